"""Offset continuity: the rule by which every reader of a log checks its batches' base
offsets, within a segment and across segments.

Offsets run on without a gap: a batch starts at the offset after the previous batch's last
one (the first batch of a segment at the segment's base offset). Only compaction removes
offsets, so only there may a batch start past that offset: inside a segment compaction
rewrote (its `.compacted` marker, see log/compaction/swap.py; such a segment spans its
removed offsets up to the end its marker gives), and so at the start of the segment after
one. A step back is never allowed. Nothing else (a segment merely being sealed) allows a gap.

The functions use operators only (`==`, `>`, `&`, `|`), so that the one rule serves every
reader as it is: Python ints and bools (the engine, one batch at a time), numpy arrays, and
Spark columns (the offline checks).
"""

from __future__ import annotations

from typing import Any

from ...errors import CorruptLogError

# bools and ints, numpy arrays of them, or Spark columns: whatever the reader holds
Value = Any


def may_skip(in_compacted: Value, starts_segment: Value, after_compacted: Value) -> Value:
    """Whether a batch may start past the offset after its predecessor: it lies in a
    compacted segment, or it starts the segment after one (whose removed offsets may run
    to that segment's end)."""
    return in_compacted | (starts_segment & after_compacted)


def continues(base_offset: Value, expected: Value, skip_allowed: Value) -> Value:
    """Whether a batch starting at `base_offset` continues the offsets, `expected` being
    the offset after the previous batch's last (or the segment's base offset):
    `base_offset == expected`, or past it where `skip_allowed` (see may_skip)."""
    return (base_offset == expected) | (skip_allowed & (base_offset > expected))


def check_continues(base_offset: int, expected: int, skip_allowed: bool, path: str | None,
                    position: int) -> None:
    """`continues`, for the engine: raises CorruptLogError naming the batch where not."""
    if not continues(base_offset, expected, skip_allowed):
        raise CorruptLogError(f"batch base offset {base_offset}, expected {expected}", path,
                              position)
