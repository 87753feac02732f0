"""The bytes of a log's consumer-group commit journal, `groups/positions.journal`: encoding
and the checked scan (no file I/O; `positions.py` owns writing, the swap and recovery).

One journal per log holds every group's commits, as Kafka's `__consumer_offsets` is one log:
a batch of commits is one append of records and one fdatasync. Integers are big-endian.

    header (20 bytes): magic "KDGJ" | version u16 = 1 | reserved u16 |
                       clock floor i64 | crc32c u32 of the 16 bytes before it
    record:            length u32 (of the body) | crc32c u32 (of the body) | body
    body:              kind u8 (1 COMMIT, 2 DELETE) | flags u8 (bit 0: a key follows) |
                       synced u64 | deliver_after i64 | offset i64 | clock i64 |
                       name length u8 | name (UTF-8, 1..120 bytes)

A COMMIT sets the group's position: the DeliveryKey (deliver_after, offset), or "from the
start" when flag bit 0 is clear (then both are 0), with the log clock at commit time. A
DELETE forgets the group. `synced` is the journal length known durable when the record's
append began (every append is fdatasynced before the next begins, so it is where that
append starts): a record vouches that every byte below it was on disk. The header's clock
floor is the largest clock of any record the journal held before it was last rewritten (a
deleted group's too), so the log clock never resumes below a clock a commit saw.

Scanning: records are read in order up to the first that fails (short, bad length, CRC,
kind, name, or a `synced` beyond its own position). What follows is a torn tail, what a
crash mid-append leaves (never acknowledged: the fdatasync comes after the write), unless a
valid record further on vouches for bytes past the failure: then it is damage, reported
with the file and byte. Damage to the last acknowledged append alone cannot be told from a
torn one (no later record vouches for it); it is cut off like one, and logged.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import NamedTuple

import crc32c

from ..errors import CorruptLogError
from ..records import DeliveryKey

MAGIC = b"KDGJ"
VERSION = 1
COMMIT, DELETE = 1, 2
_HAS_KEY = 1
_HEAD = struct.Struct(">4sHHq")
_CRC = struct.Struct(">I")
HEADER_SIZE = _HEAD.size + _CRC.size
_FRAME = struct.Struct(">II")
_BODY = struct.Struct(">BBQqqqB")
MAX_NAME_BYTES = 120
RECORD_OVERHEAD = _FRAME.size + _BODY.size  # a record is this plus its name's bytes
# where a record may start, found by its kind and flags bytes (for the search past damage)
_RECORD_START = re.compile(rb"(?=[\x01\x02][\x00\x01])")


class JournalRecord(NamedTuple):
    position: int
    end: int
    kind: int
    group: str
    key: DeliveryKey | None
    clock: int
    synced: int


@dataclass
class JournalScan:
    """What a journal holds: its valid records in order (up to the first failure), where
    they end (the append position), the torn tail after them (position, bytes), or the
    damage that is not one. `max_clock`: the largest clock of the header and of every
    valid record, those past damage included; `later`: with damage, the sound records past
    it (believed for nothing but the names they carry and their clocks)."""
    records: list[JournalRecord] = field(default_factory=list)
    later: list[JournalRecord] = field(default_factory=list)
    end: int = 0
    torn: tuple[int, int] | None = None
    damage: CorruptLogError | None = None
    clock_floor: int = 0
    max_clock: int = 0


def encode_header(clock_floor: int) -> bytes:
    head = _HEAD.pack(MAGIC, VERSION, 0, clock_floor)
    return head + _CRC.pack(crc32c.crc32c(head))


def encode_record(kind: int, name: bytes, key: DeliveryKey | None, clock: int,
                  synced: int) -> bytes:
    """One record's bytes (`name`: the group's UTF-8, already checked). O(1)."""
    if key is None:
        body = _BODY.pack(kind, 0, synced, 0, 0, clock, len(name)) + name
    else:
        body = _BODY.pack(kind, _HAS_KEY, synced, key.deliver_after, key.offset, clock,
                          len(name)) + name
    return _FRAME.pack(len(body), crc32c.crc32c(body)) + body


def record_at(data: bytes, pos: int) -> JournalRecord | None:
    """The valid record starting at byte `pos`, else None. O(record)."""
    start = pos + _FRAME.size
    if start + _BODY.size > len(data):
        return None
    length, crc = _FRAME.unpack_from(data, pos)
    end = start + length
    if not _BODY.size < length <= _BODY.size + MAX_NAME_BYTES or end > len(data):
        return None
    if crc32c.crc32c(memoryview(data)[start:end]) != crc:
        return None
    kind, flags, synced, da, off, clock, n = _BODY.unpack_from(data, start)
    if kind not in (COMMIT, DELETE) or flags > _HAS_KEY or length != _BODY.size + n or \
            synced > pos:
        return None
    try:
        group = data[start + _BODY.size:end].decode("utf-8")
    except UnicodeDecodeError:
        return None
    key = DeliveryKey(da, off) if flags & _HAS_KEY else None
    return JournalRecord(pos, end, kind, group, key, clock, synced)


def scan(data: bytes, path: str) -> JournalScan:
    """Check a whole journal (see the module docstring). Never raises: damage is returned
    as a CorruptLogError naming `path` and the byte. O(bytes): one CRC per record, and past
    a failure one attempt per place a record could start."""
    out = JournalScan()
    if len(data) < HEADER_SIZE:
        out.damage = CorruptLogError(
            f"group commit journal header cut short ({len(data)} of {HEADER_SIZE} bytes)",
            path, 0)
        return out
    magic, version, _, floor = _HEAD.unpack_from(data)
    if _CRC.unpack_from(data, _HEAD.size)[0] != crc32c.crc32c(data[:_HEAD.size]) or \
            magic != MAGIC:
        out.damage = CorruptLogError("group commit journal header is damaged", path, 0)
        return out
    if version != VERSION:
        out.damage = CorruptLogError(f"group commit journal version {version} is not "
                                     f"known here (this version reads {VERSION})", path, 0)
        return out
    out.clock_floor = out.max_clock = floor
    pos = HEADER_SIZE
    records = out.records
    while pos < len(data):
        rec = record_at(data, pos)
        if rec is None:
            break
        records.append(rec)
        if rec.clock > out.max_clock:
            out.max_clock = rec.clock
        pos = rec.end
    out.end = pos
    if pos < len(data):
        vouched = pos
        for m in _RECORD_START.finditer(data, pos + 1 + _FRAME.size):
            later = record_at(data, m.start() - _FRAME.size)
            if later is not None:
                out.later.append(later)
                vouched = max(vouched, later.synced)
                out.max_clock = max(out.max_clock, later.clock)
        if vouched <= pos:
            out.later = []
        if vouched > pos:
            out.damage = CorruptLogError(
                f"group commit journal record is damaged (a later record says {vouched} "
                f"bytes were durable)", path, pos)
        else:
            out.torn = (pos, len(data) - pos)
    return out


def latest(records: list[JournalRecord]) -> dict[str, JournalRecord]:
    """Each group's last record (a COMMIT or a DELETE). O(records)."""
    return {r.group: r for r in records}
