"""The broker runs retention by itself every log.retention.check.interval.ms: segments whose
records have all been due for longer than retention.ms go without anyone calling
enforce_retention. (A deadline is an upper bound for the pass to come, never a measure.)"""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode
from produce_support import TIMEOUT_S, RawClient, partition_answer, produce_request, v2_batch

from kdelay import Broker


def test_retention_runs_on_its_interval(tmp_path):
    with Broker(tmp_path, listen="127.0.0.1:0",
                config={"log.retention.check.interval.ms": "100"}) as broker:
        registry = broker._server.state.topics
        registry.create("old", 1, {"retention.ms": "1", "segment.bytes": "200"})
        with RawClient(broker.bootstrap_servers) as c:
            for _ in range(6):  # each batch fills a segment: five sealed ones
                answer = partition_answer(c.request(0, 9, produce_request(
                    9, "old", 0, v2_batch([b"x" * 150]))))
                assert answer.error_code == ErrorCode.none
        log = registry.get("old").partition(0)
        assert log.log_end_offset == 6
        deadline = time.monotonic() + TIMEOUT_S
        while log.segments != [5] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert log.segments == [5]  # every sealed segment gone, the active one kept
        assert [r.offset for r in log.read(0)] == [5]
