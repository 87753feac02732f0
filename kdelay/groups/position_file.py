"""The bytes of a consumer group's position file: two checksummed slots, rewritten in place.

A commit overwrites the slot that does not hold the newest valid record, so the newest
acknowledged position is never the bytes being written: a write torn by a crash spoils only
its own slot, and a reader takes the valid slot with the higher sequence number. Slot 0
starts at byte 0 and slot 1 at byte 512, in separate disk sectors, so that no torn sector
holds both. Each slot (big-endian):

    magic  b"kdgp"   4      sequence  u64   8   the commit's number in this file (1, 2, ...)
    version  u8      1      flags     u8    1   bit 0: a key follows (else the group has
    deliver_after i64  8    offset    i64   8     consumed nothing: position None)
    clock    i64     8      name length u8  1   the log clock when the commit was made
    name     UTF-8   n      crc32c    u32   4   over every byte of the slot before it

A file begins life holding slot 0 only (written whole to a temporary file and renamed in,
so a crash never leaves a name with no valid slot); slot 1 appears with the second commit.
Files of the first format (UTF-8 text, `kdelay-group v1`, replaced whole on every commit)
are still read: `parse` tells them apart by their first bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from ..errors import CorruptLogError
from ..records import DeliveryKey

MAGIC = b"kdgp"
VERSION = 2
SLOT_SPAN = 512   # where slot 1 starts; also the most bytes a slot may take
SLOTS = 2
_HEAD = struct.Struct(">4sBQBqqqB")  # magic, version, sequence, flags, key, clock, name len
_CRC = struct.Struct(">I")
_HAS_KEY = 1
MAX_FILE_BYTES = SLOT_SPAN * SLOTS
LEGACY_TAG = "kdelay-group v1"


@dataclass(frozen=True)
class Slot:
    """One valid slot's record."""
    sequence: int
    key: DeliveryKey | None
    clock: int


@dataclass(frozen=True)
class PositionFile:
    """What a position file holds. `slots[i]` is slot i's record, or None with the reason in
    `damage[i]` ("" for a slot never written). `legacy`: the first format (no slots; its one
    record stands in `slots[0]`)."""
    slots: tuple[Slot | None, Slot | None]
    damage: tuple[str, str]
    legacy: bool = False

    @property
    def newest(self) -> int | None:
        """The index of the valid slot with the higher sequence (None: neither is valid)."""
        a, b = self.slots
        if a is None:
            return None if b is None else 1
        return 0 if b is None or a.sequence > b.sequence else 1

    @property
    def current(self) -> Slot | None:
        i = self.newest
        return None if i is None else self.slots[i]

    @property
    def max_clock(self) -> int:
        """The largest clock a valid slot holds (0 if none)."""
        return max((s.clock for s in self.slots if s is not None), default=0)


def encode_slot(group: str, sequence: int, key: DeliveryKey | None, clock: int) -> bytes:
    """One slot's bytes (at most SLOT_SPAN: the group name is at most 120 bytes)."""
    name = group.encode("utf-8")
    head = _HEAD.pack(MAGIC, VERSION, sequence, 0 if key is None else _HAS_KEY,
                      0 if key is None else key.deliver_after, 0 if key is None else key.offset,
                      clock, len(name)) + name
    return head + _CRC.pack(crc32c.crc32c(head))


def slot_position(index: int) -> int:
    return index * SLOT_SPAN


def parse(raw: bytes, group: str) -> PositionFile:
    """Read a whole position file of either format. Never raises: a damaged slot is
    reported in `damage` (see `current_or_raise`). O(file size), at most 1 KiB."""
    if raw.startswith(LEGACY_TAG.encode() + b"\n"):
        try:
            return PositionFile((_parse_legacy(raw, group), None), ("", ""), legacy=True)
        except ValueError as e:
            return PositionFile((None, None), (f"first-format record unreadable: {e}", ""),
                                legacy=True)
    verdicts = [_parse_slot(raw, i, group) for i in range(SLOTS)]
    return PositionFile((verdicts[0][0], verdicts[1][0]), (verdicts[0][1], verdicts[1][1]))


def current_or_raise(file: PositionFile, path: str) -> Slot:
    """The newest valid record, or CorruptLogError naming the file and what is wrong with
    each slot (a crash cannot leave a file without one valid slot)."""
    slot = file.current
    if slot is None:
        if file.legacy:
            why = file.damage[0]
        else:
            why = "; ".join(f"slot {i}: {d or 'never written'}" for i, d in enumerate(file.damage))
        raise CorruptLogError(f"group position file is corrupt ({why})", path=path)
    return slot


def _parse_slot(raw: bytes, index: int, group: str) -> tuple[Slot | None, str]:
    start = slot_position(index)
    if len(raw) <= start:
        return None, "" if index else "the file is empty"
    if len(raw) < start + _HEAD.size:
        return None, f"cut short at byte {len(raw)}"
    magic, version, sequence, flags, da, off, clock, n = _HEAD.unpack_from(raw, start)
    end = start + _HEAD.size + n
    if magic != MAGIC:
        return None, f"no slot magic at byte {start}"
    if end + _CRC.size > len(raw):
        return None, f"cut short at byte {len(raw)}"
    (crc,) = _CRC.unpack_from(raw, end)
    if crc != crc32c.crc32c(raw[start:end]):
        return None, f"checksum mismatch in the slot at byte {start}"
    if version != VERSION:
        return None, f"unknown slot version {version} at byte {start}"
    if raw[start + _HEAD.size:end] != group.encode("utf-8"):
        return None, f"the slot at byte {start} is another group's"
    return Slot(sequence, DeliveryKey(da, off) if flags & _HAS_KEY else None, clock), ""


def _parse_legacy(raw: bytes, group: str) -> Slot:
    """The first format: tag, group name (which may itself hold newlines), position, then
    the CRC of all of that, as text. Parsed from both ends so the name can be anything."""
    try:
        body, crc_line, end = raw.decode("utf-8").rsplit("\n", 2)
    except (UnicodeDecodeError, ValueError):
        raise ValueError("not UTF-8 lines") from None
    text = body + "\n"
    if end or f"{crc32c.crc32c(text.encode('utf-8')):08x}" != crc_line:
        raise ValueError("checksum mismatch")
    tag, rest = body.split("\n", 1)
    name, position = rest.rsplit("\n", 1)
    if tag != LEGACY_TAG or name != group:
        raise ValueError("another group's file")
    *key, clock = position.split(" ")
    if key == ["none"]:
        return Slot(0, None, int(clock))
    da, off = key
    return Slot(0, DeliveryKey(int(da), int(off)), int(clock))


def encode_legacy(group: str, key: DeliveryKey | None, clock: int) -> bytes:
    """A first-format file (what earlier versions wrote): for tests of the upgrade."""
    body = ("none" if key is None else f"{key.deliver_after} {key.offset}") + f" {clock}"
    text = f"{LEGACY_TAG}\n{group}\n{body}\n"
    return f"{text}{crc32c.crc32c(text.encode('utf-8')):08x}\n".encode()
