"""Disk full: ENOSPC from every space-allocating file operation (writes, with a short write
first half of the time, and file creation) during append, roll, index persist, commit and
close. Each gives a clear KdelayError, leaves the log consistent (a refused append leaves
nothing that a read sees, not even on disk), and the log works again once space returns,
without a reopen."""

from __future__ import annotations

import errno
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdelay import DeliveryKey, KdelayError, Log, LogConfig, Record
from kdelay.log.segments.layout import segment_name
from kdelay.testing.checks import check_log
from kdelay.testing.faults import FaultInjector

T0 = 1_700_000_000_000


class Disk:
    """Which operations fail with ENOSPC: while `full`, those whose kind is in `kinds` and
    whose path ends with one of `suffixes` (all paths when None)."""

    def __init__(self) -> None:
        self.full = False
        self.kinds = ("write", "create")
        self.suffixes: tuple[str, ...] | None = None
        self.refused = 0

    def __call__(self, op: str, path: str) -> bool:
        hit = self.full and op in self.kinds and (
            self.suffixes is None or path.endswith(self.suffixes))
        self.refused += hit
        return hit


class Harness:
    def __init__(self, path: str, config: LogConfig):
        self.path = path
        self.config = config
        self.clock = lambda: T0
        self.log = Log.open(path, config=config, clock=self.clock)
        self.sent: dict[int, tuple[bytes, int]] = {}
        self.commits: dict[str, DeliveryKey | None] = {}
        self.n = 0

    def append(self, n: int) -> bool:
        """Append a batch; True if accepted. A refusal must be a KdelayError saying ENOSPC."""
        base = self.log.log_end_offset
        recs = [Record(b"v%d-" % (self.n + i) * (1 + (self.n + i) % 5)) for i in range(n)]
        self.n += n
        da = T0 + 1000 * (self.n % 3)
        try:
            res = self.log.append(recs, deliver_after=da)
        except KdelayError as e:
            assert_enospc(e)
            assert self.log.log_end_offset == base
            return False
        assert res.base_offset == base
        assert res.deliver_after == da
        for i, r in enumerate(recs):
            self.sent[base + i] = (r.value, da)
        return True

    def call(self, fn, *args) -> bool:
        try:
            fn(*args)
        except KdelayError as e:
            assert_enospc(e)
            return False
        return True

    def commit(self, group: str, key: DeliveryKey) -> None:
        if self.call(self.log.commit, group, key):
            self.commits[group] = key
        assert self.log.committed(group) == self.commits.get(group)

    def check(self, where: str, all_due: bool = False) -> None:
        for_log = dict(self.sent)
        got = check_log(self.log, for_log, set(for_log), where=where, all_due=all_due)
        assert got == for_log, where
        for group, key in self.commits.items():
            assert self.log.committed(group) == key, where

    def reopen_and_check(self, where: str) -> None:
        self.log.close()
        self.log = Log.open(self.path, config=self.config, clock=lambda: T0 + 10 ** 6)
        assert not self.log.load_report.problems, (where, self.log.load_report.problems)
        self.check(where + " after reopen", all_due=True)
        self.log.close()


def assert_enospc(e: BaseException) -> None:
    """The error is a KdelayError that says what happened: ENOSPC, in errno and message."""
    assert isinstance(e, KdelayError), repr(e)
    assert getattr(e, "errno", None) == errno.ENOSPC, repr(e)
    assert "space" in str(e).lower(), str(e)


def cfg(**kw) -> LogConfig:
    base = {"flush_messages": 1, "index_interval_bytes": 64}
    base.update(kw)
    return LogConfig(**base)


@pytest.fixture(autouse=True)
def _fast_fsync(monkeypatch):
    # nothing here models power loss; real fsyncs only slow the runs down
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def test_append_refused_writes_nothing(tmp_path) -> None:
    h = Harness(str(tmp_path / "p"), cfg())
    disk = Disk()
    with FaultInjector([h.path], enospc=disk, seed=1):
        for _ in range(3):
            assert h.append(2)
        size = os.path.getsize(os.path.join(h.path, segment_name(0) + ".log"))
        disk.full = True
        for _ in range(6):  # short writes half the time (seeded)
            assert not h.append(3)
            assert os.path.getsize(os.path.join(h.path, segment_name(0) + ".log")) == size
        h.check("while full")
        disk.full = False
        for _ in range(3):
            assert h.append(2)
        h.check("space back")
    assert disk.refused >= 6
    h.reopen_and_check("append")


