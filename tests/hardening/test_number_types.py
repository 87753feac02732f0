"""Class 3: number types of every time and offset parameter, and of the clock.

A matrix over every parameter that is a time, an offset or a count (append's deliver_after,
a record's timestamp and deliver_after, fetch's `after` as an int and as each DeliveryKey
field, commit's key fields, read's offset, max_records / max_bytes / max_wait_ms) and over
the values the clock returns, times a list of value types (int, numpy int64 / int32 /
uint64, float, bool, str, None, 2**63, negative):

- an int or a numpy integer behaves exactly as the equal int does (same result, same
  error), on a separate log;
- anything else is refused with a KdelayError, and the directory is byte for byte as it
  was (log_end_offset, every file's contents);
- nothing is persisted that the reader would reject: after a reopen every record reads
  back and the group position is there, as an int.

The same matrix covers every integer argument of the clients (Topic, Consumer,
QueueConsumer): a numpy integer behaves as the equal int; a bool, a float, a negative
number or anything else is refused with a KdelayError that changed no file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import fields

import numpy as np
import pytest

from kdelay import (
    Consumer,
    DeliveryKey,
    InvalidConfigError,
    KdelayError,
    Log,
    LogConfig,
    QueueConsumer,
    Record,
    Topic,
)
from kdelay.clients.consumer import backoff_ms

T0 = 1_700_000_000_000
NOW = T0 + 2000


class Clock:
    def __init__(self, t=NOW):
        self.t = t

    def __call__(self):
        return self.t


VALUES: dict[str, Callable[[int], object]] = {
    "int": lambda b: b,
    "np.int64": lambda b: np.int64(b),
    "np.int32": lambda b: np.int32(min(b, 2 ** 31 - 1)),
    "np.uint64": lambda b: np.uint64(b),
    "float": lambda b: float(b),
    "float.5": lambda b: b + 0.5,
    "bool": lambda b: True,
    "str": lambda b: str(b),
    "None": lambda b: None,
    "2**63": lambda b: 2 ** 63,
    "np.uint64 2**63": lambda b: np.uint64(2 ** 63),
    "negative": lambda b: -1,
    "np.int64 negative": lambda b: np.int64(-1),
}


def setup(log: Log) -> None:
    log.append([Record(b"a0"), Record(b"a1")], deliver_after=T0)
    log.append([Record(b"b0")], deliver_after=T0 + 1000)
    log.append([Record(b"c0"), Record(b"c1")], deliver_after=T0 + 3000)
    log.commit("g", DeliveryKey(T0, 0))


def _fetch(res):
    return [(r.offset, r.deliver_after, r.timestamp, r.value) for r in res.records], res.next


def _read(recs):
    return [(r.offset, r.deliver_after, r.timestamp, r.value) for r in recs]


def _appended(log, res):
    return (res.base_offset, res.last_offset, res.deliver_after, _read(log.read(5)))


def _commit(log, key):
    log.commit("g", key)
    return log.committed("g")


# parameter -> (base int, whether None is a legal value, op(log, value) -> comparable result)
PARAMS: dict[str, tuple[int, bool, Callable]] = {
    "append deliver_after": (T0 + 5000, True, lambda log, v: _appended(
        log, log.append([Record(b"x")], deliver_after=v))),
    "record deliver_after": (T0 + 5000, True, lambda log, v: _appended(
        log, log.append([Record(b"x", deliver_after=v), Record(b"y")]))),
    "record timestamp": (T0 - 5000, True, lambda log, v: _appended(
        log, log.append([Record(b"x", timestamp=v), Record(b"y")]))),
    "append_columns deliver_after": (T0 + 5000, True, lambda log, v: _appended(
        log, log.append_columns([b"x"], deliver_after=v))),
    "append_columns timestamp": (T0 - 5000, True, lambda log, v: _appended(
        log, log.append_columns([b"x", b"y"], timestamps=[v, None]))),
    "fetch after (offset)": (1, True, lambda log, v: _fetch(log.fetch(v))),
    "fetch DeliveryKey.deliver_after": (T0, False, lambda log, v: _fetch(
        log.fetch(DeliveryKey(v, 1)))),
    "fetch DeliveryKey.offset": (1, False, lambda log, v: _fetch(
        log.fetch(DeliveryKey(T0, v)))),
    "fetch max_records": (1, False, lambda log, v: _fetch(log.fetch(None, max_records=v))),
    "fetch max_bytes": (1, False, lambda log, v: _fetch(log.fetch(None, max_bytes=v))),
    "fetch max_wait_ms": (1, False, lambda log, v: _fetch(log.fetch(None, max_wait_ms=v))),
    "commit DeliveryKey.deliver_after": (T0 + 1000, False, lambda log, v: _commit(
        log, DeliveryKey(v, 2))),
    "commit DeliveryKey.offset": (T0, False, lambda log, v: _commit(
        log, DeliveryKey(T0 + 1000, v))),
    "read offset": (1, False, lambda log, v: _read(log.read(v))),
    "read max_records": (2, False, lambda log, v: _read(log.read(0, max_records=v))),
    "Consumer.poll max_records": (2, False, lambda log, v: _read(
        Consumer(log, "g2").poll(max_records=v))),
    "Consumer.poll timeout_ms": (1, False, lambda log, v: _read(
        Consumer(log, "g2").poll(timeout_ms=v))),
    "Consumer.retry delay_ms": (5000, True, lambda log, v: _retried(log, v)),
}


def _retried(log, v):
    consumer = Consumer(log, "g2")
    out = consumer.retry(consumer.poll(max_records=1)[0], delay_ms=v)
    return out.attempt, out.result.deliver_after - out.result.append_time, _read(log.read(5))


# counts: any size is fine (as long as numpy and int agree); times and offsets are int64
COUNTS = {"fetch max_records", "fetch max_bytes", "fetch max_wait_ms", "read max_records",
          "Consumer.poll max_records", "Consumer.poll timeout_ms"}


@pytest.fixture(autouse=True)
def _no_real_fsync(monkeypatch):
    """Nothing crashes here: the real fsync only costs time."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def int_like(v) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, np.integer)


