"""A new due-order view's file before its first sync (`delivery-offsets.view.pending`,
view_file.py): the first look at a partition writes it without an fsync; its first sync
publishes it under its own name; after a crash before that sync it is used where it reads
soundly (even once retention has removed records it numbered: they stay gaps) and numbered
again from 0 where a power loss garbled it; a real broker killed with kill -9 before any
sync serves every record at the delivery offset it had. (The crash-point injector over the
whole write path, the pending file's creation and rename included, is
test_view_crashes.py's.)"""

from __future__ import annotations

import os
import signal

import pytest
from produce_support import broker_process, stop
from view_support import T0, FakeClock, decode_served, numbering, segmented_log
from wire_support import connect, fetch

from kdelay import Log, LogConfig, Record, Topic
from kdelay.broker.delivery_view import DeliveryView
from kdelay.broker.view_file import HEADER_SIZE, PENDING_SUFFIX, VIEW_FILE
from kdelay.testing.faults import FaultInjector, SimulatedCrash, close_abandoned
from kdelay.tools.cli import main as cli_main

RETENTION = LogConfig(retention_ms=1000, compaction_min_ratio=0)


def _log_of_segments(path: str, config: LogConfig, clock: FakeClock) -> Log:
    """segmented_log with record 4 cancelled; the clock then moved on 5 s (all due)."""
    log = segmented_log(path, config, clock, [4])
    clock.advance(5000)
    return log


@pytest.mark.parametrize("config", [LogConfig(), LogConfig(flush_messages=1)],
                         ids=["no flush policy", "flush.messages=1"])
def test_a_first_look_makes_no_fsync_and_the_first_sync_publishes_the_file(tmp_path, config):
    path = os.fspath(tmp_path / "t-0")
    clock = FakeClock(T0)
    log = _log_of_segments(path, config, clock)
    view_path = os.path.join(path, VIEW_FILE)
    try:
        with FaultInjector(roots=[path]) as faults:
            view = DeliveryView.open(log)
            view.extend()
            served = bytes(view.read(0, 1 << 20))
        assert len(decode_served(served)) == 35  # 36 records, one cancelled
        ops = {op for op, _ in faults.ops}
        if config.flush_messages is None:
            # the first look: the pending file created and written, nothing fsync'd
            assert ops == {"create", "write"}
            assert {p for _, p in faults.ops} == {view_path + PENDING_SUFFIX}
            assert not os.path.exists(view_path)
            with FaultInjector(roots=[path]) as faults:
                view.sync()
            ops = {op for op, _ in faults.ops}
        # the first sync (here, a flush policy's) publishes it: fsync'd, renamed, the
        # directory fsync'd
        assert {"fsync", "rename", "fsync_dir"} <= ops
        assert ("rename", view_path) in faults.ops
        assert os.path.exists(view_path) and not os.path.exists(view_path + PENDING_SUFFIX)
        before = numbering(view)
        view.close()
        view = DeliveryView.open(log)
        assert numbering(view) == before
        view.close()
    finally:
        log.close()
    assert cli_main(["verify", path]) == 0


def _crashed_before_the_first_sync(path: str, clock: FakeClock) -> dict[int, int]:
    """A view numbered what is due, then the machine died (kill -9: the page cache
    survives) as it numbered one more record; returns the numbering it had. The view's
    file is left pending."""
    log = _log_of_segments(path, RETENTION, clock)
    view = DeliveryView.open(log)
    view.extend()
    numbered = numbering(view)
    log.append([Record(b"late")])
    log.flush()
    with FaultInjector(roots=[path], crash_at=0) as faults, pytest.raises(SimulatedCrash):
        view.extend()  # its write: the crash point
    view.close()  # (what a dead process leaves: its write failed, so no sync is tried)
    close_abandoned(log)
    faults.apply_crash("process")
    assert os.path.exists(os.path.join(path, VIEW_FILE + PENDING_SUFFIX))
    assert not os.path.exists(os.path.join(path, VIEW_FILE))
    return numbered


def test_a_pending_file_is_used_even_after_retention_removed_records(tmp_path) -> None:
    """Retention ran between the crash and the view's next open (no view open to sync
    first): the pending file's numbers are kept, the removed records leaving gaps;
    numbering again from 0 would have given the records still there other offsets."""
    path = os.fspath(tmp_path / "t-0")
    clock = FakeClock(T0)
    numbered = _crashed_before_the_first_sync(path, clock)
    clock.advance(2000)
    log = Log.open(path, config=RETENTION, clock=clock)
    try:
        assert log.enforce_retention() > 0
        held = {r.offset for r in log.read(0, max_records=1000)}
        view = DeliveryView.open(log)
        view.extend()
        got = {off: n for off, n in numbering(view).items() if off in held}
        assert {off: n for off, n in numbered.items() if off in held}.items() <= got.items()
        assert min(got.values()) > 0  # the first record left keeps its number, not 0
        assert view.log_start == min(got.values())
        view.close()
    finally:
        log.close()
    assert cli_main(["verify", path]) == 0


