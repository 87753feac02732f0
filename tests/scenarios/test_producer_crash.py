"""Crash points over the producer's append path: every file operation the sender thread
makes while it appends a producer's batches (flush_messages=1) is made the last thing the
machine did, under each crash model (kdelay.testing.faults). After recovery every record
whose future resolved with metadata is there, where it said, and no record is there
twice; a batch is there whole or not at all."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from conftest import FakeClock

from kdelay import Log, LogConfig, Producer
from kdelay.testing.checks import batches_in, check_log, read_everything
from kdelay.testing.faults import CRASH_MODES, FaultInjector, SimulatedCrash, close_abandoned

CONFIG = LogConfig(flush_messages=1, index_interval_bytes=64, segment_bytes=700)
SENDS = 14
MIN_POINTS = 30  # measured: 36; a floor so that ops escaping fsio would show


@pytest.fixture(autouse=True)
def _no_real_fsync(monkeypatch):
    """The injector models durability; the real syscall only costs time."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def produce(path: str, crash_at: int | None, mode: str) -> tuple[int, dict, list]:
    """Send SENDS records through a Producer (batches of 3, sealed by count; the rest on
    flush), crashing before file operation `crash_at`. Returns (file operations seen, the
    resolved records {offset: (value, deliver_after)}, every sent value)."""
    clock = FakeClock()
    log = Log.open(path, config=CONFIG, clock=clock)
    inj = FaultInjector([path], crash_at=crash_at, seed=hash((crash_at, mode)) & 0xFFFF)
    producer = Producer(log, linger_ms=600_000, batch_records=3, max_spread_ms=0)
    futures = []
    with inj:
        for i in range(SENDS):
            value = b"value-%d-" % i + b"x" * (i * 7 % 40)
            futures.append((value, producer.send(value, delay_ms=(i % 4) * 1000)))
        producer.flush()
    producer.close()
    resolved = {}
    for value, fut in futures:
        if fut.exception() is None:
            meta = fut.result()
            resolved[meta.offset] = (value, meta.deliver_after)
        else:
            assert isinstance(fut.exception(), SimulatedCrash)
    assert inj.crashed == (crash_at is not None)
    close_abandoned(log)  # a process crash, or the end of a clean run
    inj.apply_crash(mode)
    return len(inj.ops), resolved, [v for v, _ in futures]


def reopen(path: str) -> Log:
    return Log.open(path, config=CONFIG, clock=FakeClock(10 ** 13))


def batch_values(log: Log) -> list[set[bytes]]:
    """The values of each batch in the log."""
    held = read_everything(log)
    return [{held[o][0] for o in range(base, base + n)} for base, n, _ in batches_in(log)]


def check(path: str, resolved: dict, sent: list, batches: list[set[bytes]],
          where: str) -> None:
    log = reopen(path)
    try:
        held = read_everything(log)
        for off, want in resolved.items():
            assert held.get(off) == want, f"{where}: resolved record {off} lost or altered"
        counts = Counter(v for v, _ in held.values())
        assert set(counts) <= set(sent) and set(counts.values()) <= {1}, \
            f"{where}: a record twice, or one never sent"
        values = set(counts)
        assert all(b <= values or not b & values for b in batches), \
            f"{where}: part of a batch"
        check_log(log, held, set(resolved), where=where)
    finally:
        log.close()


def test_every_crash_point_of_the_producers_appends(tmp_path) -> None:
    clean = os.fspath(tmp_path / "clean")
    total, resolved, sent = produce(clean, None, "process")
    assert len(resolved) == SENDS
    with reopen(clean) as log:
        batches = batch_values(log)  # the same batches every run: sealed by count
    assert len(batches) > 3
    check(clean, resolved, sent, batches, "no crash")
    assert total >= MIN_POINTS, f"only {total} file operations seen"
    for point in range(total):
        for mode in CRASH_MODES:
            path = os.fspath(tmp_path / f"{point}-{mode}")
            _, resolved, sent = produce(path, point, mode)
            check(path, resolved, sent, batches, f"op {point} {mode}")
