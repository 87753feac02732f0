"""Forked children (issue 26, point 1): a Log, and everything attached to it, belongs to
the process that opened it.

In a child forked from a process with open logs (gunicorn --preload, Celery prefork,
multiprocessing with fork), every call of the parent's Log, Topic, Consumer and
QueueConsumer raises ForkedProcessError saying why, and nothing reaches the files; close
in the child touches nothing, and does not release the parent's lock. The parent goes on
as before, closes cleanly, and `kdelay verify` finds the directories healthy. Once the
parent has closed a log, the child may open its own. All with real child processes.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading

import pytest
from conftest import T0, FakeClock

from kdelay import (
    Consumer,
    DeliveryKey,
    ForkedProcessError,
    KdelayError,
    Log,
    LogClosedError,
    LogConfig,
    LogLockedError,
    Producer,
    QueueConsumer,
    Record,
    Topic,
)
from kdelay.forks import Ownership
from kdelay.testing.checks import files_under


def in_child(fn, timeout_s: int = 20) -> object:
    """Run `fn()` in a child made by os.fork() and return what it returned (JSON through a
    pipe). The child ends with os._exit, running none of the parent's cleanup; an alarm
    ends a child that hangs (a refused call must never deadlock)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.close(r)
            signal.alarm(timeout_s)
            try:
                data = json.dumps({"result": fn()}).encode()
            except BaseException as e:
                data = json.dumps({"crashed": f"{type(e).__name__}: {e}"}).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
        finally:
            os._exit(0)
    os.close(w)
    chunks = []
    with os.fdopen(r, "rb") as f:
        chunks.append(f.read())
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"child died: status {status}"
    out = json.loads(b"".join(chunks) or b'{"crashed": "no answer (hung?)"}')
    assert "crashed" not in out, out["crashed"]
    return out["result"]


def outcome(call) -> str:
    """What a call did, as a word: the class of the error it raised, or "returned"."""
    try:
        call()
    except KdelayError as e:
        if isinstance(e, ForkedProcessError):
            assert f"opened by process {os.getppid()}" in str(e), str(e)
        return type(e).__name__
    except Exception as e:
        return f"escaped {type(e).__name__}: {e}"
    return "returned"