@pytest.mark.parametrize("garbled", ["empty", "half a header", "bad header"])
def test_a_pending_file_a_power_loss_garbled_is_numbered_again(tmp_path, capsys, garbled):
    """A pending file was never fsync'd: a power loss may leave it anything. One whose
    header is not sound is dropped and the log numbered again from 0, which gives what it
    held (no record it numbered was removed while the broker ran: removals sync the open
    views first)."""
    path = os.fspath(tmp_path / "t-0")
    clock = FakeClock(T0)
    numbered = _crashed_before_the_first_sync(path, clock)
    pending = os.path.join(path, VIEW_FILE + PENDING_SUFFIX)
    with open(pending, "r+b") as f:
        if garbled == "empty":
            f.truncate(0)
        elif garbled == "half a header":
            f.truncate(HEADER_SIZE // 2)
        else:
            f.write(b"\0" * HEADER_SIZE)  # the header's block never written back
    capsys.readouterr()
    assert cli_main(["verify", path]) == 0  # information, not a problem
    assert "never synced" in capsys.readouterr().out
    log = Log.open(path, config=RETENTION, clock=clock)
    try:
        view = DeliveryView.open(log)
        view.extend()
        got = numbering(view)
        assert numbered.items() <= got.items() and len(got) == len(numbered) + 1
        view.close()
    finally:
        log.close()
    assert os.path.exists(os.path.join(path, VIEW_FILE)) and not os.path.exists(pending)


def test_kill_9_before_the_first_sync_keeps_every_delivery_offset(tmp_path) -> None:
    """A real broker numbers a partition (its view pending: nothing fsync'd) and is killed
    with kill -9; the next one serves every record at the same delivery offset, and its
    clean stop publishes the file."""
    root = os.fspath(tmp_path)
    with Topic.open(root, "k", partitions=1) as t:
        log = t.partition(0)
        log.append([Record(b"first-%d" % i) for i in range(3)])
        log.append([Record(b"later-%d" % i) for i in range(3)])
    view_path = os.path.join(root, "k-0", VIEW_FILE)

    def served(address: str, topic_id) -> list:
        conn = connect(address, topic_id)
        with conn.sock:
            part = fetch(conn, 12, [("k", [(0, 0, 1 << 20)])]).responses[0].partitions[0]
            return [(o, v) for _, o, _, v, *_ in decode_served(part.records)]

    with broker_process(root) as (proc, address):
        first = served(address, None)
        assert stop(proc, signal.SIGKILL) == -signal.SIGKILL
    assert first == [(0, b"first-0"), (1, b"first-1"), (2, b"first-2"), (3, b"later-0"),
                     (4, b"later-1"), (5, b"later-2")]
    assert os.path.exists(view_path + PENDING_SUFFIX) and not os.path.exists(view_path)
    with broker_process(root) as (proc, address):
        assert served(address, None) == first
        assert stop(proc, signal.SIGTERM) == 0
    assert os.path.exists(view_path) and not os.path.exists(view_path + PENDING_SUFFIX)
    assert cli_main(["verify", os.path.join(root, "k-0")]) == 0


def test_a_topic_reopened_with_new_configs_publishes_its_pending_views(tmp_path) -> None:
    """A config change reopens the topic (its logs closed first, then its views let go):
    the pending view is synced under its own name on the way, and the reopened topic
    serves every record at the same delivery offset."""
    import asyncio

    from kdelay import Broker

    root = os.fspath(tmp_path)
    with Topic.open(root, "a", partitions=1) as t:
        t.partition(0).append([Record(b"v%d" % i) for i in range(5)])
    view_path = os.path.join(root, "a-0", VIEW_FILE)
    with Broker(root, listen="127.0.0.1:0") as b:
        conn = connect(b.bootstrap_servers, None)
        with conn.sock:
            def served() -> list:
                part = fetch(conn, 12, [("a", [(0, 0, 1 << 20)])]).responses[0].partitions[0]
                return [(o, v) for _, o, _, v, *_ in decode_served(part.records)]

            first = served()
            assert first == [(i, b"v%d" % i) for i in range(5)]
            assert os.path.exists(view_path + PENDING_SUFFIX)

            async def alter() -> None:
                b._server.state.topics.alter("a", {"retention.ms": "3600000"})

            asyncio.run_coroutine_threadsafe(alter(), b._loop).result(30)
            assert os.path.exists(view_path) and not os.path.exists(view_path + PENDING_SUFFIX)
            assert served() == first
