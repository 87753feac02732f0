"""Consumer-group positions: one small file per group, replaced atomically on commit.

A position is the DeliveryKey of the last record the group consumed, stored with the log
clock at commit time: after any restart, clean or not, the log clock resumes at or above
every clock a commit saw, so no append can be dated behind a committed position. Group
names are hex-encoded into file names, so no name can reach outside the log directory.
"""

from __future__ import annotations

import contextlib
import os
import threading

import crc32c

from .. import fsio
from ..errors import GroupFencedError, KdelayError
from ..records import DeliveryKey

GROUPS_DIR = "groups"
_TAG = "kdelay-group v1"
# hex doubles the name, and atomic_write adds ".tmp": 2 * 120 + len(".pos.tmp") <= 255
MAX_GROUP_NAME_BYTES = 120


class GroupStore:
    def __init__(self, log_path: str):
        self.directory = os.path.join(log_path, GROUPS_DIR)
        self._cache: dict[str, DeliveryKey | None] = {}
        self._lock = threading.Lock()
        # group -> generation of its current member (in memory: members are Consumers of
        # this open Log; a reopen starts every group afresh)
        self._generations: dict[str, int] = {}

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
        """Store `group`'s position; with `generation`, only if that member is current
        (checked and written under one lock, so no join slips in between)."""
        path = self._file(group)
        data = _encode(group, key, clock)
        with self._lock:
            if generation is not None:
                self.check_member(group, generation)
            if not os.path.isdir(self.directory):
                os.makedirs(self.directory, exist_ok=True)
                fsio.fsync_dir(os.path.dirname(self.directory))
            fsio.atomic_write(path, data)
            self._cache[group] = key

    def commit_many(self, positions: dict[str, DeliveryKey | None], clock: int) -> None:
        """Store several groups' positions with one directory fsync: each file is written,
        fsynced and renamed, then the directory fsync makes every rename durable (a crash
        before it leaves each group at its old or its new position, never a torn one)."""
        files = [(group, self._file(group)) for group in positions]
        with self._lock:
            if not os.path.isdir(self.directory):
                os.makedirs(self.directory, exist_ok=True)
                fsio.fsync_dir(os.path.dirname(self.directory))
            # every new file is written and fsynced before any rename, so that no file is
            # created between a rename and the directory fsync that makes it durable
            for group, path in files:
                fsio.write_new(path + ".tmp", _encode(group, positions[group], clock))
            for _, path in files:
                fsio.rename(path + ".tmp", path)
            fsio.fsync_dir(self.directory)
            for group, _ in files:
                self._cache[group] = positions[group]

    def committed(self, group: str) -> DeliveryKey | None:
        path = self._file(group)
        with self._lock:
            if group in self._cache:
                return self._cache[group]
            raw = fsio.read_small(path)
            key = None if raw is None else _parse(raw, path, group)[0]
            self._cache[group] = key
            return key

    def max_clock(self) -> int:
        """The largest log clock any stored commit saw (0 if none). A corrupt position file
        is skipped here: it is reported when that group's position is asked for."""
        best = 0
        for group in self.groups():
            path = self._file(group)
            raw = fsio.read_small(path)
            if raw is not None:
                with contextlib.suppress(KdelayError):
                    best = max(best, _parse(raw, path, group)[1])
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


def _encode(group: str, key: DeliveryKey | None, clock: int) -> bytes:
    body = ("none" if key is None else f"{key.deliver_after} {key.offset}") + f" {clock}"
    text = f"{_TAG}\n{group}\n{body}\n"
    return f"{text}{crc32c.crc32c(text.encode('utf-8')):08x}\n".encode()


def _parse(raw: bytes, path: str, group: str) -> tuple[DeliveryKey | None, int]:
    """Read a position file: tag, group name (which may itself hold newlines), position,
    then the CRC of all of that. Parsed from both ends so the name can be anything."""
    try:
        body, crc_line, end = raw.decode("utf-8").rsplit("\n", 2)
        text = body + "\n"
        if end or f"{crc32c.crc32c(text.encode('utf-8')):08x}" != crc_line:
            raise ValueError("checksum")
        tag, rest = body.split("\n", 1)
        name, position = rest.rsplit("\n", 1)
        if tag != _TAG or name != group:
            raise ValueError("tag or name")
        *key, clock = position.split(" ")
        if key == ["none"]:
            return None, int(clock)
        da, off = key
        return DeliveryKey(int(da), int(off)), int(clock)
    except (ValueError, UnicodeDecodeError):
        raise KdelayError(f"group position file {path} is corrupt") from None


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
