"""Entry: one DeliverAfterIndex entry, the index's row for one stored batch.

It says where a batch is and what it holds: its deliverAfter, its base offset, its byte
position in the segment's .log, its last offset delta (records - 1) and its size in bytes.
A NamedTuple, so entries order as tuples do, by (deliverAfter, base offset) first (heaps
and sorted lists of entries need nothing else), and a field read by name costs what an
index does. The index's five columns come in the same order; code that indexes a column
or a compiled entry (five int64s) uses the field numbers of entry_fields.pxd (E_*,
re-exported here for Python), defined once there and checked against Entry at import.
"""

from __future__ import annotations

from typing import NamedTuple

from .entry_fields import (
    E_BASE_OFFSET,
    E_DELIVER_AFTER,
    E_LAST_OFFSET_DELTA,
    E_POSITION,
    E_SIZE,
    ENTRY_FIELDS,
)

__all__ = ["E_BASE_OFFSET", "E_DELIVER_AFTER", "E_LAST_OFFSET_DELTA", "E_POSITION", "E_SIZE",
           "ENTRY_FIELDS", "Entry"]


class Entry(NamedTuple):
    deliver_after: int
    base_offset: int
    position: int  # of the batch's first byte in the .log
    last_offset_delta: int  # the batch's records - 1
    size: int  # the batch's bytes

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


if Entry._fields != tuple(name for _, name in sorted(
        ((E_DELIVER_AFTER, "deliver_after"), (E_BASE_OFFSET, "base_offset"),
         (E_POSITION, "position"), (E_LAST_OFFSET_DELTA, "last_offset_delta"),
         (E_SIZE, "size")))) or len(Entry._fields) != ENTRY_FIELDS:
    raise ImportError("Entry's fields are not in entry_fields.pxd's order")