def snapshot(path: str) -> dict[str, bytes]:
    """Every file's bytes, but the lock and the append horizon: both describe the live
    writer (the horizon counts append attempts for lock-free readers), not the log."""
    out = {}
    for d, _, names in os.walk(path):
        for n in names:
            if n not in (".lock", "append.horizon"):
                with open(os.path.join(d, n), "rb") as f:
                    out[os.path.relpath(os.path.join(d, n), path)] = f.read()
    return out


KEEP = object()  # outcome(): leave the clock alone


def outcome(path: str, op: Callable, value, clock_value=KEEP) -> tuple[str, object]:
    """Run `op` on a fresh log at `path`; ("ok", result) or ("error", class name). A
    refusal must be a KdelayError that changed nothing on disk."""
    clock = Clock()
    log = Log.open(path, config=LogConfig(), clock=clock)
    try:
        setup(log)
        end = log.log_end_offset
        before = snapshot(path)
        if clock_value is not KEEP:
            clock.t = clock_value
        try:
            result = ("ok", op(log, value))
        except KdelayError as e:
            assert log.log_end_offset == end, "a refused call moved log_end_offset"
            assert snapshot(path) == before, "a refused call changed files"
            result = ("error", type(e).__name__)
        except Exception as e:
            raise AssertionError(f"{type(e).__name__} escaped the hierarchy: {e}") from e
        clock.t = NOW
    finally:
        log.close()
    check_reopen(path)
    return result


def check_reopen(path: str) -> None:
    """Nothing persisted that the reader rejects: every record and the group position
    read back (as ints)."""
    with Log.open(path, config=LogConfig(), clock=Clock(T0 + 10 ** 9)) as log:
        recs = log.read(0, max_records=100)
        assert [r.offset for r in recs] == list(range(log.log_end_offset))
        assert all(type(r.timestamp) is int and type(r.deliver_after) is int for r in recs)
        fetched = log.fetch(None, max_records=100).records
        assert sorted(r.offset for r in fetched) == [r.offset for r in recs]
        key = log.committed("g")
        assert key is not None and type(key.deliver_after) is int and type(key.offset) is int


def check_cell(params: dict, counts: set[str], param: str, value_name: str,
               run: Callable[[str, Callable, object], tuple[str, object]]) -> None:
    """One cell of a matrix: `run(directory name, op, value)` with the value, and with the
    equal int on a separate directory for an int-like value."""
    base, none_ok, op = params[param]
    value = VALUES[value_name](base)
    got = run("subject", op, value)
    if int_like(value):
        want = run("reference", op, int(value))
        assert got == want, f"{param} = {value!r} ({value_name}): {got} but as an int {want}"
        out_of_range = int(value) < 0 or (int(value) >= 2 ** 63 and param not in counts)
        if out_of_range:
            assert got[0] == "error", f"{param} = {value!r} accepted"
        if int(value) == base:
            assert got[0] == "ok", f"{param} = {value!r} ({value_name}) refused: {got}"
    elif value is None and none_ok:
        assert got[0] == "ok", f"{param} = None refused: {got}"
    else:
        assert got[0] == "error", f"{param} = {value!r} ({value_name}) accepted: {got}"


