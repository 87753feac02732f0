"""Topic: Kafka directory naming, name rules, key routing, partition-count metadata."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner import murmur2 as kafka_murmur2

from kdelay import InvalidRecordError, InvalidTopicError, KdelayError, Log, LogConfig, Record, Topic
from kdelay.clients.topic import META_DIR, validate_topic_name
from kdelay.errors import LogClosedError


def test_layout_is_kafkas(tmp_path, clock):
    with Topic.open(tmp_path, "orders", partitions=3, clock=clock) as t:
        assert t.partitions == 3
        assert all(isinstance(t.partition(i), Log) for i in range(3))
        assert t.partition(1).path == os.path.join(tmp_path, "orders-1")
    names = sorted(os.listdir(tmp_path))
    assert names == [META_DIR, "orders-0", "orders-1", "orders-2"]
    meta = json.loads((tmp_path / META_DIR / "orders").read_text())
    assert meta["partitions"] == 3


@pytest.mark.parametrize("name", [
    "a", "A.b_c-9", "x" * 249, "...", "-", "_", ".hidden", "a..b",
])
def test_legal_names(tmp_path, name, clock):
    with Topic.open(tmp_path, name, partitions=1, clock=clock) as t:
        assert os.path.dirname(t.partition(0).path) == os.fspath(tmp_path)
    with Topic.open(tmp_path, name, clock=clock) as t:  # metadata was written and read
        assert t.partitions == 1


@pytest.mark.parametrize("name", [
    "", ".", "..", "x" * 250, "a/b", "../escape", "../../etc", "/abs", "a\\b", "a b",
    "é", "a\x00b", "a\nb", "top:ic", "a*", "~", "a/../../b", "..\\..", "\u2024",
])
def test_illegal_names_refused_and_nothing_written(tmp_path, name):
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(InvalidTopicError):
        Topic.open(root, name, partitions=2)
    assert os.listdir(root) in ([], [META_DIR])
    assert not os.path.exists(root / META_DIR) or os.listdir(root / META_DIR) == []
    assert sorted(os.listdir(tmp_path)) == ["root"]  # nothing escaped the root


@pytest.mark.parametrize("name", [None, 3, b"bytes"])
def test_non_str_names_refused(tmp_path, name):
    with pytest.raises(InvalidTopicError):
        Topic.open(tmp_path, name)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=260))
def test_name_rule_matches_kafka(name):
    legal = (0 < len(name) <= 249 and name not in (".", "..")
             and all(c.isascii() and (c.isalnum() or c in "._-") for c in name))
    if legal:
        assert validate_topic_name(name) == name
    else:
        with pytest.raises(InvalidTopicError):
            validate_topic_name(name)


@pytest.mark.parametrize("bad", [0, -1, True, 1.0, "2"])
def test_bad_partition_counts(tmp_path, bad):
    with pytest.raises(InvalidTopicError):
        Topic.open(tmp_path, "t", partitions=bad)


def test_reopen_with_other_count_is_refused(tmp_path, clock):
    Topic.open(tmp_path, "t", partitions=3, clock=clock).close()
    for n in (1, 2, 4):
        with pytest.raises(InvalidTopicError, match="3 partitions"):
            Topic.open(tmp_path, "t", partitions=n, clock=clock)
    with Topic.open(tmp_path, "t", clock=clock) as t:  # None: the stored count
        assert t.partitions == 3
    with Topic.open(tmp_path, "t", partitions=3, clock=clock) as t:
        assert t.partitions == 3


def test_new_topic_defaults_to_one_partition(tmp_path, clock):
    with Topic.open(tmp_path, "t", clock=clock) as t:
        assert t.partitions == 1


def test_partition_dirs_without_metadata_are_detected(tmp_path, clock):
    # e.g. partitions written by plain Logs, or metadata lost: infer the count from dirs
    for i in range(2):
        with Log.open(tmp_path / f"t-{i}", clock=clock) as log:
            log.append([Record(b"v%d" % i)])
    with pytest.raises(InvalidTopicError, match="2 partitions"):
        Topic.open(tmp_path, "t", partitions=5, clock=clock)
    assert not (tmp_path / META_DIR / "t").exists()
    with Topic.open(tmp_path, "t", clock=clock) as t:
        assert t.partitions == 2
        assert t.partition(1).fetch().records[0].value == b"v1"
    assert (tmp_path / META_DIR / "t").exists()


def test_stray_partition_dir_beyond_stored_count(tmp_path, clock):
    Topic.open(tmp_path, "t", partitions=2, clock=clock).close()
    (tmp_path / "t-7").mkdir()
    with pytest.raises(InvalidTopicError, match="partition 7"):
        Topic.open(tmp_path, "t", clock=clock)


def test_similar_names_do_not_collide(tmp_path, clock):
    # "t-0" is both partition 0 of "t" and a legal topic name: its partitions are "t-0-<i>"
    with Topic.open(tmp_path, "t", partitions=2, clock=clock) as a, \
            Topic.open(tmp_path, "t-0", partitions=3, clock=clock) as b:
        a.send([Record(b"a")], key=b"k")
        b.send([Record(b"b")], key=b"k")
    with Topic.open(tmp_path, "t", clock=clock) as a, Topic.open(tmp_path, "t-0", clock=clock) as b:
        assert (a.partitions, b.partitions) == (2, 3)


def test_corrupt_metadata(tmp_path, clock):
    Topic.open(tmp_path, "t", partitions=2, clock=clock).close()
    (tmp_path / META_DIR / "t").write_bytes(b"{not json")
    with pytest.raises(InvalidTopicError, match="corrupt"):
        Topic.open(tmp_path, "t", clock=clock)


@pytest.fixture(scope="module")
def shared_topic(tmp_path_factory):
    with Topic.open(tmp_path_factory.mktemp("shared"), "t", partitions=7) as t:
        yield t


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=20), min_size=1, max_size=10))
def test_keyed_sends_follow_kafkas_partitioner(shared_topic, keys):
    for k in keys:
        p, res = shared_topic.send([Record(b"v", key=k)])
        assert p == (kafka_murmur2(k) & 0x7FFFFFFF) % 7
        assert shared_topic.partition(p).read(res.base_offset)[0].key == k


def test_explicit_key_overrides_record_key(tmp_path, clock):
    with Topic.open(tmp_path, "t", partitions=16, clock=clock) as t:
        want = (kafka_murmur2(b"route") & 0x7FFFFFFF) % 16
        for i in range(20):
            p, _ = t.send([Record(b"v", key=b"other%d" % i)], key=b"route")
            assert p == want


def test_keyless_batches_rotate(tmp_path, clock):
    with Topic.open(tmp_path, "t", partitions=3, clock=clock) as t:
        parts = [t.send([Record(b"v%d" % i), Record(b"w")])[0] for i in range(9)]
        assert sorted(parts) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
        assert parts[:3] == parts[3:6] == parts[6:]
        assert [t.partition(i).log_end_offset for i in range(3)] == [6, 6, 6]


def test_send_is_one_batch_with_deliver_after(tmp_path, clock):
    with Topic.open(tmp_path, "t", partitions=2, clock=clock) as t:
        due = clock.t + 5000
        p, res = t.send([Record(b"a", key=b"k"), Record(b"b")], deliver_after=due)
        assert (res.base_offset, res.last_offset, res.deliver_after) == (0, 1, due)
        log = t.partition(p)
        assert log.fetch().records == []
        clock.advance(5000)
        assert [r.value for r in log.fetch().records] == [b"a", b"b"]


def test_bad_sends_write_nothing(tmp_path, clock):
    with Topic.open(tmp_path, "t", partitions=2, clock=clock) as t:
        with pytest.raises(InvalidRecordError):
            t.send([Record(b"v")], key="str-key")
        with pytest.raises(InvalidRecordError):
            t.send([])
        with pytest.raises(InvalidRecordError):
            t.send([Record("not bytes", key=b"k")])
        assert [t.partition(i).log_end_offset for i in range(2)] == [0, 0]


def test_partition_index_checked(tmp_path, clock):
    with Topic.open(tmp_path, "t", partitions=2, clock=clock) as t:
        for bad in (-1, 2, "0", True):
            with pytest.raises(KdelayError):
                t.partition(bad)


def test_close_closes_every_partition_and_data_survives(tmp_path, clock):
    t = Topic.open(tmp_path, "t", partitions=4, clock=clock)
    sent = [t.send([Record(b"v%d" % i, key=b"k%d" % i)]) for i in range(40)]
    logs = t.logs
    t.close()
    t.close()  # idempotent
    assert all(log.closed for log in logs)
    with pytest.raises(KdelayError):
        t.send([Record(b"x")])
    with pytest.raises(LogClosedError):
        logs[0].fetch()
    with Topic.open(tmp_path, "t", clock=clock) as t2:
        got = {(p, r.offset): r.value for p in range(4) for r in t2.partition(p).fetch().records}
        assert len(got) == 40
        for i, (p, res) in enumerate(sent):
            assert got[(p, res.base_offset)] == b"v%d" % i


def test_topic_config_reaches_partitions(tmp_path, clock):
    cfg = LogConfig(delayed_delivery_enable=False)
    with Topic.open(tmp_path, "fifo", partitions=2, config=cfg, clock=clock) as t:
        assert all(t.partition(i).config is cfg for i in range(2))
        with pytest.raises(InvalidRecordError):
            t.send([Record(b"v")], deliver_after=clock.t + 1)


def test_open_failure_releases_partitions(tmp_path, clock):
    # partition 1 is held by another open Log: the topic fails to open and must not keep
    # partition 0 locked
    held = Log.open(tmp_path / "t-1", clock=clock)
    with pytest.raises(KdelayError):
        Topic.open(tmp_path, "t", partitions=2, clock=clock)
    held.close()
    with Log.open(tmp_path / "t-0", clock=clock):
        pass  # lock on partition 0 was released
