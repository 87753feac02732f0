"""QueueConsumer: the contract's work-queue semantics, one behaviour per test."""

from __future__ import annotations

import os
import threading

import pytest
from conftest import T0, FakeClock

from kdelay import KdelayError, Log, LogConfig, QueueConsumer, Record, Topic
from kdelay.groups.queue import state_store


@pytest.fixture
def env(tmp_path):
    clock = FakeClock(T0)
    opened: list = []

    def open_log(name: str = "p-0", **cfg) -> Log:
        log = Log.open(str(tmp_path / name), config=LogConfig(**cfg), clock=clock)
        opened.append(log)
        return log

    yield clock, open_log
    for log in opened:
        if not log.closed:
            log.close()


def fill(log: Log, n: int, start_da: int = T0, step: int = 0) -> None:
    for i in range(n):
        log.append([Record(b"v%d" % i, key=b"k%d" % i, headers=[("h", b"%d" % i)])],
                   deliver_after=start_da + i * step)


def offs(recs) -> list[int]:
    return [r.offset for r in recs]


def test_poll_acquires_in_due_order_with_counts(env):
    clock, open_log = env
    log = open_log()
    for i, da in enumerate([30, 10, 20, 10]):
        log.append([Record(b"v%d" % i)], deliver_after=T0 + da)
    clock.t = T0 + 25
    q = QueueConsumer(log, "g")
    recs = q.poll()
    assert offs(recs) == [1, 3, 2]  # (deliver_after, offset) order; offset 0 not yet due
    assert [r.delivery_count for r in recs] == [1, 1, 1]
    assert recs[0].value == b"v1" and recs[0].partition is None
    assert q.poll() == []  # held: not offered again
    clock.t = T0 + 30
    assert offs(q.poll()) == [0]
    q.close()


def test_each_record_goes_to_one_consumer_at_a_time(env):
    clock, open_log = env
    log = open_log()
    fill(log, 300)
    consumers = [QueueConsumer(log, "g") for _ in range(4)]
    got: list[list[int]] = [[] for _ in consumers]

    def work(i: int) -> None:
        while True:
            recs = consumers[i].poll(max_records=7)
            if not recs:
                return
            got[i] += offs(recs)
            consumers[i].ack(recs)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = sorted(o for g in got for o in g)
    assert flat == list(range(300))
    for c in consumers:
        c.close()
    log.close()  # the acks (group-committed across threads) all hold after a reopen
    q = QueueConsumer(open_log(), "g")
    assert q.poll() == []


def test_release_with_delay_keeps_offset_and_appends_nothing(env):
    clock, open_log = env
    log = open_log()
    fill(log, 3)
    q = QueueConsumer(log, "g")
    recs = q.poll()
    end = log.log_end_offset
    q.release(recs[:1], delay_ms=500)
    q.ack(recs[1:])
    assert log.log_end_offset == end
    assert q.poll() == []
    clock.t += 499
    assert q.poll() == []
    clock.t += 1
    again = q.poll()
    assert offs(again) == [0] and again[0].delivery_count == 2
    assert again[0].value == b"v0" and again[0].headers == [("h", b"0")]


def test_released_record_is_offered_at_its_new_time(env):
    clock, open_log = env
    log = open_log()
    fill(log, 2)
    q = QueueConsumer(log, "g")
    first = q.poll(max_records=1)
    q.release(first, delay_ms=100)           # offset 0 now at T0 + 100
    log.append([Record(b"late")], deliver_after=T0 + 50)  # offset 2
    clock.t = T0 + 200
    assert offs(q.poll()) == [1, 2, 0]


def test_lock_expiry_on_log_clock(env):
    clock, open_log = env
    log = open_log()
    fill(log, 2)
    a = QueueConsumer(log, "g", lock_ms=1000)
    b = QueueConsumer(log, "g", lock_ms=1000)
    held = a.poll()
    clock.t += 1000
    assert b.poll() == []  # the lock lasts through acquisition + lock_ms
    a.renew(held)  # at T0 + 1000: held until T0 + 2000
    clock.t += 1000
    assert b.poll() == []
    clock.t += 1
    taken = b.poll()
    assert offs(taken) == [0, 1] and [r.delivery_count for r in taken] == [2, 2]
    with pytest.raises(KdelayError, match="not held"):
        a.ack(held)  # a's lock ran out and b holds them now
    b.ack(taken)


