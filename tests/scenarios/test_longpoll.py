"""Long-poll fetch: wakes when a record becomes due (append or timer), else at the timeout,
and burns no CPU while it waits.

Waits use the real wall clock. Bounds on elapsed time are loose on purpose (a wake that
should come after ~0.3 s is only required to come well before the multi-second timeout),
so a loaded machine cannot make them fail, while a missed wake-up still does.
"""

from __future__ import annotations

import threading
import time

import pytest

from kdelay import Consumer, Log, QueueConsumer, Record, Topic
from kdelay.errors import LogClosedError
from kdelay.fetch.long_poll import ActivitySignal

LONG_WAIT_MS = 15_000
MUST_WAKE_BEFORE_S = 7.0  # a missed wake-up would only return at LONG_WAIT_MS


class Waiter(threading.Thread):
    """Runs `fn` in a thread; records what it returned (or raised) and how long it took."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn = fn
        self.result = self.error = None
        self.elapsed = None

    def run(self):
        t0 = time.monotonic()
        try:
            self.result = self.fn()
        except BaseException as e:  # reported by the test
            self.error = e
        self.elapsed = time.monotonic() - t0

    def finish(self):
        self.join(LONG_WAIT_MS / 1000 + 10)
        assert not self.is_alive()
        if self.error is not None:
            raise self.error
        return self.result


@pytest.fixture
def wall_log(tmp_path):
    log = Log.open(tmp_path / "p-0")
    yield log
    log.close()


def test_due_record_returns_at_once(wall_log):
    wall_log.append([Record(b"now")])
    t0 = time.monotonic()
    res = wall_log.fetch(max_wait_ms=LONG_WAIT_MS)
    assert [r.value for r in res.records] == [b"now"]
    assert time.monotonic() - t0 < MUST_WAKE_BEFORE_S


def test_times_out_with_nothing(wall_log):
    wall_log.append([Record(b"late")], deliver_after=wall_log.now() + 3_600_000)
    first = wall_log.append([Record(b"x")])
    cursor = wall_log.fetch().next
    assert cursor == (first.deliver_after, first.base_offset)
    t0 = time.monotonic()
    res = wall_log.fetch(cursor, max_wait_ms=200)
    assert time.monotonic() - t0 >= 0.19
    assert res.records == [] and res.next == cursor


def test_append_due_now_wakes_waiter(wall_log):
    w = Waiter(lambda: wall_log.fetch(max_wait_ms=LONG_WAIT_MS))
    w.start()
    time.sleep(0.2)
    wall_log.append([Record(b"a"), Record(b"b")])
    res = w.finish()
    assert [r.value for r in res.records] == [b"a", b"b"]
    assert w.elapsed < MUST_WAKE_BEFORE_S


@pytest.mark.parametrize("where", ["active", "sealed"])
def test_timer_wakes_at_earliest_pending(wall_log, where):
    # "sealed": the only pending record is in a rolled segment. fetch's due stream skips
    # segments with nothing due yet, so the timer must come from elsewhere (this once
    # slept until the timeout).
    due = wall_log.now() + 300
    wall_log.append([Record(b"later")], deliver_after=due + 5000)
    wall_log.append([Record(b"soon")], deliver_after=due)
    if where == "sealed":
        wall_log.roll()
    w = Waiter(lambda: (wall_log.fetch(max_wait_ms=LONG_WAIT_MS), wall_log.now()))
    w.start()
    res, now_after = w.finish()
    assert [r.value for r in res.records] == [b"soon"]
    assert res.records[0].deliver_after == due <= now_after
    assert w.elapsed < MUST_WAKE_BEFORE_S


def test_future_append_rearms_timer(wall_log):
    w = Waiter(lambda: wall_log.fetch(max_wait_ms=LONG_WAIT_MS))
    w.start()
    time.sleep(0.1)
    due = wall_log.now() + 300
    wall_log.append([Record(b"x")], deliver_after=due)
    res = w.finish()
    assert [(r.value, r.deliver_after) for r in res.records] == [(b"x", due)]
    assert wall_log.now() >= due
    assert w.elapsed < MUST_WAKE_BEFORE_S


def test_never_returns_early(wall_log):
    # many waits, each for a record due a little later: none may come back before its time
    for i in range(5):
        res0 = wall_log.fetch()
        due = wall_log.now() + 20 + 10 * i
        wall_log.append([Record(b"%d" % i)], deliver_after=due)
        res = wall_log.fetch(res0.next, max_wait_ms=LONG_WAIT_MS)
        assert [r.deliver_after for r in res.records] == [due]
        assert wall_log.now() >= due


def test_close_wakes_waiter_with_error(wall_log):
    w = Waiter(lambda: wall_log.fetch(max_wait_ms=LONG_WAIT_MS))
    w.start()
    time.sleep(0.2)
    wall_log.close()
    with pytest.raises(LogClosedError):
        w.finish()
    assert w.elapsed < MUST_WAKE_BEFORE_S


def test_topic_consumer_wakes_on_any_partition(tmp_path):
    with Topic.open(tmp_path, "t", partitions=4) as topic:
        c = Consumer(topic, "g")
        w = Waiter(lambda: c.poll(timeout_ms=LONG_WAIT_MS))
        w.start()
        time.sleep(0.2)
        topic.partition(3).append([Record(b"direct")])  # not via topic.send
        recs = w.finish()
        assert [(r.partition, r.value) for r in recs] == [(3, b"direct")]
        assert w.elapsed < MUST_WAKE_BEFORE_S

        due = topic.partition(1).now() + 300
        topic.partition(2).append([Record(b"later")], deliver_after=due + 60_000)
        topic.partition(1).append([Record(b"timer")], deliver_after=due)
        t0 = time.monotonic()
        recs = c.poll(timeout_ms=LONG_WAIT_MS)
        assert [(r.partition, r.value) for r in recs] == [(1, b"timer")]
        assert topic.partition(1).now() >= due
        assert time.monotonic() - t0 < MUST_WAKE_BEFORE_S


def test_topic_consumer_times_out(tmp_path):
    with Topic.open(tmp_path, "t", partitions=3) as topic:
        c = Consumer(topic, "g")
        t0 = time.monotonic()
        assert c.poll(timeout_ms=200) == []
        assert time.monotonic() - t0 >= 0.19


def test_waiting_burns_no_cpu(tmp_path):
    """Five waits at once for ~3 s: an empty log, a log whose only record is pending (active
    and sealed segment) far in the future, and Log and Topic consumers. A busy loop in any
    of them would cost about a CPU-second per second; sleeping costs milliseconds."""
    empty = Log.open(tmp_path / "empty-0")
    active = Log.open(tmp_path / "active-0")
    sealed = Log.open(tmp_path / "sealed-0")
    topic = Topic.open(tmp_path, "t", partitions=4)
    far = active.now() + 3_600_000
    active.append([Record(b"x")], deliver_after=far)
    sealed.append([Record(b"x")], deliver_after=far)
    sealed.roll()
    topic.partition(2).append([Record(b"x")], deliver_after=far)
    try:
        waiters = [Waiter(lambda log=log: log.fetch(max_wait_ms=3000))
                   for log in (empty, active, sealed)]
        waiters.append(Waiter(lambda: Consumer(topic, "g").poll(timeout_ms=3000)))
        waiters.append(Waiter(lambda: Consumer(sealed, "g").poll(timeout_ms=3000)))
        cpu0, wall0 = time.process_time(), time.monotonic()
        for w in waiters:
            w.start()
        results = [w.finish() for w in waiters]
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    finally:
        for x in (empty, active, sealed, topic):
            x.close()
    assert all(not (r.records if hasattr(r, "records") else r) for r in results)
    assert wall >= 2.9
    print(f"5 waiters, {wall:.2f} s wall: {cpu * 1000:.1f} ms CPU")
    assert cpu < 0.5, f"waiting used {cpu:.2f} s of CPU in {wall:.2f} s"


@pytest.mark.parametrize("kind", ["queue", "consumer", "fetch"])
def test_an_idle_waiter_sleeps_through_appends_due_later(tmp_path, monkeypatch, kind):
    """1000 single-record sends due a minute later wake no long-polling consumer (each would
    cost it a round over every partition, and the sender the GIL): the waiter sleeps a few
    times at most, and its thread's CPU time stays far below the sender's. A send due now
    still wakes it at once."""
    sleeps = []
    real_wait = ActivitySignal.wait

    def counted_wait(self, *args):
        sleeps.append(threading.get_ident())
        return real_wait(self, *args)

    monkeypatch.setattr(ActivitySignal, "wait", counted_wait)
    with Topic.open(tmp_path, "t", partitions=4) as topic:
        if kind == "queue":
            q = QueueConsumer(topic, "g")
            poll = lambda: q.poll(timeout_ms=LONG_WAIT_MS)  # noqa: E731
        elif kind == "consumer":
            c = Consumer(topic, "g")
            poll = lambda: c.poll(timeout_ms=LONG_WAIT_MS)  # noqa: E731
        else:
            log = topic.partition(0)
            poll = lambda: log.fetch(max_wait_ms=LONG_WAIT_MS).records  # noqa: E731

        def waiter():
            cpu = time.thread_time()
            return poll(), time.thread_time() - cpu, threading.get_ident()

        w = Waiter(waiter)
        w.start()
        time.sleep(0.2)  # asleep in its long poll
        cpu = time.thread_time()
        clock = topic.partition(0).now
        for _ in range(1000):  # keyless: over every partition
            topic.send([Record(b"later")], deliver_after=clock() + 60_000)
        sender_cpu = time.thread_time() - cpu
        time.sleep(0.1)
        t0 = time.monotonic()
        topic.partition(0).append([Record(b"now")])
        recs, waiter_cpu, ident = w.finish()
        assert [r.value for r in recs] == [b"now"]
        assert time.monotonic() - t0 < MUST_WAKE_BEFORE_S
        print(f"{kind}: waiter slept {sleeps.count(ident)} times, {waiter_cpu * 1000:.1f} ms "
              f"CPU, against the sender's {sender_cpu * 1000:.1f} ms")
        assert sleeps.count(ident) <= 3  # one sleep, woken once by the send due now
        if kind == "queue":
            q.close()
