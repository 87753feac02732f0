"""Topics over the wire: Metadata at every version (node 0 at the advertised listener, leader
of every partition, topic ids that survive a restart), auto-creation and its switch,
CreateTopics/DeleteTopics/CreatePartitions and DescribeConfigs/IncrementalAlterConfigs from
confluent-kafka's and kafka-python's admin clients (the broker's own configs read-only),
DescribeLogDirs; configs persist in ROOT, map onto
LogConfig, and a bad one is refused with INVALID_CONFIG naming it, changing nothing."""

from __future__ import annotations

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from produce_support import TIMEOUT_S, RawClient, broker_process, stop

from kdelay import Broker, LogConfig, Topic
from kdelay.broker.responses import element, make


def metadata_request(version: int, names: list[str] | None, auto: bool = True):
    req = load_request_schema(3, version)
    topic_cls = element(req, "topics")
    topics = None if names is None else tuple(
        make(topic_cls, name=n, topic_id=None) for n in names)
    if version == 0 and topics is None:
        topics = ()
    return make(req, topics=topics, allow_auto_topic_creation=auto,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("topics-admin")
    with Broker(root, listen="127.0.0.1:0",
                config={"num.partitions": "3", "retention.ms": "3600000"}) as b:
        yield b


@pytest.fixture(scope="module")
def advertised(tmp_path_factory):
    root = tmp_path_factory.mktemp("advertised")
    with Broker(root, listen="127.0.0.1:0", advertised_listener="localhost:19092",
                config={"num.partitions": "3"}) as b:
        yield b


@pytest.mark.parametrize("version", range(14))
def test_metadata_every_version(advertised, version):
    broker = advertised
    with RawClient(f"127.0.0.1:{broker._server.state.port}") as c:
        answer = c.request(3, version, metadata_request(version, [f"auto{version}"]))
    [node] = answer.brokers
    assert (node.node_id, node.host, node.port) == (0, "localhost", 19092)
    [topic] = answer.topics
    assert topic.error_code == ErrorCode.none and topic.name == f"auto{version}"
    assert [p.partition_index for p in topic.partitions] == [0, 1, 2]  # num.partitions
    assert all(p.leader_id == 0 and tuple(p.replica_nodes) == (0,) for p in topic.partitions)
    if version >= 10:
        assert topic.topic_id == broker._server.state.topics.topic_id(f"auto{version}")
        assert topic.topic_id.int != 0


def admin(broker):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": f"127.0.0.1:{broker._server.state.port}",
                        "broker.address.family": "v4"})


