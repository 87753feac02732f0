"""columns.BatchColumns: a checked batch travels as named columns, one entry per record,
whether it came as Records (record_columns) or as columns (batch_columns), with numpy
integers made plain ints."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay import InvalidRecordError, PackedBinary, Record
from kdelay.log.batch.columns import BatchColumns, batch_columns, record_columns, record_fields

T0 = 1_700_000_000_000

maybe_bytes = st.one_of(st.none(), st.binary(max_size=8))
maybe_time = st.one_of(st.none(), st.integers(0, 2 ** 63 - 1))
headers = st.lists(st.tuples(st.text(max_size=4), maybe_bytes), max_size=2)
records = st.lists(st.builds(Record, maybe_bytes, maybe_bytes, headers, maybe_time, maybe_time),
                   min_size=1, max_size=20)


@given(records, st.booleans())
def test_record_columns_name_each_column(recs, numpy_times):
    if numpy_times:  # numpy integers are accepted, and handed on as plain ints
        recs = [r._replace(timestamp=None if r.timestamp is None else np.int64(r.timestamp))
                for r in recs]
    cols = record_columns(recs)
    assert isinstance(cols, BatchColumns)
    assert list(cols.values) == [r.value for r in recs]
    assert list(cols.keys) == [r.key for r in recs]
    assert [list(h) for h in cols.headers] == [list(r.headers) for r in recs]
    assert list(cols.timestamps) == [None if r.timestamp is None else int(r.timestamp)
                                     for r in recs]
    assert all(t is None or type(t) is int for t in cols.timestamps)
    assert list(cols.deliver_afters) == [r.deliver_after for r in recs]


@given(st.lists(maybe_bytes, min_size=1, max_size=20), st.data())
def test_batch_columns_name_each_column(values, data):
    n = len(values)
    keys = data.draw(st.one_of(st.none(), st.lists(maybe_bytes, min_size=n, max_size=n)))
    stamps = data.draw(st.one_of(st.none(), st.lists(maybe_time, min_size=n, max_size=n)))
    cols = batch_columns(values, keys, stamps)
    assert isinstance(cols, BatchColumns)
    assert list(cols.values) == values
    assert list(cols.keys) == (keys or [None] * n)
    assert list(cols.timestamps) == (stamps or [None] * n)
    assert list(cols.headers) == [()] * n and list(cols.deliver_afters) == [None] * n


def test_packed_batch_columns():
    values = PackedBinary(np.array([1, -1, 2]), b"abc")
    cols = batch_columns(values, timestamps=np.array([T0, T0 + 1, T0 + 2]))
    assert list(cols.values.lengths) == [1, -1, 2] and bytes(cols.values.data) == b"abc"
    assert list(cols.keys.lengths) == [-1, -1, -1]
    assert cols.headers is None and cols.timestamps.dtype == np.int64
    assert cols.deliver_afters == (None, None, None)


anything = st.one_of(st.none(), st.binary(max_size=4), st.text(max_size=2), st.booleans(),
                     st.integers(-2, 2 ** 64), st.floats(allow_nan=False),
                     st.builds(bytearray, st.binary(max_size=2)),
                     st.builds(np.int64, st.integers(-5, 2 ** 63 - 1)))
any_headers = st.one_of(anything, st.just(()), st.lists(anything, max_size=2),
                        st.lists(st.tuples(anything, anything), max_size=2))
fields = (maybe_bytes, maybe_bytes, headers, maybe_time, maybe_time)  # a record's, valid


@settings(max_examples=300)
@given(st.data(), st.integers(-1, 4))
def test_record_fields_is_record_columns_for_one_record(data, odd):
    """A Producer checks one record with record_fields: it accepts and refuses exactly what
    record_columns does of that record alone, and hands on the same fields (each field in
    turn drawn from anything, the others valid)."""
    drawn = [data.draw(any_headers if i == odd == 2 else anything if i == odd else f)
             for i, f in enumerate(fields)]
    try:
        cols = record_columns([Record(*drawn)])
    except InvalidRecordError:
        with pytest.raises(InvalidRecordError):
            record_fields(*drawn)
        return
    checked = record_fields(*drawn)
    assert checked == (tuple(cols.headers[0] or ()), cols.timestamps[0], cols.deliver_afters[0])
    assert type(checked[0]) is tuple
    assert all(t is None or type(t) is int for t in checked[1:])
