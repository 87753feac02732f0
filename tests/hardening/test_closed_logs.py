"""Closed logs (issue 26, point 2): nothing attached to a closed Log writes.

A QueueConsumer, a Consumer, a Topic and its partitions, and the queue groups of a Log are
refused with LogClosedError once their Log is closed, and no file changes: the group's
next owner (the same directory opened again) must never find the old owner's entries
among its own. Closing such a consumer afterwards is quiet and writes nothing.
"""

from __future__ import annotations

import os
import threading

import pytest
from conftest import T0

from kdelay import (
    Consumer,
    DeliveryKey,
    KdelayError,
    Log,
    LogClosedError,
    QueueConsumer,
    Record,
    Topic,
)
from kdelay.clients.partitioner import partition_for_key
from kdelay.groups.queue import state_store
from kdelay.groups.queue.state_store import ACK, StateStore
from kdelay.testing.checks import files_under

KEY_OF = {partition_for_key(b"k%d" % i, 2): b"k%d" % i for i in range(10)}  # a key per partition


@pytest.fixture(autouse=True)
def _no_real_fsync(monkeypatch):
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def fill(log: Log, n: int = 10) -> None:
    for i in range(n):
        log.append([Record(b"v%d" % i)])


def test_the_old_owner_of_a_group_cannot_ack_after_its_log_closed(tmp_path) -> None:
    """The issue's sequence: the old member's ack after close and reopen was accepted and
    left entries the new owner's journal could not read past (CorruptQueueStateError at
    the next open of the group)."""
    p = tmp_path / "p"
    log = Log.open(p, clock=lambda: T0)
    fill(log)
    old = QueueConsumer(log, "g")
    s = old.poll(3)
    log.close()
    log2 = Log.open(p, clock=lambda: T0)
    new = QueueConsumer(log2, "g")
    got = new.poll(6)
    assert [r.offset for r in got] == [0, 1, 2, 3, 4, 5]
    files = files_under(str(p))
    with pytest.raises(LogClosedError, match="is closed"):
        old.ack(s)
    assert files_under(str(p)) == files
    old.close()  # quiet, and writes nothing
    assert files_under(str(p)) == files
    new.ack(got)
    new.close()
    again = QueueConsumer(log2, "g")  # reopens the group from its files
    assert [r.offset for r in again.poll(100)] == [6, 7, 8, 9]
    again.close()
    log2.close()


# ---------------------------------------------------------------------- every client


class Setup:
    """A Topic of 2 partitions plus a Log, each client mid-use; then `closing` is closed:
    the Log, the Topic, or only partition 0 of the Topic."""

    def __init__(self, root: str, closing: str):
        self.root = root
        self.log = Log.open(os.path.join(root, "solo"), clock=lambda: T0)
        fill(self.log)
        self.pending = self.log.append([Record(b"p")], deliver_after=T0 + 10**6)
        self.dead = Log.open(os.path.join(root, "dead"), clock=lambda: T0)
        self.topic = Topic.open(root, "t", partitions=2, clock=lambda: T0)
        for i in range(10):
            self.topic.send([Record(b"t%d" % i)])  # keyless: 5 per partition
        src = self.log if closing == "log" else self.topic
        self.q = QueueConsumer(src, "work", dead_letter=self.dead)
        polled = self.q.poll(8)
        self.held = [r for r in polled if r.partition in (None, 0)]
        self.held_elsewhere = [r for r in polled if r.partition == 1]
        assert len(self.held) >= 4
        self.c = Consumer(src, "g")
        self.polled = [r for r in self.c.poll(6) if r.partition in (None, 0)]
        self.closing = closing
        if closing == "log":
            self.log.close()
        elif closing == "topic":
            self.topic.close()
        else:
            self.topic.partition(0).close()

    def calls(self) -> dict:
        q, c, held = self.q, self.c, self.held
        calls = {
            "QueueConsumer.poll": lambda: q.poll(100),
            "QueueConsumer.poll waiting": lambda: q.poll(100, timeout_ms=20),
            "QueueConsumer.ack": lambda: q.ack(held[:1]),
            "QueueConsumer.release": lambda: q.release(held[1:2], delay_ms=5),
            "QueueConsumer.reject": lambda: q.reject(held[2:3]),
            "QueueConsumer.renew": lambda: q.renew(held[3:]),
            "Consumer.poll": lambda: c.poll(100),
            "Consumer.commit": c.commit,
            "Consumer.retry": lambda: c.retry(self.polled[0]),
            "new QueueConsumer": lambda: QueueConsumer(q.source, "other"),
            "new Consumer": lambda: Consumer(q.source, "other"),
        }
        if self.closing == "log":
            calls.update({
                "Log.append": lambda: self.log.append([Record(b"x")]),
                "Log.cancel": lambda: self.log.cancel(self.pending.base_offset),
                "Log.reschedule": lambda: self.log.reschedule(self.pending.base_offset, T0),
                "Log.commit": lambda: self.log.commit("g", DeliveryKey(T0, 1)),
                "Log.compact": self.log.compact,
                "Log.metrics": self.log.metrics,
            })
        else:
            calls.update({
                "Topic.send": lambda: self.topic.send([Record(b"x")], key=KEY_OF[0]),
                "Topic.cancel": lambda: self.topic.cancel(0, 0),
                "Topic.reschedule": lambda: self.topic.reschedule(0, 0, T0),
                "partition append": lambda: self.topic.partition(0).append([Record(b"x")]),
            })
        return calls

    def close(self) -> None:
        self.q.close()
        for thing in (self.log, self.topic, self.dead):
            thing.close()


    def closed_dirs(self) -> list[str]:
        names = {"log": ["solo"], "topic": ["t-0", "t-1"], "partition 0": ["t-0"]}
        return [os.path.join(self.root, n) for n in names[self.closing]]


