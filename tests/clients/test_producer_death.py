"""A Producer whose sender thread dies (issue 31, point 7): whatever it dies of, nothing
waits for it forever. The records it held fail with a KdelayError that says why, and so
does every later call: send, flush, close (a flush already waiting wakes and raises).
Deterministic: each death is staged with events, never with sleeps."""

from __future__ import annotations

import sys
import threading

import pytest

from kdelay import KdelayError, Log, LogConfig, Producer, Record
from kdelay.clients import producer as producer_module

# the dying sender re-raises what killed it, for threading.excepthook to report: expected
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


def _dead(producer: Producer) -> None:
    producer._thread.join(timeout=60)
    assert not producer._thread.is_alive()


def _every_call_says(producer: Producer, why: str) -> None:
    for call in (lambda: producer.send(b"later"), producer.flush, producer.close,
                 lambda: producer.send(b"later", key=b"k")):
        with pytest.raises(KdelayError, match=why):
            call()


def test_a_callback_that_exits_kills_the_sender_and_nothing_hangs(tmp_path) -> None:
    """The issue's case: a done-callback calls sys.exit() (a BaseException, which ends the
    thread). Records sent while it ran fail; a flush waiting meanwhile raises; every later
    call raises; the record whose callback it was is appended."""
    log = Log.open(tmp_path / "p", config=LogConfig(flush_messages=1))
    producer = Producer(log, linger_ms=0)
    in_callback, go = threading.Event(), threading.Event()

    def exit_from_callback(_future) -> None:
        in_callback.set()
        go.wait(60)
        sys.exit(3)

    first = producer.send(b"first")
    first.add_done_callback(exit_from_callback)
    assert in_callback.wait(60)  # the sender is inside the callback now
    stranded = [producer.send(b"s%d" % i) for i in range(5)]
    flushed: list[BaseException | None] = []
    flusher = threading.Thread(target=lambda: flushed.append(_raised(producer.flush)))
    flusher.start()
    go.set()
    _dead(producer)
    flusher.join(60)
    assert not flusher.is_alive()
    assert isinstance(flushed[0], KdelayError) and "SystemExit" in str(flushed[0])
    assert first.result(timeout=5).offset == 0
    for f in stranded:
        error = f.exception(timeout=5)
        assert isinstance(error, KdelayError) and "died of SystemExit" in str(error)
        assert "never appended" in str(error)
    _every_call_says(producer, "sender thread died of SystemExit")
    assert [r.value for r in log.read(0)] == [b"first"]
    log.append([Record(b"the log is fine")])
    log.close()


def test_a_death_outside_the_callbacks_fails_the_batch_it_held(tmp_path, monkeypatch) -> None:
    """Any other death (here a MemoryError while resolving a batch it has appended): the
    batch it held fails saying it may have been appended, the records waiting behind it
    fail as never appended, and every later call says why."""
    log = Log.open(tmp_path / "p")
    started, go = threading.Event(), threading.Event()
    real_resolve = producer_module.resolve

    def dying_resolve(*args) -> None:
        started.set()
        go.wait(60)
        raise MemoryError("no room for the metadata")

    monkeypatch.setattr(producer_module, "resolve", dying_resolve)
    producer = Producer(log, linger_ms=0)
    held = producer.send(b"held")
    assert started.wait(60)
    behind = producer.send(b"behind")
    go.set()
    _dead(producer)
    monkeypatch.setattr(producer_module, "resolve", real_resolve)
    error = held.exception(timeout=5)
    assert isinstance(error, KdelayError) and "may or may not have been appended" in str(error)
    assert isinstance(error.__cause__, MemoryError)
    assert "never appended" in str(behind.exception(timeout=5))
    _every_call_says(producer, "died of MemoryError: no room for the metadata")
    assert [r.value for r in log.read(0)] == [b"held"]  # it was, in fact
    log.close()


def test_a_send_blocked_on_a_full_buffer_wakes_when_the_sender_dies(tmp_path) -> None:
    """Back-pressure waits for the sender to make room: its death must end the wait."""
    log = Log.open(tmp_path / "p")
    in_callback, go = threading.Event(), threading.Event()
    producer = Producer(log, linger_ms=600_000, buffer_records=2)

    def stall_then_die(_future) -> None:
        in_callback.set()
        go.wait(60)
        raise KeyboardInterrupt

    producer.send(b"a").add_done_callback(stall_then_die)
    producer.send(b"b")
    blocked: list[BaseException | None] = []

    def send_over_the_buffer() -> None:
        blocked.append(_raised(lambda: producer.send(b"c")))

    # the third send seals the open batch and waits for room; the sender appends it and
    # stalls in the callback, so the room never comes
    sender = threading.Thread(target=send_over_the_buffer)
    sender.start()
    assert in_callback.wait(60)
    go.set()
    _dead(producer)
    sender.join(60)
    assert not sender.is_alive()
    assert isinstance(blocked[0], KdelayError) and "KeyboardInterrupt" in str(blocked[0])
    log.close()


def test_every_callback_runs_though_one_exits(tmp_path) -> None:
    """A BaseException from one future's callback no longer skips the other futures'
    callbacks of the batch: each runs, then the sender dies of the first."""
    log = Log.open(tmp_path / "p")
    producer = Producer(log, linger_ms=600_000)
    ran = []
    futures = [producer.send(b"r%d" % i) for i in range(4)]
    for i, f in enumerate(futures):
        f.add_done_callback(lambda _f, i=i: ran.append(i) or (i == 1 and sys.exit(1)))
    with pytest.raises(KdelayError, match="SystemExit"):
        producer.flush()
    _dead(producer)
    assert ran == [0, 1, 2, 3]
    assert [f.result(timeout=5).offset for f in futures] == [0, 1, 2, 3]
    log.close()


def test_a_producer_on_a_closed_log_is_refused(tmp_path) -> None:
    """Every batch would fail: refused when it is made instead (the fork sweep's rule)."""
    log = Log.open(tmp_path / "p")
    log.close()
    with pytest.raises(KdelayError, match="closed"):
        Producer(log)


def _raised(call) -> BaseException | None:
    try:
        call()
    except BaseException as e:  # noqa: BLE001 - what the call raised is the result
        return e
    return None
