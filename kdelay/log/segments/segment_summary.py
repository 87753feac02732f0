"""The segment summary: what a clean close knows of every sealed local segment, so that
the next clean open needs none of their indexes (they load on first use, as Kafka's
LazyIndex does: DeferredIndexes in log/local/deferred_indexes.py), and, when the directory still
holds exactly the files the close left, none of their names either: the open then builds
no object per segment until one is first used (SegmentSet, segment_set.py).

File `segment-summary-checkpoint`, replaced atomically by every clean close (before the
clean-shutdown marker, and trusted only while that marker is present: the first change
after an open removes the marker, so a summary never outlives the state it describes):

    header (40 bytes, little-endian): magic b"KDLYSUM2", rows n (q), the active segment's
      base offset (q), companion rows c (q), listing bytes m (q)
    n rows of 8 int64: base_offset, next_offset, log_bytes, min_deliver_after,
      max_key deliverAfter, max_key offset, max_timestamp, compacted (0/1)
      (min_deliver_after and max_key are NO_KEY for a segment with no batch)
    c rows of 2 int64: companion kind (COMPANIONS' index: compaction marker, cancellation
      journal, its cache), base offset: the segments that have that file
    m bytes: the directory's file names at the close, sorted, NUL-separated, UTF-8
      (m = 0: not recorded, the directory then being one the close does not vouch for)
    CRC-32C (uint32) of everything before it

A summary whose checksum fails, or whose segments are not exactly the directory's sealed
local ones, is ignored: the open then loads every index, as without one. One whose listing
differs from the directory's by any name is used the older way (every segment listed and
built at open, its indexes deferred).
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

import crc32c
import numpy as np

from ... import fsio
from .layout import CANCEL_INDEX_SUFFIX, CANCELS_SUFFIX, MARKER_SUFFIX

SUMMARY_FILE = "segment-summary-checkpoint"
_MAGIC = b"KDLYSUM2"
_HEAD = struct.Struct("<8sqqqq")
_FIELDS = 8
NO_KEY = -(1 << 63)  # min_deliver_after / max_key of a segment with no batch
# the companion files a summary records, by kind (the index is the kind's number)
COMPANIONS = (MARKER_SUFFIX, CANCELS_SUFFIX, CANCEL_INDEX_SUFFIX)
# column numbers of a summary row
BASE, NEXT, LOG_BYTES, MIN_DA, MAX_DA, MAX_OFF, MAX_TS, COMPACTED = range(_FIELDS)


class SegmentSummary(NamedTuple):
    base_offset: int
    next_offset: int
    log_bytes: int
    min_deliver_after: int | None
    max_key: tuple[int, int] | None
    max_timestamp: int
    compacted: bool


class SummaryFile(NamedTuple):
    """A summary as read (`read_summary_file`): rows as a table, one column per field."""

    table: np.ndarray                    # n x 8 int64, ascending base offsets
    active_base: int                     # the active segment's base offset at the close
    companions: dict[str, frozenset[int]]  # suffix -> bases of segments having that file
    listing: bytes                       # encode_listing of the directory (b"": none)

    def row(self, i: int) -> SegmentSummary:
        """Row `i` as a SegmentSummary. O(1)."""
        return _as_summary(self.table[i].tolist())

    def rows(self) -> dict[int, SegmentSummary]:
        """Every row, by base offset. O(rows)."""
        return {r[BASE]: _as_summary(r) for r in self.table.tolist()}


def _as_summary(r: list[int]) -> SegmentSummary:
    empty = r[MIN_DA] == NO_KEY
    return SegmentSummary(r[BASE], r[NEXT], r[LOG_BYTES], None if empty else r[MIN_DA],
                          None if empty else (r[MAX_DA], r[MAX_OFF]), r[MAX_TS],
                          bool(r[COMPACTED]))


def summary_path(directory: str) -> str:
    return os.path.join(directory, SUMMARY_FILE)


def encode_listing(names: list[str]) -> bytes:
    """A directory listing as a summary records it (any order in; C-level: sort, join)."""
    return "\0".join(sorted(names)).encode("utf-8", "surrogateescape")


def encode_summaries(rows: list[SegmentSummary], active_base: int = 0,
                     companions: dict[str, frozenset[int]] | None = None,
                     listing: bytes = b"") -> bytes:
    table = np.array([(r.base_offset, r.next_offset, r.log_bytes,
                       NO_KEY if r.min_deliver_after is None else r.min_deliver_after,
                       *((NO_KEY, NO_KEY) if r.max_key is None else r.max_key),
                       r.max_timestamp, int(r.compacted)) for r in rows],
                     dtype="<i8").reshape(len(rows), _FIELDS)
    comp = [(kind, base) for kind, suffix in enumerate(COMPANIONS)
            for base in sorted((companions or {}).get(suffix, ()))]
    extra = np.array(comp, dtype="<i8").reshape(len(comp), 2)
    body = (_HEAD.pack(_MAGIC, len(rows), active_base, len(comp), len(listing)) +
            table.tobytes() + extra.tobytes() + listing)
    return body + struct.pack("<I", crc32c.crc32c(body))


def write_summaries(directory: str, rows: list[SegmentSummary], active_base: int = 0,
                    companions: dict[str, frozenset[int]] | None = None,
                    listing: bytes = b"") -> None:
    """Replace the directory's summary (atomically). O(rows + listing)."""
    fsio.atomic_write(summary_path(directory),
                      encode_summaries(rows, active_base, companions, listing))


def read_summary_file(directory: str) -> SummaryFile | None:
    """The summary; None if it is missing or does not hold (a checksum, a size, a field
    out of range, rows out of order). One small read; the checks are numpy's, no Python
    work per row."""
    raw = fsio.read_small(summary_path(directory))
    if raw is None or len(raw) < _HEAD.size + 4:
        return None
    magic, n, active, c, m = _HEAD.unpack_from(raw)
    if magic != _MAGIC or min(n, c, m) < 0 or \
            len(raw) != _HEAD.size + 8 * (_FIELDS * n + 2 * c) + m + 4:
        return None
    if crc32c.crc32c(memoryview(raw)[:-4]) != struct.unpack_from("<I", raw, len(raw) - 4)[0]:
        return None
    table = np.frombuffer(raw, "<i8", n * _FIELDS, _HEAD.size).reshape(n, _FIELDS)
    at = _HEAD.size + 8 * _FIELDS * n
    extra = np.frombuffer(raw, "<i8", 2 * c, at).reshape(c, 2)
    if n and (bool((table[:, NEXT] < table[:, BASE]).any()) or
              bool((table[:, LOG_BYTES] < 0).any()) or
              bool(((table[:, COMPACTED] != 0) & (table[:, COMPACTED] != 1)).any()) or
              bool((np.diff(table[:, BASE]) <= 0).any())):
        return None
    if c and bool(((extra[:, 0] < 0) | (extra[:, 0] >= len(COMPANIONS))).any()):
        return None
    companions = {suffix: frozenset(extra[extra[:, 0] == kind, 1].tolist())
                  for kind, suffix in enumerate(COMPANIONS)}
    return SummaryFile(table, active, companions, raw[at + 16 * c:len(raw) - 4])


def read_summaries(directory: str) -> dict[int, SegmentSummary] | None:
    """The summary's rows by base offset; None if it is missing or does not hold."""
    found = read_summary_file(directory)
    return None if found is None else found.rows()
