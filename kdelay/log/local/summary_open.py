"""The clean open of a directory the last clean close vouched for: when it still holds
exactly the files that close listed (segment_summary.py records their names), every
sealed segment is taken from the summary's columns, checked as a whole (each segment ends
where the next begins, compacted ones agree with their markers), and made into a
LogSegment only when first used (segment_set.Summarised); only the active segment is
loaded. The per-segment work left at open is numpy's and the sorted orders' (no Python
call per segment), so an open of 1,000 segments costs little more than one of 10.

Anything else (no summary, a listing that differs by one name, a gap, a marker that
disagrees) returns None and the loader opens the directory segment by segment, as it
always has, deferring the indexes where the summary still describes the segments.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..compaction import swap
from ..segments.layout import Listing
from ..segments.segment import LogSegment
from ..segments.segment_set import Summarised
from ..segments.segment_summary import (
    BASE,
    COMPACTED,
    NEXT,
    SegmentSummary,
    SummaryFile,
    encode_listing,
)


def vouched_summary(summary: SummaryFile | None, names: list[str]) -> bool:
    """Does `summary` record exactly the directory listed as `names`? One sort and one
    comparison, both in C. O(names log names)."""
    return summary is not None and bool(summary.listing) and \
        encode_listing(names) == summary.listing


def open_summarised(directory: str, summary: SummaryFile,
                    load_active: Callable[[int], LogSegment],
                    make: Callable[[SegmentSummary], LogSegment]
                    ) -> tuple[LogSegment, Summarised, Listing] | None:
    """The active segment (by `load_active(base)`), the sealed ones as rows (made by
    `make`), and the listing they stand for; None where the summary does not hold
    together (the caller opens segment by segment)."""
    t = summary.table
    bases, ends = t[:, BASE], t[:, NEXT]
    active = summary.active_base
    if len(t) and (bool((bases[1:] != ends[:-1]).any()) or int(ends[-1]) != active):
        return None  # a gap: the segment-by-segment open reports it
    for i in np.flatnonzero(t[:, COMPACTED]).tolist():
        # read as that open reads them: a damaged marker is its to repair
        marker = swap.read_marker(directory, int(bases[i]))
        if marker is None or marker.end_offset != int(ends[i]):
            return None
    sealed = Summarised(summary, make)
    listing = Listing([*sealed.bases, active], [], frozenset(), [], [],
                      {suffix: found for suffix, found in summary.companions.items()
                       if found})
    return load_active(active), sealed, listing
