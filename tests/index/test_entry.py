"""Entry (kdelay/index/entry.py) and the field numbers compiled code uses (entry_fields.pxd):
one order, whichever way an entry is read."""

from __future__ import annotations

from kdelay.index.deliver_after_index import DeliverAfterIndex
from kdelay.index.entry import (
    E_BASE_OFFSET,
    E_DELIVER_AFTER,
    E_LAST_OFFSET_DELTA,
    E_POSITION,
    E_SIZE,
    ENTRY_FIELDS,
    Entry,
)


def test_the_field_numbers_name_the_entry_and_the_index_columns():
    numbers = {"deliver_after": E_DELIVER_AFTER, "base_offset": E_BASE_OFFSET,
               "position": E_POSITION, "last_offset_delta": E_LAST_OFFSET_DELTA,
               "size": E_SIZE}
    assert sorted(numbers.values()) == list(range(ENTRY_FIELDS))
    assert all(Entry._fields[i] == name for name, i in numbers.items())
    assert len(DeliverAfterIndex.COLUMNS) == ENTRY_FIELDS


def test_entries_read_back_by_name_from_recent_and_persisted_columns(tmp_path):
    idx = DeliverAfterIndex(10)
    idx.add(500, 10, 0, 2, 90)  # (added through the compiled recent columns)
    idx.add(400, 13, 90, 0, 70)
    want = [Entry(400, 13, 90, 0, 70), Entry(500, 10, 0, 2, 90)]
    cols = idx.columns()
    got = [Entry._make(int(c[i]) for c in cols) for i in range(2)]
    assert got == want and got[1].last_offset == 12
    assert [int(v) for v in cols[E_POSITION]] == [e.position for e in want]
    assert idx.max_key() == (500, 12)
    idx.persist(str(tmp_path / "x.dlyindex"), log_bytes=160, next_offset=14)
    again = DeliverAfterIndex.load(str(tmp_path / "x.dlyindex"), base_offset=10, log_bytes=160)
    cols = again.columns()
    assert [Entry._make(int(c[i]) for c in cols) for i in range(2)] == want
    assert DeliverAfterIndex.from_entries(10, want[::-1]).max_key() == (500, 12)
