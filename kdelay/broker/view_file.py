"""The due-order view's file, `delivery-offsets.view` in a partition directory: which
records hold which delivery offsets (docs/formats.md, "Delivery offsets").

A 32-byte header, then 32-byte entries, little-endian:

    header: magic "KDLVIEW1" (8) | first delivery offset (int64) | reserved, 0 (int64) |
            CRC-32C of the 24 bytes before it (uint32) | 0 (uint32)
    entry:  delivery base (int64) | deliverAfter (int64) | first log offset (int64) |
            count (int32) | CRC-32C of the 28 bytes before it (uint32)

An entry says: delivery offsets base .. base + count - 1 are the records at log offsets
first .. first + count - 1, all with that deliverAfter. Entries run on without a gap (each
base is the previous base plus its count, the first is the header's) and their keys
strictly increase. The file only grows by appends of whole entries, written before any
offset in them is served; `rewrite` drops a dead head atomically (temp file, rename).

A new view's file starts under a pending name, `delivery-offsets.view.pending`, written
without an fsync (the first look at a partition pays no fsync); its first sync (a flush
policy's, the one before retention, compaction or the tiered sync, or close) fsyncs it,
renames it to its own name and fsyncs the directory. While the broker ran, no record a
pending file numbers was removed (every removal syncs the open views first), so a
pending file that a crash left unreadable (a header that is not sound: a power loss
before its first fsync) is discarded and numbered again from 0, which gives its numbers
again, as a view's unsynced tail lost to a power failure is numbered again (in either
case unless retention removed some of those records after the restart, before the
partition was served again); one that reads soundly is used as it is.

Opening checks everything. A torn tail (a partial entry, or bad entries up to the end of
the file: what a crash mid-append leaves) is cut off: the entries it held are numbered
again, identically, from the ones before it. Anything else (a bad header, a bad entry
followed by a good one) is damage: `Reading.later` keeps the sound entries after it, and
the view (delivery_view.py) cuts it off as a torn tail only where numbering the log again
gives each of them exactly (a torn page cache written back garbled); else it refuses to
serve from the file (ViewDamagedError).
Cost: open O(entries) (one CRC per entry); append O(entries appended); create one
write; the first sync two fsyncs and a rename.
"""

from __future__ import annotations

import os
import struct

import crc32c
import numpy as np

from .. import fsio
from ..errors import KdelayError

VIEW_FILE = "delivery-offsets.view"
PENDING_SUFFIX = ".pending"  # a new view's file until its first sync (see the module)
MAGIC = b"KDLVIEW1"
_HEADER = struct.Struct("<8sqqII")
_ENTRY = struct.Struct("<qqqiI")
HEADER_SIZE = _HEADER.size
ENTRY_SIZE = _ENTRY.size
assert HEADER_SIZE == ENTRY_SIZE == 32
ENTRY_DTYPE = np.dtype([("base", "<i8"), ("deliver_after", "<i8"), ("first", "<i8"),
                        ("count", "<i4"), ("crc", "<u4")])


class ViewDamagedError(KdelayError):
    """The view's file is damaged beyond a torn tail: its delivery offsets cannot be
    trusted, so the partition is not served (kdelay verify names the damage)."""


def encode_header(first_delivery: int) -> bytes:
    body = _HEADER.pack(MAGIC, first_delivery, 0, 0, 0)[:24]
    return body + struct.pack("<II", crc32c.crc32c(body), 0)


def encode_entries(rows: list[tuple[int, int, int, int]]) -> bytes:
    """Entries (base, deliverAfter, first, count) as the file holds them."""
    out = bytearray()
    for base, da, first, count in rows:
        body = _ENTRY.pack(base, da, first, count, 0)[:28]
        out += body
        out += struct.pack("<I", crc32c.crc32c(body))
    return bytes(out)


class Reading:
    """What a view file holds: the first delivery offset, its sound entries, and where the
    torn tail began (None: no torn tail) or, with damage, what is wrong and at which byte
    the damaged part starts."""

    def __init__(self, first_delivery: int, rows: np.ndarray, torn_at: int | None,
                 damage: str | None, damage_at: int = 0, later: np.ndarray | None = None):
        self.first_delivery = first_delivery
        self.rows = rows
        self.torn_at = torn_at
        self.damage = damage
        self.damage_at = damage_at
        # with damage: the entries after the damaged one that pass their CRC (what a torn
        # page cache leaves after a garbled block; the view checks them against the log)
        self.later = later


