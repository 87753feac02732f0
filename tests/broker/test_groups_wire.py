"""Consumer groups over the wire with real clients in real processes: workers that commit
after processing see every record once per group; a worker killed with kill -9 loses its
partitions to the others after its session timeout (at least once, nothing lost); commits
survive a broker restart and kill -9; the wire group and `Consumer(topic, group)` in
process are one position."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from produce_support import TIMEOUT_S, broker_process, stop

from kdelay import Consumer, Record, Topic
from kdelay.testing.processes import child_env

kafka = pytest.importorskip("kafka")
confluent_kafka = pytest.importorskip("confluent_kafka")

WORKER = os.path.join(os.path.dirname(__file__), "group_worker.py")
FAST_GROUPS = "group.initial.rebalance.delay.ms=200"


def fill(root: str, topic: str, partitions: int, values: list[str]) -> None:
    with Topic.open(root, topic, partitions=partitions) as t:
        for i, v in enumerate(values):
            t.partition(i % partitions).append([Record(v.encode())])


def start_worker(client: str, bootstrap: str, topic: str, group: str,
                 output: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, WORKER, client, bootstrap, topic, group, output],
                            env=child_env(), stderr=subprocess.DEVNULL)


def processed(outputs: list[str]) -> list[str]:
    """Every value the workers processed, duplicates kept."""
    out = []
    for path in outputs:
        if os.path.exists(path):
            with open(path) as f:
                out += [line.split(" ", 2)[2].rstrip("\n") for line in f
                        if line[0].isdigit()]
    return out


def assigned(path: str) -> int:
    """How many rebalances have reached this worker."""
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        return sum(1 for line in f if line.startswith("assigned"))


def wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_workers_committing_after_processing_see_each_record_once(tmp_path, client):
    root = str(tmp_path / "root")
    values = [f"job-{i}" for i in range(60)]
    with Topic.open(root, "jobs", partitions=3):
        pass
    with broker_process(root, FAST_GROUPS) as (proc, bootstrap):
        outputs = [str(tmp_path / f"w{i}") for i in range(3)]
        workers = [start_worker(client, bootstrap, "jobs", "g", o) for o in outputs]
        try:
            # every worker holds its share before anything is produced: no rebalance
            # happens while records are processed, so commit-after-processing is once
            wait_for(lambda: all(assigned(o) for o in outputs) and _stable(bootstrap, 3),
                     "three workers in a stable group")
            producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
            for i, v in enumerate(values):
                producer.produce("jobs", v.encode(), partition=i % 3)
            assert producer.flush(TIMEOUT_S) == 0
            wait_for(lambda: len(processed(outputs)) >= len(values), "every record")
        finally:
            for w in workers:
                w.send_signal(signal.SIGTERM)
            for w in workers:
                w.wait(TIMEOUT_S)
        got = processed(outputs)
        assert sorted(got) == sorted(values)  # each once
        assert stop(proc, signal.SIGTERM) == 0


def _stable(bootstrap: str, members: int) -> bool:
    """Whether group g is Stable with `members` members (DescribeGroups, asked by
    confluent-kafka's admin client)."""
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    group = admin.describe_consumer_groups(["g"])["g"].result(TIMEOUT_S)
    return group.state == ConsumerGroupState.STABLE and len(group.members) == members


def test_a_killed_worker_loses_its_partitions_and_nothing_is_lost(tmp_path):
    root = str(tmp_path / "root")
    values = [f"job-{i}" for i in range(40)]
    fill(root, "jobs", 2, values)
    with broker_process(root, FAST_GROUPS) as (proc, bootstrap):
        outputs = [str(tmp_path / "a"), str(tmp_path / "b")]
        victim = start_worker("confluent", bootstrap, "jobs", "g", outputs[0])
        wait_for(lambda: len(processed(outputs[:1])) > 0, "the first worker's records")
        victim.send_signal(signal.SIGKILL)  # no leave: the session timeout must find it
        victim.wait(TIMEOUT_S)
        survivor = start_worker("kafka-python", bootstrap, "jobs", "g", outputs[1])
        try:
            wait_for(lambda: set(processed(outputs)) >= set(values), "every record")
        finally:
            survivor.send_signal(signal.SIGTERM)
            survivor.wait(TIMEOUT_S)
        assert set(processed(outputs)) == set(values)  # at least once: nothing lost
        stop(proc, signal.SIGTERM)


def test_commits_survive_restart_and_kill_9_and_are_the_in_process_position(tmp_path):
    root = str(tmp_path / "root")
    fill(root, "jobs", 1, [f"job-{i}" for i in range(10)])
    with broker_process(root, FAST_GROUPS) as (proc, bootstrap):
        c = kafka.KafkaConsumer("jobs", bootstrap_servers=bootstrap, group_id="g",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                consumer_timeout_ms=10_000)
        got = []
        for m in c:
            got.append(m.value)
            if len(got) == 4:
                break
        c.commit()
        c.close()
        assert stop(proc, signal.SIGKILL) == -signal.SIGKILL
    assert got == [b"job-%d" % i for i in range(4)]
    with Topic.open(root, "jobs") as t:  # in process, where the wire group committed
        consumer = Consumer(t, "g")
        assert [r.value for r in consumer.poll(max_records=3)] == [b"job-4", b"job-5",
                                                                  b"job-6"]
        consumer.commit()
        consumer.close()
    with broker_process(root, FAST_GROUPS) as (proc, bootstrap):
        c = kafka.KafkaConsumer("jobs", bootstrap_servers=bootstrap, group_id="g",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                consumer_timeout_ms=5_000)
        assert [m.value for m in c] == [b"job-7", b"job-8", b"job-9"]
        c.close()
        stop(proc, signal.SIGTERM)