def verify_healthy(path: str) -> None:
    r = subprocess.run([sys.executable, "-m", "kdelay", "verify", path],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


class Opened:
    """A parent with one of everything open, each mid-use: a Log with a pending record,
    a Topic, a Consumer that polled, and QueueConsumers holding records."""

    def __init__(self, root: str, config: LogConfig | None = None):
        self.root = root
        self.clock = FakeClock()
        self.log = Log.open(os.path.join(root, "solo"), config=config, clock=self.clock)
        self.log.append([Record(b"a"), Record(b"b")])
        self.pending = self.log.append([Record(b"later")], deliver_after=T0 + 10**6)
        self.topic = Topic.open(root, "t", partitions=2, config=config, clock=self.clock)
        for i in range(6):
            self.topic.send([Record(b"t%d" % i, key=b"k%d" % i)])
        self.consumer = Consumer(self.log, "g")
        self.polled = self.consumer.poll(max_records=1)
        self.queue = QueueConsumer(self.topic, "work")
        self.held = self.queue.poll(max_records=4)
        self.log_queue = QueueConsumer(self.log, "wq")
        self.log_held = self.log_queue.poll(max_records=1)
        assert self.polled and len(self.held) == 4 and self.log_held

    def calls(self) -> dict:
        """Every call a child might make, of every object opened here."""
        log, topic, q = self.log, self.topic, self.queue
        p = self.pending.base_offset
        return {
            "Log.append": lambda: log.append([Record(b"child")]),
            "Log.append_columns": lambda: log.append_columns([b"child"]),
            "Log.fetch": lambda: log.fetch(None),
            "Log.fetch waiting": lambda: log.fetch(DeliveryKey(T0 * 2, 0), max_wait_ms=50),
            "Log.read": lambda: log.read(0),
            "Log.cancel": lambda: log.cancel(p),
            "Log.reschedule": lambda: log.reschedule(p, T0 + 5),
            "Log.commit": lambda: log.commit("g", DeliveryKey(T0, 0)),
            "Log.committed": lambda: log.committed("g"),
            "Log.roll": log.roll,
            "Log.flush": log.flush,
            "Log.compact": log.compact,
            "Log.enforce_retention": log.enforce_retention,
            "Log.metrics": log.metrics,
            "Topic.send": lambda: topic.send([Record(b"child")]),
            "Topic.cancel": lambda: topic.cancel(0, 0),
            "Topic.reschedule": lambda: topic.reschedule(0, 0, T0 + 5),
            "Topic partition append": lambda: topic.partition(1).append([Record(b"c")]),
            "Consumer.poll": self.consumer.poll,
            "Consumer.commit": self.consumer.commit,
            "Consumer.retry": lambda: self.consumer.retry(self.polled[0]),
            "new Consumer": lambda: Consumer(topic, "g2"),
            "QueueConsumer.poll": q.poll,
            "QueueConsumer.poll waiting": lambda: q.poll(timeout_ms=50),
            "QueueConsumer.ack": lambda: q.ack(self.held[:1]),
            "QueueConsumer.release": lambda: q.release(self.held[1:2], delay_ms=5),
            "QueueConsumer.reject": lambda: q.reject(self.held[2:3]),
            "QueueConsumer.renew": lambda: q.renew(self.held[3:]),
            "QueueConsumer.ack on a Log": lambda: self.log_queue.ack(self.log_held),
            "new QueueConsumer": lambda: QueueConsumer(self.log, "x"),
            # last: closing must not release anything of the parent's
            "QueueConsumer.close": q.close,
            "Log.close": log.close,
            "Topic.close": topic.close,
        }

    def close(self) -> None:
        self.queue.close()
        self.log_queue.close()
        self.log.close()
        self.topic.close()


def test_every_call_in_a_forked_child_is_refused(tmp_path) -> None:
    root = str(tmp_path)
    o = Opened(root)
    before = files_under(root)

    def child() -> dict:
        return {name: outcome(call) for name, call in o.calls().items()}

    got = in_child(child)
    wrong = {name: what for name, what in got.items() if what != "ForkedProcessError"}
    assert not wrong, f"not refused in the child: {wrong}"
    assert files_under(root) == before, "the child changed a file"
    # the parent is unaffected: it goes on where it was, then closes cleanly
    o.queue.ack(o.held)
    o.log_queue.release(o.log_held)
    o.consumer.commit()
    assert o.log.append([Record(b"parent")]).base_offset == 3
    assert o.log.cancel(o.pending.base_offset) == 1
    o.topic.send([Record(b"parent")])
    o.close()
    for part in ("solo", "t-0", "t-1"):
        verify_healthy(os.path.join(root, part))
    with Log.open(os.path.join(root, "solo"), clock=FakeClock()) as log:
        assert [r.value for r in log.read(0)] == [b"a", b"b", b"later", b"parent"]
        assert log.committed("g") == o.polled[0].delivery_key


def test_two_children_appending_write_nothing(tmp_path) -> None:
    """The issue's case: two children each sending through the parent's Topic. Both are
    refused from the first send on; the parent's later appends, clean close and reopen
    see only its own records, and verify finds the topic healthy."""
    root = str(tmp_path)
    topic = Topic.open(root, "t", partitions=2, config=LogConfig(flush_messages=1))
    topic.send([Record(b"before", key=b"k")])
    before = files_under(root)

    def child() -> dict:
        outcomes: dict[str, int] = {}
        for i in range(300):
            what = outcome(lambda i=i: topic.send([Record(b"child %d" % i, key=b"k%d" % i)]))
            outcomes[what] = outcomes.get(what, 0) + 1
        return outcomes

    for _ in range(2):
        assert in_child(child) == {"ForkedProcessError": 300}
    assert files_under(root) == before
    for i in range(50):
        topic.send([Record(b"parent %d" % i, key=b"k%d" % i)])
    topic.close()
    verify_healthy(root)
    with Topic.open(root, "t") as topic:
        values = [r.value for log in topic.logs for r in log.read(0, max_records=1000)]
        assert sorted(values) == sorted([b"before"] + [b"parent %d" % i for i in range(50)])
        assert all(log.load_report.clean for log in topic.logs)


def test_the_parent_keeps_its_lock_and_the_child_may_open_after_it(tmp_path) -> None:
    """The child's copy of the lock's descriptor is closed at the fork without releasing
    the lock, and its close of the parent's Log is refused: the parent still holds the
    lock, so the child's own open is refused, and so is a second open in the parent. Once
    the parent has closed the log, the child opens it, appends and closes."""
    path = str(tmp_path / "p")
    log = Log.open(path)
    log.append([Record(b"parent")])
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()

    def child() -> list:
        out = [outcome(log.close), outcome(lambda: Log.open(path))]
        os.write(ready_w, b"x")
        os.read(go_r, 1)  # the parent has closed the log
        with Log.open(path) as own:
            own.append([Record(b"child")])
            out.append(own.load_report.clean)
        return out

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(w, json.dumps(child()).encode())
        finally:
            os._exit(0)
    os.close(w)
    os.read(ready_r, 1)
    with pytest.raises(LogLockedError):  # nothing the child did freed the lock
        Log.open(path)
    log.close()
    os.write(go_w, b"x")
    with os.fdopen(r, "rb") as f:
        got = json.loads(f.read() or b"null")
    os.waitpid(pid, 0)
    assert got == ["ForkedProcessError", "LogLockedError", True]
    with Log.open(path) as log:
        assert [r.value for r in log.read(0)] == [b"parent", b"child"]


def test_locks_held_by_parent_threads_do_not_hang_the_child(tmp_path) -> None:
    """A parent thread inside the log (flusher, another request) holds its locks at the
    fork, and no thread of the child ever releases them: the child is refused at once."""
    o = Opened(str(tmp_path), config=LogConfig(flush_ms=5))
    holding, done = threading.Event(), threading.Event()
    part = o.queue._parts[0]

    def hold() -> None:
        with o.log._lock, o.topic.partition(0)._lock, part.lock, part.store._sync_lock:
            holding.set()
            done.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    holding.wait(10)
    try:
        got = in_child(lambda: {name: outcome(call) for name, call in o.calls().items()},
                       timeout_s=10)
    finally:
        done.set()
        t.join()
    assert set(got.values()) == {"ForkedProcessError"}, got
    o.close()


def test_a_child_opens_logs_of_its_own(tmp_path) -> None:
    """Only what the parent opened is refused: a Log the child opens works as usual, and
    forks of the child refuse it in turn."""
    with Log.open(tmp_path / "parent"):
        def child() -> list:
            with Log.open(tmp_path / "child") as own:
                own.append([Record(b"x")])
                grandchild = in_child(lambda: outcome(lambda: own.append([Record(b"y")])))
                return [[r.value.decode() for r in own.read(0)], grandchild]

        assert in_child(child) == [["x"], "ForkedProcessError"]


def test_a_producer_in_a_forked_child_refuses_and_its_futures_fail(tmp_path) -> None:
    """The issue's gunicorn --preload case (issue 31, point 6): a Producer made before the
    fork. In the child, send, flush and close raise ForkedProcessError (they used to return
    a future that never resolved, and hang), a Producer made there on the parent's Log or
    Topic is refused too, and a future the parent's copy held at the fork fails at once
    (the parent appends that record). The parent's producer goes on and closes cleanly."""
    log = Log.open(tmp_path / "solo", config=LogConfig(flush_messages=1))
    topic = Topic.open(tmp_path, "t", partitions=2)
    producer = Producer(log, linger_ms=600_000)  # records wait in open batches at the fork
    on_topic = Producer(topic, linger_ms=600_000)
    called = []
    held = producer.send(b"before")
    held.add_done_callback(lambda f: called.append(os.getpid()))
    held_on_topic = on_topic.send(b"before", key=b"k")

    def child() -> dict:
        out = {
            "send": outcome(lambda: producer.send(b"child")),
            "send to a topic": outcome(lambda: on_topic.send(b"child", key=b"k")),
            "flush": outcome(producer.flush),
            "new Producer on the Log": outcome(lambda: Producer(log)),
            "new Producer on the Topic": outcome(lambda: Producer(topic)),
            "close": outcome(producer.close),
            "close the topic's": outcome(on_topic.close),
            "send after close": outcome(lambda: producer.send(b"child")),
        }
        for name, future in (("held", held), ("held on the topic", held_on_topic)):
            error = future.exception(timeout=5)  # at once: no sender to wait for here
            out[name] = type(error).__name__
            assert "forked from it" in str(error), str(error)
        out["callbacks run here"] = len(called)
        return out

    got = in_child(child, timeout_s=15)
    assert got.pop("callbacks run here") == 0  # the parent's, run when its copy resolves
    wrong = {name: what for name, what in got.items() if what != "ForkedProcessError"}
    assert not wrong, f"not refused in the child: {wrong}"
    producer.flush()
    assert held.result(timeout=30).offset == 0 and called == [os.getpid()]
    after = producer.send(b"after")
    producer.flush()
    assert after.result(timeout=30).offset == 1
    on_topic.flush()
    assert held_on_topic.result(timeout=30) is not None
    producer.close()
    on_topic.close()
    log.close()
    topic.close()
    with Log.open(tmp_path / "solo") as log:
        assert [r.value for r in log.read(0)] == [b"before", b"after"]


def test_a_producer_made_in_the_child_works(tmp_path) -> None:
    """Only the parent's objects are refused: a child that opens its own Log after the
    fork makes a Producer on it and sends as usual."""
    with Log.open(tmp_path / "parent") as parent_log, Producer(parent_log) as parent:
        parent.send(b"p").result(timeout=30)

        def child() -> list:
            with Log.open(tmp_path / "child") as own, Producer(own, linger_ms=0) as p:
                offsets = [p.send(b"c%d" % i).result(timeout=30).offset for i in range(3)]
            return offsets

        assert in_child(child, timeout_s=30) == [0, 1, 2]
        assert parent.send(b"q").result(timeout=30).offset == 1


def test_store_requests_in_a_child_forked_after_one_are_refused_not_hung(tmp_path) -> None:
    """The sweep of issue 31, point 6, over what owns threads beyond kdelay's objects:
    obstore's request threads are started at the first request and a fork copies none, so
    in a child forked after one, every store request used to wait forever (a tiered Log
    made in the child, as the docs advise, hung in Log.open). Now each raises
    RemoteStorageError saying why; the parent goes on."""
    from kdelay.remote.store import RemoteStore

    store = RemoteStore.open("memory://", {}, "p-0")
    store.put("x", b"1")  # a request: obstore's threads run in this process now
    url = "file://" + str(tmp_path / "store")

    def child() -> list:
        return [outcome(lambda: store.get("x")),
                outcome(lambda: RemoteStore.open(url, {}, "p-0")),
                outcome(lambda: Log.open(tmp_path / "tiered",
                                         config=LogConfig(remote_storage=url)))]

    assert in_child(child, timeout_s=20) == ["RemoteStorageError"] * 3
    assert store.get("x") == b"1"


def test_a_child_forked_before_any_store_request_may_use_a_store(tmp_path) -> None:
    """The refusal is for children forked after a request only (a fresh interpreter: this
    one has made requests)."""
    script = f"""
import os, sys
from kdelay import Log, LogConfig, Record
pid = os.fork()
if pid == 0:
    with Log.open({str(tmp_path / 'p')!r},
                  config=LogConfig(remote_storage="file://{tmp_path}/store")) as log:
        log.append([Record(b"x")])
        log.roll()
        log.sync_remote()
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert r.returncode == 0, r.stderr[-2000:]
    assert os.listdir(tmp_path / "store")


def test_a_reader_fence_held_at_the_fork_does_not_hang_the_child(tmp_path) -> None:
    """append_horizon's reader fence is a module-level lock a lock-free reader takes for
    a moment: a parent thread holding it at the fork left it held forever in the child,
    whose own readers (the Spark stream, the live tools) then hung."""
    from kdelay.log.segments import append_horizon

    path = str(tmp_path / "p")
    with Log.open(path, clock=FakeClock()) as log:
        log.append([Record(b"x")])
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with append_horizon._READER_FENCE:
            holding.set()
            done.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    holding.wait(10)
    try:
        got = in_child(lambda: append_horizon.read_bound(path, T0) == T0 - 1, timeout_s=10)
    finally:
        done.set()
        t.join()
    assert got is True


# ---------------------------------------------------------------------- multiprocessing

_TOPIC: Topic | None = None  # what a pool worker inherits through the fork


def _send_from_worker(i: int) -> int:
    return _TOPIC.send([Record(b"worker %d" % i)])[1].base_offset


def _report_from_process(queue) -> None:
    queue.put(outcome(lambda: _TOPIC.send([Record(b"process")])))


def test_multiprocessing_fork_context(tmp_path) -> None:
    """A fork-context Pool and Process on a Topic opened before them: every worker's send
    is refused with ForkedProcessError (the parent receives the error itself from the
    pool); the topic holds only the parent's records."""
    global _TOPIC
    ctx = multiprocessing.get_context("fork")
    _TOPIC = Topic.open(tmp_path, "t", partitions=2)
    try:
        _TOPIC.send([Record(b"parent")])
        with ctx.Pool(2) as pool:
            pending = [pool.apply_async(_send_from_worker, (i,)) for i in range(4)]
            for p in pending:
                with pytest.raises(ForkedProcessError, match="forked from it"):
                    p.get(timeout=60)
        queue = ctx.Queue()
        proc = ctx.Process(target=_report_from_process, args=(queue,))
        proc.start()
        assert queue.get(timeout=60) == "ForkedProcessError"
        proc.join(60)
        _TOPIC.send([Record(b"parent again")])
    finally:
        _TOPIC.close()
        _TOPIC = None
    verify_healthy(str(tmp_path))
    with Topic.open(tmp_path, "t") as topic:
        values = sorted(r.value for log in topic.logs for r in log.read(0))
        assert values == [b"parent", b"parent again"]


# ---------------------------------------------------------------------- the rule itself


def test_ownership_refuses_by_process(monkeypatch) -> None:
    class Thing:
        def _orphaned(self) -> None:
            pass

    owner = Ownership(Thing(), "log /x")
    here = owner.refusal()
    assert type(here) is LogClosedError and str(here) == "log /x is closed"
    owner.check_close_again()  # a second close in the owner: nothing
    monkeypatch.setattr(os, "getpid", lambda: owner.pid + 1)
    there = owner.refusal()
    assert isinstance(there, ForkedProcessError) and isinstance(there, LogClosedError)
    assert f"opened by process {owner.pid}" in str(there)
    with pytest.raises(ForkedProcessError):
        owner.check_close_again()


def test_the_child_pays_nothing_per_call_in_the_parent(tmp_path) -> None:
    """The fork check is the closed flag every call tests anyway: a Log registers once and
    its hot path reads no process id (os.getpid is a system call)."""
    calls = []
    real = os.getpid
    with Log.open(tmp_path / "p") as log, pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "getpid", lambda: calls.append(1) or real())
        for _ in range(20):
            log.append([Record(b"x")])
            log.append_columns([b"y"])
            log.fetch(None)
            log.read(0)
    assert calls == []
