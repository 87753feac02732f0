"""Producer: single records batched per partition, futures of RecordMetadata, linger,
flush and close, back-pressure, partitioning, and bad input refused by send itself."""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref
from concurrent.futures import Future

import numpy as np
import pytest
from conftest import T0, FakeClock
from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay import (
    DelayedDeliveryDisabledError,
    DeliveryDelayExceededError,
    InvalidConfigError,
    InvalidRecordError,
    KdelayError,
    Log,
    LogClosedError,
    LogConfig,
    Producer,
    Record,
    RecordMetadata,
    Topic,
)
from kdelay.clients.partitioner import partition_for_key
from kdelay.testing.checks import batches_in, read_everything

HOUR = 3_600_000


def test_batches_in_reads_the_batches_back(open_log, clock) -> None:
    log = open_log(segment_bytes=400)
    for n, due in ((3, T0 + 5), (1, T0), (4, T0 + 9), (2, T0 + 1)):
        log.append([Record(b"x" * 40)] * n, deliver_after=due)
    assert len(log.segments) > 1
    assert batches_in(log) == [(0, 3, T0 + 5), (3, 1, T0), (4, 4, T0 + 9), (8, 2, T0 + 1)]


def test_send_returns_a_future_of_where_the_record_landed(open_log, clock) -> None:
    log = open_log()
    with Producer(log, linger_ms=60_000) as producer:
        fut = producer.send(b"v", b"k", headers=[("h", b"1")], delay_ms=30_000)
        assert isinstance(fut, Future) and not fut.done()
        producer.flush()
        meta = fut.result(timeout=5)
    assert isinstance(meta, RecordMetadata)
    assert meta == RecordMetadata(0, 0, T0 + 30_000, T0)
    [rec] = log.read(0)
    assert (rec.key, rec.value, rec.headers, rec.timestamp, rec.deliver_after) == \
        (b"k", b"v", [("h", b"1")], meta.timestamp, meta.deliver_after)


def test_timestamp_is_the_log_clock_at_send_unless_given(open_log, clock) -> None:
    log = open_log()
    with Producer(log, linger_ms=60_000) as producer:
        stamped = producer.send(b"a")
        clock.advance(500)
        given_ts = producer.send(b"b", timestamp=T0 - 7)
        clock.advance(500)  # appended later: the stamps stay the sends'
    assert (stamped.result().timestamp, given_ts.result().timestamp) == (T0, T0 - 7)
    assert [r.timestamp for r in log.read(0)] == [T0, T0 - 7]


def test_relative_and_absolute_due_times(open_log, clock) -> None:
    log = open_log()
    with Producer(log, max_spread_ms=0, linger_ms=60_000) as producer:
        rel = producer.send(b"rel", delay_ms=np.int64(1_000))
        ab = producer.send(b"abs", deliver_after=T0 + 1_000)
        past = producer.send(b"past", deliver_after=T0 - 5_000)
        now = producer.send(b"now")
    # equal requests share a batch; a past one and none are due at append time
    assert rel.result().deliver_after == ab.result().deliver_after == T0 + 1_000
    assert rel.result().offset + 1 == ab.result().offset
    assert past.result().deliver_after == now.result().deliver_after == T0


def test_batch_deliver_after_is_the_fold_within_the_spread(open_log, clock) -> None:
    log = open_log()
    base = T0 // 1001 * 1001 + 2_002  # a bucket's first ms
    with Producer(log, max_spread_ms=1_000, linger_ms=60_000) as producer:
        futs = [producer.send(b"%d" % d, deliver_after=base + d) for d in (0, 400, 1_000)]
        far = producer.send(b"far", deliver_after=base + 1_001)
    assert {f.result().deliver_after for f in futs} == {base + 1_000}
    assert far.result().deliver_after == base + 1_001
    assert batches_in(log) == [(0, 3, base + 1_000), (3, 1, base + 1_001)]


