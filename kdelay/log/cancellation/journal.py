"""Cancellations: which records of a segment have been withdrawn (cancel, reschedule).

Each segment with at least one cancelled record has two files beside its .log:

``<base>.cancels``: the journal, the source of truth. Append-only, fixed 32-byte slots
(little-endian), so a damaged entry costs only itself and a reader resyncs at the next slot::

    header (32 bytes)
      0  8s  magic       b"KDCANJ01"
      8  q   base_offset the segment's base offset (must match the file name)
     16  q   generation  bumped whenever recovery rewrites the journal (see below)
     24  4x  reserved
     28  I   crc         CRC-32C of bytes 0..28
    entries (32 bytes each)
      0  B   kind        1 CANCEL, 2 MOVE (reschedule intent), 3 CONFIRM, 4 VOID
      1  3x  reserved
      4  I   copy_crc    MOVE: the CRC field of the copy's batch header; else 0
      8  q   offset      the cancelled record's offset (in this segment)
     16  q   copy_offset MOVE: base offset of the copy's (single-record) batch; else -1
     24  I   reserved
     28  I   crc         CRC-32C of bytes 0..28

``<base>.cancelindex``: a cache of the journal's outcome, the sorted cancelled offsets as one
int64 column, in the shared index-file format (kdelay/index/index_file.py, magic
``KCANIDX2``). Its header's ``log_bytes`` field holds the journal size it covers and its
``next_offset`` field the journal generation; it is trusted only if both match the journal
(so a clean open reads one header per segment and maps the column lazily; it is O(segments)
whatever the number of cancellations). Anything else (missing, stale, corrupt) is rebuilt by
replaying the journal.

Replaying (in order): CANCEL adds the offset; MOVE adds it, pending confirmation; CONFIRM
settles that MOVE; VOID removes the offset. A reschedule of X is: encode the copy, write MOVE
(X, C, crc of the copy) and fsync the journal, then append the copy at offset C. Once the
.log holding the copy is fsync'd, a CONFIRM is written. A MOVE that replay finds unconfirmed
(a crash came in between) is resolved against the recovered log: the copy is there (its batch
at C carries the recorded CRC) or X stays live. Either way exactly one of them survives:

* copy bytes lost, MOVE kept: C is not in the log (or holds another batch) -> X is live;
* MOVE lost: impossible while the copy survives, the MOVE was fsync'd before the copy's
  bytes were even written (the write-ahead rule; one fsync per reschedule);
* CONFIRM is only written after the copy is durable, so a confirmed MOVE never loses its copy.

A CANCEL or MOVE naming an offset at or past the segment's recovered end names a record a
crash took away (its offset will be reused): replay drops it. Whenever replay drops or
resolves anything, the journal is rewritten as plain CANCELs (atomically, generation + 1)
before the log takes appends, so a later replay never re-decides an old MOVE.

A sound cache of the journal's generation that covers more bytes than the journal holds
means the journal lost its tail (it only ever grows): its offsets are kept and the loss is
reported. Cost on disk: 32 + 8 bytes per cancelled record (64 + 8 for a moved one until
a recovery rewrites its MOVE and CONFIRM as one CANCEL).

Memory: offsets cancelled since the cache was written sit in a SortedList until the next
checkpoint (roll, close, or when they reach a quarter of the cache, within [1 Ki, 64 Ki]),
everything else is in the mmap'd cache, so cancelled records that are due cost no heap. Fetch asks a segment only for the cancelled offsets inside one batch:
two searchsorted calls plus a SortedList range, O(log n + k) per batch.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable
from typing import NamedTuple

import crc32c
import numpy as np

from ... import fsio
from ...errors import IndexFileError
from ...index.index_file import IndexMeta, load_index, read_meta
from ..segments.layout import CANCEL_INDEX_SUFFIX, CANCEL_SUFFIXES, segment_file
from ..segments.layout import CANCELS_SUFFIX as JOURNAL_SUFFIX

__all__ = ["CANCEL_INDEX_SUFFIX", "CANCEL_SUFFIXES", "JOURNAL_SUFFIX", "check_cancels",
           "read_cancelled", "replay"]
JOURNAL_MAGIC = b"KDCANJ01"
INDEX_MAGIC = b"KCANIDX2"
CACHE_DTYPES = [np.dtype("<i8")]

JOURNAL_HEAD = struct.Struct("<8sqq4xI")
_ENTRY = struct.Struct("<B3xIqqII")
SLOT = 32
_CRC_AT = 28  # a slot's CRC-32C covers the bytes before it
assert JOURNAL_HEAD.size == SLOT and _ENTRY.size == SLOT

CANCEL, MOVE, CONFIRM, VOID = 1, 2, 3, 4
KIND_NAMES = {CANCEL: "cancel", MOVE: "move", CONFIRM: "confirm", VOID: "void"}
NO_OFFSETS = np.empty(0, dtype=np.int64)
NO_END = 1 << 62  # replay with no segment end: every offset the journal names counts

# copy_check(copy_offset, copy_crc) -> True (the copy is in the log), False (it is not),
# None (cannot tell: the copy's segment is gone, so the move was settled long ago)
CopyCheck = Callable[[int, int], "bool | None"]


class JournalEntry(NamedTuple):
    position: int
    kind: int
    offset: int
    copy_offset: int
    copy_crc: int


class JournalScan(NamedTuple):
    generation: int | None  # None: header missing or damaged
    entries: list[JournalEntry]
    problems: list[tuple[int, str]]  # (byte position, what is wrong)
    size: int


def _sealed(slot: bytes) -> bytes:
    """The slot with its CRC field filled in."""
    return slot[:_CRC_AT] + struct.pack("<I", crc32c.crc32c(slot[:_CRC_AT]))


def journal_header(base_offset: int, generation: int) -> bytes:
    return _sealed(JOURNAL_HEAD.pack(JOURNAL_MAGIC, base_offset, generation, 0))


def encode_entry(kind: int, offset: int, copy_offset: int = -1, copy_crc: int = 0) -> bytes:
    return _sealed(_ENTRY.pack(kind, copy_crc, offset, copy_offset, 0, 0))


def parse_header(data: bytes, base_offset: int) -> tuple[int | None, str | None]:
    """(generation, None) when `data` starts with a sound header of segment `base_offset`'s
    journal, else (None, what is wrong): too short, bad magic, bad CRC, or another
    segment's. Nothing else may trust a journal's generation."""
    if len(data) < SLOT:
        return None, f"truncated header ({len(data)} bytes)"
    magic, base, generation, crc = JOURNAL_HEAD.unpack_from(data, 0)
    if magic != JOURNAL_MAGIC:
        return None, f"bad magic {magic!r}"
    if crc32c.crc32c(data[:_CRC_AT]) != crc:
        return None, "header checksum mismatch"
    if base != base_offset:
        return None, f"header names segment {base}, file is segment {base_offset}"
    return generation, None


def read_generation(path: str, base_offset: int) -> int | None:
    """The generation of the journal at `path` if its header is sound (parse_header), else
    None. Raises OSError (FileNotFoundError: no journal)."""
    with open(path, "rb") as f:
        return parse_header(f.read(SLOT), base_offset)[0]


def parse_journal(data: bytes, base_offset: int) -> JournalScan:
    """Every entry of a journal's bytes, with the damaged ones listed (not returned). A
    header or slot that fails its CRC, an unknown kind, or a trailing part-slot is a
    problem; the walk goes on at the next slot."""
    problems: list[tuple[int, str]] = []
    generation, damage = parse_header(data, base_offset)
    if damage is not None:
        problems.append((0, damage))
        if len(data) < SLOT:
            return JournalScan(None, [], problems, len(data))
    entries = []
    end = len(data) - (len(data) % SLOT)
    view = memoryview(data)
    for pos in range(SLOT, end, SLOT):
        kind, copy_crc, offset, copy_offset, _, crc = _ENTRY.unpack_from(data, pos)
        if crc32c.crc32c(view[pos:pos + _CRC_AT]) != crc:
            problems.append((pos, "damaged entry (checksum mismatch)"))
        elif kind not in KIND_NAMES or offset < 0:
            problems.append((pos, f"invalid entry (kind {kind}, offset {offset})"))
        else:
            entries.append(JournalEntry(pos, kind, offset, copy_offset, copy_crc))
    if end != len(data):
        problems.append((end, f"torn tail ({len(data) - end} bytes of a partial entry)"))
    return JournalScan(generation, entries, problems, len(data))


def read_journal(path: str, base_offset: int) -> JournalScan:
    data = fsio.read_small(path)
    return parse_journal(data or b"", base_offset) if data is not None else \
        JournalScan(None, [], [], 0)


def cache_is_current(meta: IndexMeta, base_offset: int, journal_size: int,
                     generation: int | None) -> bool:
    """Does a cache's header vouch for this journal: the same segment, the journal's whole
    size and its generation (None, a damaged journal header, vouches for nothing)?"""
    return generation is not None and \
        (meta.base_offset, meta.log_bytes, meta.next_offset) == \
        (base_offset, journal_size, generation)


def replay(entries: Iterable[JournalEntry], next_offset: int, base_offset: int,
           copy_check: CopyCheck | None) -> tuple[set[int], bool]:
    """The cancelled offsets a journal's entries amount to, and whether replay had to drop
    or resolve anything (then the journal should be rewritten). `copy_check` None: treat an
    unconfirmed MOVE as confirmed (a reader that must not decide, e.g. an offline tool)."""
    state: set[int] = set()
    unsettled: dict[int, tuple[int, int]] = {}
    changed = False
    for e in entries:
        in_range = base_offset <= e.offset < next_offset
        if e.kind == CANCEL:
            if in_range:
                state.add(e.offset)
            else:
                changed = True
        elif e.kind == MOVE:
            if in_range:
                state.add(e.offset)
                unsettled[e.offset] = (e.copy_offset, e.copy_crc)
            else:
                changed = True
        elif e.kind == CONFIRM:
            unsettled.pop(e.offset, None)
        else:  # VOID
            state.discard(e.offset)
            unsettled.pop(e.offset, None)
    if unsettled and copy_check is not None:
        changed = True
        for offset, (copy_offset, copy_crc) in unsettled.items():
            if copy_check(copy_offset, copy_crc) is False:
                state.discard(offset)
    return state, changed


def cancelled_in_journal(path: str, base_offset: int) -> set[int]:
    """Every offset the journal at `path` cancels, deciding nothing (no segment end, an
    unconfirmed move kept): for a reader that may not rewrite it."""
    return replay(read_journal(path, base_offset).entries, NO_END, base_offset, None)[0]


def cache_beyond_journal(index_path: str, base_offset: int, scan: JournalScan
                          ) -> tuple[int, list[int]] | None:
    """(bytes covered, offsets) of a sound cache of this journal generation that covers
    more bytes than the journal has, else None."""
    if scan.generation is None:
        return None
    try:
        meta, _ = read_meta(index_path, INDEX_MAGIC)
        if meta.base_offset != base_offset or meta.next_offset != scan.generation or \
                meta.log_bytes <= scan.size:
            return None
        _, (col,) = load_index(index_path, INDEX_MAGIC, CACHE_DTYPES, base_offset=base_offset,
                               log_bytes=meta.log_bytes)
    except IndexFileError:
        return None
    return meta.log_bytes, col.tolist()


def check_cancels(directory: str, base_offset: int, next_offset: int
                  ) -> tuple[list[tuple[str, int, str]], int]:
    """Offline check of one segment's cancellation files (kdelay verify): damaged journal
    entries, entries naming an offset outside the segment, and a cache that is current
    but disagrees with the journal, each as (file, byte position, what). Returns those
    and how many offsets the journal cancels. Reads only."""
    stem = segment_file(directory, base_offset, "")
    path = stem + JOURNAL_SUFFIX
    scan = read_journal(path, base_offset)
    problems = [(path, pos, f"cancellation journal: {what}") for pos, what in scan.problems]
    for e in scan.entries:
        if e.kind in (CANCEL, MOVE) and not base_offset <= e.offset < next_offset:
            problems.append((path, e.position,
                             f"cancellation journal: {KIND_NAMES[e.kind]} names offset "
                             f"{e.offset}, outside segment [{base_offset}, {next_offset})"))
    state, _ = replay(scan.entries, next_offset, base_offset, None)
    cache = stem + CANCEL_INDEX_SUFFIX
    lost = cache_beyond_journal(cache, base_offset, scan)
    if lost is not None:
        problems.append((path, scan.size, f"cancellation journal shorter than its cache "
                                          f"covers ({lost[0]} bytes): entries lost"))
    if scan.generation is not None and os.path.exists(cache):
        try:
            meta, (col,) = load_index(cache, INDEX_MAGIC, CACHE_DTYPES, base_offset=base_offset,
                                      log_bytes=scan.size)
            if cache_is_current(meta, base_offset, scan.size, scan.generation) and \
                    set(col.tolist()) != replay(scan.entries, NO_END, base_offset, None)[0]:
                problems.append((cache, 64, "cancellation cache is current for its journal "
                                            "but lists other offsets"))
        except IndexFileError as e:
            if "stale" not in str(e):  # stale after a crash is normal: the open rebuilds it
                problems.append((cache, 0, f"cancellation cache: {e}"))
    return problems, len(state)


def read_cancelled(directory: str, base_offset: int, next_offset: int | None = None
                   ) -> np.ndarray:
    """The segment's cancelled offsets, sorted, for readers that do not open the Log (tools,
    Spark): the cache when it is current, else a replay of the journal (settling nothing).
    Offsets at or past `next_offset` (if given) are left out. Empty if there is no journal."""
    stem = segment_file(directory, base_offset, "")
    try:
        size = os.path.getsize(stem + JOURNAL_SUFFIX)
    except FileNotFoundError:
        return NO_OFFSETS
    out = None
    try:
        gen = read_generation(stem + JOURNAL_SUFFIX, base_offset)
        meta, (col,) = load_index(stem + CANCEL_INDEX_SUFFIX, INDEX_MAGIC, CACHE_DTYPES,
                                  base_offset=base_offset, log_bytes=size)
        if cache_is_current(meta, base_offset, size, gen):
            out = np.asarray(col)
    except (IndexFileError, OSError):
        out = None
    if out is None:
        state = cancelled_in_journal(stem + JOURNAL_SUFFIX, base_offset)
        out = np.array(sorted(state), dtype=np.int64)
    if next_offset is not None and len(out) and out[-1] >= next_offset:
        out = out[: int(np.searchsorted(out, next_offset))]
    return out