def closed_files(s: Setup) -> dict[str, dict[str, bytes]]:
    return {d: files_under(d) for d in s.closed_dirs()}


@pytest.mark.parametrize("closing", ["log", "topic", "partition 0"])
def test_every_writing_call_is_refused_and_writes_nothing(tmp_path, closing: str) -> None:
    """Each call on each client attached to the closed Log(s) raises LogClosedError and
    changes no file of theirs (with only partition 0 closed, a poll may acquire from the
    open partition 1 before partition 0 refuses)."""
    s = Setup(str(tmp_path), closing)
    try:
        before = closed_files(s)
        wrong = {}
        for name, call in s.calls().items():
            if closing == "partition 0" and name in ("Topic.send", "Topic.cancel",
                                                     "Topic.reschedule"):
                continue  # the Topic is open: its partition 0 refuses (below)
            try:
                call()
                wrong[name] = "accepted"
            except LogClosedError:
                pass
            except KdelayError as e:
                wrong[name] = f"{type(e).__name__}: {e}"
            if closed_files(s) != before:
                wrong[name] = "wrote"
                before = closed_files(s)
        assert not wrong, wrong
        s.q.close()  # quiet: the group closed with its Log
        assert closed_files(s) == before
    finally:
        s.close()


def test_a_closed_partition_leaves_the_other_one_working(tmp_path) -> None:
    """With partition 0 closed, records held from partition 1 are still settled and a send
    keyed to partition 1 goes through; a poll, which would read partition 0, is refused."""
    s = Setup(str(tmp_path), "partition 0")
    try:
        with pytest.raises(LogClosedError):
            s.topic.send([Record(b"x")], key=KEY_OF[0])
        assert s.topic.send([Record(b"x")], key=KEY_OF[1])[0] == 1
        assert s.held_elsewhere
        s.q.ack(s.held_elsewhere)
        with pytest.raises(LogClosedError):
            s.q.poll(100)
    finally:
        s.close()


def test_a_closed_dead_letter_log_refuses_the_reject(tmp_path) -> None:
    """The dead-letter copy is appended before the reject is journaled: refused, the record
    stays held and the group's files do not change."""
    with Log.open(tmp_path / "p", clock=lambda: T0) as log:
        fill(log, 3)
        dead = Log.open(tmp_path / "dead", clock=lambda: T0)
        q = QueueConsumer(log, "g", dead_letter=dead)
        recs = q.poll(3)
        dead.close()
        before = files_under(str(tmp_path))
        with pytest.raises(LogClosedError):
            q.reject(recs)
        assert files_under(str(tmp_path)) == before
        q.ack(recs)  # still held by q
        q.close()


def test_close_during_acks_leaves_no_write_after_it(tmp_path) -> None:
    """A thread settles records while another closes the Log: every call after close is
    refused, no byte of the group's files changes once close has returned, and the group
    reopens with every ack that returned."""
    p = tmp_path / "p"
    log = Log.open(p, clock=lambda: T0)
    fill(log, 400)
    q = QueueConsumer(log, "g")
    acked: list[int] = []
    refused: list[Exception] = []
    started = threading.Event()

    def worker() -> None:
        try:
            while True:
                recs = q.poll(2)
                started.set()
                q.ack(recs)
                acked.extend(r.offset for r in recs)
        except KdelayError as e:
            refused.append(e)

    t = threading.Thread(target=worker)
    t.start()
    started.wait(10)
    log.close()
    files = files_under(str(p))
    t.join(10)
    assert refused and isinstance(refused[0], LogClosedError), refused
    assert files_under(str(p)) == files
    with Log.open(p, clock=lambda: T0) as log:
        again = QueueConsumer(log, "g")
        left = [r.offset for r in again.poll(1000)]
        assert not set(left) & set(acked)
        assert sorted(set(left) | set(acked)) == list(range(400))
        again.close()


@pytest.mark.parametrize("wrote_before", [False, True])
def test_a_closed_state_store_never_writes(tmp_path, wrote_before: bool) -> None:
    """The queue group's state store after close: append, compaction and sync are refused,
    and a store that had not written yet does not create its files."""
    path = str(tmp_path)
    store = StateStore(path, "g")
    store.open()
    lsn = 0
    if wrote_before:
        lsn = store.append([(ACK, state_store.offsets_payload([1]))], sync=False)
    store.close()
    before = files_under(path)
    for call in (lambda: store.append([(ACK, state_store.offsets_payload([2]))], sync=False),
                 lambda: store.compact(None, 0, 0, []),
                 lambda: store.sync_to(lsn + 1)):
        with pytest.raises(LogClosedError):
            call()
    assert files_under(path) == before
    assert os.path.exists(state_store.paths(path, "g")[1]) == wrote_before