def test_a_full_batch_goes_at_once_and_linger_sends_the_rest(open_log) -> None:
    log = open_log()
    with Producer(log, batch_records=3, linger_ms=100) as producer:
        futs = [producer.send(b"%d" % i) for i in range(4)]
        assert [f.result(timeout=5).offset for f in futs[:3]] == [0, 1, 2]
        # the fourth waits out linger_ms of real time, no flush needed
        assert futs[3].result(timeout=5).offset == 3
    assert [n for _, n, _ in batches_in(log)] == [3, 1]


def test_nothing_goes_before_linger_ms_or_flush(open_log) -> None:
    log = open_log()
    with Producer(log, linger_ms=60_000) as producer:
        fut = producer.send(b"x")
        time.sleep(0.2)
        assert not fut.done() and log.log_end_offset == 0
        producer.flush()
        assert fut.done() and log.log_end_offset == 1


def test_batch_bytes_seals_a_batch(open_log) -> None:
    log = open_log()
    with Producer(log, batch_bytes=700, linger_ms=60_000) as producer:
        for i in range(12):
            producer.send(b"%03d" % i + b"x" * 97)
    counts = [n for _, n, _ in batches_in(log)]
    assert sum(counts) == 12 and len(counts) > 1 and max(counts) < 12


def test_a_record_at_max_batch_bytes_is_taken_and_one_byte_more_is_not(open_log,
                                                                        tmp_path) -> None:
    cfg = {"max_batch_bytes": 300}
    probe = open_log(os.fspath(tmp_path / "probe"), **cfg)
    size = 100
    while True:  # the largest value log.append takes alone
        try:
            probe.append([Record(b"x" * (size + 1))])
        except InvalidRecordError:
            break
        size += 1
    log = open_log(**cfg)
    with Producer(log, linger_ms=60_000) as producer:
        a = producer.send(b"x" * size)
        b = producer.send(b"y" * 10)
        with pytest.raises(InvalidRecordError, match="max_batch_bytes"):
            producer.send(b"x" * (size + 1))
    assert (a.result().offset, b.result().offset) == (0, 1)
    assert [n for _, n, _ in batches_in(log)] == [1, 1]


def test_flush_waits_for_everything_sent_before_it(open_log) -> None:
    log = open_log()
    with Producer(log, linger_ms=60_000, batch_records=7) as producer:
        futs = [producer.send(b"%d" % i, delay_ms=i * 300) for i in range(50)]
        producer.flush()
        assert all(f.done() for f in futs)
        assert log.log_end_offset == 50


def test_close_flushes_then_refuses(open_log) -> None:
    log = open_log()
    producer = Producer(log, linger_ms=60_000)
    fut = producer.send(b"x")
    producer.close()
    assert fut.result(timeout=0).offset == 0
    with pytest.raises(KdelayError, match="closed"):
        producer.send(b"y")
    producer.close()  # again: nothing to do
    producer.flush()
    assert log.log_end_offset == 1


def test_a_records_future_is_set_up_as_futures_are(open_log) -> None:
    """RecordFuture sets Future.__init__'s attributes itself (to share its batch's
    Condition): a Python whose Future gains or renames one fails here, not in use."""
    with Producer(open_log(), linger_ms=60_000) as producer:
        fut = producer.send(b"x")
        fresh = Future()
        assert vars(fut).keys() == vars(fresh).keys()
        assert {k: v for k, v in vars(fut).items() if k != "_condition"} == \
            {k: v for k, v in vars(fresh).items() if k != "_condition"}
        assert not fut.done() and fut.running() is False


def test_a_resolved_future_is_as_set_result_leaves_one(open_log) -> None:
    """The sender resolves a batch's futures by setting Future's attributes itself: a
    Python whose Future.set_result sets more, or other values, fails here."""
    with Producer(open_log(), linger_ms=60_000) as producer:
        fut = producer.send(b"x")
    plain = Future()
    plain.set_result(fut.result())
    assert vars(fut).keys() == vars(plain).keys()
    assert {k: v for k, v in vars(fut).items() if k != "_condition"} == \
        {k: v for k, v in vars(plain).items() if k != "_condition"}


