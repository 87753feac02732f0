"""Consumer-group positions: one commit journal per log, shared by all its groups.

A position is the DeliveryKey of the last record the group consumed, stored with the log
clock at commit time: after any restart, clean or not, the log clock resumes at or above
every clock a commit saw, so no append can be dated behind a committed position.

Every group's commits go to one append-only journal, `groups/positions.journal`
(journal_format.py), as Kafka keeps every group's offsets in the one `__consumer_offsets`
log: a commit, or a batch of them (`commit_many`, the broker's group commit), is one append
of checksummed records and one fdatasync, whatever the number of groups in it. Memory holds
each group's latest position, so reading one is a dict lookup.

The journal is kept small by rewriting it (Kafka's log cleaner swap): once it outgrows
COMPACT_RATIO times what the live positions take (and at least `compact_min_bytes`), the
next write puts every live position, its own changes included, into `positions.journal.tmp`,
fsyncs it, renames it over the journal and fsyncs the directory. A crash before the rename
is durable leaves the old journal, which holds every acknowledged commit; after it, the new
one holds them all too. The first write to a log makes the journal the same way, and so does
the write after a failed one (the page cache may then not say what the disk holds).

Per-group files of earlier versions (`legacy_positions.py`) are read at open and folded into
the journal by its first write; each is removed only once the journal holding its group is
durable (a file whose group the journal already holds is a leftover of a crash in between,
removed before anything else is written). A file with no valid record stays, and reading
its group raises, until the group is committed or deleted.

A journal damaged where a crash cannot have left it (journal_format.scan) is not written
to and not believed: every group operation on this log raises its CorruptLogError, which
names the file and byte (`kdelay verify` does too); the log itself opens and serves records.
"""

from __future__ import annotations

import logging
import os
import threading

from .. import fsio
from ..errors import CorruptLogError, GroupFencedError, KdelayError
from ..records import DeliveryKey
from .journal_format import (
    COMMIT,
    DELETE,
    HEADER_SIZE,
    MAX_NAME_BYTES,
    RECORD_OVERHEAD,
    encode_header,
    encode_record,
    latest,
    scan,
)
from .legacy_positions import read_legacy

GROUPS_DIR = "groups"
JOURNAL_FILE = "positions.journal"
MAX_GROUP_NAME_BYTES = MAX_NAME_BYTES
COMPACT_MIN_BYTES = 1 << 20
COMPACT_RATIO = 4
_DELETED = object()  # in a batch of changes: the group is deleted

_log = logging.getLogger("kdelay")


