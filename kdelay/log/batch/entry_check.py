"""A batch read back from a .log, checked against the index entry that led its reader to
it: the one rule of every reader of indexed batches (a segment's verified read, the
due-order merge, compaction's copy, Spark's readers).

An entry (index.entry.Entry) says where a batch is and what it holds: its
deliverAfter, base offset, lastOffsetDelta and size. The batch read there must parse
(codec.parse_header's checks), agree with the entry on each of those fields, and pass its
CRC-32C. The fields matter because the CRC does not cover the base offset or the size, and
a sane batch that is not the one the entry meant (a stale index, a file changed under a
lock-free reader) passes every other check. A header walk that reads a batch again checks
it against the entry it expects (the offset the batch before it ended at, the header it
just walked).

`check_batch` checks one batch: a segment's verified read (fetches in offset order,
cancellations, and the due-order page fill's second look at a batch its compiled check,
batch_read.pxd, refused), compaction's copy of a single batch, Spark's readers; no Python
beyond a header parse and the comparison. `check_run` checks batches lying back to back in
one buffer, as columns (one compiled header walk, one compiled CRC pass: check_crcs). A
test holds the two to the same verdicts.
"""

from __future__ import annotations

import numpy as np

from ...errors import CorruptLogError
from ...index.entry import Entry
from . import codec
from .walker import HeaderColumns

# the fields an entry and its batch's header must agree on, in Entry's order
CHECKED_FIELDS = ("deliver_after", "base_offset", "last_offset_delta", "size")


def check_batch(buf, rel: int, entry: Entry, *, path: str | None,
                crc: bool = True) -> codec.BatchHeader:
    """The header of the batch at `buf[rel:]`, read from the .log where `entry` says,
    once it is checked against `entry` (and, with `crc`, its CRC-32C: Spark's reader
    leaves that to report per batch). Raises CorruptLogError naming the file and the
    entry's position."""
    deliver_after, base_offset, position, last_offset_delta, size = entry
    h = codec.parse_header(buf, rel, path=path, file_pos=position)
    # CHECKED_FIELDS spelled out: a tuple of them costs every caller more per batch
    if h.base_offset != base_offset or h.size != size or h.deliver_after != deliver_after \
            or h.last_offset_delta != last_offset_delta:
        raise CorruptLogError(
            f"batch has deliverAfter {h.deliver_after}, base offset {h.base_offset}, "
            f"lastOffsetDelta {h.last_offset_delta} and {h.size} bytes, not the "
            f"{deliver_after}, {base_offset}, {last_offset_delta} and {size} its index entry "
            f"says", path, position)
    if crc:
        codec.check_crc(buf, rel, h, path=path, file_pos=position)
    return h


def check_run(buf, rel: int, deliver_after: np.ndarray, base_offset: np.ndarray,
              last_offset_delta: np.ndarray, size: np.ndarray) -> HeaderColumns | None:
    """`check_batch` over batches lying back to back in `buf` from `rel`, their entries
    given as columns: their headers if every one passes, else None (the caller then has
    check_batch say which batch fails, and why)."""
    end = rel + int(size.sum())
    if end > len(buf):
        return None
    headers, _ = HeaderColumns.walk(np.frombuffer(buf, dtype=np.uint8, count=end), rel,
                                    len(size))
    if len(headers) < len(size):
        return None
    expected = (deliver_after, base_offset, last_offset_delta, size)
    for name, want in zip(CHECKED_FIELDS, expected, strict=True):
        if not np.array_equal(getattr(headers, name), want):
            return None
    return headers if headers.crc_valid(buf).all() else None