def test_ack_after_lock_ran_out_is_refused(env):
    clock, open_log = env
    log = open_log()
    fill(log, 1)
    q = QueueConsumer(log, "g", lock_ms=10)
    recs = q.poll()
    clock.t += 11
    with pytest.raises(KdelayError, match="ran out"):
        q.ack(recs)
    assert offs(q.poll()) == [0]


def test_dead_letter_after_max_delivery_count(env):
    clock, open_log = env
    log, dl = open_log(), open_log("dl-0")
    log.append([Record(b"poison", key=b"k", headers=[("a", b"1")])])
    q = QueueConsumer(log, "g", max_delivery_count=3, dead_letter=dl)
    for n in (1, 2, 3):
        recs = q.poll()
        assert [r.delivery_count for r in recs] == [n]
        q.release(recs)
    assert q.poll() == []  # the 4th delivery is a reject instead
    copies = dl.read(0)
    # the record's own headers, then its origin (docs/api.md: dead-lettered records)
    assert [(r.value, r.key, r.headers) for r in copies] == [(b"poison", b"k", [
        ("a", b"1"), ("kdelay.dlq.partition", b"0"), ("kdelay.dlq.offset", b"0"),
        ("kdelay.dlq.delivery_count", b"3"), ("kdelay.dlq.reason", b"max_delivery_count")])]
    m = log.metrics()["queues"]["g"]
    assert m["rejected"] == 1 and m["in_flight"] == 0


def test_reject_dead_letters_and_never_redelivers(env):
    clock, open_log = env
    log, dl = open_log(), open_log("dl-0")
    fill(log, 2)
    q = QueueConsumer(log, "g", dead_letter=dl)
    recs = q.poll()
    q.reject(recs[:1])
    q.release(recs[1:])
    assert offs(q.poll()) == [1]
    assert [r.value for r in dl.read(0)] == [b"v0"]


@pytest.mark.parametrize("bad", ["not held", "twice", "negative delay", "foreign",
                                 "wrong count", "not a record"])
def test_bad_calls_raise_and_change_nothing(env, bad):
    clock, open_log = env
    log = open_log()
    fill(log, 3)
    a, b = QueueConsumer(log, "g"), QueueConsumer(log, "g")
    mine = a.poll(max_records=2)
    theirs = b.poll()
    before = os.path.getsize(os.path.join(log.path, "queues", "g.journal"))
    args = {"not held": (a.ack, [mine[0], theirs[0]]),
            "twice": (a.ack, [mine[0], mine[0]]),
            "negative delay": (lambda r: a.release(r, delay_ms=-1), mine),
            "foreign": (a.ack, [mine[0]._replace(partition=3)]),
            "wrong count": (a.ack, [mine[0]._replace(delivery_count=2)]),
            "not a record": (a.ack, [mine[0], ("x", 1)])}[bad]
    with pytest.raises(KdelayError):
        args[0](args[1])
    assert os.path.getsize(os.path.join(log.path, "queues", "g.journal")) == before
    a.ack(mine)  # still held, all of them
    b.ack(theirs)


@pytest.mark.parametrize("name", ["", "a/b", "..", ".", "x" * 201, "é", "a b", None, 3])
def test_unsafe_group_names_are_refused(env, name):
    _, open_log = env
    log = open_log()
    with pytest.raises(KdelayError):
        QueueConsumer(log, name)
    assert not os.path.exists(os.path.join(log.path, "queues"))


def test_bad_arguments(env):
    _, open_log = env
    log = open_log()
    for kw in ({"lock_ms": -1}, {"max_delivery_count": 0}, {"dead_letter": "x"},
               {"lock_ms": 1.5}):
        with pytest.raises(KdelayError):
            QueueConsumer(log, "g", **kw)
    with pytest.raises(KdelayError):
        QueueConsumer("not a log", "g")
    # issue 31, point 11: a lock of 0 ms frees every record again at once, so every
    # worker would get every record
    with pytest.raises(KdelayError, match=r"lock_ms must be in \[1, "):
        QueueConsumer(log, "g", lock_ms=0)
    q = QueueConsumer(log, "g")
    for kw in ({"max_records": 0}, {"timeout_ms": -1}, {"max_records": True}):
        with pytest.raises(KdelayError):
            q.poll(**kw)
    q.close()
    with pytest.raises(KdelayError):
        q.poll()


