"""The bytes of a queue group's state files: encoding, decoding and replay (no file I/O;
`state_store` owns reading, writing and recovery).

Files, in `<partition dir>/queues/` (all integers big-endian):

`<group>.snapshot`, replaced atomically (temp file, fsync, rename, fsync dir):

    magic "KDQS" | version u16 = 1 | flags u16 (bit 0: a cursor is stored) |
    generation u64 | cursor deliverAfter i64 | cursor offset i64 | acked u64 |
    rejected u64 | count u32 | count x (offset i64, delivery count u32, available-at i64) |
    crc32c u32 of every byte before it
    (the delivery count's top bit says the record was held when the snapshot was taken;
    only the offline counts read it: after a restart nothing is held)

`<group>.journal`, append-only; a 24-byte header, then entries:

    header: magic "KDQJ" | version u16 = 1 | reserved u16 | generation u64 |
            reserved u32 | crc32c u32 of the 20 bytes before it
    entry:  length u32 (of the body) | crc32c u32 (of the body) | body
    body:   type u8 | synced u64 | payload
      synced: the journal length known to be fsync'd before this entry was written, so a
      damaged byte below it is real damage, not the torn tail a crash leaves
      1 ACQUIRE  flags u8 (bit 0: cursor) | cursor da i64 | cursor offset i64 | n u32 |
                 n x (offset i64, delivery count u32, available-at i64)
      2 ACK      n u32 | n x offset i64      (finished: never delivered again)
      3 REJECT   n u32 | n x offset i64      (finished, dead-lettered if configured)
      4 RELEASE  n u32 | n x (offset i64, available-at i64)
      5 DROP     n u32 | n x offset i64      (gone from the log: retention, compaction,
                                              or an unflushed tail lost in a power loss)

A journal applies to the snapshot of the same generation. Compaction writes the state as a
new snapshot of generation g + 1, then replaces the journal with an empty one of g + 1; a
crash between the two leaves an older journal, which is ignored (the snapshot holds it).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import crc32c
import numpy as np

from ...errors import CorruptQueueStateError
from ...records import DeliveryKey

ACQUIRE, ACK, REJECT, RELEASE, DROP = 1, 2, 3, 4, 5
ENTRY_NAMES = {ACQUIRE: "acquire", ACK: "ack", REJECT: "reject", RELEASE: "release",
               DROP: "drop"}

_SNAP_HEAD = struct.Struct(">4sHHQqqQQI")
_SNAP_ITEM = struct.Struct(">qIq")
ACQUIRED_BIT = 1 << 31  # in a snapshot item's count: held when the snapshot was taken
_COUNT_MASK = ACQUIRED_BIT - 1
_ITEM_DTYPE = np.dtype([("offset", ">i8"), ("count", ">u4"), ("at", ">i8")])  # = _SNAP_ITEM
_JOURNAL_HEAD = struct.Struct(">4sHHQI")
JOURNAL_HEADER_SIZE = _JOURNAL_HEAD.size + 4
_ENTRY_FRAME = struct.Struct(">II")
_BODY_HEAD = struct.Struct(">BQ")
_ACQ_HEAD = struct.Struct(">BqqI")
_COUNT = struct.Struct(">I")
_OFFSET = struct.Struct(">q")
_RELEASE_ITEM = struct.Struct(">qq")
_MIN_BODY = _BODY_HEAD.size + _COUNT.size
SNAPSHOT_ITEM_SIZE = _SNAP_ITEM.size
SNAP_MAGIC, JOURNAL_MAGIC, VERSION = b"KDQS", b"KDQJ", 1
MAX_ENTRY = 64 << 20

@dataclass
class LoadedState:
    """What `load` found. `journal_end` is where valid entries end (the append position);
    `torn` is (position, bytes) of a dropped torn tail; `stale_journal` means the journal
    predates the snapshot (a crash during compaction) and must be replaced."""

    cursor: DeliveryKey | None = None
    inflight: dict[int, tuple[int, int]] = field(default_factory=dict)
    acquired: set[int] = field(default_factory=set)  # last event an acquisition (counts only)
    acked: int = 0
    rejected: int = 0
    generation: int = 0
    exists: bool = False
    journal_exists: bool = False
    journal_end: int = JOURNAL_HEADER_SIZE
    journal_entries: int = 0
    torn: tuple[int, int] | None = None
    stale_journal: bool = False


# ---------------------------------------------------------------------- encoding

def encode_snapshot(generation: int, cursor: DeliveryKey | None, acked: int, rejected: int,
                    items: list[tuple[int, int, int]]) -> bytes:
    """O(items): one struct pack per in-flight record."""
    da, off = (0, 0) if cursor is None else cursor
    parts = [_SNAP_HEAD.pack(SNAP_MAGIC, VERSION, 0 if cursor is None else 1, generation,
                             da, off, acked, rejected, len(items))]
    pack = _SNAP_ITEM.pack
    parts += [pack(o, c, a) for o, c, a in items]
    data = b"".join(parts)
    return data + _COUNT.pack(crc32c.crc32c(data))


def journal_header(generation: int) -> bytes:
    head = _JOURNAL_HEAD.pack(JOURNAL_MAGIC, VERSION, 0, generation, 0)
    return head + _COUNT.pack(crc32c.crc32c(head))


def frame(kind: int, synced: int, payload: bytes) -> bytes:
    body = _BODY_HEAD.pack(kind, synced) + payload
    return _ENTRY_FRAME.pack(len(body), crc32c.crc32c(body)) + body


def acquire_payload(cursor: DeliveryKey | None, items: list[tuple[int, int, int]]) -> bytes:
    da, off = (0, 0) if cursor is None else cursor
    head = _ACQ_HEAD.pack(0 if cursor is None else 1, da, off, len(items))
    pack = _SNAP_ITEM.pack
    return head + b"".join([pack(o, c, a) for o, c, a in items])


def offsets_payload(offsets: list[int]) -> bytes:
    return _COUNT.pack(len(offsets)) + struct.pack(f">{len(offsets)}q", *offsets)


def release_payload(items: list[tuple[int, int]]) -> bytes:
    pack = _RELEASE_ITEM.pack
    return _COUNT.pack(len(items)) + b"".join([pack(o, a) for o, a in items])


# ---------------------------------------------------------------------- decoding

def parse_snapshot(data: bytes, path: str) -> LoadedState:
    if len(data) < _SNAP_HEAD.size + 4:
        raise CorruptQueueStateError("queue snapshot is truncated", path, 0)
    if _COUNT.unpack_from(data, len(data) - 4)[0] != crc32c.crc32c(data[:-4]):
        raise CorruptQueueStateError("queue snapshot fails its checksum", path, 0)
    magic, version, flags, gen, da, off, acked, rejected, n = _SNAP_HEAD.unpack_from(data)
    if magic != SNAP_MAGIC or version != VERSION:
        raise CorruptQueueStateError("not a queue snapshot (magic or version)", path, 0)
    if len(data) != _SNAP_HEAD.size + n * _SNAP_ITEM.size + 4:
        raise CorruptQueueStateError("queue snapshot length disagrees with its count", path, 0)
    st = LoadedState(cursor=DeliveryKey(da, off) if flags & 1 else None, acked=acked,
                     rejected=rejected, generation=gen, exists=True)
    items = np.frombuffer(data, _ITEM_DTYPE, n, _SNAP_HEAD.size)
    offsets, counts = items["offset"].tolist(), items["count"]
    st.inflight = dict(zip(offsets, zip((counts & _COUNT_MASK).tolist(), items["at"].tolist(),
                                        strict=True), strict=True))
    st.acquired = {o for o, held in zip(offsets, (counts & ACQUIRED_BIT).tolist(),
                                        strict=True) if held}
    return st


def entry_at(data: bytes, pos: int) -> tuple[int, int, bytes] | None:
    """(kind, synced, payload) of a valid entry starting at `pos`, else None."""
    if pos + _ENTRY_FRAME.size > len(data):
        return None
    length, crc = _ENTRY_FRAME.unpack_from(data, pos)
    start = pos + _ENTRY_FRAME.size
    if length < _MIN_BODY or length > MAX_ENTRY or start + length > len(data):
        return None
    body = data[start:start + length]
    if crc32c.crc32c(body) != crc:
        return None
    kind, synced = _BODY_HEAD.unpack_from(body)
    if kind not in ENTRY_NAMES:
        return None
    return kind, synced, body[_BODY_HEAD.size:]


def apply_entry(st: LoadedState, kind: int, payload: bytes) -> None:
    if kind == ACQUIRE:
        flags, da, off, n = _ACQ_HEAD.unpack_from(payload)
        if flags & 1:
            st.cursor = DeliveryKey(da, off)
        items = np.frombuffer(payload, _ITEM_DTYPE, n, _ACQ_HEAD.size)
        offsets = items["offset"].tolist()
        st.inflight.update(zip(offsets, zip(items["count"].tolist(),
                                            items["at"].tolist(), strict=True), strict=True))
        st.acquired.update(offsets)
        return
    n = _COUNT.unpack_from(payload)[0]
    if kind == RELEASE:
        for o, a in _RELEASE_ITEM.iter_unpack(payload[4:4 + n * _RELEASE_ITEM.size]):
            if o in st.inflight:
                st.inflight[o] = (st.inflight[o][0], a)
                st.acquired.discard(o)
        return
    offsets = struct.unpack_from(f">{n}q", payload, 4)
    for o in offsets:
        st.inflight.pop(o, None)
        st.acquired.discard(o)
    if kind == ACK:
        st.acked += n
    elif kind == REJECT:
        st.rejected += n


def payload_ok(kind: int, payload: bytes) -> bool:
    """The payload's own length agrees with its count (the CRC already matched)."""
    if kind == ACQUIRE:
        return (len(payload) >= _ACQ_HEAD.size and len(payload) == _ACQ_HEAD.size
                + _ACQ_HEAD.unpack_from(payload)[3] * _SNAP_ITEM.size)
    item = _RELEASE_ITEM.size if kind == RELEASE else _OFFSET.size
    return len(payload) == 4 + _COUNT.unpack_from(payload)[0] * item