@pytest.mark.parametrize("suffixes", [(".tmp",), (".log",), (".index.tmp",),
                                      (".dlyindex.tmp",), ("checkpoint.tmp",)])
def test_roll_refused(tmp_path, suffixes) -> None:
    """A roll (explicit, or forced by segment_bytes inside append) that cannot write an
    index, the checkpoint, or create the next segment's .log."""
    h = Harness(str(tmp_path / "p"), cfg(segment_bytes=400))
    disk = Disk()
    disk.suffixes = suffixes
    with FaultInjector([h.path], enospc=disk, seed=2):
        h.append(2)
        disk.full = True
        outcomes = [h.append(3) for _ in range(8)]
        outcomes.append(h.call(h.log.roll))
        h.check(f"full {suffixes}")
        disk.full = False
        assert h.call(h.log.roll)
        for _ in range(6):
            assert h.append(3)
        h.check(f"space back {suffixes}")
    assert disk.refused and not all(outcomes), "the fault never fired"
    assert len(h.log.segments) >= 3
    h.reopen_and_check(f"roll {suffixes}")


def test_commit_refused_keeps_old_position(tmp_path) -> None:
    h = Harness(str(tmp_path / "p"), cfg())
    disk = Disk()
    with FaultInjector([h.path], enospc=disk, seed=3):
        h.append(2)
        h.commit("g", DeliveryKey(T0, 0))
        disk.full = True
        h.commit("g", DeliveryKey(T0, 1))
        h.commit("new-group", DeliveryKey(T0, 1))
        assert h.log.committed("g") == DeliveryKey(T0, 0)
        disk.full = False
        h.commit("g", DeliveryKey(T0, 1))
        h.check("commit")
    h.reopen_and_check("commit")


def test_close_refused_then_reopen(tmp_path) -> None:
    """Close cannot persist the indexes: it says so, releases the log, and the next open
    recovers everything that was acknowledged."""
    h = Harness(str(tmp_path / "p"), cfg())
    disk = Disk()
    with FaultInjector([h.path], enospc=disk, seed=4):
        for _ in range(4):
            h.append(2)
        disk.full = True
        try:
            h.log.close()
        except KdelayError as e:
            assert_enospc(e)
        else:
            pytest.fail("close with a full disk reported nothing")
        assert h.log.closed
    h.log = Log.open(h.path, config=h.config, clock=h.clock)
    h.check("after failed close")
    h.append(1)
    h.reopen_and_check("close")


OPS = st.lists(st.tuples(st.sampled_from(["append", "append", "append", "roll", "flush",
                                          "commit", "fill", "free"]),
                         st.integers(1, 6)), min_size=5, max_size=40)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, seed=st.integers(0, 1 << 16),
       kinds=st.sampled_from([("write",), ("create",), ("write", "create")]))
def test_random_operations_with_disk_filling_up(tmp_path_factory, ops, seed, kinds) -> None:
    """Any mix of appends, rolls, flushes and commits while the disk fills and frees: every
    accepted record is readable, every refused one absent, indexes agree, and once space is
    back the log takes appends and reopens clean."""
    h = Harness(str(tmp_path_factory.mktemp("df") / "p"), cfg(segment_bytes=600))
    disk = Disk()
    disk.kinds = kinds
    with FaultInjector([h.path], enospc=disk, seed=seed):
        for i, (op, n) in enumerate(ops):
            if op == "append":
                h.append(n)
            elif op == "roll":
                h.call(h.log.roll)
            elif op == "flush":
                h.call(h.log.flush)
            elif op == "commit":
                h.commit(f"g{n % 2}", DeliveryKey(T0, i))
            else:
                disk.full = op == "fill"
        h.check("end of run")
        disk.full = False
        assert h.append(2)
        h.check("space back")
    h.reopen_and_check("random")