def test_state_survives_reopen(env, tmp_path):
    clock, open_log = env
    log = open_log()
    fill(log, 6)
    q = QueueConsumer(log, "g")
    recs = q.poll(max_records=4)           # 0..3 acquired, 4..5 never delivered
    q.ack(recs[:1])
    q.reject(recs[1:2])
    q.release(recs[2:3], delay_ms=1000)
    # offset 3 stays acquired: after a restart it comes back with its count
    q.close()
    log.close()
    log = open_log()
    q = QueueConsumer(log, "g")
    got = q.poll()
    assert [(r.offset, r.delivery_count) for r in got] == [(3, 2), (4, 1), (5, 1)]
    clock.t += 1000
    assert [(r.offset, r.delivery_count) for r in q.poll()] == [(2, 2)]
    m = log.metrics()["queues"]["g"]
    assert (m["acked"], m["rejected"], m["acquired"]) == (1, 1, 4)


def test_close_releases_held_records(env):
    clock, open_log = env
    log = open_log()
    fill(log, 2)
    a, b = QueueConsumer(log, "g"), QueueConsumer(log, "g")
    a.poll()
    assert b.poll() == []
    a.close()
    assert [r.delivery_count for r in b.poll()] == [2, 2]


def test_groups_are_independent_of_each_other_and_of_consumers(env):
    clock, open_log = env
    log = open_log()
    fill(log, 2)
    q1, q2 = QueueConsumer(log, "one"), QueueConsumer(log, "two")
    q1.ack(q1.poll())
    assert offs(q2.poll()) == [0, 1]
    from kdelay import Consumer
    assert offs(Consumer(log, "one").poll()) == [0, 1]


def test_topic_partitions(env, tmp_path):
    clock, _ = env
    with Topic.open(str(tmp_path), "t", partitions=3, clock=clock) as topic:
        for i in range(30):
            topic.send([Record(b"v%d" % i, key=b"key%d" % i)])
        q = QueueConsumer(topic, "g")
        seen = set()
        while recs := q.poll(max_records=4):
            assert len(recs) <= 4
            seen |= {(r.partition, r.offset) for r in recs}
            q.ack(recs)
        assert len(seen) == 30
        with pytest.raises(KdelayError):
            q.ack([next(iter(recs), None)] if recs else [None])
        q.close()
        assert sorted(state_store.group_names(topic.partition(0).path)) == ["g"]


def test_compaction_keeps_state_small_and_correct(env):
    clock, open_log = env
    log = open_log()
    fill(log, 200)
    q = QueueConsumer(log, "g", compact_min_bytes=0)
    keep = []
    while recs := q.poll(max_records=9):
        keep.append(recs[0])
        q.ack(recs[1:])
    store = q._parts[0].store
    assert store.generation > 10  # compacted again and again
    size = os.path.getsize(store.snapshot_path) + os.path.getsize(store.journal_path)
    assert size < 2000  # O(in flight): 23 records, not 200
    q.release(keep)
    q.close()
    log.close()
    log = open_log()
    q = QueueConsumer(log, "g")
    assert offs(q.poll()) == sorted(r.offset for r in keep)


def test_long_poll_wakes_on_append_and_release(env):
    clock, open_log = env
    log = open_log()
    q, other = QueueConsumer(log, "g"), QueueConsumer(log, "g")
    got: list = []
    t = threading.Thread(target=lambda: got.append(q.poll(timeout_ms=30_000)))
    t.start()
    log.append([Record(b"x")])
    t.join(timeout=20)
    assert not t.is_alive() and offs(got[0]) == [0]
    t = threading.Thread(target=lambda: got.append(other.poll(timeout_ms=30_000)))
    t.start()
    q.release(got[0])
    t.join(timeout=20)
    assert not t.is_alive() and offs(got[1]) == [0]


