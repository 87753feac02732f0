"""Consumer-group positions: one small file per group, rewritten in place on commit.

A position is the DeliveryKey of the last record the group consumed, stored with the log
clock at commit time: after any restart, clean or not, the log clock resumes at or above
every clock a commit saw, so no append can be dated behind a committed position. Group
names are hex-encoded into file names, so no name can reach outside the log directory.

A commit writes one checksummed slot of the group's file in place and fdatasyncs it
(position_file.py: two slots, the one not holding the newest record is overwritten), through
a descriptor kept open between commits (open_files.py, bounded process-wide); a group commit
runs its groups' writes on a few threads at once (parallel_sync.py). Only a group's
first commit creates its file, whole, by a rename (and so does the first commit to a file
of the first format, or to a damaged one): a crash never leaves a name with no valid slot.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
import weakref

from .. import fsio
from ..errors import CorruptLogError, GroupFencedError, KdelayError
from ..records import DeliveryKey
from .open_files import POOL, DescriptorPool
from .parallel_sync import run_all
from .position_file import MAX_FILE_BYTES, current_or_raise, encode_slot, parse, slot_position

GROUPS_DIR = "groups"
# hex doubles the name, and the first write adds ".tmp": 2 * 120 + len(".pos.tmp") <= 255
MAX_GROUP_NAME_BYTES = 120
_owners = itertools.count(1)


class _Position:
    """What this store knows of one group's file: the newest record and its slot."""
    __slots__ = ("key", "clock", "sequence", "newest", "stored")

    def __init__(self, key: DeliveryKey | None = None, clock: int = 0, sequence: int = 0,
                 newest: int | None = None, stored: bool = False):
        self.key = key
        self.clock = clock
        self.sequence = sequence
        # the slot holding the newest record; None: the next commit writes the file whole
        # (none yet, a first-format file, a damaged one, or a write that failed)
        self.newest = newest
        self.stored = stored  # the group has a file

    def written(self, slot: int, key: DeliveryKey | None, clock: int) -> None:
        self.sequence += 1
        self.newest, self.key, self.clock, self.stored = slot, key, clock, True


