"""Share groups over the wire with confluent-kafka's ShareConsumer: explicit ACCEPT, RELEASE
and REJECT; the delayed release (a released record back no earlier than its backoff); the
delivery limit and the dead-letter topic with the kdelay.dlq.* headers; a member killed with
kill -9 loses its records to another after its session timeout; group configs through
IncrementalAlterConfigs; and one group state with QueueConsumer in process."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from produce_support import TIMEOUT_S, broker_process, stop

from kdelay import QueueConsumer, Record, Topic
from kdelay.testing.processes import child_env

confluent_kafka = pytest.importorskip("confluent_kafka")
if not hasattr(confluent_kafka, "ShareConsumer"):
    pytest.skip("this confluent-kafka has no ShareConsumer", allow_module_level=True)

from confluent_kafka import AcknowledgeType, ShareConsumer  # noqa: E402

FAST = ["group.share.session.timeout.ms=3000", "group.share.heartbeat.interval.ms=500"]


def share_consumer(bootstrap: str, group: str = "sg", explicit: bool = True) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit" if explicit else "implicit"})
    c.subscribe(["jobs"])
    return c


def poll_until(c: ShareConsumer, count: int, what: str) -> list:
    got: list = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {len(got)} of {count}")
        got += [m for m in c.poll(0.5) if m.error() is None]
    return got


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(TIMEOUT_S)


def fill(root: str, n: int) -> None:
    with Topic.open(root, "jobs", partitions=1) as t:
        for i in range(n):
            t.partition(0).append([Record(b"job-%d" % i)])


def test_accept_release_with_backoff_and_reject_to_the_dead_letter_topic(tmp_path):
    root = str(tmp_path / "root")
    fill(root, 3)
    with broker_process(root, *FAST) as (proc, bootstrap):
        set_group_configs(bootstrap, "sg", {
            "share.auto.offset.reset": "earliest", "share.delivery.count.limit": "3",
            "errors.deadletterqueue.topic.name": "jobs-dlq",
            "kdelay.share.release.delay.ms": "400",
            "kdelay.share.release.backoff.multiplier": "2"})
        c = share_consumer(bootstrap)
        first = poll_until(c, 3, "the three records")
        assert sorted(m.offset() for m in first) == [0, 1, 2]
        by_offset = {m.offset(): m for m in first}
        c.acknowledge(by_offset[0], AcknowledgeType.ACCEPT)
        c.acknowledge(by_offset[1], AcknowledgeType.RELEASE)
        c.acknowledge(by_offset[2], AcknowledgeType.REJECT)
        released_at = time.monotonic()  # before the broker hears of it: a lower bound
        c.commit_sync()
        again = poll_until(c, 1, "the released record")
        back_after = time.monotonic() - released_at
        assert [m.offset() for m in again] == [1]
        assert back_after >= 0.4  # never before its delay: 400 ms x 2^0
        c.acknowledge(again[0], AcknowledgeType.RELEASE)  # second delivery: 800 ms
        released_at = time.monotonic()
        c.commit_sync()
        third = poll_until(c, 1, "the record's third delivery")
        assert time.monotonic() - released_at >= 0.8
        c.acknowledge(third[0], AcknowledgeType.RELEASE)  # its last allowed delivery
        c.commit_sync()
        c.close()
        # the fourth delivery would pass the limit of 3: it is dead-lettered instead
        dlq = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "d",
                                        "auto.offset.reset": "earliest"})
        dlq.subscribe(["jobs-dlq"])
        dead: list = []
        deadline = time.monotonic() + TIMEOUT_S
        share = share_consumer(bootstrap)  # a poll makes the group offer record 1 again
        while len(dead) < 2 and time.monotonic() < deadline:
            share.poll(0.2)
            m = dlq.poll(0.2)
            if m is not None and m.error() is None:
                dead.append(m)
        share.close()
        dlq.close()
        assert stop(proc, signal.SIGTERM) == 0
    headers = [dict(m.headers()) for m in dead]
    assert sorted(h["kdelay.dlq.reason"] for h in headers) == [b"max_delivery_count",
                                                               b"rejected"]
    assert sorted(h["kdelay.dlq.offset"] for h in headers) == [b"1", b"2"]
    assert sorted(m.value() for m in dead) == [b"job-1", b"job-2"]
    with Topic.open(root, "jobs") as t:  # one group state with the in-process queue
        q = QueueConsumer(t, "sg")
        assert q.poll(timeout_ms=0) == []  # 0 acked, 1 and 2 dead-lettered
        q.close()


def test_a_killed_member_loses_its_records_to_another(tmp_path):
    root = str(tmp_path / "root")
    fill(root, 5)
    with broker_process(root, *FAST, "share.auto.offset.reset=earliest") as (proc, bootstrap):
        script = (
            "import sys, time\n"
            "from confluent_kafka import ShareConsumer\n"
            "c = ShareConsumer({'bootstrap.servers': sys.argv[1], 'group.id': 'sg',"
            " 'share.acknowledgement.mode': 'explicit'})\n"
            "c.subscribe(['jobs'])\n"
            "n = 0\n"
            "while n < 5:\n"
            "    n += len([m for m in c.poll(0.5) if m.error() is None])\n"
            "print('held', n, flush=True)\n"
            "time.sleep(600)\n")
        victim = subprocess.Popen([sys.executable, "-c", script, bootstrap], env=child_env(),
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert victim.stdout.readline().startswith("held 5")
        finally:
            victim.send_signal(signal.SIGKILL)
            victim.wait(TIMEOUT_S)
        c = share_consumer(bootstrap)
        got = poll_until(c, 5, "the dead member's records")  # after its session timeout
        assert sorted(m.offset() for m in got) == [0, 1, 2, 3, 4]
        for m in got:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync()
        c.close()
        assert stop(proc, signal.SIGTERM) == 0


def test_group_configs_are_checked_and_latest_is_the_default_start(tmp_path):
    root = str(tmp_path / "root")
    fill(root, 4)  # due before the group exists: a `latest` group never sees them
    with broker_process(root, *FAST) as (proc, bootstrap):
        from confluent_kafka import KafkaException
        for bad in ({"share.delivery.count.limit": "zero"}, {"no.such.config": "1"},
                    {"kdelay.share.release.backoff.multiplier": "0.5"}):
            with pytest.raises(KafkaException, match="INVALID_CONFIG|Invalid|config"):
                set_group_configs(bootstrap, "sg", bad)
        c = share_consumer(bootstrap, explicit=False)
        assert [m for m in c.poll(1.0) if m.error() is None] == []
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
        producer.produce("jobs", b"fresh", partition=0)
        producer.flush(TIMEOUT_S)
        got = poll_until(c, 1, "the record produced after the group started")
        assert [(m.offset(), m.value()) for m in got] == [(4, b"fresh")]
        c.close()
        assert stop(proc, signal.SIGTERM) == 0


def test_the_worked_retry_example_in_docs_broker_md_runs(tmp_path):
    """docs/broker.md's retry-with-backoff example, run as written (its asserts: delivery
    counts 1, 2, 3, each retry no earlier than its backoff)."""
    import os
    import re
    doc = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "broker.md")
    with open(doc) as f:
        text = f.read()
    section = text.split("### Worked example: retries with backoff", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "docs/broker.md", "exec"), {"root": str(tmp_path / "root")})