class GroupStore:
    def __init__(self, log_path: str, *, compact_min_bytes: int | None = None):
        """Read the journal and any per-group files of earlier versions (writes nothing).
        O(journal bytes + old files). `compact_min_bytes`: the size below which the journal
        is never rewritten (default COMPACT_MIN_BYTES, read when the store is made)."""
        self.directory = os.path.join(log_path, GROUPS_DIR)
        self.journal_path = os.path.join(self.directory, JOURNAL_FILE)
        self.compact_min_bytes = COMPACT_MIN_BYTES if compact_min_bytes is None \
            else compact_min_bytes
        self._lock = threading.Lock()
        # group -> generation of its current member (in memory: members are Consumers of
        # this open Log; a reopen starts every group afresh)
        self._generations: dict[str, int] = {}
        self._positions: dict[str, tuple[DeliveryKey | None, int]] = {}  # key, clock
        self._live_bytes = HEADER_SIZE  # what a rewrite of the live positions would take
        self._clock = 0  # the largest clock any commit saw
        self._fd = -1
        self._end = 0  # where the next append goes; 0: there is no journal yet
        self._rewrite_next = False  # the next write makes the journal whole (see above)
        self._torn: tuple[int, int] | None = None  # cut off before the first append
        self._damage: CorruptLogError | None = None
        self._damaged_groups: list[str] = []  # the groups a damaged journal names
        self._unfolded: dict[str, str] = {}  # group -> old file, position not in the journal
        self._leftovers: list[str] = []  # old files whose groups the journal holds
        self._broken: dict[str, CorruptLogError] = {}  # old files with no valid record
        self._load()

    def _load(self) -> None:
        raw = fsio.read_small(self.journal_path)
        in_journal: set[str] = set()
        if raw is not None:
            found = scan(raw, self.journal_path)
            self._clock, self._end, self._torn = found.max_clock, found.end, found.torn
            self._damage = found.damage
            if self._damage is not None:
                self._damaged_groups = sorted({r.group for r in found.records + found.later})
                return
            for group, rec in latest(found.records).items():
                in_journal.add(group)
                if rec.kind == COMMIT:
                    self._set(group, rec.key, rec.clock)
            if found.torn is not None:
                _log.warning("kdelay: %s: %d bytes of torn tail at byte %d (a commit a crash "
                             "interrupted, never acknowledged) are cut off at the next commit",
                             self.journal_path, found.torn[1], found.torn[0])
        if os.path.exists(self.journal_path + ".tmp"):  # a rewrite a crash interrupted
            self._leftovers.append(self.journal_path + ".tmp")
        for old in read_legacy(self.directory):
            self._clock = max(self._clock, old.file.max_clock)
            if old.group in in_journal:
                self._leftovers.append(old.path)
                continue
            error = old.readable()
            if error is not None:
                self._broken[old.group] = error
            else:
                slot = old.current()
                self._set(old.group, slot.key, slot.clock)
                self._unfolded[old.group] = old.path

    def _set(self, group: str, key: DeliveryKey | None, clock: int) -> None:
        if group not in self._positions:
            self._live_bytes += RECORD_OVERHEAD + len(group.encode("utf-8"))
        self._positions[group] = (key, clock)

    def close(self) -> None:
        """Close the journal's descriptor (writes nothing: every commit is durable when it
        returns); waits for a commit under way. A later commit opens it again."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    # ------------------------------------------------------------------ members

    def join(self, group: str) -> int:
        """A new member of `group`: returns its generation, fencing every older member."""
        _check_name(group)
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

    # ------------------------------------------------------------------ writing

    def commit(self, group: str, key: DeliveryKey | None, clock: int,
               generation: int | None = None) -> None:
        """Store `group`'s position, durable when this returns; with `generation`, only if
        that member is current (checked and written under one lock, so no join slips in
        between). Cost: one append of one record and one fdatasync (now and then a rewrite
        of the live positions instead, see the module docstring)."""
        _check_name(group)
        with self._lock:
            if generation is not None:
                self.check_member(group, generation)
            self._write({group: key}, clock)

    def commit_many(self, positions: dict[str, DeliveryKey | None], clock: int) -> None:
        """Store several groups' positions, all durable when this returns; a crash before
        leaves each group at its old or its new position, never a torn one. Cost: one
        append of one record per group and one fdatasync for them all."""
        for group in positions:
            _check_name(group)
        if positions:
            with self._lock:
                self._write(dict(positions), clock)

    def delete(self, group: str, clock: int) -> bool:
        """Forget `group`'s position (durable when this returns); False if it had none.
        Cost: as one commit."""
        _check_name(group)
        with self._lock:
            self._raise_damage()
            if group not in self._positions and group not in self._broken:
                return False
            self._write({group: _DELETED}, clock)
            return True

    def _write(self, changes: dict, clock: int) -> None:
        """Make `changes` (group -> key, None or _DELETED) durable and then apply them, with
        the positions of old files folded in. Call with the lock held."""
        self._raise_damage()
        if self._leftovers:  # the journal holds their groups durably already (or a .tmp)
            for path in self._leftovers:
                fsio.unlink(path)
            fsio.fsync_dir(self.directory)
            self._leftovers = []
        folded = {g: self._positions[g] for g in self._unfolded if g not in changes}
        data = self._records(folded, changes, clock, self._end)
        if self._end == 0 or self._rewrite_next or self._end + len(data) > max(
                self.compact_min_bytes, COMPACT_RATIO * self._live_bytes):
            self._rewrite(changes, clock)
        else:
            self._append(data)
        for group, change in changes.items():
            if change is _DELETED:
                if self._positions.pop(group, None) is not None:
                    self._live_bytes -= RECORD_OVERHEAD + len(group.encode("utf-8"))
            else:
                self._set(group, change, clock)
        self._clock = max(self._clock, clock)
        # the journal now holds every unfolded group, and each changed group's broken file
        # is superseded: those old files can go
        gone = [*self._unfolded.values(),
                *(self._broken[g].path or "" for g in changes if g in self._broken)]
        self._unfolded = {}
        for g in changes:
            self._broken.pop(g, None)
        if gone:
            for path in gone:
                fsio.unlink(path)
            fsio.fsync_dir(self.directory)

    @staticmethod
    def _records(folded: dict[str, tuple[DeliveryKey | None, int]], changes: dict,
                 clock: int, synced: int) -> bytes:
        parts = [encode_record(COMMIT, g.encode("utf-8"), key, at, synced)
                 for g, (key, at) in folded.items()]
        parts += [encode_record(DELETE, g.encode("utf-8"), None, clock, synced)
                  if change is _DELETED else
                  encode_record(COMMIT, g.encode("utf-8"), change, clock, synced)
                  for g, change in changes.items()]
        return b"".join(parts)

    def _append(self, data: bytes) -> None:
        """One write at the journal's end and one fdatasync (cutting a torn tail first)."""
        try:
            if self._fd < 0:
                self._fd = fsio.open_existing(self.journal_path)
            if self._torn is not None:
                fsio.truncate(self._fd, self._end)
            fsio.write(self._fd, data, self._end)
            fsio.fdatasync(self._fd)
        except OSError:
            self._rewrite_next = True
            raise
        self._torn = None
        self._end += len(data)

    def _rewrite(self, changes: dict, clock: int) -> None:
        """The swap: every live position after `changes` into a new file, fsynced, renamed
        over the journal, directory fsynced. O(live groups)."""
        live = dict(self._positions)
        for group, change in changes.items():
            if change is _DELETED:
                live.pop(group, None)
            else:
                live[group] = (change, clock)
        data = encode_header(max(self._clock, clock)) + self._records(
            live, {}, clock, HEADER_SIZE)
        if not os.path.isdir(self.directory):
            os.makedirs(self.directory, exist_ok=True)
            fsio.fsync_dir(os.path.dirname(self.directory))
        tmp = self.journal_path + ".tmp"
        fd = fsio.open_append(tmp)
        try:
            fsio.truncate(fd, 0)
            fsio.write(fd, data, 0)
            fsio.fsync(fd)
            fsio.rename(tmp, self.journal_path)
        except BaseException:
            os.close(fd)
            raise
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._end, self._torn = fd, len(data), None
        self._rewrite_next = True  # until the directory fsync says the new name is durable
        fsio.fsync_dir(self.directory)
        self._rewrite_next = False

    # ------------------------------------------------------------------ reading

    def _raise_damage(self) -> None:
        if self._damage is not None:
            raise CorruptLogError(self._damage.reason, self._damage.path,
                                  self._damage.position)

    def has_position(self, group: str) -> bool:
        """Whether `group` has a stored position here (an old file with no valid record
        counts). A dict lookup."""
        _check_name(group)
        self._raise_damage()
        return group in self._positions or group in self._broken

    def committed(self, group: str) -> DeliveryKey | None:
        """The group's position (None: from the start). CorruptLogError naming the file if
        the journal is damaged, or the group's old file has no valid record. A dict
        lookup."""
        _check_name(group)
        self._raise_damage()
        broken = self._broken.get(group)
        if broken is not None:
            raise CorruptLogError(broken.reason, broken.path, broken.position)
        found = self._positions.get(group)
        return None if found is None else found[0]

    def max_clock(self) -> int:
        """The largest log clock any stored commit saw (0 if none), deleted groups' and a
        damaged journal's readable records included. O(1)."""
        return self._clock

    def groups(self) -> list[str]:
        """Every group with a stored position (with a damaged journal: those it names).
        O(groups log groups)."""
        if self._damage is not None:
            return list(self._damaged_groups)
        return sorted({*self._positions, *self._broken})


def _check_name(group: object) -> None:
    if not isinstance(group, str) or not group:
        raise KdelayError(f"group must be a non-empty str, got {group!r}")
    try:
        raw = group.encode("utf-8")
    except UnicodeEncodeError:
        raise KdelayError(f"group name {group!r} is not valid Unicode") from None
    if len(raw) > MAX_GROUP_NAME_BYTES:
        raise KdelayError(f"group name is {len(raw)} bytes in UTF-8; the maximum is "
                          f"{MAX_GROUP_NAME_BYTES}")


def committed_positions(store: GroupStore) -> tuple[dict[str, DeliveryKey | None],
                                                    dict[str, str]]:
    """Every stored group's committed key, and the error of each group whose position
    cannot be read (for Log.metrics: one damaged file must not fail the whole call).
    O(groups)."""
    keys: dict[str, DeliveryKey | None] = {}
    unreadable: dict[str, str] = {}
    for g in store.groups():
        try:
            keys[g] = store.committed(g)
        except KdelayError as e:
            unreadable[g] = str(e)
    return keys, unreadable
