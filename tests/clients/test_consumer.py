"""Consumer groups, topic consumers, retries and dead letters, and group lag in metrics."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from itertools import pairwise

import pytest
from conftest import T0, FakeClock
from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay import Consumer, DeliveryKey, KdelayError, Log, LogConfig, Record, Topic
from kdelay.clients.consumer import ATTEMPT_HEADER, attempt_of, backoff_ms
from kdelay.errors import CorruptLogError, DelayedDeliveryDisabledError, InvalidRecordError

# ---------------------------------------------------------------------- positions and groups


def _fill(log, n, *, batch=3, clock=None, delay=None):
    """Append n records in batches; with `delay(i)` each batch gets its own deliverAfter."""
    i = 0
    while i < n:
        k = min(batch, n - i)
        da = None if delay is None else log.now() + delay(i)
        log.append([Record(b"v%d" % j, key=b"k%d" % j) for j in range(i, i + k)],
                   deliver_after=da)
        i += k


def test_poll_continues_and_commit_resumes(open_log):
    log = open_log()
    _fill(log, 20)
    c = Consumer(log, "g")
    assert c.committed == [None]
    first = c.poll(max_records=7)
    second = c.poll(max_records=7)
    assert [r.offset for r in first + second] == list(range(14))
    c.commit()
    assert log.committed("g") == DeliveryKey(second[-1].deliver_after, 13)
    c.poll(max_records=4)  # polled, not committed
    again = Consumer(log, "g").poll()
    assert [r.offset for r in again] == list(range(14, 20))
    assert Consumer(log, "g").poll() == again  # still not committed


def test_commit_survives_reopen(log_dir, clock):
    with Log.open(log_dir, clock=clock) as log:
        _fill(log, 10)
        c = Consumer(log, "g")
        c.poll(max_records=6)
        c.commit()
        c.poll(max_records=2)
    with Log.open(log_dir, clock=clock) as log:
        assert [r.offset for r in Consumer(log, "g").poll()] == [6, 7, 8, 9]


def test_commit_without_progress_writes_nothing(open_log, log_dir):
    log = open_log()
    c = Consumer(log, "g")
    c.commit()
    assert not os.path.exists(os.path.join(log_dir, "groups"))
    _fill(log, 2)
    c.poll()
    c.commit()
    path = os.path.join(log_dir, "groups", os.listdir(os.path.join(log_dir, "groups"))[0])
    mtime = os.stat(path).st_mtime_ns
    time.sleep(0.01)
    c.commit()
    assert os.stat(path).st_mtime_ns == mtime


def test_rewind_goes_back_to_committed(open_log):
    log = open_log()
    _fill(log, 10)
    c = Consumer(log, "g")
    c.poll(max_records=3)
    c.commit()
    polled = c.poll(max_records=3)
    c.rewind()
    assert c.poll(max_records=3) == polled


def test_groups_are_independent(open_log, clock):
    log = open_log()
    _fill(log, 12)
    a, b = Consumer(log, "a"), Consumer(log, "b")
    a.poll(max_records=10)
    a.commit()
    b.poll(max_records=2)
    b.commit()
    assert [r.offset for r in Consumer(log, "a").poll()] == [10, 11]
    assert [r.offset for r in Consumer(log, "b").poll()] == list(range(2, 12))
    assert [r.offset for r in Consumer(log, "fresh").poll()] == list(range(12))
    assert log.clients.positions.groups() == ["a", "b"]
    m = log.metrics()
    assert {g: v["lag"] for g, v in m["groups"].items()} == {"a": 2, "b": 10}


def test_group_names_cannot_escape(open_log, log_dir):
    log = open_log()
    _fill(log, 1)
    for g in ("../../evil", "/abs", "a/b", "..", "\x00"):
        c = Consumer(log, g)
        c.poll()
        c.commit()
    assert sorted(os.listdir(os.path.dirname(log_dir))) == [os.path.basename(log_dir)]
    assert sorted(log.clients.positions.groups()) == sorted(["../../evil", "/abs", "a/b", "..", "\x00"])
    for bad in ("", None, 3):
        with pytest.raises(KdelayError):
            Consumer(log, bad)


def test_poll_arguments_checked(open_log):
    c = Consumer(open_log(), "g")
    for kw in ({"max_records": 0}, {"max_records": True}, {"timeout_ms": -1},
               {"timeout_ms": 0.5}):
        with pytest.raises(KdelayError):
            c.poll(**kw)
    with pytest.raises(KdelayError):
        Consumer(object(), "g")


# A model of one consumer group against a log with a fake clock: appends with random delays,
# clock steps, polls of random size, commits and restarts (a new Consumer from the committed
# position). Every poll must equal the model's answer exactly.
_ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 4), st.integers(-50, 300)),
    st.tuples(st.just("advance"), st.integers(0, 200)),
    st.tuples(st.just("poll"), st.integers(1, 8)),
    st.tuples(st.just("commit")),
    st.tuples(st.just("restart")),
    st.tuples(st.just("roll")),
), max_size=60)


@settings(max_examples=60, deadline=None)
@given(_ops)
def test_consumer_matches_model(tmp_path_factory, ops):
    clock = FakeClock(T0)
    with Log.open(tmp_path_factory.mktemp("m"), clock=clock) as log:
        appended = []  # (deliver_after, offset)
        c = Consumer(log, "g")
        pos = committed = None
        for op in ops:
            if op[0] == "append":
                res = log.append([Record(b"x")] * op[1], deliver_after=max(0, clock.t + op[2]))
                appended += [(res.deliver_after, o) for o in range(res.base_offset,
                                                                   res.last_offset + 1)]
            elif op[0] == "advance":
                clock.advance(op[1])
            elif op[0] == "poll":
                want = sorted(k for k in appended
                              if (pos is None or k > pos) and k[0] <= clock.t)[:op[1]]
                got = [(r.deliver_after, r.offset) for r in c.poll(max_records=op[1])]
                assert got == want
                pos = got[-1] if got else pos
            elif op[0] == "commit":
                c.commit()
                committed = pos
            elif op[0] == "restart":
                c = Consumer(log, "g")
                pos = committed
            else:
                log.roll()
        # the lag in metrics is the model's count of due records after the committed key
        lag = sum(1 for k in appended if (committed is None or k > committed)
                  and k[0] <= clock.t)
        m = log.metrics()
        if committed is not None or "g" in m["groups"]:
            assert m["groups"]["g"]["lag"] == lag


# ---------------------------------------------------------------------- concurrency


def _producers(target, n_threads, batches, clock_now):
    """Threads appending batches of 1-3 records due 0-30 ms from now (wall clock)."""
    sent = []
    lock = threading.Lock()

    def run(seed):
        rng = random.Random(seed)
        for b in range(batches):
            recs = [Record(b"%d-%d-%d" % (seed, b, j)) for j in range(rng.randint(1, 3))]
            res = target(recs, clock_now() + rng.randint(0, 30))
            with lock:
                sent.append((res, len(recs)))
            if rng.random() < 0.1:
                time.sleep(0.002)

    threads = [threading.Thread(target=run, args=(s,)) for s in range(n_threads)]
    for t in threads:
        t.start()
    return threads, sent


def test_long_poll_while_threads_append(tmp_path):
    with Log.open(tmp_path / "p-0", config=LogConfig(segment_bytes=4096)) as log:
        threads, sent = _producers(lambda recs, da: log.append(recs, deliver_after=da),
                                   3, 300, log.now)
        c = Consumer(log, "g")
        got = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            batch = c.poll(max_records=random.randint(1, 40), timeout_ms=50)
            now = log.now()
            assert all(r.deliver_after <= now for r in batch)  # never early
            got += batch
            if not any(t.is_alive() for t in threads) and len(got) >= sum(n for _, n in sent):
                break
        for t in threads:
            t.join()
        c.poll()  # nothing may be left over
        assert c.poll() == []
        keys = [(r.deliver_after, r.offset) for r in got]
        assert all(a < b for a, b in pairwise(keys))  # (deliver_after, offset) order, no dups
        expected = {(res.deliver_after, o) for res, _ in sent
                    for o in range(res.base_offset, res.last_offset + 1)}
        assert set(keys) == expected  # every record exactly once
        assert len(log.segments) > 1


def test_topic_long_poll_while_threads_append(tmp_path):
    with Topic.open(tmp_path, "t", partitions=3) as topic:
        def send(recs, da):
            return topic.send(recs, key=recs[0].value, deliver_after=da)

        threads, sent = _producers(send, 3, 200, topic.partition(0).now)
        c = Consumer(topic, "g")
        got = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            batch = c.poll(max_records=random.randint(1, 40), timeout_ms=50)
            for r in batch:
                assert r.deliver_after <= topic.partition(r.partition).now()
            got += batch
            if not any(t.is_alive() for t in threads) and len(got) >= sum(n for _, n in sent):
                break
        for t in threads:
            t.join()
        assert c.poll() == []
        expected = {(p, res.deliver_after, o) for (p, res), _ in sent
                    for o in range(res.base_offset, res.last_offset + 1)}
        assert len(got) == len(expected)
        assert {(r.partition, r.deliver_after, r.offset) for r in got} == expected
        for p in range(3):
            keys = [(r.deliver_after, r.offset) for r in got if r.partition == p]
            assert all(a < b for a, b in pairwise(keys))


# ---------------------------------------------------------------------- crash


_CHILD = r"""
import json, sys, time
from kdelay import Consumer, Log
log = Log.open(sys.argv[1])
c = Consumer(log, "g")
first = c.poll(max_records=10)
c.commit()
second = c.poll(max_records=10)
print(json.dumps([[r.offset for r in first], [r.offset for r in second]]), flush=True)
time.sleep(600)  # killed here: after poll, before commit
"""


def test_kill_9_between_poll_and_commit(tmp_path):
    path = tmp_path / "p-0"
    with Log.open(path) as log:
        _fill(log, 50, batch=4)
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    proc = subprocess.Popen([sys.executable, str(script), str(path)],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    first, second = json.loads(line)
    assert first == list(range(10)) and second == list(range(10, 20))
    with Log.open(path) as log:  # the lock died with the process
        # the killed process only read and committed: its segments are exactly as the clean
        # close left them, so nothing needs a recovery scan
        assert log.load_report.segments_scanned == 0
        c = Consumer(log, "g")
        assert c.committed[0].offset == 9
        again = c.poll()
        assert [r.offset for r in again] == list(range(10, 50))  # none lost, none skipped


# ---------------------------------------------------------------------- topics


def _topic_with(tmp_path, clock, counts):
    topic = Topic.open(tmp_path, "t", partitions=len(counts), clock=clock)
    for p, n in enumerate(counts):
        for i in range(n):
            topic.partition(p).append([Record(b"p%d-%d" % (p, i))])
    return topic


def test_topic_poll_shares_and_rotates(tmp_path, clock):
    with _topic_with(tmp_path, clock, [100, 100, 100]) as topic:
        c = Consumer(topic, "g")
        firsts = []
        for _ in range(3):
            recs = c.poll(max_records=30)
            assert sorted(r.partition for r in recs) == [0] * 10 + [1] * 10 + [2] * 10
            firsts.append(recs[0].partition)
            for r in recs:
                assert r.value.startswith(b"p%d-" % r.partition)
        assert sorted(firsts) == [0, 1, 2]  # a different partition leads each poll


def test_topic_poll_fills_from_busy_partitions(tmp_path, clock):
    with _topic_with(tmp_path, clock, [2, 0, 50, 1]) as topic:
        c = Consumer(topic, "g")
        recs = c.poll(max_records=20)
        counts = [sum(r.partition == p for r in recs) for p in range(4)]
        assert counts == [2, 0, 17, 1]
        rest = c.poll(max_records=100)
        assert [r.partition for r in rest] == [2] * 33
        assert c.poll() == []


def test_topic_positions_are_per_partition(tmp_path, clock):
    with _topic_with(tmp_path, clock, [5, 5]) as topic:
        c = Consumer(topic, "g")
        c.poll(max_records=4)
        c.commit()
        assert [topic.partition(p).committed("g").offset for p in range(2)] == [1, 1]
        c.poll(max_records=2)
        c2 = Consumer(topic, "g")
        assert sorted((r.partition, r.offset) for r in c2.poll()) == \
            [(p, o) for p in range(2) for o in range(2, 5)]
        # the group's lag is counted per partition
        assert [topic.partition(p).metrics()["groups"]["g"]["lag"] for p in range(2)] == [3, 3]


# ---------------------------------------------------------------------- retries


def test_backoff_ms():
    assert [backoff_ms(a, base_ms=100, max_ms=1000) for a in range(1, 7)] == \
        [100, 200, 400, 800, 1000, 1000]
    assert backoff_ms(3, base_ms=10, factor=3) == 90
    assert backoff_ms(10**6, base_ms=1, max_ms=5000) == 5000  # no overflow
    rng = random.Random(1)
    for a in range(1, 20):
        d = backoff_ms(a, base_ms=100, max_ms=10_000)
        j = backoff_ms(a, base_ms=100, max_ms=10_000, jitter=0.5, rng=rng)
        assert d // 2 <= j <= d
    for bad in ({"attempt": 0}, {"attempt": 1, "jitter": 2.0}, {"attempt": 1, "factor": 0.5}):
        with pytest.raises(ValueError):
            backoff_ms(**bad)


def test_retry_redelivers_later_with_attempt_header(open_log, clock):
    log = open_log()
    log.append([Record(b"job", key=b"k", headers=[("trace", b"t1"), ("x", None)])])
    c = Consumer(log, "g")
    (rec,) = c.poll()
    assert attempt_of(rec) == 0
    out = c.retry(rec, 1000)
    assert (out.action, out.attempt, out.partition) == ("retried", 1, None)
    assert out.result.deliver_after == clock.t + 1000
    c.commit()
    assert c.poll() == []  # not due yet
    clock.advance(999)
    assert c.poll() == []
    clock.advance(1)
    (again,) = c.poll()
    assert (again.key, again.value) == (b"k", b"job")
    assert again.headers == [("trace", b"t1"), ("x", None), (ATTEMPT_HEADER, b"1")]
    c.retry(again, 0)
    (third,) = c.poll()
    assert third.headers == [("trace", b"t1"), ("x", None), (ATTEMPT_HEADER, b"2")]


def test_retry_default_delay_is_backoff(open_log, clock):
    log = open_log()
    log.append([Record(b"v")])
    c = Consumer(log, "g", backoff_base_ms=100, backoff_factor=3)
    rec = c.poll()[0]
    for attempt, delay in ((1, 100), (2, 300), (3, 900)):
        out = c.retry(rec, None)
        assert out.result.deliver_after == clock.t + delay
        clock.advance(delay)
        (rec,) = c.poll()
        assert attempt_of(rec) == attempt


def test_dead_letter_after_max_attempts(open_log, tmp_path, clock):
    log = open_log()
    dlq = open_log(os.fspath(tmp_path / "dlq-0"))
    log.append([Record(b"poison", key=b"k", headers=[("h", b"1")])])
    c = Consumer(log, "g", max_attempts=2, dead_letter=dlq)
    rec = c.poll()[0]
    actions = []
    while True:
        out = c.retry(rec, 10)
        actions.append(out.action)
        if out.dead_lettered:
            break
        clock.advance(10)
        (rec,) = c.poll()
    assert actions == ["retried", "retried", "dead_lettered"]
    assert out.attempt == 2
    (dead,) = dlq.fetch().records
    assert (dead.key, dead.value) == (b"k", b"poison")
    # the record's own headers, then its origin (docs/api.md: dead-lettered records)
    assert dead.headers == [("h", b"1"), (ATTEMPT_HEADER, b"2"),
                            ("kdelay.dlq.partition", b"0"), ("kdelay.dlq.offset", b"2"),
                            ("kdelay.dlq.delivery_count", b"3"),
                            ("kdelay.dlq.reason", b"max_delivery_count")]
    assert dead.timestamp == rec.timestamp  # the last retry's copy, dead-lettered
    clock.advance(1000)
    assert c.poll() == []  # the dead-lettered copy is not redelivered to the source


def test_max_attempts_zero_dead_letters_at_once(open_log, tmp_path, clock):
    log = open_log()
    dlq = open_log(os.fspath(tmp_path / "dlq-0"))
    log.append([Record(b"v")])
    c = Consumer(log, "g", max_attempts=0, dead_letter=dlq)
    assert c.retry(c.poll()[0], 5).dead_lettered
    assert log.log_end_offset == 1 and dlq.log_end_offset == 1


def test_retry_on_topic_stays_on_its_partition(tmp_path, clock):
    with Topic.open(tmp_path, "t", partitions=5, clock=clock) as topic, \
            Topic.open(tmp_path, "dead", partitions=3, clock=clock) as dead:
        sent = {}
        for i in range(20):
            key = b"key-%d" % i
            sent[key] = topic.send([Record(b"v%d" % i, key=key)])[0]
        c = Consumer(topic, "g", max_attempts=1, dead_letter=dead)
        recs = c.poll()
        assert len(recs) == 20
        for r in recs:
            out = c.retry(r, 50)
            assert out.partition == r.partition == sent[r.key]
        c.commit()
        clock.advance(50)
        retried = c.poll()
        assert sorted((r.partition, r.key) for r in retried) == \
            sorted((p, k) for k, p in sent.items())
        for r in retried:
            out = c.retry(r, 50)
            assert out.dead_lettered
            assert out.partition == dead.partition_for(r.key)  # keyed like any send
        got = [r for p in range(3) for r in dead.partition(p).fetch().records]
        assert sorted(r.key for r in got) == sorted(sent)
        # a record that did not come from this topic's poll cannot be retried onto it
        with pytest.raises(InvalidRecordError):
            c.retry(recs[0]._replace(partition=None), 10)
        with pytest.raises(InvalidRecordError):
            c.retry(recs[0]._replace(partition=5), 10)


def test_retry_arguments(open_log, tmp_path):
    log = open_log()
    log.append([Record(b"v")])
    with pytest.raises(KdelayError, match="dead_letter"):
        Consumer(log, "g", max_attempts=3)
    with pytest.raises(KdelayError):
        Consumer(log, "g", max_attempts=-1, dead_letter=log)
    c = Consumer(log, "g")
    rec = c.poll()[0]
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidRecordError):
            c.retry(rec, bad)
    with pytest.raises(InvalidRecordError):
        c.retry(Record(b"v"), 1)
    assert log.log_end_offset == 1


def test_retry_on_fifo_log(open_log, clock):
    log = open_log(delayed_delivery_enable=False)
    log.append([Record(b"v")])
    c = Consumer(log, "g")
    rec = c.poll()[0]
    assert c.retry(rec, 0).action == "retried"  # no delay: plain re-append
    with pytest.raises(DelayedDeliveryDisabledError):
        c.retry(rec, 10)
    assert [attempt_of(r) for r in c.poll()] == [1]


@pytest.mark.parametrize(("value", "count"), [
    (b"7", 7), (b"0", 0), (b"", 0), (b"-3", 0), (b"x", 0), (b"\xff", 0), (None, 0),
])
def test_attempt_header_parsing(value, count):
    assert attempt_of(Record(b"v", headers=[(ATTEMPT_HEADER, value)])) == count


# ---------------------------------------------------------------------- metrics


def test_metrics_counts(open_log, log_dir, clock):
    log = open_log(segment_bytes=600)
    _fill(log, 30, batch=2, delay=lambda i: (i % 3) * 1000)  # 0, 1000, 2000 ms
    m = log.metrics()
    assert m["records"] == 30
    assert m["due_records"] == 10 and m["pending_records"] == 20
    assert m["earliest_pending_deliver_after"] == clock.t + 1000
    assert m["segments"] == len(log.segments) > 1
    on_disk = sum(os.path.getsize(os.path.join(log_dir, f)) for f in os.listdir(log_dir)
                  if f.endswith((".index", ".timeindex", ".dlyindex")))
    assert m["index_bytes_on_disk"] == on_disk > 0
    assert m["index_bytes_in_memory"] > 0  # the active segment's entries
    assert m["groups"] == {}
    clock.advance(2000)
    m = log.metrics()
    assert (m["due_records"], m["pending_records"]) == (30, 0)
    assert m["earliest_pending_deliver_after"] is None


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(0, 6), st.booleans()),
                min_size=1, max_size=30),
       st.integers(0, 7), st.lists(st.integers(0, 200), max_size=4))
def test_lag_matches_brute_force(tmp_path_factory, batches, now_step, cuts):
    """Lag from the index columns (per segment, searchsorted) vs a per-record count, for
    committed keys anywhere: mid-batch, at batch ends, at equal deliverAfters, past due."""
    clock = FakeClock(T0)
    with Log.open(tmp_path_factory.mktemp("lag"), clock=clock) as log:
        for n, d, roll in batches:
            log.append([Record(b"x")] * n, deliver_after=T0 + d * 100)
            if roll:
                log.roll()
        clock.advance(now_step * 100)
        everything = sorted((r.deliver_after, r.offset)
                            for r in log.read(0, max_records=10_000))
        groups = {}
        for i, cut in enumerate(cuts):
            key = everything[cut % len(everything)] if cut < 190 else None
            if key is not None and cut % 2:
                key = (key[0], key[1] - 1) if key[1] else key  # a key inside a batch
            groups[f"g{i}"] = key
            log.commit(f"g{i}", None if key is None else DeliveryKey(*key))
        lags = {g: v["lag"] for g, v in log.metrics()["groups"].items()}
        for g, key in groups.items():
            want = sum(1 for k in everything if (key is None or k > key) and k[0] <= clock.t)
            assert lags[g] == want


# ---------------------------------------------------------------------- group store


@pytest.mark.parametrize("group", ["a\nb", "\n", "x\n\nnone", "g 1 2", "é" * 60, "\x00"])
def test_any_group_name_round_trips(log_dir, clock, group):
    # names used to be stored as one line: a newline in one made its file "corrupt"
    with Log.open(log_dir, clock=clock) as log:
        _fill(log, 3)
        c = Consumer(log, group)
        c.poll(max_records=2)
        c.commit()
    with Log.open(log_dir, clock=clock) as log:
        assert log.committed(group) == DeliveryKey(clock.t, 1)
        assert log.clients.positions.groups() == [group]
        assert [r.offset for r in Consumer(log, group).poll()] == [2]


def test_group_name_limits(open_log):
    log = open_log()
    log.commit("x" * 120, None)
    for bad in ("x" * 121, "é" * 61, "\ud800"):
        with pytest.raises(KdelayError):
            log.commit(bad, None)
    assert log.clients.positions.groups() == ["x" * 120]


def test_corrupt_group_journal_is_detected(log_dir, clock):
    """Damage to the commit journal that a crash cannot leave is refused; a cut-short last
    record is what a crash mid-commit leaves: cut off, the commit before it stands."""
    with Log.open(log_dir, clock=clock) as log:
        log.commit("g", DeliveryKey(5, 6))
        log.commit("g", DeliveryKey(7, 8))
    gdir = os.path.join(log_dir, "groups")
    (path,) = [os.path.join(gdir, f) for f in os.listdir(gdir)]
    with open(path, "rb") as f:
        good = f.read()
    flipped = bytearray(good)
    flipped[40] ^= 1  # inside the first record's key: its CRC no longer matches
    for bad in (bytes(flipped), b"", b"x" * len(good)):
        with open(path, "wb") as f:
            f.write(bad)
        with Log.open(log_dir, clock=clock) as log, pytest.raises(CorruptLogError,
                                                                  match="journal"):
            log.committed("g")
    with open(path, "wb") as f:
        f.write(good[:-3])
    with Log.open(log_dir, clock=clock) as log:
        assert log.committed("g") == DeliveryKey(5, 6)


def test_log_clock_resumes_above_committed_clock_after_a_crash(tmp_path):
    """After an unclean shutdown with the clock stepped back, an append must still not be
    dated behind a group's committed position (the commit recorded the clock it saw)."""
    import shutil

    t = [10_000]
    src = str(tmp_path / "live")
    log = Log.open(src, clock=lambda: t[0])
    log.append([Record(b"a")])
    page = log.fetch(None)
    log.commit("g", page.next)
    shutil.copytree(src, str(tmp_path / "crashed"), ignore=shutil.ignore_patterns(".lock"))
    log.close()
    t[0] = 5_000  # the wall clock stepped back across the crash
    with Log.open(str(tmp_path / "crashed"), clock=lambda: t[0]) as log2:
        res = log2.append([Record(b"b")])
        assert res.deliver_after >= page.next.deliver_after
        assert [r.value for r in log2.fetch(log2.committed("g")).records] == [b"b"]