def test_metrics_counts(env):
    clock, open_log = env
    log = open_log()
    fill(log, 6)
    log.append([Record(b"later")], deliver_after=T0 + 10_000)
    q = QueueConsumer(log, "g")
    recs = q.poll(max_records=4)
    q.ack(recs[:1])
    q.release(recs[1:2], delay_ms=100)
    q.release(recs[2:3])
    m = log.metrics()["queues"]["g"]
    # acquired: offset 3; available: 2 released + 4, 5 never delivered; delayed: 1
    assert {k: m[k] for k in ("acquired", "available", "delayed", "acked")} == \
        {"acquired": 1, "available": 3, "delayed": 1, "acked": 1}


def test_cancelled_records_are_never_polled(env):
    clock, open_log = env
    log = open_log()
    log.append([Record(b"a")], deliver_after=T0 + 100)
    log.append([Record(b"b")], deliver_after=T0 + 100)
    assert log.cancel(0) == 1
    clock.t = T0 + 100
    q = QueueConsumer(log, "g")
    recs = q.poll()
    assert offs(recs) == [1]
    q.release(recs, delay_ms=50)
    assert log.cancel(1) == 0  # due in the log already: a released record cannot be cancelled
    clock.t += 50
    assert offs(q.poll()) == [1]
    q.close()


def test_long_poll_wakes_when_a_lock_runs_out_or_a_release_comes_due(tmp_path):
    """On the wall clock: a waiting poll sleeps until the earliest lock expiry or delayed
    release, not until its timeout (60 s here)."""
    log = Log.open(str(tmp_path / "p-0"))
    try:
        log.append([Record(b"a"), Record(b"b")])
        holder = QueueConsumer(log, "g", lock_ms=150)
        waiter = QueueConsumer(log, "g")
        held = holder.poll()
        holder.release(held[1:], delay_ms=300)
        got: list = []

        def wait_twice() -> None:
            got.append(waiter.poll(timeout_ms=60_000))
            got.append(waiter.poll(timeout_ms=60_000))
        t = threading.Thread(target=wait_twice)
        t.start()
        t.join(timeout=30)
        assert not t.is_alive()
        assert [offs(g) for g in got] == [[0], [1]]
        assert [g[0].delivery_count for g in got] == [2, 2]
    finally:
        log.close()


def test_a_waiting_poll_does_not_spin(env, monkeypatch):
    """Nothing due and nothing coming: the poll sleeps through its timeout in a few rounds."""
    clock, open_log = env
    log = open_log()
    log.append([Record(b"far")], deliver_after=T0 + 10**9)
    q = QueueConsumer(log, "g")
    rounds = []
    real = QueueConsumer._poll_round
    monkeypatch.setattr(QueueConsumer, "_poll_round",
                        lambda self, n: rounds.append(1) or real(self, n))
    assert q.poll(timeout_ms=400) == []
    assert len(rounds) <= 3


def test_topic_dead_letter_topic_and_limit(env, tmp_path):
    clock, _ = env
    with Topic.open(str(tmp_path), "jobs", partitions=2, clock=clock) as topic, \
            Topic.open(str(tmp_path), "dead", partitions=2, clock=clock) as dead:
        for i in range(6):
            topic.send([Record(b"v%d" % i, key=b"k%d" % i)])
        q = QueueConsumer(topic, "g", max_delivery_count=1, dead_letter=dead)
        recs = q.poll()
        assert sorted(r.value for r in recs) == [b"v%d" % i for i in range(6)]
        q.reject([r for r in recs if r.value == b"v0"])
        q.release([r for r in recs if r.value != b"v0"])
        assert q.poll() == []  # the second delivery would pass the limit: all dead-lettered
        copies = sorted(r.value for p in range(2) for r in dead.partition(p).read(0))
        assert copies == [b"v%d" % i for i in range(6)]
        # each copy went to the partition its key maps to, as a send does
        for p in range(2):
            for r in dead.partition(p).read(0):
                assert dead.partition_for(r.key) == p
        m = topic.partition(0).metrics()["queues"]["g"]
        assert m["in_flight"] == 0
        q.close()