def synced_claim_after(data: bytes, pos: int) -> int:
    """The largest `synced` length claimed by any valid entry found after a damaged one at
    `pos` (0 if none): a search byte by byte, only run when a journal has a bad entry."""
    best = 0
    find = data.find
    q = pos + 1
    while True:
        # a body starts with a valid kind byte at q + 8: skip positions where it cannot
        q = min((i for i in (find(bytes([k]), q + 8) for k in ENTRY_NAMES) if i >= 0),
                default=-1)
        if q < 0:
            return best
        q -= 8
        entry = entry_at(data, q)
        if entry is not None and payload_ok(entry[0], entry[2]):
            best = max(best, entry[1])
        q += 1


def entry_end(pos: int, payload: bytes) -> int:
    """Where the entry starting at `pos` with this payload ends."""
    return pos + _ENTRY_FRAME.size + _BODY_HEAD.size + len(payload)


def parse_journal_header(journal: bytes, path: str) -> int:
    """The journal's generation; CorruptQueueStateError if its header is damaged (it is
    written atomically, so a crash never tears it)."""
    head = journal[:JOURNAL_HEADER_SIZE]
    if len(head) < JOURNAL_HEADER_SIZE or _COUNT.unpack_from(head, _JOURNAL_HEAD.size)[0] \
            != crc32c.crc32c(head[:_JOURNAL_HEAD.size]):
        raise CorruptQueueStateError("queue journal header is damaged", path, 0)
    magic, version, _, gen, _ = _JOURNAL_HEAD.unpack_from(head)
    if magic != JOURNAL_MAGIC or version != VERSION:
        raise CorruptQueueStateError("not a queue journal (magic or version)", path, 0)
    return gen