@pytest.mark.parametrize("value_name", list(VALUES))
@pytest.mark.parametrize("param", list(PARAMS))
def test_parameter_types(tmp_path, param: str, value_name: str) -> None:
    check_cell(PARAMS, COUNTS, param, value_name,
               lambda name, op, value: outcome(str(tmp_path / name), op, value))


CLOCK_OPS = {
    "append": lambda log, v: _appended(log, log.append([Record(b"x")])),
    "append record timestamps": lambda log, v: _appended(
        log, log.append([Record(b"x"), Record(b"y", timestamp=T0)])),
    "fetch": lambda log, v: _fetch(log.fetch(None, max_records=100)),
    "fetch after key": lambda log, v: _fetch(log.fetch(DeliveryKey(T0, 1))),
    "commit": lambda log, v: _commit(log, DeliveryKey(T0 + 1000, 2)),
    "metrics": lambda log, v: sorted((k, v) for k, v in log.metrics().items()
                                     if k not in ("groups",)),
}


@pytest.mark.parametrize("value_name", list(VALUES))
@pytest.mark.parametrize("op_name", list(CLOCK_OPS))
def test_clock_value_types(tmp_path, op_name: str, value_name: str) -> None:
    """The clock returns `value` from the op on (after a normal setup); an int-like value
    behaves as the equal int, anything else makes the op refuse with nothing written."""
    value = VALUES[value_name](T0 + 5000)
    op = CLOCK_OPS[op_name]
    got = outcome(str(tmp_path / "subject"), op, None, clock_value=value)
    if int_like(value) and 0 <= int(value) < 2 ** 63:
        want = outcome(str(tmp_path / "reference"), op, None, clock_value=int(value))
        assert got == want, f"clock -> {value!r} ({value_name}): {got}, as an int {want}"
    else:
        assert got[0] == "error", f"clock -> {value!r} ({value_name}) accepted: {got}"


# LogConfig's integer settings: a value the log works with, and the smallest one accepted
# (a size or period must be > 0; a delay limit may be 0, "no limit"; retention may be -1,
# "no limit"); every int up to 2**63 - 1 from there is accepted
CONFIG_FIELDS = {"segment_bytes": (1 << 20, 1), "segment_ms": (3_600_000, 1),
                 "index_interval_bytes": (64, 1), "max_delivery_delay_ms": (60_000, 0),
                 "retention_ms": (3_600_000, -1), "retention_bytes": (1 << 20, -1),
                 "flush_messages": (1, 1), "flush_ms": (1000, 1), "max_batch_bytes": (1 << 16, 1),
                 "local_retention_ms": (3_600_000, -2), "local_retention_bytes": (1 << 20, -2),
                 "remote_timeout_ms": (1000, 1), "remote_cache_bytes": (1 << 20, 1)}
CONFIG_NULLABLE = ("flush_messages", "flush_ms")  # None: leave flushing to the OS
# the settings that are not integers: values accepted, values refused
CONFIG_OTHERS = {
    "delayed_delivery_enable": ([True, False], [1, 0, None, "true", np.int64(1)]),
    "compaction_min_ratio": ([0, 0.0, 0.3, 1, 1.0, np.float64(0.5)],
                             [-0.01, 1.01, -1, 2, float("nan"), float("inf"), True, None,
                              "0.5"]),
    "remote_storage": ([None, "s3://bucket/prefix", "file:///tmp/kdelay-store"],
                       ["bucket", "", 3, b"s3://b/p"]),
    "remote_storage_options": ([{}, {"region": "us-east-1", "allow_http": True}],
                               [[("region", "x")], {"region": None}, {1: "x"}, "region=x"]),
}


def config_outcome(name: str, value: object) -> LogConfig | None:
    """LogConfig with `value` for `name`, or None if it refused the value with an
    InvalidConfigError (any other exception fails the test)."""
    try:
        return LogConfig(**{name: value})
    except InvalidConfigError:
        return None
    except Exception as e:
        raise AssertionError(f"LogConfig({name}={value!r}) raised {type(e).__name__}, "
                             f"not InvalidConfigError: {e}") from e


def test_config_tables_name_every_field() -> None:
    assert set(CONFIG_FIELDS) | set(CONFIG_OTHERS) == {f.name for f in fields(LogConfig)}