@pytest.mark.parametrize("through", ["callback", "attribute"])
def test_a_future_in_a_cycle_is_collected(open_log, through) -> None:
    """A pending future and its lists are untracked by the garbage collector; resolution
    must hand them back to it, or a future in a cycle (through its callback, or an
    attribute set while it was pending) would leak."""
    with Producer(open_log(), linger_ms=60_000) as producer:
        holder = type("Holder", (), {})()
        holder.future = producer.send(b"x")  # holder -> future -> holder:
        if through == "callback":
            holder.future.add_done_callback(lambda _f, h=holder: h)
        else:
            holder.future.holder = holder
        producer.flush()
    gone = weakref.ref(holder.future)
    del holder
    gc.collect()
    assert gone() is None


def test_a_future_cannot_be_cancelled(open_log) -> None:
    with Producer(open_log(), linger_ms=60_000) as producer:
        fut = producer.send(b"x")
        assert fut.cancel() is False and not fut.cancelled()
    assert fut.result().offset == 0


def test_a_failed_append_fails_every_future_of_the_batch(open_log) -> None:
    log = open_log()
    producer = Producer(log, linger_ms=60_000)
    futs = [producer.send(b"%d" % i) for i in range(3)]
    log.close()
    producer.flush()
    for f in futs:
        assert isinstance(f.exception(timeout=0), LogClosedError)
    producer.close()


def test_waiters_on_other_threads_wake_with_their_own_result(open_log) -> None:
    """The futures of a batch share one Condition: a waiter never wakes to a timeout
    because a neighbour was resolved first."""
    log = open_log()
    with Producer(log, linger_ms=60_000) as producer:
        futs = [producer.send(b"%d" % i) for i in range(20)]
        got: dict[int, int] = {}

        def wait(i: int) -> None:
            got[i] = futs[i].result().offset

        waiters = [threading.Thread(target=wait, args=(i,)) for i in range(20)]
        for t in waiters:
            t.start()
        time.sleep(0.05)
        producer.flush()
        for t in waiters:
            t.join(timeout=10)
    assert got == {i: i for i in range(20)}


def test_a_callback_may_send_but_not_flush(open_log) -> None:
    log = open_log()
    errors: list[BaseException] = []
    with Producer(log, linger_ms=60_000, buffer_records=1) as producer:
        def callback(fut: Future) -> None:
            producer.send(b"from-callback")  # over the buffer: the sender cannot wait
            try:
                producer.flush()
            except KdelayError as e:
                errors.append(e)

        producer.send(b"first").add_done_callback(callback)
        producer.flush()
        producer.flush()  # the record the callback sent
    assert [r.value for r in log.read(0)] == [b"first", b"from-callback"]
    assert len(errors) == 1 and "callback" in str(errors[0])


def test_a_full_buffer_sends_the_oldest_batches_at_once(open_log) -> None:
    log = open_log()
    with Producer(log, linger_ms=600_000, buffer_records=5, batch_records=100) as producer:
        futs = [producer.send(b"%d" % i, delay_ms=i * 2_000) for i in range(5)]
        assert not any(f.done() for f in futs)
        t0 = time.monotonic()
        late = producer.send(b"late")  # blocks until the waiting records are appended
        assert time.monotonic() - t0 < 30
        assert all(f.done() for f in futs) and not late.done()
    assert late.result().offset == 5


def test_a_send_blocked_on_a_full_buffer_gives_up_on_close(open_log) -> None:
    log = open_log()
    disk_free = threading.Event()
    real_append = log.append_columns  # what the sender calls for records without headers

    def slow_append(values, **kw):
        disk_free.wait(10)
        return real_append(values, **kw)

    log.append_columns = slow_append  # the sender is stuck in an append: nothing drains
    producer = Producer(log, linger_ms=600_000, buffer_records=1)
    first = producer.send(b"a")
    refused: list[BaseException] = []

    def blocked_send() -> None:
        try:
            producer.send(b"b")
        except KdelayError as e:
            refused.append(e)

    sender = threading.Thread(target=blocked_send)
    sender.start()
    time.sleep(0.1)
    assert sender.is_alive()  # waiting for room
    closer = threading.Thread(target=producer.close)
    closer.start()
    sender.join(timeout=10)
    assert not sender.is_alive() and "closed" in str(refused[0])
    disk_free.set()
    closer.join(timeout=10)
    assert not closer.is_alive() and first.result(timeout=0).offset == 0
    assert [r.value for r in log.read(0)] == [b"a"]


