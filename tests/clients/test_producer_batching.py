"""The batching rules of the producer's accumulator (kdelay/clients/accumulator.pyx), as a
model: whatever records arrive, every record lands in exactly one batch, no batch makes a
record due early or more than max_spread_ms late, and every batch stays within
batch_records, the byte cap and the log's delay limit, with at most max_open batches
open at once. Also the byte bound against the codec's real sizes."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay import Record
from kdelay.clients.accumulator import Limits, PartitionAccumulator, record_bytes
from kdelay.log.batch.codec import HEADER_SIZE, encode_batch

T0 = 1_700_000_000_000

records = st.lists(st.tuples(
    st.integers(0, 5_000),            # requested, relative to T0
    st.booleans(),                    # asked for (else due at once)
    st.integers(-3_000, 100),         # timestamp, relative to T0
    st.integers(0, 300),              # value bytes
), min_size=1, max_size=120)

limits = st.builds(
    Limits,
    batch_records=st.integers(1, 12),
    byte_cap=st.integers(HEADER_SIZE + 40, 2_000),
    max_spread_ms=st.sampled_from([0, 1, 10, 250, 1_000, 10_000]),
    max_delay_ms=st.sampled_from([0, 1_000, 3_500, 8_000]),
    max_open=st.integers(1, 6),
)


@settings(max_examples=300, deadline=None)
@given(records, limits, st.data())
def test_every_record_once_within_every_bound(recs, lim, data) -> None:
    acc = PartitionAccumulator(0, lim)
    sealed = []
    wanted = {}  # ticket -> (requested, asked, stamp)
    tickets = itertools.count()
    for i, (req, asked, ts, n) in enumerate(recs):
        requested, stamp = T0 + req, T0 + ts
        if asked and lim.max_delay_ms and requested - stamp > lim.max_delay_ms:
            continue  # send refuses it: the record alone breaks the limit
        size = record_bytes(b"v" * n, None, ())
        if HEADER_SIZE + size > lim.byte_cap:
            size = lim.byte_cap  # send's "goes alone" (a record only the log may size)
        ticket, out = acc.add(b"v" * n, None, (), stamp, requested, asked, size, float(i),
                              lambda _b: next(tickets))
        wanted[ticket] = (requested, asked, stamp)
        sealed += out
        assert len(acc) <= lim.max_open
        if data.draw(st.booleans(), label="linger"):  # the sender's linger sweep
            sealed += acc.seal_opened_before(float(i) - data.draw(st.integers(0, 5)))
    sealed += acc.seal_all()
    assert len(acc) == 0 and acc.oldest_opened() is None

    seen = [t for b in sealed for t in b.tickets]
    assert sorted(seen) == sorted(wanted), "every record in exactly one batch"
    for b in sealed:
        assert 1 <= len(b) <= lim.batch_records
        assert len(b) == len(b.tickets)
        if len(b) > 1:
            assert b.size <= lim.byte_cap
        asks = [wanted[t] for t in b.tickets]
        due = b.deliver_after
        assert (due is not None) == any(a for _, a, _ in asks)
        for requested, _asked, _stamp in asks:
            if due is not None:
                assert requested <= due, "never early"
            assert max(r for r, _, _ in asks) - requested <= lim.max_spread_ms, \
                "at most max_spread_ms late"
        if due is not None and lim.max_delay_ms:
            assert due - min(s for _, _, s in asks) <= lim.max_delay_ms, \
                "the fold never breaks the delay limit"


def test_the_oldest_batch_makes_room() -> None:
    lim = Limits(batch_records=10, byte_cap=10_000, max_spread_ms=0, max_delay_ms=0,
                 max_open=2)
    acc = PartitionAccumulator(3, lim)
    stamp = T0

    def add(requested: int, now: float):
        return acc.add(b"x", None, (), stamp, requested, True, 40, now, lambda b: b)

    a, out = add(T0 + 1, 0.0)
    assert out == []
    b, out = add(T0 + 2, 1.0)
    assert out == [] and a is not b and acc.oldest_opened() == 0.0
    c, out = add(T0 + 3, 2.0)  # a third due time: the oldest batch goes
    assert out == [a] and a.partition == 3 and len(acc) == 2
    assert acc.seal_opened_before(1.5) == [b]
    assert acc.seal_all() == [c]


def test_a_record_that_would_break_the_delay_limit_starts_a_batch() -> None:
    lim = Limits(batch_records=10, byte_cap=10_000, max_spread_ms=1_000, max_delay_ms=1_000,
                 max_open=4)
    acc = PartitionAccumulator(0, lim)
    now = T0 // 1001 * 1001  # both due times in one bucket: only the limit parts them
    # stamped 900 ms ago, due in 100 ms: within the limit alone, 1800 ms with the fold
    old, _ = acc.add(b"a", None, (), now - 900, now + 100, True, 40, 0.0, lambda b: b)
    new, out = acc.add(b"b", None, (), now, now + 900, True, 40, 0.0, lambda b: b)
    assert out == [old] and new is not old
    assert old.deliver_after == now + 100 and new.deliver_after == now + 900


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=300)),
                          st.one_of(st.none(), st.binary(max_size=40)),
                          st.lists(st.tuples(st.text(max_size=8),
                                             st.one_of(st.none(), st.binary(max_size=20))),
                                   max_size=3),
                          st.integers(-(1 << 40), 1 << 40)),
                min_size=1, max_size=30))
def test_record_bytes_bound_the_encoded_batch(rows) -> None:
    """However the records' timestamps and offsets come out, the batch the log encodes is
    never larger than the header plus the records' record_bytes."""
    base = 1 << 41
    recs = [Record(v, k, tuple(h), base + dt, None) for v, k, h, dt in rows]
    data = encode_batch(base_offset=0, base_timestamp=recs[0].timestamp, deliver_after=base,
                        keys=[r.key for r in recs], values=[r.value for r in recs],
                        timestamp_deltas=[r.timestamp - recs[0].timestamp for r in recs],
                        headers=[r.headers for r in recs])
    assert len(data) <= HEADER_SIZE + sum(record_bytes(r.value, r.key, r.headers) for r in recs)


@pytest.mark.parametrize("spread", [0, 1, 999, 1000])
def test_bucket_width_is_the_spread(spread) -> None:
    """Records max_spread_ms apart may share a batch; one more ms apart never do."""
    lim = Limits(batch_records=10, byte_cap=10_000, max_spread_ms=spread, max_delay_ms=0,
                 max_open=8)
    acc = PartitionAccumulator(0, lim)
    start = 10 * (spread + 1)  # a bucket's first ms
    a, _ = acc.add(b"a", None, (), T0, start, True, 40, 0.0, lambda b: b)
    b, _ = acc.add(b"b", None, (), T0, start + spread, True, 40, 0.0, lambda b: b)
    c, _ = acc.add(b"c", None, (), T0, start + spread + 1, True, 40, 0.0, lambda b: b)
    assert a is b and c is not a
