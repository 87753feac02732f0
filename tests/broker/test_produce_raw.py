"""Produce over a raw socket: what is stored for a client batch (runs within the spread,
client offsets = log offsets, headers and timestamps kept), every refusal with its error
code and nothing written, acks=0 unanswered, idempotent retries answered with the original
offsets, gaps refused, across a kill -9 of the broker process too."""

from __future__ import annotations

import signal

import pytest
from kio.schema.errors import ErrorCode
from produce_support import (
    RawClient,
    broker_process,
    partition_answer,
    produce_request,
    stop,
    stored,
    v2_batch,
)

from kdelay import Broker

V = 9  # kafka-python's Produce version


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("produce-raw")
    with Broker(root, listen="127.0.0.1:0") as b:
        yield b


def log_of(broker: Broker, topic: str, partition: int = 0):
    return broker._server.state.topics.get(topic).partition(partition)


def create(broker: Broker, name: str, partitions: int = 1, **configs: str) -> None:
    broker._server.state.topics.create(name, partitions,
                                       {k.replace("_", "."): v for k, v in configs.items()})


def produce(broker: Broker, topic: str, batch: bytes | None, *, partition: int = 0,
            version: int = V, **kw) -> object:
    with RawClient(broker.bootstrap_servers) as c:
        return partition_answer(c.request(0, version, produce_request(
            version, topic, partition, batch, **kw)))


def test_a_client_batch_is_stored_as_runs_within_the_spread(broker):
    create(broker, "runs", delayed_delivery_max_spread_ms="1000")
    log = log_of(broker, "runs")
    now = log.now()
    far = now + 3_600_000
    delays = [None, ("kdelay.delay_ms", b"500"), ("kdelay.deliver_after", str(far).encode()),
              ("kdelay.deliver_after", str(far + 900).encode()), None,
              ("kdelay.delay_ms", b"0")]
    headers = [[("app", b"x")] + ([d] if d else []) for d in delays]
    values = [b"a", None, b"c", b"d", b"e", b"f"]
    answer = produce(broker, "runs", v2_batch(values, headers=headers,
                                              keys=[b"k"] * 6))
    assert answer.error_code == ErrorCode.none and answer.base_offset == 0
    got = log.read(0)
    assert [r.offset for r in got] == list(range(6))
    assert [r.value for r in got] == values
    assert [r.headers for r in got] == headers
    assert [r.timestamp for r in got] == [1_000_000 + i for i in range(6)]
    # records 0-1 share a run (now, now+500), 2-3 the far one, 4-5 are due at once
    assert got[0].deliver_after == got[1].deliver_after >= now + 500
    assert got[0].deliver_after <= now + 500 + 1000
    assert got[2].deliver_after == got[3].deliver_after == far + 900
    assert got[4].deliver_after == got[5].deliver_after < far


def test_spread_zero_keeps_each_time_apart_and_offsets_continue(broker):
    create(broker, "spread0")
    log = log_of(broker, "spread0")
    first = produce(broker, "spread0", v2_batch([b"x"]))
    batch = v2_batch([b"a", b"b", b"c"], headers=[[("kdelay.delay_ms", b"10")], [],
                                                   [("kdelay.delay_ms", b"10")]])
    second = produce(broker, "spread0", batch)
    assert (first.base_offset, second.base_offset) == (0, 1)
    got = log.read(0)
    assert [r.offset for r in got] == [0, 1, 2, 3]
    assert got[1].deliver_after >= got[2].deliver_after + 10 - 1  # a run each
    assert got[1].deliver_after != got[2].deliver_after


def test_log_append_time_replaces_timestamps(broker):
    create(broker, "appendtime", message_timestamp_type="LogAppendTime")
    log = log_of(broker, "appendtime")
    answer = produce(broker, "appendtime", v2_batch([b"a", b"b"]))
    assert answer.error_code == ErrorCode.none
    got = log.read(0)
    assert got[0].timestamp == got[1].timestamp >= log.now() - 60_000
    assert answer.log_append_time is not None


@pytest.mark.parametrize("codec", [1, 2, 3, 4])  # gzip, snappy, lz4, zstd
def test_compressed_batches_are_stored_uncompressed(broker, codec):
    name = f"codec{codec}"
    create(broker, name)
    values = [bytes([i]) * 50 for i in range(20)]
    answer = produce(broker, name, v2_batch(values, compression=codec))
    assert answer.error_code == ErrorCode.none
    assert [r.value for r in log_of(broker, name).read(0)] == values


REFUSALS = [
    # (headers of record 1, topic configs, error, words in the message)
    ([("kdelay.delay_ms", b"-5")], {}, ErrorCode.invalid_record, "record 1"),
    ([("kdelay.delay_ms", b"12x")], {}, ErrorCode.invalid_record, "decimal"),
    ([("kdelay.delay_ms", None)], {}, ErrorCode.invalid_record, "decimal"),
    ([("kdelay.delay_ms", b"1"), ("kdelay.deliver_after", b"1")], {},
     ErrorCode.invalid_record, "more than one"),
    ([("kdelay.delay_ms", b"5000")], {"delayed.delivery.max.delay.ms": "1000"},
     ErrorCode.invalid_record, "1000 ms"),
    ([("kdelay.delay_ms", b"5")], {"delayed.delivery.enable": "false"},
     ErrorCode.invalid_record, "delayed.delivery.enable=false"),
]


