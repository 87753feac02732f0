"""Class 4: errors outside the hierarchy.

A matrix over the public entry points (Log.open, Topic.open, append, send, fetch, read,
commit, the calls of a closed log, Consumer's settings and retry) with the malformed
arguments and hostile environments a user or operator produces. For each:

- only a KdelayError subclass escapes (never struct.error, OverflowError,
  UnicodeEncodeError, TypeError, ValueError, FileExistsError, NotADirectoryError, an
  OSError such as EBADF, ...);
- a refused call writes nothing: every file of the directories it could touch is byte for
  byte as before, and a path that did not exist still does not;
- a refused commit leaves the group's good position, also after a reopen.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from kdelay import (
    Consumer,
    DeliveryKey,
    KdelayError,
    Log,
    LogClosedError,
    LogConfig,
    PackedBinary,
    Record,
    Topic,
)

T0 = 1_700_000_000_000
GOOD = DeliveryKey(T0, 1)


@pytest.fixture(autouse=True)
def _no_real_fsync(monkeypatch):
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@dataclass
class Env:
    root: str
    path: str        # a healthy log directory, closed, group "g" committed at GOOD
    file: str        # a plain file
    fresh: str       # a path that does not exist
    log: Log | None = None
    topic: Topic | None = None

    def open(self) -> Log:
        self.log = Log.open(self.path, clock=lambda: T0 + 5000)
        return self.log

    def open_topic(self) -> Topic:
        self.topic = Topic.open(self.root, "t", partitions=2, clock=lambda: T0)
        return self.topic


def make_env(tmp_path) -> Env:
    root = str(tmp_path)
    path = os.path.join(root, "p-0")
    with Log.open(path, clock=lambda: T0) as log:
        log.append([Record(b"a"), Record(b"b")], deliver_after=T0)
        log.append([Record(b"c", headers=[("kdelay.attempt", b"9" * 5000)])])
        log.commit("g", GOOD)
    file = os.path.join(root, "a-file")
    with open(file, "wb") as f:
        f.write(b"not a log")
    return Env(root, path, file, os.path.join(root, "fresh"))


def snapshot(root: str) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for d, dirs, names in os.walk(root):
        for n in dirs:
            out[os.path.relpath(os.path.join(d, n), root) + "/"] = None
        for n in names:
            if n in (".lock", "append.horizon"):  # the live writer's state, not the log's
                continue
            with open(os.path.join(d, n), "rb") as f:
                out[os.path.relpath(os.path.join(d, n), root)] = f.read()
    return out


def _consumer_retry(env: Env, **settings) -> None:
    """Bad backoff settings: refused when the Consumer is made, or at the latest by the
    retry that would use them (which then writes nothing)."""
    consumer = Consumer(env.log, "g2", **settings)
    rec = consumer.poll()[0]
    consumer.retry(rec)


def _retry_huge_attempt(env: Env, **kw) -> None:
    log = env.log
    recs = Consumer(log, "g3").poll()
    huge = next(r for r in recs if r.headers)
    dead = Log.open(os.path.join(env.root, "dead"), clock=lambda: T0) if kw else None
    try:
        Consumer(log, "g3", max_attempts=3, dead_letter=dead).retry(huge) if kw else \
            Consumer(log, "g3").retry(huge)
    finally:
        if dead is not None:
            dead.close()


BAD_KEYS = {
    "str deliver_after": DeliveryKey("x", 1),
    "float deliver_after": DeliveryKey(T0 + 0.5, 1),
    "None fields": DeliveryKey(None, None),
    "str offset": DeliveryKey(T0, "1"),
    "2**64 deliver_after": DeliveryKey(2 ** 64, 1),
    "negative offset": DeliveryKey(T0, -7),
    "three-tuple": (T0, 1, 2),
    "list": [T0, 1],
}

# name -> (what to open first, call(env), whether a success is also acceptable)
CASES: dict[str, tuple[str | None, Callable[[Env], object], bool]] = {
    "Log.open on a file": (None, lambda e: Log.open(e.file), False),
    "Log.open under a file": (None, lambda e: Log.open(os.path.join(e.file, "p")), False),
    "Log.open(None)": (None, lambda e: Log.open(None), False),
    "Log.open clock=5 (new dir)": (None, lambda e: Log.open(e.fresh, clock=5), False),
    "Log.open clock=5 (existing)": (None, lambda e: Log.open(e.path, clock=5), False),
    "Log.open clock='x'": (None, lambda e: Log.open(e.fresh, clock="x"), False),
    "Log.open config='x'": (None, lambda e: Log.open(e.fresh, config="x"), False),
    "Log.open config=dict": (None, lambda e: Log.open(e.fresh, config={"segment_bytes": 1}), False),
    "LogConfig bad": (None, lambda e: LogConfig(segment_bytes="1"), False),
    "LogConfig float": (None, lambda e: LogConfig(retention_ms=1.5), False),
    "Topic.open on a file": (None, lambda e: Topic.open(e.file, "t"), False),
    "Topic.open under a file": (None, lambda e: Topic.open(os.path.join(e.file, "r"), "t"), False),
    "Topic.open clock=5": (None, lambda e: Topic.open(e.fresh, "t", clock=5), False),
    "Topic.open config='x'": (None, lambda e: Topic.open(e.fresh, "t", config="x"), False),
    "Topic.open partitions='2'": (None, lambda e: Topic.open(e.fresh, "t", partitions="2"), False),
    "Topic.open bad name": (None, lambda e: Topic.open(e.fresh, "a/b"), False),
    "append deliver_after=2**63": ("log",
        lambda e: e.log.append([Record(b"x")], deliver_after=2 ** 63), False),
    "append record deliver_after=2**63": ("log",
        lambda e: e.log.append([Record(b"x", deliver_after=2 ** 63)]), False),
    "append record timestamp=2**63": ("log",
        lambda e: e.log.append([Record(b"x", timestamp=2 ** 63)]), False),
    "append record timestamp=-1": ("log",
        lambda e: e.log.append([Record(b"x", timestamp=-1)]), False),
    "append unencodable header key": ("log",
        lambda e: e.log.append([Record(b"x", headers=[("\udc80", b"v")])]), False),
    "append header key bytes": ("log",
        lambda e: e.log.append([Record(b"x", headers=[(b"k", b"v")])]), False),
    "append header value str": ("log",
        lambda e: e.log.append([Record(b"x", headers=[("k", "v")])]), False),
    "append value int": ("log", lambda e: e.log.append([Record(5)]), False),
    "append a generator": ("log", lambda e: e.log.append(Record(b"x") for _ in range(2)), False),
    "append a Record": ("log", lambda e: e.log.append(Record(b"x")), True),
    "append bytes": ("log", lambda e: e.log.append(b"x"), False),
    "send bytes": ("topic", lambda e: e.topic.send(b"x"), False),
    "append_columns empty": ("log", lambda e: e.log.append_columns([]), False),
    "append_columns a generator": ("log",
        lambda e: e.log.append_columns(b"x" for _ in range(2)), False),
    "append_columns value str": ("log", lambda e: e.log.append_columns(["x"]), False),
    "append_columns key int": ("log", lambda e: e.log.append_columns([b"x"], keys=[5]), False),
    "append_columns keys too short": ("log",
        lambda e: e.log.append_columns([b"x", b"y"], keys=[b"k"]), False),
    "append_columns timestamp=2**63": ("log",
        lambda e: e.log.append_columns([b"x"], timestamps=[2 ** 63]), False),
    "append_columns timestamp float": ("log",
        lambda e: e.log.append_columns([b"x"], timestamps=[1.5]), False),
    "append_columns packed lengths short of data": ("log",
        lambda e: e.log.append_columns(PackedBinary(np.array([1]), b"xy")), False),
    "append_columns packed length -2": ("log",
        lambda e: e.log.append_columns(PackedBinary(np.array([-2, 4]), b"abcd")), False),
    "append_columns packed lengths float": ("log",
        lambda e: e.log.append_columns(PackedBinary(np.array([1.0]), b"x")), False),
    "append_columns packed data str": ("log",
        lambda e: e.log.append_columns(PackedBinary(np.array([1]), "x")), False),
    "append_columns packed keys a list": ("log",
        lambda e: e.log.append_columns(PackedBinary(np.array([1]), b"x"), keys=[b"k"]), False),
    "append_columns packed keys too short": ("log",
        lambda e: e.log.append_columns(PackedBinary(np.array([1, 1]), b"xy"),
                                       keys=PackedBinary(np.array([1]), b"k")), False),
    "append_columns packed timestamp -1": ("log",
        lambda e: e.log.append_columns(PackedBinary(np.array([1]), b"x"),
                                       timestamps=np.array([-1])), False),
    "append_columns packed timestamp None": ("log",
        lambda e: e.log.append_columns(PackedBinary(np.array([1]), b"x"),
                                       timestamps=[None]), False),
    "append_columns packed empty": ("log",
        lambda e: e.log.append_columns(PackedBinary(np.array([], np.int64), b"")), False),
    "append_columns deliver_after=-1": ("log",
        lambda e: e.log.append_columns([b"x"], deliver_after=-1), False),
    "send unencodable header key": ("topic",
        lambda e: e.topic.send([Record(b"x", headers=[("\ud800", b"v")])]), False),
    "send deliver_after=2**63": ("topic",
        lambda e: e.topic.send([Record(b"x")], deliver_after=2 ** 63), False),
    "send key=5": ("topic", lambda e: e.topic.send([Record(b"x")], key=5), False),
    "Topic.partition('0')": ("topic", lambda e: e.topic.partition("0"), False),
    "fetch after='x'": ("log", lambda e: e.log.fetch("x"), False),
    "fetch after=2**64": ("log", lambda e: e.log.fetch(2 ** 64), False),
    "read offset=2**64": ("log", lambda e: e.log.read(2 ** 64), True),
    "read offset='0'": ("log", lambda e: e.log.read("0"), False),
    "closed fetch None": ("closed", lambda e: e.log.fetch(None), False),
    "closed fetch offset": ("closed", lambda e: e.log.fetch(1), False),
    "closed fetch key": ("closed", lambda e: e.log.fetch(GOOD), False),
    "closed read": ("closed", lambda e: e.log.read(0), False),
    "closed append": ("closed", lambda e: e.log.append([Record(b"x")]), False),
    "closed commit": ("closed", lambda e: e.log.commit("g", DeliveryKey(T0, 0)), False),
    "closed roll": ("closed", lambda e: e.log.roll(), False),
    "closed flush": ("closed", lambda e: e.log.flush(), False),
    "closed retention": ("closed", lambda e: e.log.enforce_retention(), False),
    "closed metrics": ("closed", lambda e: e.log.metrics(), True),
    "closed committed": ("closed", lambda e: e.log.committed("g"), True),
    "closed earliest_pending": ("closed", lambda e: e.log.clients.earliest_pending(T0), True),
    "closed topic send": ("closed_topic", lambda e: e.topic.send([Record(b"x")]), False),
    "Consumer backoff_base_ms=-1": ("log", lambda e: _consumer_retry(e, backoff_base_ms=-1), False),
    "Consumer backoff_base_ms='1'": ("log", lambda e: _consumer_retry(e, backoff_base_ms="1"), False),
    "Consumer backoff_factor=0.5": ("log", lambda e: _consumer_retry(e, backoff_factor=0.5), False),
    "Consumer backoff_factor='2'": ("log", lambda e: _consumer_retry(e, backoff_factor="2"), False),
    "Consumer backoff_max_ms=None": ("log", lambda e: _consumer_retry(e, backoff_max_ms=None), False),
    "Consumer backoff_jitter=2": ("log", lambda e: _consumer_retry(e, backoff_jitter=2.0), False),
    "Consumer backoff_jitter='x'": ("log", lambda e: _consumer_retry(e, backoff_jitter="x"), False),
    "Consumer group=5": ("log", lambda e: Consumer(e.log, 5), False),
    "Consumer of a str": (None, lambda e: Consumer("p-0", "g"), False),
    "Consumer.poll max_records='1'": ("log", lambda e: Consumer(e.log, "g").poll("1"), False),
    "Consumer.retry not a record": ("log", lambda e: Consumer(e.log, "g").retry("x"), False),
    "Consumer.retry delay_ms=-1": ("log",
        lambda e: Consumer(e.log, "g").retry(e.log.read(0)[0], delay_ms=-1), False),
    "retry huge kdelay.attempt": ("log", lambda e: _retry_huge_attempt(e), True),
    "retry huge kdelay.attempt, max_attempts": ("log",
        lambda e: _retry_huge_attempt(e, dead=True), True),
}
for _name, _key in BAD_KEYS.items():
    CASES[f"fetch {_name}"] = ("log", (lambda k: lambda e: e.log.fetch(k))(_key), False)
    CASES[f"commit {_name}"] = ("log", (lambda k: lambda e: e.log.commit("g", k))(_key), False)
    CASES[f"topic commit {_name}"] = ("topic",
        (lambda k: lambda e: e.topic.partition(0).commit("g", k))(_key), False)


@pytest.mark.parametrize("name", list(CASES))
def test_only_kdelay_errors_escape(tmp_path, name: str) -> None:
    env = make_env(tmp_path)
    prep, call, success_ok = CASES[name]
    if prep in ("log", "closed"):
        env.open()
    elif prep in ("topic", "closed_topic"):
        env.open_topic()
    if prep == "closed":
        env.log.close()
    elif prep == "closed_topic":
        env.topic.close()
    before = snapshot(env.root)
    refused = None
    after = None
    try:
        call(env)
    except KdelayError as e:
        refused = e
    except Exception as e:  # the point of the test
        pytest.fail(f"{name}: {type(e).__name__} escaped the hierarchy: {e}")
    finally:
        after = snapshot(env.root)
        for thing in (env.log, env.topic):
            if thing is not None:
                with contextlib.suppress(KdelayError):
                    thing.close()
    if refused is None:
        assert success_ok, f"{name}: accepted"
        if name.startswith("closed"):
            return
    else:
        assert after == before, f"{name}: refused ({refused}) but wrote"
    with Log.open(env.path, clock=lambda: T0) as log:
        assert log.committed("g") == GOOD, f"{name}: the group's position is gone"
        assert [r.value for r in log.read(0)][:3] == [b"a", b"b", b"c"]
    if name.startswith("closed"):
        assert isinstance(refused, LogClosedError) or success_ok, \
            f"{name}: {type(refused).__name__}, not LogClosedError"
