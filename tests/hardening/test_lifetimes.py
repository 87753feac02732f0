"""Class 7: lifetimes of locks, group files and group members.

- A Log (or Topic) dropped without close() releases its directory lock when it is
  garbage-collected: a later open in the same process works and finds every record.
- One damaged group position file (of an earlier version, not yet folded into the commit
  journal) does not make metrics() fail for the whole log: that group is reported with its
  error, every other group as usual (damage to the journal: tests/groups/).
- Two Consumers of one group on one Log: the older is fenced (as Kafka's group generations
  do) or the second is refused; either way no two members both consume, and the committed
  position never moves backwards.
"""

from __future__ import annotations

import gc
import os

import pytest

from kdelay import Consumer, DeliveryKey, KdelayError, Log, LogConfig, Record, Topic
from kdelay.groups.position_file import encode_slot

T0 = 1_700_000_000_000


@pytest.fixture(autouse=True)
def _no_real_fsync(monkeypatch):
    monkeypatch.setattr(os, "fsync", lambda fd: None)


# ---------------------------------------------------------------------- locks


def _abandon_log(path: str, config: LogConfig, used: str) -> None:
    """Open, use and drop a Log without closing it (the frame ends: no reference left)."""
    log = Log.open(path, config=config, clock=lambda: T0)
    log.append([Record(b"kept")])
    if used == "consumer":
        c = Consumer(log, "g")
        c.poll()
        c.commit()
    elif used == "fetch":
        log.fetch(None, max_records=1, max_wait_ms=1)
    elif used == "roll":
        log.roll()
        log.append([Record(b"second")])


@pytest.mark.parametrize("used", ["append", "consumer", "fetch", "roll"])
@pytest.mark.parametrize("flush", [{}, {"flush_ms": 20}, {"flush_messages": 1}])
def test_dropped_log_releases_its_lock(tmp_path, used: str, flush: dict) -> None:
    path = str(tmp_path / "p")
    config = LogConfig(**flush)
    _abandon_log(path, config, used)
    gc.collect()
    with Log.open(path, config=config, clock=lambda: T0) as log:  # not LogLockedError
        assert log.read(0)[0].value == b"kept"


def test_dropped_topic_releases_its_locks(tmp_path) -> None:
    def use() -> None:
        topic = Topic.open(tmp_path, "t", partitions=3, clock=lambda: T0)
        for i in range(6):
            topic.send([Record(b"v%d" % i)])

    use()
    gc.collect()
    with Topic.open(tmp_path, "t", clock=lambda: T0) as topic:
        assert sum(len(topic.partition(i).read(0)) for i in range(3)) == 6


# ---------------------------------------------------------------------- group files

DAMAGE = {
    "garbage": lambda raw: b"\x00\xff garbage",
    "empty": lambda raw: b"",
    "truncated": lambda raw: raw[: len(raw) // 2],
    "bad checksum": lambda raw: raw[:-3] + b"zz\n",
    "bit flip": lambda raw: raw[:20] + bytes([raw[20] ^ 0x08]) + raw[21:],
    "not utf-8": lambda raw: b"\xc3\x28" + raw,
}


@pytest.mark.parametrize("how", list(DAMAGE))
def test_one_damaged_group_does_not_break_metrics(tmp_path, how: str) -> None:
    path = str(tmp_path / "p")
    with Log.open(path, clock=lambda: T0) as log:
        log.append([Record(b"a"), Record(b"b"), Record(b"c")])
    gdir = os.path.join(path, "groups")
    os.makedirs(gdir)
    for g in ("good", "bad", "other"):  # files of an earlier version
        raw = encode_slot(g, 1, DeliveryKey(T0, 0), T0)
        with open(os.path.join(gdir, g.encode().hex() + ".pos"), "wb") as f:
            f.write(DAMAGE[how](raw) if g == "bad" else raw)
    with Log.open(path, clock=lambda: T0) as log:
        m = log.metrics()  # must not raise
        groups = m["groups"]
        for g in ("good", "other"):
            assert groups[g]["committed"] == DeliveryKey(T0, 0)
            assert groups[g]["lag"] == 2
        assert "bad" in groups, "the damaged group is not reported"
        assert groups["bad"].get("error"), f"no error reported for it: {groups['bad']}"
        with pytest.raises(KdelayError):
            log.committed("bad")
        # a new commit repairs it
        log.commit("bad", DeliveryKey(T0, 1))
        assert log.metrics()["groups"]["bad"]["lag"] == 1


# ---------------------------------------------------------------------- two members


def _fill(log_or_topic, n: int) -> None:
    for i in range(n):
        if isinstance(log_or_topic, Topic):
            log_or_topic.send([Record(b"r%d" % i, key=b"k%d" % i)])
        else:
            log_or_topic.append([Record(b"r%d" % i)])


def _committed(source) -> list:
    logs = source.logs if isinstance(source, Topic) else [source]
    return [log.committed("g") for log in logs]


def _never_backwards(history: list[list]) -> None:
    for before, after in zip(history, history[1:], strict=False):
        for b, a in zip(before, after, strict=True):
            assert b is None or (a is not None and a >= b), \
                f"committed position moved backwards: {before} -> {after}"


@pytest.mark.parametrize("kind", ["log", "topic"])
def test_second_member_fences_or_is_refused(tmp_path, kind: str) -> None:
    src = (Log.open(tmp_path / "p", clock=lambda: T0) if kind == "log"
           else Topic.open(tmp_path, "t", partitions=2, clock=lambda: T0))
    try:
        _fill(src, 20)
        history = [_committed(src)]
        old = Consumer(src, "g")
        first = old.poll(max_records=4)
        assert len(first) == 4
        old.commit()
        history.append(_committed(src))
        old.poll(max_records=3)  # polled, not committed
        try:
            new = Consumer(src, "g")
        except KdelayError:
            # refused: the one member goes on alone
            more = old.poll(max_records=100)
            old.commit()
            history.append(_committed(src))
            _never_backwards(history)
            assert len(first) + 3 + len(more) == 20
            return
        # fenced: the new member takes over from the committed position...
        got = new.poll(max_records=100)
        assert len(got) == 16
        new.commit()
        history.append(_committed(src))
        # ...and the old one can neither commit its older position nor keep consuming
        with pytest.raises(KdelayError):
            old.commit()
        history.append(_committed(src))
        with pytest.raises(KdelayError):
            old.poll()
        _never_backwards(history)
        assert _committed(src) == history[-2]
    finally:
        src.close()


def test_a_dropped_member_does_not_block_the_group(tmp_path) -> None:
    """Whichever design: once the first member is gone (dropped, as a restarted worker's
    is), a new member of the group works."""
    with Log.open(tmp_path / "p", clock=lambda: T0) as log:
        _fill(log, 5)

        def first_worker() -> None:
            c = Consumer(log, "g")
            c.poll(max_records=2)
            c.commit()

        first_worker()
        gc.collect()
        c = Consumer(log, "g")
        assert [r.value for r in c.poll()] == [b"r2", b"r3", b"r4"]
