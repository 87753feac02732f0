"""log/batch/records_batch.pyx, the compiled builder of an append, against the Python path
it stands in for: columns.record_columns and requested_deliver_after check the batch,
builder.build_batch encodes its columns with codec.encode_batch. A batch the compiled
builder takes must be one the Python path takes, with the same requested deliverAfter and
byte for byte the same batch at any append time; one it leaves must be one the Python path
refuses, or one with a type it does not take (a numpy integer)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay import KdelayError, LogConfig, Record
from kdelay.log.batch import builder, codec, records_batch
from kdelay.log.batch.columns import record_columns
from kdelay.validation import requested_deliver_after

T0 = 1_700_000_000_000

# what the Python path takes, and what it refuses or the compiled builder leaves to it
GOOD_PAYLOADS = st.one_of(st.none(), st.binary(max_size=40))
GOOD_TIMES = st.one_of(st.none(), st.integers(0, 2 * T0), st.just(2 ** 63 - 1))
GOOD_HEADERS = st.one_of(st.just(()), st.just([]), st.sampled_from([
    (("kdelay.attempt", b"2"),), [("a", None), ("b", b"")]]), st.lists(
    st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=3))
payloads = st.one_of(GOOD_PAYLOADS, st.sampled_from(["text", 5, bytearray(b"x")]))
times = st.one_of(GOOD_TIMES, st.sampled_from([-1, 2 ** 63, True, 1.5, "1", np.int64(T0)]))
headers = st.one_of(GOOD_HEADERS, st.sampled_from([
    (("k", "not bytes"),), [1], "not a list", (("\udcff", b"x"),)]))
good_records = st.builds(Record, GOOD_PAYLOADS, GOOD_PAYLOADS, GOOD_HEADERS, GOOD_TIMES,
                         GOOD_TIMES)
records = st.builds(Record, payloads, payloads, headers, times, times)
batches = st.one_of(st.lists(good_records, min_size=1, max_size=6),
                    st.lists(good_records, min_size=1, max_size=6).map(tuple),
                    st.lists(st.one_of(good_records, records), max_size=6),
                    st.just([("not", "a record")]), st.just("nope"))


def _python_path(recs, deliver_after, delays: bool):
    """(columns, requested) as the Python path checks them, or the error it raises."""
    try:
        cols = record_columns(recs)
        return cols, requested_deliver_after(cols.deliver_afters, deliver_after,
                                             delayed_delivery_enable=delays, path="p")
    except KdelayError as e:
        return e


def _numpy_inside(recs, deliver_after) -> bool:
    fields = [deliver_after] + [f for r in recs if isinstance(r, Record) for f in r]
    return any(isinstance(f, np.integer) for f in fields)


def _built(batch, requested, now: int, limit: int):
    cfg = LogConfig(max_delivery_delay_ms=limit)
    try:
        return builder.build_batch(batch, base_offset=77, now=now, requested=requested,
                                   config=cfg)
    except KdelayError as e:
        return type(e), str(e)


@settings(max_examples=500, deadline=None)
@given(batches, st.one_of(GOOD_TIMES, times), st.booleans(), st.integers(0, 2 * T0),
       st.sampled_from([0, 5, 10 ** 9]))
def test_the_compiled_builder_takes_what_the_python_path_takes_and_builds_the_same_bytes(
        recs, deliver_after, delays, now, limit):
    fast = records_batch.RecordsBatch.of(recs, deliver_after, delays)
    slow = _python_path(recs, deliver_after, delays)
    if fast is None:
        assert isinstance(slow, KdelayError) or _numpy_inside(recs, deliver_after)
        return
    assert not isinstance(slow, KdelayError), slow
    cols, requested = slow
    assert fast.requested == requested
    assert fast.n == len(recs)
    assert _built(fast, requested, now, limit) == _built(cols, requested, now, limit)


def test_encode_takes_only_a_header_long_template():
    fast = records_batch.RecordsBatch.of([Record(b"v")], None, True)
    assert fast.encode(T0, 0, T0, codec.HEADER_LAYOUT, codec.HEADER_TEMPLATE) is not None
    with pytest.raises(ValueError):
        fast.encode(T0, 0, T0, codec.HEADER_LAYOUT, codec.HEADER_TEMPLATE[:-1])
