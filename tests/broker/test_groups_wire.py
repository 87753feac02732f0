"""Consumer groups over the wire with real clients in real processes (confluent-kafka,
kafka-python, aiokafka, KafkaJS, and confluent-kafka with KIP-848's group.protocol=consumer):
workers that commit after processing see every record once per group; a worker killed with
kill -9 loses its partitions to the others after its session timeout (at least once,
nothing lost); a KIP-848 member leaving cleanly hands its partitions over; commits survive
a broker restart and kill -9; the wire group and `Consumer(topic, group)` in process are
one position."""

from __future__ import annotations

import os
import shutil
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
JS_DIR = os.path.join(os.path.dirname(__file__), "js")
JS_WORKER = os.path.join(JS_DIR, "group_worker.js")
# fast rebalances: classic groups' first join, and KIP-848 members' heartbeats
FAST_GROUPS = ("group.initial.rebalance.delay.ms=200", "group.consumer.heartbeat.interval.ms=300",
               "group.consumer.session.timeout.ms=6000")


def fill(root: str, topic: str, partitions: int, values: list[str]) -> None:
    with Topic.open(root, topic, partitions=partitions) as t:
        for i, v in enumerate(values):
            t.partition(i % partitions).append([Record(v.encode())])


def start_worker(client: str, bootstrap: str, topic: str, group: str,
                 output: str) -> subprocess.Popen:
    if client == "kafkajs":
        return subprocess.Popen([_node(), JS_WORKER, bootstrap, topic, group, output],
                                stderr=subprocess.DEVNULL)
    return subprocess.Popen([sys.executable, WORKER, client, bootstrap, topic, group, output],
                            env=child_env(), stderr=subprocess.DEVNULL)


def _node() -> str:
    """node with kafkajs installed in tests/broker/js (.ci/run installs it); skipped when
    absent here, a failure in CI."""
    node = shutil.which("node")
    if node is None or not os.path.isdir(os.path.join(JS_DIR, "node_modules", "kafkajs")):
        what = "node and kafkajs (npm install in tests/broker/js)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{what} is not installed (.ci/run installs it)")
        pytest.skip(f"{what} is not installed here (.ci/run installs it)")
    return node


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


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka", "kafkajs",
                                    "confluent-848"])
def test_workers_committing_after_processing_see_each_record_once(tmp_path, client):
    root = str(tmp_path / "root")
    values = [f"job-{i}" for i in range(60)]
    with Topic.open(root, "jobs", partitions=3):
        pass
    with broker_process(root, *FAST_GROUPS) as (proc, bootstrap):
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


def _stable(bootstrap: str, members: int, group_id: str = "g") -> bool:
    """Whether the group is Stable with `members` members (DescribeGroups, asked by
    confluent-kafka's admin client)."""
    return _described(bootstrap, group_id)[0] == "stable" and \
        len(_described(bootstrap, group_id)[1]) == members