@pytest.mark.parametrize("case", range(len(REFUSALS)))
def test_bad_kdelay_headers_refuse_the_whole_batch(broker, case):
    headers, configs, code, words = REFUSALS[case]
    name = f"refuse{case}"
    broker._server.state.topics.create(name, 1, configs)
    answer = produce(broker, name, v2_batch([b"a", b"b", b"c"],
                                            headers=[[], headers, []]))
    assert answer.error_code == code
    assert words in answer.error_message and "record 1" in answer.error_message
    assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == \
        [(1, answer.error_message)]
    assert log_of(broker, name).log_end_offset == 0


def test_framing_refusals_write_nothing(broker):
    create(broker, "framing", max_message_bytes="2000")
    log = log_of(broker, "framing")
    good = v2_batch([b"a"])
    bad_crc = good[:-1] + bytes([good[-1] ^ 1])
    assert produce(broker, "framing", bad_crc).error_code == ErrorCode.corrupt_message
    assert produce(broker, "framing", good[:-3]).error_code == ErrorCode.corrupt_message
    assert produce(broker, "framing", v2_batch([b"x" * 3000])).error_code == \
        ErrorCode.message_too_large
    assert produce(broker, "framing", v2_batch([b"a"], transactional=True, producer_id=1,
                                               producer_epoch=0, base_sequence=0)
                   ).error_code == ErrorCode.invalid_record
    assert produce(broker, "framing", good, partition=5).error_code == \
        ErrorCode.unknown_topic_or_partition
    assert produce(broker, "nosuchtopic", good).error_code == \
        ErrorCode.unknown_topic_or_partition
    assert produce(broker, "framing", good, transactional_id="tx").error_code == \
        ErrorCode.transactional_id_authorization_failed
    assert log.log_end_offset == 0
    assert produce(broker, "framing", good).error_code == ErrorCode.none  # still served
    assert log.log_end_offset == 1


def test_acks_zero_gets_no_answer_and_is_stored(broker):
    create(broker, "acks0")
    with RawClient(broker.bootstrap_servers) as c:
        c.send(c.frame(0, V, produce_request(V, "acks0", 0, v2_batch([b"q"]), acks=0)))
        # the next request's answer is the first frame to come back
        answer = partition_answer(c.request(0, V, produce_request(V, "acks0", 0,
                                                                  v2_batch([b"r"]))))
    assert answer.base_offset == 1
    assert [r.value for r in log_of(broker, "acks0").read(0)] == [b"q", b"r"]


def idempotent(values, seq, pid=4242, epoch=0):
    return v2_batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_idempotent_retries_and_gaps(broker):
    create(broker, "idem", delayed_delivery_max_spread_ms="0")
    log = log_of(broker, "idem")
    first = idempotent([b"a", b"b"], 0)
    mixed = v2_batch([b"c", b"d", b"e"], producer_id=4242, producer_epoch=0,
                     base_sequence=2, headers=[[], [("kdelay.delay_ms", b"60000")], []])
    assert produce(broker, "idem", first).base_offset == 0
    assert produce(broker, "idem", mixed).base_offset == 2   # stored as three runs
    assert produce(broker, "idem", first).base_offset == 0   # duplicates: original offsets
    assert produce(broker, "idem", mixed).base_offset == 2
    gap = produce(broker, "idem", idempotent([b"z"], 9))
    assert gap.error_code == ErrorCode.out_of_order_sequence_number
    old_epoch = produce(broker, "idem", idempotent([b"z"], 0, epoch=-1 + 0))
    assert old_epoch.error_code in (ErrorCode.none, ErrorCode.invalid_producer_epoch)
    assert [r.value for r in log.read(0)][:5] == [b"a", b"b", b"c", b"d", b"e"]


def test_idempotent_state_survives_kill_9(tmp_path):
    root = str(tmp_path)
    batches = [idempotent([b"a", b"b"], 0, pid=77),
               v2_batch([b"c", b"d"], producer_id=77, producer_epoch=0, base_sequence=2,
                        headers=[[("kdelay.delay_ms", b"100000")], []])]
    with broker_process(root) as (proc, bootstrap):
        with RawClient(bootstrap) as c:
            for b in batches:
                c.request(3, 9, _metadata_all())  # auto-creates the topic
                answer = partition_answer(c.request(0, V, produce_request(V, "k9", 0, b)))
                assert answer.error_code == ErrorCode.none
        stop(proc, signal.SIGKILL)
    with broker_process(root) as (proc, bootstrap):
        with RawClient(bootstrap) as c:
            retry = [partition_answer(c.request(0, V, produce_request(V, "k9", 0, b)))
                     for b in batches]
            gap = partition_answer(c.request(0, V, produce_request(
                V, "k9", 0, idempotent([b"x"], 7, pid=77))))
            nxt = partition_answer(c.request(0, V, produce_request(
                V, "k9", 0, idempotent([b"e"], 4, pid=77))))
        assert [a.base_offset for a in retry] == [0, 2]
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        assert (nxt.error_code, nxt.base_offset) == (ErrorCode.none, 4)
        assert stop(proc) == 0
    assert [r.value for r in stored(root, "k9")] == [b"a", b"b", b"c", b"d", b"e"]


def _metadata_all():
    from kio.index import load_request_schema

    from kdelay.broker.responses import element, make
    req = load_request_schema(3, 9)
    return make(req, topics=(make(element(req, "topics"), name="k9"),),
                allow_auto_topic_creation=True,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False)