def test_keyed_records_go_where_kafkas_partitioner_says(tmp_path, clock) -> None:
    with Topic.open(tmp_path, "t", partitions=3, clock=clock) as topic, \
            Producer(topic, linger_ms=60_000) as producer:
        keys = [b"user-%d" % i for i in range(40)]
        futs = [producer.send(b"v", k) for k in keys]
        pinned = producer.send(b"v", b"user-0", partition=2)
    assert [f.result().partition for f in futs] == [partition_for_key(k, 3) for k in keys]
    assert pinned.result().partition == 2


def test_keyless_records_stick_to_a_partition_until_its_batch_is_sent(tmp_path,
                                                                     clock) -> None:
    with Topic.open(tmp_path, "t", partitions=3, clock=clock) as topic, \
            Producer(topic, linger_ms=60_000, batch_records=4) as producer:
        futs = [producer.send(b"%d" % i) for i in range(12)]
    parts = [f.result().partition for f in futs]
    assert parts[0:4] == [parts[0]] * 4 and parts[4:8] == [parts[4]] * 4 \
        and parts[8:] == [parts[8]] * 4
    assert len({parts[0], parts[4], parts[8]}) == 3


def test_a_log_is_partition_zero(open_log) -> None:
    log = open_log()
    with Producer(log, linger_ms=60_000) as producer:
        fut = producer.send(b"v", b"any key", partition=0)
    assert fut.result().partition == 0


# ---------------------------------------------------------------------- bad input

BAD_SENDS = {
    "value str": (dict(value="text"), InvalidRecordError),
    "key int": (dict(value=b"v", key=5), InvalidRecordError),
    "key bytearray": (dict(value=b"v", key=bytearray(b"k")), InvalidRecordError),
    "header not a pair": (dict(value=b"v", headers=[("k",)]), InvalidRecordError),
    "header value str": (dict(value=b"v", headers=[("k", "x")]), InvalidRecordError),
    "headers str": (dict(value=b"v", headers="k"), InvalidRecordError),
    "timestamp negative": (dict(value=b"v", timestamp=-1), InvalidRecordError),
    "timestamp float": (dict(value=b"v", timestamp=1.5), InvalidRecordError),
    "deliver_after bool": (dict(value=b"v", deliver_after=True), InvalidRecordError),
    "deliver_after too big": (dict(value=b"v", deliver_after=1 << 63), InvalidRecordError),
    "delay_ms negative": (dict(value=b"v", delay_ms=-1), InvalidRecordError),
    "delay_ms float": (dict(value=b"v", delay_ms=10.0), InvalidRecordError),
    "delay_ms str": (dict(value=b"v", delay_ms="10"), InvalidRecordError),
    "delay_ms bool": (dict(value=b"v", delay_ms=True), InvalidRecordError),
    "delay_ms past 2**63": (dict(value=b"v", delay_ms=(1 << 63) - 1), InvalidRecordError),
    "both deliver_after and delay_ms": (dict(value=b"v", deliver_after=T0, delay_ms=0),
                                        InvalidRecordError),
    "delay over the limit": (dict(value=b"v", delay_ms=HOUR + 1),
                             DeliveryDelayExceededError),
    "deliver_after over the limit": (dict(value=b"v", deliver_after=T0 + HOUR + 1),
                                     DeliveryDelayExceededError),
    "old timestamp over the limit": (dict(value=b"v", timestamp=T0 - 1,
                                          deliver_after=T0 + HOUR),
                                     DeliveryDelayExceededError),
    "record over max_batch_bytes": (dict(value=b"x" * 2_000), InvalidRecordError),
    "partition out of range": (dict(value=b"v", partition=3), InvalidRecordError),
    "partition negative": (dict(value=b"v", partition=-1), InvalidRecordError),
    "partition str": (dict(value=b"v", partition="0"), InvalidRecordError),
    "partition bool": (dict(value=b"v", partition=True), InvalidRecordError),
}