def test_records_compaction_removes_while_in_flight_are_dropped(env):
    """Compaction may remove a record due for longer than retention_ms even while a group
    has it in flight (released far ahead): the group drops it (journaled) and serves the
    rest."""
    clock, open_log = env
    log = open_log(retention_ms=1000, compaction_min_ratio=0.1)
    for i in range(6):
        log.append([Record(b"old%d" % i)])
    log.roll()
    log.append([Record(b"young")], deliver_after=T0 + 5000)
    log.roll()
    q = QueueConsumer(log, "g")
    recs = q.poll()
    assert offs(recs) == list(range(6))
    q.release(recs[:2], delay_ms=10_000)
    q.ack(recs[2:])
    clock.t = T0 + 5000
    assert log.compact().segments_rewritten >= 1
    clock.t = T0 + 20_000
    got = q.poll()
    assert offs(got) == [6] and got[0].value == b"young"
    m = log.metrics()["queues"]["g"]
    assert (m["in_flight"], m["acquired"]) == (1, 1)
    q.close()
    log.close()
    log = open_log(retention_ms=1000, compaction_min_ratio=0.1)
    q = QueueConsumer(log, "g")
    assert offs(q.poll()) == [6]  # the drops were journaled: 0 and 1 stay gone
    q.close()


def test_one_partition_topic_settles_its_records(env, tmp_path):
    """A 1-partition Topic's records carry partition 0 (as Consumer's do), so they can be
    acked, released, rejected and renewed."""
    clock, _ = env
    with Topic.open(str(tmp_path), "one", partitions=1, clock=clock) as topic, \
            Topic.open(str(tmp_path), "one-dead", partitions=1, clock=clock) as dead:
        for i in range(4):
            topic.send([Record(b"v%d" % i)])
        q = QueueConsumer(topic, "g", lock_ms=100, dead_letter=dead)
        recs = q.poll()
        assert [r.partition for r in recs] == [0, 0, 0, 0]
        clock.t += 60
        q.renew(recs)
        clock.t += 60  # past the first lock: held only thanks to the renewal
        q.ack(recs[:1])
        q.release(recs[1:2])
        q.reject(recs[2:3])
        again = q.poll()
        assert [(r.offset, r.delivery_count, r.partition) for r in again] == [(1, 2, 0)]
        q.ack([recs[3], *again])
        assert [r.value for r in dead.partition(0).read(0)] == [b"v2"]
        m = topic.partition(0).metrics()["queues"]["g"]
        assert (m["acked"], m["rejected"], m["in_flight"]) == (3, 1, 0)
        q.close()


def test_dead_letters_in_a_one_partition_topic_are_consumed_by_a_queue(env, tmp_path):
    clock, _ = env
    with Topic.open(str(tmp_path), "jobs", partitions=3, clock=clock) as topic, \
            Topic.open(str(tmp_path), "jobs-dlq", partitions=1, clock=clock) as dlq:
        for i in range(6):  # keyless: two to each partition
            topic.send([Record(b"v%d" % i)])
        q = QueueConsumer(topic, "work", max_delivery_count=1, dead_letter=dlq)
        q.reject(q.poll())  # into the dead-letter topic's one partition
        q.close()
        triage = QueueConsumer(dlq, "triage")
        recs = triage.poll()
        assert sorted(r.value for r in recs) == [b"v%d" % i for i in range(6)]
        assert {r.partition for r in recs} == {0}
        triage.release(recs[:2])
        triage.ack(recs[2:])
        triage.ack(triage.poll())
        assert triage.poll() == []
        m = dlq.partition(0).metrics()["queues"]["triage"]
        assert (m["acked"], m["in_flight"]) == (6, 0)
        triage.close()


def test_available_leaves_cancelled_records_out(env):
    """`available` counts what polls will return: 6 records come due, 3 were cancelled."""
    clock, open_log = env
    log = open_log()
    log.append([Record(b"v%d" % i) for i in range(4)], deliver_after=T0 + 100)
    fill(log, 2, start_da=T0 + 100)
    assert log.cancel([1, 3, 5]) == 3
    clock.t = T0 + 100
    q = QueueConsumer(log, "g")

    def available() -> int:
        return log.metrics()["queues"]["g"]["available"]

    assert available() == 3
    first = q.poll(max_records=1)
    assert offs(first) == [0] and available() == 2  # the cursor inside the 4-record batch
    rest = q.poll()
    assert offs(rest) == [2, 4] and available() == 0
    q.close()
