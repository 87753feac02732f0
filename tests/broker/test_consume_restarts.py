"""Delivery offsets across restarts of a real broker process: a consumer reads part of a
delayed topic as its records come due, the broker is stopped (SIGTERM: exit 0) or killed
(kill -9) and started again, and the consumer continues at the next delivery offset: every
record once, in due order, none early, and a reader from 0 afterwards finds every record at
the delivery offset it had before."""

from __future__ import annotations

import os
import signal

from consume_support import (
    broker_process,
    check_delivered,
    due_records,
    read_kafka_python,
    stop,
    wall_ms,
)

from kdelay import Topic

N = 30


def test_restart_and_kill_continue_at_the_same_delivery_offsets(tmp_path) -> None:
    root = os.fspath(tmp_path)
    with Topic.open(root, "r", partitions=1) as topic:
        expected = due_records(topic, 0, N, start_ms=wall_ms() + 300, spread_ms=2400,
                               tag="r")
    got = []
    with broker_process(root) as (proc, address):
        got += read_kafka_python(address, "r", 0, 10)
        assert stop(proc, signal.SIGTERM) == 0
    with broker_process(root) as (proc, address):
        got += read_kafka_python(address, "r", 10, 10)
        assert stop(proc, signal.SIGKILL) == -signal.SIGKILL
    with broker_process(root) as (proc, address):
        got += read_kafka_python(address, "r", 20, N - 20)
        check_delivered(got, expected)
        again = read_kafka_python(address, "r", 0, N)
        assert [(g.offset, g.value) for g in again] == [(g.offset, g.value) for g in got]
        assert stop(proc, signal.SIGTERM) == 0