@pytest.mark.parametrize("value_name", list(VALUES))
@pytest.mark.parametrize("name", list(CONFIG_FIELDS))
def test_config_types(tmp_path, name: str, value_name: str) -> None:
    """LogConfig's times and sizes: an int or numpy integer in the field's range is stored
    as the equal int (and the log works with it); None only where it means "no setting";
    anything else is an InvalidConfigError (a KdelayError)."""
    base, lowest = CONFIG_FIELDS[name]
    value = VALUES[value_name](base)
    cfg = config_outcome(name, value)
    if int_like(value) and lowest <= int(value) < 2 ** 63:
        assert cfg is not None and type(getattr(cfg, name)) is int
        assert getattr(cfg, name) == int(value)
        with Log.open(tmp_path / "p", config=cfg, clock=Clock()) as log:
            setup(log)
    elif value is None and name in CONFIG_NULLABLE:
        assert cfg is not None and getattr(cfg, name) is None
    else:
        assert cfg is None, f"LogConfig({name}={value!r}) accepted"


@pytest.mark.parametrize("name", list(CONFIG_FIELDS))
def test_config_range_of_each_int_field(name: str) -> None:
    """The edges of each integer setting: its smallest accepted value and 2**63 - 1 are
    taken, one below the smallest (zero or a negative) and 2**63 are refused, as numpy
    integers too."""
    _, lowest = CONFIG_FIELDS[name]
    for value in (lowest, lowest + 1, 2 ** 63 - 1, np.int64(lowest), np.int64(2 ** 63 - 1)):
        cfg = config_outcome(name, value)
        assert cfg is not None and getattr(cfg, name) == value, f"{name}={value!r} refused"
    for value in (lowest - 1, lowest - 2, -(2 ** 63), 2 ** 63, np.int64(lowest - 1)):
        assert config_outcome(name, value) is None, f"{name}={value!r} accepted"


@pytest.mark.parametrize("name", list(CONFIG_OTHERS))
def test_config_other_fields(name: str) -> None:
    accepted, refused = CONFIG_OTHERS[name]
    for value in accepted:
        cfg = config_outcome(name, value)
        assert cfg is not None and getattr(cfg, name) == value, f"{name}={value!r} refused"
    for value in refused:
        assert config_outcome(name, value) is None, f"{name}={value!r} accepted"

# ---------------------------------------------------------------------- the clients

class ClientEnv:
    """A topic "t" of two partitions, each with records 0, 1 due and 2 pending (due at
    T0 + 5000), a dead-letter topic, and a clock to move."""

    def __init__(self, root: str):
        self.root = root
        self.clock = Clock()
        self.topic = Topic.open(root, "t", partitions=2, clock=self.clock)
        self.dead = Topic.open(root, "dead", partitions=1, clock=self.clock)
        for log in self.topic.logs:
            log.append([Record(b"a0", key=b"k"), Record(b"a1", key=b"k")], deliver_after=T0)
            log.append([Record(b"b0", key=b"k")], deliver_after=T0 + 5000)
        self.log = self.topic.partition(0)

    def refused_changes_nothing(self, call: Callable[[], object]) -> object:
        """`call()`; if it raises a KdelayError, no file under the root changed."""
        before = snapshot(self.root)
        try:
            return call()
        except KdelayError:
            assert snapshot(self.root) == before, "a refused call changed files"
            raise

    def close(self) -> None:
        self.topic.close()
        self.dead.close()


def _queue(env: ClientEnv, source=None, **kw) -> QueueConsumer:
    return env.refused_changes_nothing(lambda: QueueConsumer(source or env.log, "q", **kw))


def _queue_lock_ms(env, v):
    q = _queue(env, lock_ms=v)
    first = [r.offset for r in q.poll()]
    env.clock.t += 1001  # past a 1000 ms lock: offered again
    return first, [(r.offset, r.delivery_count) for r in q.poll()]


def _queue_max_delivery_count(env, v):
    q = _queue(env, max_delivery_count=v, dead_letter=env.dead)
    q.release(q.poll())
    return [r.delivery_count for r in q.poll()], env.dead.partition(0).log_end_offset


def _queue_compact_min_bytes(env, v):
    q = _queue(env, compact_min_bytes=v)
    recs = q.poll(max_records=1)
    q.ack(recs)
    return [r.offset for r in recs + q.poll()]


def _queue_poll(env, **kw):
    q = _queue(env)
    return [r.offset for r in env.refused_changes_nothing(lambda: q.poll(**kw))]


def _queue_release_delay(env, v):
    q = _queue(env)
    recs = q.poll()
    env.refused_changes_nothing(lambda: q.release(recs, delay_ms=v))
    now = [r.offset for r in q.poll()]
    env.clock.t += 1000
    return now, [r.offset for r in q.poll()]