def _described(bootstrap: str, group_id: str) -> tuple[str, dict[str, list[int]]]:
    """(state, member id -> assigned partitions) as DescribeGroups tells confluent-kafka's
    admin client."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    group = admin.describe_consumer_groups([group_id])[group_id].result(TIMEOUT_S)
    return group.state.name.lower(), {
        m.member_id: sorted(tp.partition for tp in m.assignment.topic_partitions)
        for m in group.members}


def test_kip848_a_member_leaving_hands_its_partitions_over(tmp_path):
    """group.protocol=consumer: the broker splits 4 partitions between 2 workers; when one
    leaves cleanly the other gets all 4 and processes what comes next; every record once."""
    root = str(tmp_path / "root")
    with Topic.open(root, "jobs", partitions=4):
        pass
    with broker_process(root, *FAST_GROUPS) as (proc, bootstrap):
        outputs = [str(tmp_path / "a"), str(tmp_path / "b")]
        workers = [start_worker("confluent-848", bootstrap, "jobs", "g", o) for o in outputs]
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})

        def produce(values: list[str]) -> None:
            for i, v in enumerate(values):
                producer.produce("jobs", v.encode(), partition=i % 4)
            assert producer.flush(TIMEOUT_S) == 0
        try:
            wait_for(lambda: sorted(map(len, _described(bootstrap, "g")[1].values())) == [2, 2]
                     and _stable(bootstrap, 2), "2 members with 2 partitions each")
            from confluent_kafka import ConsumerGroupType
            from confluent_kafka.admin import AdminClient
            admin = AdminClient({"bootstrap.servers": bootstrap})  # lives until answered
            group = admin.describe_consumer_groups(["g"])["g"].result(TIMEOUT_S)
            assert (group.type, group.partition_assignor) == (ConsumerGroupType.CONSUMER,
                                                             "range")
            assert all(m.target_assignment.topic_partitions == m.assignment.topic_partitions
                       for m in group.members)
            first = [f"first-{i}" for i in range(40)]
            produce(first)
            wait_for(lambda: len(processed(outputs)) >= len(first), "the first records")
            assert sorted(processed(outputs)) == sorted(first)
            assert all(processed([o]) for o in outputs)  # both worked
            workers[0].send_signal(signal.SIGTERM)  # a clean leave (epoch -1)
            assert workers[0].wait(TIMEOUT_S) == 0
            wait_for(lambda: list(_described(bootstrap, "g")[1].values()) == [[0, 1, 2, 3]]
                     and _stable(bootstrap, 1), "the survivor holding all 4 partitions")
            second = [f"second-{i}" for i in range(40)]
            produce(second)
            wait_for(lambda: len(processed(outputs)) >= len(first) + len(second),
                     "the second records")
        finally:
            for w in workers:
                if w.poll() is None:
                    w.send_signal(signal.SIGTERM)
            for w in workers:
                w.wait(TIMEOUT_S)
        assert sorted(processed(outputs)) == sorted(first + second)  # each once
        assert sorted(processed(outputs[1:])) == sorted(
            [v for v in processed(outputs[1:]) if v.startswith("first")] + second)
        admin = AdminClient({"bootstrap.servers": bootstrap})  # lives until answered
        listed = admin.list_consumer_groups().result(TIMEOUT_S)
        assert [(g.group_id, g.state.name.lower()) for g in listed.valid] == [("g", "empty")]
        assert stop(proc, signal.SIGTERM) == 0


@pytest.mark.parametrize(("victim_client", "survivor_client"),
                         [("confluent", "kafka-python"), ("confluent-848", "confluent-848")])
def test_a_killed_worker_loses_its_partitions_and_nothing_is_lost(tmp_path, victim_client,
                                                                 survivor_client):
    root = str(tmp_path / "root")
    values = [f"job-{i}" for i in range(40)]
    fill(root, "jobs", 2, values)
    with broker_process(root, *FAST_GROUPS) as (proc, bootstrap):
        outputs = [str(tmp_path / "a"), str(tmp_path / "b")]
        victim = start_worker(victim_client, bootstrap, "jobs", "g", outputs[0])
        wait_for(lambda: len(processed(outputs[:1])) > 0, "the first worker's records")
        victim.send_signal(signal.SIGKILL)  # no leave: the session timeout must find it
        victim.wait(TIMEOUT_S)
        survivor = start_worker(survivor_client, bootstrap, "jobs", "g", outputs[1])
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
    with broker_process(root, *FAST_GROUPS) as (proc, bootstrap):
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
    with broker_process(root, *FAST_GROUPS) as (proc, bootstrap):
        c = kafka.KafkaConsumer("jobs", bootstrap_servers=bootstrap, group_id="g",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                consumer_timeout_ms=5_000)
        assert [m.value for m in c] == [b"job-7", b"job-8", b"job-9"]
        c.close()
        stop(proc, signal.SIGTERM)


def test_a_static_member_restarting_within_its_session_keeps_its_partitions(tmp_path):
    """confluent-kafka with group.instance.id: a consumer closed and started again (a new
    member id, the same instance id) within its session timeout is given its partitions
    back without a rebalance: the other member sees no revocation and no assignment."""
    root = str(tmp_path / "root")
    with Topic.open(root, "s", partitions=4):
        pass
    events: dict[str, list[str]] = {"a": [], "b": []}

    def consumer(name: str) -> confluent_kafka.Consumer:
        c = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": "static", "group.instance.id": name,
            "session.timeout.ms": 30000, "heartbeat.interval.ms": 300,
            "partition.assignment.strategy": "range", "auto.offset.reset": "earliest"})
        c.subscribe(["s"], on_assign=lambda _c, ps: events[name].append(
            "assign " + ",".join(str(p.partition) for p in sorted(
                ps, key=lambda p: p.partition))),
                    on_revoke=lambda _c, ps: events[name].append("revoke"))
        return c

    def poll_until(consumers, predicate, what: str) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}: {events}")
            for c in consumers:
                c.poll(0.05)

    with broker_process(root, *FAST_GROUPS) as (proc, bootstrap):
        a, b = consumer("a"), consumer("b")
        poll_until([a, b], lambda: [e for e in events["a"] if e.startswith("assign ")]
                   and [e for e in events["b"] if e.startswith("assign ")]
                   and _stable(bootstrap, 2, "static"), "a stable group of two")
        held = events["a"][-1]
        b_seen = list(events["b"])
        assert held != "assign " and b_seen[-1] != "assign "  # two partitions each
        a.close()  # a static member sends no LeaveGroup: its place waits for it
        events["a"].clear()
        a = consumer("a")
        poll_until([a, b], lambda: events["a"], "the restarted member's assignment")
        assert events["a"] == [held]  # its partitions back
        for _ in range(20):  # b goes on heartbeating: Stable, nothing to revoke
            b.poll(0.05)
            a.poll(0.05)
        assert events["b"] == b_seen and _stable(bootstrap, 2, "static")
        a.close()
        b.close()
        assert stop(proc, signal.SIGTERM) == 0


def test_groups_with_only_committed_offsets_are_listed_and_described_empty(tmp_path):
    """A group with committed offsets and no members holds no coordinator memory, yet
    ListGroups (v5 with confluent-kafka's states and types filters) and DescribeGroups show
    it Empty, as Kafka does; a group with neither is Dead; a share group is listed as one.
    DeleteGroups deletes the offsets-only group, refuses the share group with members and
    does not find the one with neither."""
    from confluent_kafka import (
        ConsumerGroupState,
        ConsumerGroupType,
        KafkaError,
        KafkaException,
        TopicPartition,
    )
    from confluent_kafka.admin import AdminClient

    from kdelay import Broker
    root = str(tmp_path / "root")
    fill(root, "t", 2, ["a", "b"])
    with Broker(root, listen="127.0.0.1:0") as broker:
        bootstrap = broker.bootstrap_servers
        c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap,
                                      "group.id": "offsets-only"})
        c.commit(offsets=[TopicPartition("t", 1, 0)], asynchronous=False)  # no group
        c.close()
        assert "offsets-only" not in broker._server.state.groups.groups
        admin = AdminClient({"bootstrap.servers": bootstrap})

        def listed(**filters) -> set[str]:
            found = admin.list_consumer_groups(request_timeout=TIMEOUT_S, **filters)
            return {g.group_id for g in found.result(TIMEOUT_S).valid}

        assert "offsets-only" in listed()
        assert "offsets-only" in listed(states={ConsumerGroupState.EMPTY},
                                        types={ConsumerGroupType.CLASSIC})
        assert "offsets-only" not in listed(states={ConsumerGroupState.STABLE})
        assert "offsets-only" not in listed(types={ConsumerGroupType.CONSUMER})
        described = admin.describe_consumer_groups(["offsets-only", "never"],
                                                   request_timeout=TIMEOUT_S)
        assert described["offsets-only"].result(TIMEOUT_S).state == ConsumerGroupState.EMPTY
        assert described["never"].result(TIMEOUT_S).state == ConsumerGroupState.DEAD
        # a share group is listed with type "share" (confluent-kafka's admin has no such
        # filter: ListGroups v5 is answered here directly)
        share = confluent_kafka.ShareConsumer({"bootstrap.servers": bootstrap,
                                               "group.id": "sg"})
        share.subscribe(["t"])
        state = broker._server.state
        deadline = time.monotonic() + TIMEOUT_S
        while not state.share_groups.groups.get("sg") and time.monotonic() < deadline:
            share.poll(0.1)
        assert _list_groups(broker, ("share",)) == [("sg", "share", "Stable", "share")]
        assert "sg" not in [g[0] for g in _list_groups(broker, ("classic", "consumer"))]
        # DeleteGroups: the offsets go (from the partitions' commit journals); a group with
        # members is refused, one with nothing is not found
        deleted = admin.delete_consumer_groups(["offsets-only", "never", "sg"],
                                               request_timeout=TIMEOUT_S)
        deleted["offsets-only"].result(TIMEOUT_S)
        for gid, code in (("never", KafkaError.GROUP_ID_NOT_FOUND),
                          ("sg", KafkaError.NON_EMPTY_GROUP)):
            with pytest.raises(KafkaException) as refused:
                deleted[gid].result(TIMEOUT_S)
            assert refused.value.args[0].code() == code, (gid, refused.value)
        assert "offsets-only" not in listed()
        assert not state.topics.get("t").partition(1).clients.has_position("offsets-only")
        share.close()


def _list_groups(broker, types: tuple[str, ...]) -> list[tuple[str, str, str, str]]:
    """ListGroups v5 with a types filter, through the broker's own handler on its loop."""
    import asyncio

    from kio.index import load_request_schema, load_response_schema

    from kdelay.broker.apis.groups import handle_list_groups
    from kdelay.broker.dispatcher import RequestContext
    ctx = RequestContext(16, 5, None, load_response_schema(16, 5), broker._server.state,
                         None)
    request = load_request_schema(16, 5)(states_filter=(), types_filter=types)
    answer = asyncio.run_coroutine_threadsafe(handle_list_groups(ctx, request),
                                              broker._loop).result(TIMEOUT_S)
    return [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in answer.groups]