def test_create_describe_alter_delete_with_confluent_admin(broker):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
    )
    a = admin(broker)
    futures = a.create_topics([
        NewTopic("orders", 2, 1, config={"retention.ms": "60000",
                                         "delayed.delivery.max.spread.ms": "250"}),
        NewTopic("bad", 1, 1, config={"cleanup.policy": "compact"}),
        NewTopic("unknown", 1, 1, config={"no.such.config": "1"})])
    futures["orders"].result(TIMEOUT_S)
    for name, words in (("bad", "cleanup.policy"), ("unknown", "no.such.config")):
        with pytest.raises(KafkaException, match=words):
            futures[name].result(TIMEOUT_S)
    registry = broker._server.state.topics
    assert registry.get("bad") is None and registry.get("unknown") is None
    log = registry.get("orders").partition(1)
    assert log.config.retention_ms == 60000
    assert registry.configs("orders").spread_ms == 250

    resource = ConfigResource(ConfigResource.Type.TOPIC, "orders")
    described = a.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert described["retention.ms"].value == "60000"
    assert described["retention.ms"].source == 1  # the topic's own
    assert described["retention.bytes"].value == "-1" and described["retention.bytes"].source == 5

    bad = ConfigResource(ConfigResource.Type.TOPIC, "orders", incremental_configs=[
        ConfigEntry("segment.bytes", "1048576",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match="retention.ms"):
        a.incremental_alter_configs([bad])[bad].result(TIMEOUT_S)
    assert registry.get("orders").partition(0).config.segment_bytes == LogConfig().segment_bytes

    good = ConfigResource(ConfigResource.Type.TOPIC, "orders", incremental_configs=[
        ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    a.incremental_alter_configs([good])[good].result(TIMEOUT_S)
    reopened = registry.get("orders").partition(0)
    assert reopened.config.segment_bytes == 1048576
    assert reopened.config.retention_ms == 3600000  # back to the broker-wide default

    a.create_partitions([NewPartitions("orders", 4)])["orders"].result(TIMEOUT_S)
    assert registry.get("orders").partitions == 4
    with pytest.raises(KafkaException, match="only grow"):
        a.create_partitions([NewPartitions("orders", 2)])["orders"].result(TIMEOUT_S)

    a.delete_topics(["orders"])["orders"].result(TIMEOUT_S)
    assert registry.get("orders") is None
    assert not any(p.name.startswith("orders-") for p in broker_root(broker).iterdir())


def broker_root(broker):
    import pathlib
    return pathlib.Path(broker._server.state.root)


def test_kafka_python_admin(broker):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
    a = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{broker._server.state.port}")
    try:
        a.create_topics([NewTopic("kp-admin", 1, 1, topic_configs={
            "message.timestamp.type": "LogAppendTime"})])
        described = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-admin")])
        assert "LogAppendTime" in repr(described)
        assert "kp-admin" in a.list_topics()
        a.delete_topics(["kp-admin"])
    finally:
        a.close()
    assert broker._server.state.topics.get("kp-admin") is None


def test_the_broker_describes_its_own_configs_read_only(broker):
    """DescribeConfigs on BROKER 0 (what admin tools and UIs ask at start): the broker's own
    configs, given (source 4) or default (5), and the topic defaults given with --config;
    every one read-only, and an alteration refused, changing nothing. Another broker id is
    refused."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    from kdelay.broker.settings import BROKER_CONFIGS
    a = admin(broker)
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    described = a.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert set(BROKER_CONFIGS) | {"retention.ms"} == set(described)
    assert (described["num.partitions"].value, described["num.partitions"].source) == ("3", 4)
    assert (described["producer.id.expiration.ms"].value,
            described["producer.id.expiration.ms"].source) == ("86400000", 5)
    assert described["auto.create.topics.enable"].value == "true"
    assert described["retention.ms"].value == "3600000"
    assert all(e.is_read_only for e in described.values())

    change = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("num.partitions", "5", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match="--config"):
        a.incremental_alter_configs([change])[change].result(TIMEOUT_S)
    assert broker._server.state.settings.config("num.partitions") == 3
    # (a client sends a BROKER resource to that broker: only a raw request reaches this one)
    req = load_request_schema(32, 4)
    res_cls = element(req, "resources")
    with RawClient(broker.bootstrap_servers) as c:
        answer = c.request(32, 4, make(req, resources=(
            make(res_cls, resource_type=4, resource_name="7", configuration_keys=None),),
            include_synonyms=False, include_documentation=True))
    (result,) = answer.results
    assert result.error_code == ErrorCode.invalid_request and "no broker" in \
        result.error_message


def test_log_dirs_show_each_partitions_segment_bytes(broker):
    """DescribeLogDirs: ROOT as the one log directory, a partition's local segment bytes
    (kafka-python's admin client, and raw requests at v1 and v4 naming partitions, a
    missing topic and a missing partition, which are left out), the volume at v4."""
    import os

    from kafka.admin import KafkaAdminClient

    from kdelay import Record
    registry = broker._server.state.topics
    registry.create("sizes", 2)
    log = registry.get("sizes").partition(0)
    log.append([Record(b"v" * 1000, key=b"k") for _ in range(10)])
    log.flush()
    on_disk = sum(os.path.getsize(os.path.join(log.path, f)) for f in os.listdir(log.path)
                  if f.endswith(".log"))
    assert on_disk > 10_000

    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        (answer,) = a.describe_log_dirs({"sizes": [0, 1]})
    finally:
        a.close()
    (log_dir,) = answer["log_dirs"]
    assert log_dir["log_dir"] == os.path.abspath(broker._server.state.root)
    (topic,) = log_dir["topics"]
    sizes = {p["partition_index"]: p["partition_size"] for p in topic["partitions"]}
    assert sizes == {0: on_disk, 1: 0}

    with RawClient(broker.bootstrap_servers) as c:
        for version in (1, 4):
            req = load_request_schema(35, version)
            named = (make(element(req, "topics"), topic="sizes", partitions=(0, 7)),
                     make(element(req, "topics"), topic="no-such-topic", partitions=(0,)))
            (result,) = c.request(35, version, make(req, topics=named)).results
            assert result.error_code == ErrorCode.none
            assert [(t.name, [(p.partition_index, p.partition_size) for p in t.partitions])
                    for t in result.topics] == [("sizes", [(0, on_disk)])]
            if version == 4:
                assert result.total_bytes > result.usable_bytes > 0
        (every,) = c.request(35, 4, make(load_request_schema(35, 4), topics=None)).results
    assert "sizes" in {t.name for t in every.topics}


def test_auto_create_off_and_configs_and_ids_survive_a_restart(tmp_path):
    root = str(tmp_path)
    with broker_process(root, "auto.create.topics.enable=false") as (proc, bootstrap):
        with RawClient(bootstrap) as c:
            answer = c.request(3, 12, metadata_request(12, ["nope"]))
            assert answer.topics[0].error_code == ErrorCode.unknown_topic_or_partition
            req = load_request_schema(19, 7)
            t_cls = element(req, "topics")
            c_cls = element(t_cls, "configs")
            import datetime
            created = c.request(19, 7, make(req, topics=(make(
                t_cls, name="kept", num_partitions=2, replication_factor=-1, assignments=(),
                configs=(make(c_cls, name="delayed.delivery.enable", value="false"),)),),
                timeout=datetime.timedelta(seconds=30), validate_only=False))
            assert created.topics[0].error_code == ErrorCode.none
            topic_id = created.topics[0].topic_id
        assert stop(proc) == 0
    with broker_process(root) as (proc, bootstrap):
        with RawClient(bootstrap) as c:
            answer = c.request(3, 13, metadata_request(13, ["kept"], auto=False))
        assert answer.topics[0].topic_id == topic_id
        assert len(answer.topics[0].partitions) == 2
        assert stop(proc) == 0
    t = Topic.open(root, "kept")  # served topics open in process once the broker stops
    t.close()
    assert "nope" not in [p.name for p in tmp_path.iterdir()]
    from kdelay.broker.topic_store import TopicStore
    assert TopicStore(root).read("kept").configs == {"delayed.delivery.enable": "false"}