def _queue_record_partition(env, v):
    q = _queue(env, env.topic)
    recs = [r for r in q.poll() if r.partition == 1]
    env.refused_changes_nothing(lambda: q.ack([recs[0]._replace(partition=v)]))
    return sorted((r.partition, r.offset) for r in q.poll())


def _consumer_retry(env, partition=KEEP, **kw):
    consumer = env.refused_changes_nothing(lambda: Consumer(env.topic, "c", **kw))
    rec = consumer.poll(max_records=1)[0]
    if partition is not KEEP:
        rec = rec._replace(partition=partition)
    out = env.refused_changes_nothing(lambda: consumer.retry(rec))
    return out.action, out.attempt, out.partition, out.result.deliver_after


def _topic_reschedule(env, partition=1, offset=2, deliver_after=T0 + 9000):
    res = env.refused_changes_nothing(
        lambda: env.topic.reschedule(partition, offset, deliver_after))
    return res.base_offset, res.deliver_after


def _topic_open(env, v):
    with env.refused_changes_nothing(lambda: Topic.open(env.root, "fresh", partitions=v,
                                                        clock=env.clock)) as topic:
        return topic.partitions


CLIENT_PARAMS: dict[str, tuple[int, bool, Callable]] = {
    "Topic.open partitions": (2, True, _topic_open),
    "Topic.partition": (1, False, lambda env, v: env.refused_changes_nothing(
        lambda: env.topic.partition(v)).log_end_offset),
    "Topic.send deliver_after": (T0 + 5000, True, lambda env, v: env.refused_changes_nothing(
        lambda: env.topic.send([Record(b"x", key=b"k")], deliver_after=v))),
    "Topic.cancel partition": (1, False, lambda env, v: env.refused_changes_nothing(
        lambda: env.topic.cancel(v, [2]))),
    "Topic.reschedule partition": (1, False, lambda env, v: _topic_reschedule(env, partition=v)),
    "Topic.reschedule offset": (2, False, lambda env, v: _topic_reschedule(env, offset=v)),
    "Topic.reschedule deliver_after": (T0 + 9000, False,
                                       lambda env, v: _topic_reschedule(env, deliver_after=v)),
    "Consumer max_attempts": (1, True, lambda env, v: _consumer_retry(
        env, max_attempts=v, dead_letter=env.dead)),
    "Consumer backoff_base_ms": (1000, False, lambda env, v: _consumer_retry(
        env, backoff_base_ms=v)),
    "Consumer backoff_max_ms": (60_000, False, lambda env, v: _consumer_retry(
        env, backoff_max_ms=v)),
    "Consumer.retry record partition": (1, False, lambda env, v: _consumer_retry(env, partition=v)),
    "Consumer(topic).poll max_records": (2, False, lambda env, v: sorted(
        r.offset for r in Consumer(env.topic, "c").poll(max_records=v))),
    "backoff_ms attempt": (3, False, lambda env, v: backoff_ms(v)),
    "QueueConsumer lock_ms": (1000, False, _queue_lock_ms),
    "QueueConsumer max_delivery_count": (1, False, _queue_max_delivery_count),
    "QueueConsumer compact_min_bytes": (0, False, _queue_compact_min_bytes),
    "QueueConsumer.poll max_records": (1, False, lambda env, v: _queue_poll(env, max_records=v)),
    "QueueConsumer.poll timeout_ms": (1, False, lambda env, v: _queue_poll(env, timeout_ms=v)),
    "QueueConsumer.release delay_ms": (1000, False, _queue_release_delay),
    "QueueConsumer.ack record partition": (1, False, _queue_record_partition),
}
CLIENT_COUNTS = {"Consumer(topic).poll max_records", "backoff_ms attempt",
                 "QueueConsumer.poll max_records", "QueueConsumer.poll timeout_ms"}


def client_outcome(root: str, op: Callable, value) -> tuple[str, object]:
    env = ClientEnv(root)
    try:
        return "ok", op(env, value)
    except KdelayError as e:
        return "error", type(e).__name__
    except Exception as e:
        raise AssertionError(f"{type(e).__name__} escaped the hierarchy: {e}") from e
    finally:
        env.close()


@pytest.mark.parametrize("value_name", list(VALUES))
@pytest.mark.parametrize("param", list(CLIENT_PARAMS))
def test_client_parameter_types(tmp_path, param: str, value_name: str) -> None:
    check_cell(CLIENT_PARAMS, CLIENT_COUNTS, param, value_name,
               lambda name, op, value: client_outcome(str(tmp_path / name), op, value))