class GroupStore:
    def __init__(self, log_path: str, pool: DescriptorPool = POOL):
        self.directory = os.path.join(log_path, GROUPS_DIR)
        self._positions: dict[str, _Position] = {}
        self._lock = threading.Lock()
        self._pool = pool
        self._owner = next(_owners)
        # a store dropped without close() gives its descriptors back when collected
        self._finalizer = weakref.finalize(self, pool.forget_later, self._owner)
        # group -> generation of its current member (in memory: members are Consumers of
        # this open Log; a reopen starts every group afresh)
        self._generations: dict[str, int] = {}

    def close(self) -> None:
        """Close the position files' descriptors (writes nothing: every commit is durable
        when it returns); waits for a commit under way. A later commit opens them again."""
        with self._lock:
            self._pool.forget(self._owner)

    def join(self, group: str) -> int:
        """A new member of `group`: returns its generation, fencing every older member."""
        self._file(group)  # the name check
        with self._lock:
            gen = self._generations.get(group, 0) + 1
            self._generations[group] = gen
            return gen

    def check_member(self, group: str, generation: int) -> None:
        """Raise GroupFencedError if a newer member has joined `group`."""
        current = self._generations.get(group)
        if current is not None and current != generation:
            raise GroupFencedError(
                f"this consumer of group {group!r} was fenced: a newer Consumer of the group "
                f"joined on the same log (generation {current}, this one {generation})")

    def path(self, group: str) -> str:
        """The file holding `group`'s position."""
        return self._file(group)

    def _file(self, group: str) -> str:
        if not isinstance(group, str) or not group:
            raise KdelayError(f"group must be a non-empty str, got {group!r}")
        try:
            raw = group.encode("utf-8")
        except UnicodeEncodeError:
            raise KdelayError(f"group name {group!r} is not valid Unicode") from None
        if len(raw) > MAX_GROUP_NAME_BYTES:
            raise KdelayError(f"group name is {len(raw)} bytes in UTF-8; the maximum is "
                              f"{MAX_GROUP_NAME_BYTES}")
        return os.path.join(self.directory, raw.hex() + ".pos")

    def commit(self, group: str, key: DeliveryKey | None, clock: int,
               generation: int | None = None) -> None:
        """Store `group`'s position, durable when this returns; with `generation`, only if
        that member is current (checked and written under one lock, so no join slips in
        between). Cost: one slot pwrite and one fdatasync (the first commit of a group in
        this store also reads its file; its first commit ever creates it)."""
        path = self._file(group)
        with self._lock:
            if generation is not None:
                self.check_member(group, generation)
            pos = self._for_write(group, path)
            record = encode_slot(group, pos.sequence + 1, key, clock)
            if pos.newest is None:
                self._make_directory()
                fsio.atomic_write(path, record)
                pos.written(0, key, clock)
            else:
                self._write_slot(path, pos, record, key, clock)
            self._positions[group] = pos

    def commit_many(self, positions: dict[str, DeliveryKey | None], clock: int) -> None:
        """Store several groups' positions, all durable when this returns; a crash before
        leaves each group at its old or its new position, never a torn one. Cost per group:
        one slot pwrite and one fdatasync, spread over a few threads; groups whose file is
        new (or of the first format, or damaged) are created whole, with one directory fsync
        for them all."""
        files = [(group, self._file(group)) for group in positions]
        with self._lock:
            found = [(group, path, self._for_write(group, path)) for group, path in files]
            in_place = [(g, path, pos) for g, path, pos in found if pos.newest is not None]
            fresh = [(g, path, pos) for g, path, pos in found if pos.newest is None]
            if fresh:
                self._make_directory()
                # every new file is written and fsynced before any rename, so that no file
                # is created between a rename and the directory fsync that makes it durable
                for group, path, pos in fresh:
                    fsio.write_new(path + ".tmp", encode_slot(group, pos.sequence + 1,
                                                              positions[group], clock))
                for _, path, _ in fresh:
                    fsio.rename(path + ".tmp", path)
                fsio.fsync_dir(self.directory)
                for group, _, pos in fresh:
                    pos.written(0, positions[group], clock)
                    self._positions[group] = pos
            # each its own pwrite and fdatasync, several at once (parallel_sync.py)
            run_all([functools.partial(self._write_slot, path, pos,
                                       encode_slot(group, pos.sequence + 1, positions[group],
                                                   clock), positions[group], clock)
                     for group, path, pos in in_place])

    def _write_slot(self, path: str, pos: _Position, record: bytes,
                    key: DeliveryKey | None, clock: int) -> None:
        """Overwrite the slot not holding the newest record, and fdatasync: the newest
        acknowledged record is never the bytes being written."""
        assert pos.newest is not None
        slot = 1 - pos.newest
        try:
            with self._pool.use(self._owner, path, fsio.open_existing) as fd:
                fsio.write(fd, record, slot_position(slot))
                fsio.fdatasync(fd)
        except OSError:
            # the slot may be torn and, after a failed fdatasync, the page cache may not say
            # what the disk holds: the next commit writes the file whole, by a rename
            pos.newest = None
            self._pool.drop(self._owner, path)
            raise
        pos.written(slot, key, clock)

    def _make_directory(self) -> None:
        if not os.path.isdir(self.directory):
            os.makedirs(self.directory, exist_ok=True)
            fsio.fsync_dir(os.path.dirname(self.directory))

    def _for_write(self, group: str, path: str) -> _Position:
        """The group's known position, read from its file the first time. A damaged file
        is rewritten whole by the commit (the commit is the position from then on); it is
        remembered only once that has happened."""
        pos = self._positions.get(group)
        if pos is None:
            try:
                pos = self._positions[group] = self._read(group, path)
            except CorruptLogError:
                pos = _Position(stored=True)
        return pos

    def _read(self, group: str, path: str) -> _Position:
        """The newest valid record of the group's file (CorruptLogError if none is). One
        read of at most 1 KiB."""
        raw = fsio.read_small(path)
        if raw is None:
            return _Position()
        file = parse(raw[:MAX_FILE_BYTES], group)
        slot = current_or_raise(file, path)
        return _Position(slot.key, slot.clock, slot.sequence,
                         None if file.legacy else file.newest, stored=True)

    def has_position(self, group: str) -> bool:
        """Whether `group` has ever stored a position here (a dict lookup, or one stat)."""
        path = self._file(group)
        pos = self._positions.get(group)
        return pos.stored if pos is not None else os.path.exists(path)

    def committed(self, group: str) -> DeliveryKey | None:
        """The group's position (None: from the start). CorruptLogError, naming the file, if
        neither slot of its file is valid. A dict lookup once read."""
        path = self._file(group)
        with self._lock:
            pos = self._positions.get(group)
            if pos is None:
                pos = self._positions[group] = self._read(group, path)
            return pos.key

    def max_clock(self) -> int:
        """The largest log clock any stored commit saw (0 if none): of both slots of every
        file. A corrupt position file is skipped here: it is reported when that group's
        position is asked for. O(groups) file reads."""
        best = 0
        for group in self.groups():
            path = self._file(group)
            raw = fsio.read_small(path)
            if raw is not None:
                best = max(best, parse(raw[:MAX_FILE_BYTES], group).max_clock)
        return best

    def groups(self) -> list[str]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            if name.endswith(".pos"):
                try:
                    out.append(bytes.fromhex(name[:-4]).decode("utf-8"))
                except ValueError:
                    continue
        return sorted(out)


def committed_positions(store: GroupStore) -> tuple[dict[str, DeliveryKey | None],
                                                    dict[str, str]]:
    """Every stored group's committed key, and the error of each group whose position file
    cannot be read (for Log.metrics: one damaged file must not fail the whole call).
    O(groups) file reads."""
    keys: dict[str, DeliveryKey | None] = {}
    unreadable: dict[str, str] = {}
    for g in store.groups():
        try:
            keys[g] = store.committed(g)
        except KdelayError as e:
            unreadable[g] = str(e)
    return keys, unreadable
