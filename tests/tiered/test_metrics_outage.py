"""Metrics during a store outage: after a restore (remote-only segments whose indexes were
never fetched), `Log.metrics()` (its counts, its consumer groups' lag, its queue groups'
counts) and `Topic.metrics()` never raise for an unreachable store: they report it, in
`metrics()["remote"]` (`last_error`, and `segments_uncounted`: the remote segments whose
counts are left out), and count everything they can reach. Once the store is back, the
counts are whole again. One failed index fetch per call at most: the other uncached
remote segments are not tried (a store that times out would make metrics take that long
per segment)."""

from __future__ import annotations

import os

import pytest

from kdelay import Log, QueueConsumer, Topic
from kdelay.testing.store_faults import StoreFaults
from kdelay.testing.tiering import tiered_history

CONFIG = dict(segment_bytes=1024, index_interval_bytes=128)


@pytest.fixture
def restored(tmp_path, file_remote, clock):
    directory = os.fspath(tmp_path / "p-0")
    config = file_remote.config(**CONFIG)
    history = tiered_history(directory, config, clock, 30)
    clock.advance(10**6)
    return directory, config, history


def test_metrics_report_an_outage_instead_of_raising(restored, clock):
    directory, config, history = restored
    with Log.open(directory, config=config, clock=clock) as log:
        log.commit("g", None)
        remote_only = log.segments[:-1]
        with StoreFaults(unreachable=True) as faults:
            m = log.metrics()
        tried = [name for op, name in faults.ops if op == "get"]
        assert len(tried) <= 1, tried  # one failure, then no other segment is tried
        assert m["remote"]["last_error"] and "unreachable" in m["remote"]["last_error"]
        assert m["remote"]["segments_uncounted"] == len(remote_only)
        local = len(history.local)
        assert m["records"] == local and m["groups"]["g"]["lag"] <= local
        whole = log.metrics()  # the store is back: every segment counted
        assert whole["remote"]["segments_uncounted"] == 0
        assert whole["records"] == history.end + local


def test_queue_counts_and_topic_metrics_survive_an_outage(tmp_path, file_remote, clock):
    root = os.fspath(tmp_path / "root")
    config = file_remote.config(**CONFIG)
    with Topic.open(root, "t", partitions=1, clock=clock) as topic:
        directory = topic.partition(0).path
    tiered_history(directory, config, clock, 30)
    clock.advance(10**6)
    with Topic.open(root, "t", config=config, clock=clock) as topic:
        consumer = QueueConsumer(topic.partition(0), "workers")
        try:
            with StoreFaults(unreachable=True):
                m = topic.metrics()
                counts = topic.partition(0).metrics()["queues"]["workers"]
            assert m["remote"]["segments_uncounted"] >= 1
            assert "error" not in counts
        finally:
            consumer.close()