def read_view(path: str) -> Reading:
    """Read and check a view file (OSError if it cannot be read)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < HEADER_SIZE:
        return Reading(0, np.empty(0, ENTRY_DTYPE), None,
                       f"{path}: header truncated ({len(data)} of {HEADER_SIZE} bytes)")
    magic, first_delivery, _, crc, _ = _HEADER.unpack_from(data)
    if magic != MAGIC or crc != crc32c.crc32c(data[:24]) or first_delivery < 0:
        return Reading(0, np.empty(0, ENTRY_DTYPE), None, f"{path}: bad header at byte 0")
    n = (len(data) - HEADER_SIZE) // ENTRY_SIZE
    rows = np.frombuffer(data, ENTRY_DTYPE, n, HEADER_SIZE)
    bad = _first_bad(data, rows, first_delivery)
    if bad is None:
        whole = HEADER_SIZE + n * ENTRY_SIZE
        return Reading(first_delivery, rows.copy(), whole if whole < len(data) else None,
                       None)
    sound = [i for i in range(bad, n) if _entry_ok(data, i)]
    if sound:  # not what a torn append leaves, unless its blocks reached the disk garbled
        at = HEADER_SIZE + bad * ENTRY_SIZE
        return Reading(first_delivery, rows[:bad].copy(), None,
                       f"{path}: entry {bad} at byte {at} is damaged and is not a torn tail",
                       at, rows[sound].copy())
    return Reading(first_delivery, rows[:bad].copy(), HEADER_SIZE + bad * ENTRY_SIZE, None)


def _entry_ok(data: bytes, i: int) -> bool:
    at = HEADER_SIZE + i * ENTRY_SIZE
    return crc32c.crc32c(data[at:at + 28]) == int.from_bytes(data[at + 28:at + 32], "little")


def _first_bad(data: bytes, rows: np.ndarray, first_delivery: int) -> int | None:
    """Index (in the file) of the first entry that fails its CRC or does not follow the one
    before it (gapless bases, increasing keys, count >= 1); None if all are sound."""
    expected = first_delivery
    prev: tuple[int, int] | None = None
    for i, (base, da, first, count, _) in enumerate(rows.tolist()):
        if not _entry_ok(data, i) or count < 1 or first < 0 or base != expected or \
                (prev is not None and (da, first) <= prev):
            return i
        expected = base + count
        prev = (da, first + count - 1)
    return None


class ViewFile:
    """The open file: appends whole entries at its end; `rewrite` replaces it atomically.
    `path` is the file's own name; until its first sync a new file lies at the pending
    name beside it (see the module)."""

    def __init__(self, path: str, fd: int, end: int, durable: bool = True):
        self.path = path
        self._fd = fd
        self._end = end
        self.durable = durable  # under its own name, fsync'd once (else pending)

    @classmethod
    def create(cls, path: str) -> ViewFile:
        """A new, empty view (first delivery offset 0) at the pending name of `path` (no
        file there: the caller removed any); no fsync (the first `sync` makes it
        durable)."""
        fd = fsio.open_append(path + PENDING_SUFFIX)
        try:
            fsio.write(fd, encode_header(0), 0)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, HEADER_SIZE, durable=False)

    @classmethod
    def open(cls, path: str, reading: Reading, durable: bool = True) -> ViewFile:
        """The file `reading` read (at `path`, or at its pending name when not `durable`),
        with its torn tail (if any) cut off."""
        fd = fsio.open_append(path if durable else path + PENDING_SUFFIX)
        end = HEADER_SIZE + len(reading.rows) * ENTRY_SIZE
        try:
            if reading.torn_at is not None or os.fstat(fd).st_size != end:
                fsio.truncate(fd, end)
                fsio.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, end, durable)

    def append(self, rows: list[tuple[int, int, int, int]], sync: bool) -> bytes:
        """Write entries at the end (fsync'd with `sync`) and return them as written. A
        failed write leaves at most a torn tail, which the next open cuts off; the end
        only moves once it is written."""
        data = encode_entries(rows)
        fsio.write(self._fd, data, self._end)
        if sync:
            self.sync()
        self._end += len(data)
        return data

    def sync(self) -> None:
        """fsync the file; a pending one is then renamed to its own name and the directory
        fsync'd (once)."""
        fsio.fsync(self._fd)
        if not self.durable:
            fsio.rename(self.path + PENDING_SUFFIX, self.path)
            fsio.fsync_dir(os.path.dirname(os.path.abspath(self.path)))
            self.durable = True

    def rewrite(self, first_delivery: int, rows: np.ndarray) -> None:
        """Replace the file by one holding `rows` (sound entries starting at
        `first_delivery`): atomic, so a crash leaves the old file or the new one."""
        if not self.durable:  # (retention syncs first: only a pending file adopted after
            self.sync()       # a crash can get here, once retention passed it unopened)
        body = encode_header(first_delivery) + rows.tobytes()
        fsio.atomic_write(self.path, body)
        os.close(self._fd)
        self._fd = fsio.open_append(self.path)
        self._end = len(body)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