@pytest.mark.parametrize("name", list(BAD_SENDS))
def test_bad_input_raises_from_send_and_buffers_nothing(tmp_path, clock, name) -> None:
    kwargs, error = BAD_SENDS[name]
    cfg = LogConfig(max_delivery_delay_ms=HOUR, max_batch_bytes=1_000)
    with Topic.open(tmp_path, "t", partitions=3, config=cfg, clock=clock) as topic:
        producer = Producer(topic, linger_ms=60_000)
        value = kwargs.pop("value")
        with pytest.raises(error):
            producer.send(value, **kwargs)
        producer.flush()
        assert [topic.partition(i).log_end_offset for i in range(3)] == [0, 0, 0]
        ok = producer.send(b"fine", deliver_after=T0 + HOUR)  # the limit itself is fine
        producer.close()
        assert ok.result().deliver_after == T0 + HOUR


def test_delayed_delivery_disabled_refuses_a_delay_at_send(open_log) -> None:
    log = open_log(delayed_delivery_enable=False)
    with Producer(log, linger_ms=60_000) as producer:
        for kwargs in ({"delay_ms": 0}, {"deliver_after": T0}):
            with pytest.raises(DelayedDeliveryDisabledError):
                producer.send(b"v", **kwargs)
        fine = producer.send(b"v")
    assert fine.result().offset == 0 and log.log_end_offset == 1


@pytest.mark.parametrize("kwargs", [
    {"linger_ms": -1}, {"batch_records": 0}, {"batch_bytes": 0}, {"max_spread_ms": -1},
    {"buffer_records": 0}, {"max_open_batches": 0}, {"linger_ms": 1.5},
    {"batch_records": True}])
def test_bad_settings(open_log, kwargs) -> None:
    with pytest.raises(InvalidConfigError):
        Producer(open_log(), **kwargs)


def test_a_producer_needs_a_log_or_topic() -> None:
    with pytest.raises(KdelayError):
        Producer("/tmp/somewhere")


# ---------------------------------------------------------------------- the model


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["none", "delay", "abs", "past"]),
                          st.integers(0, 6_000),
                          st.one_of(st.none(), st.integers(-2_000, 0)),
                          st.integers(0, 200)),
                min_size=1, max_size=60),
       st.integers(1, 9), st.sampled_from([0, 10, 1_000, 4_000]),
       st.sampled_from([0, 3_000, 7_000]), st.integers(1, 4))
def test_a_real_log_against_the_rules(tmp_path_factory, sends, batch_records, spread,
                                      limit, max_open) -> None:
    """Every send accepted is appended exactly once, never due early, at most
    max_spread_ms late (or at the append time), in batches within batch_records."""
    path = os.fspath(tmp_path_factory.mktemp("p"))
    clock = FakeClock()
    log = Log.open(path, config=LogConfig(max_delivery_delay_ms=limit,
                                          max_batch_bytes=1_500), clock=clock)
    wanted = []
    with Producer(log, linger_ms=600_000, batch_records=batch_records, max_spread_ms=spread,
                  max_open_batches=max_open) as producer:
        for i, (how, t, ts, n) in enumerate(sends):
            value = b"%d:" % i + b"x" * n
            ts = None if ts is None else clock.t + ts
            kw = {"none": {}, "delay": {"delay_ms": t}, "abs": {"deliver_after": clock.t + t},
                  "past": {"deliver_after": max(0, clock.t - t)}}[how]
            requested = clock.t if how == "none" else kw.get("deliver_after", clock.t + t)
            try:
                fut = producer.send(value, timestamp=ts, **kw)
            except DeliveryDelayExceededError:
                assert limit and requested - (clock.t if ts is None else ts) > limit
                continue
            wanted.append((fut, value, requested))
            clock.advance(i % 3)
        append_time = clock.t
    on_disk = read_everything(log)
    assert len(on_disk) == len(wanted)
    for fut, value, requested in wanted:
        meta = fut.result(timeout=0)
        assert on_disk[meta.offset] == (value, meta.deliver_after)
        assert meta.deliver_after >= requested, "early"
        assert meta.deliver_after <= max(requested + spread, append_time), "too late"
    assert all(n <= batch_records for _, n, _ in batches_in(log))
    log.close()
