"""Fixtures for the pytest-benchmark microbenchmarks (bench/test_bench_micro.py).

Logs are built once per session in a temp dir, with the builders of bench/scaling.py, so
the microbenchmarks and the scaling curves measure the same workload: 16-byte keys,
100-byte values, 100-record batches, batch i appended at T0 + i ms and due up to 15 min
later.

Not collected by the normal `pytest` run: pyproject's testpaths is ["tests"].
"""

from __future__ import annotations

import logging
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scaling import (  # noqa: E402
    MICRO_RECORDS,
    T0,
    FakeClock,
    batch_bytes,
    build_log,
    crash_image,
    record_pool,
)

from kdelay import DeliveryKey, Log, LogConfig  # noqa: E402

N_RECORDS = MICRO_RECORDS
HALF_DUE = T0 + N_RECORDS // 100 + 7 * 60_000  # about half of the 15-min spread is due


@pytest.fixture(scope="session", autouse=True)
def _quiet_recovery_warnings() -> None:
    # the crash-open benchmark truncates a torn tail on purpose
    logging.getLogger("kdelay").setLevel(logging.ERROR)


@pytest.fixture(scope="session")
def bench_root(tmp_path_factory) -> str:
    return os.fspath(tmp_path_factory.mktemp("kdelay-bench"))


@pytest.fixture(scope="session")
def std_batch() -> list:
    """One batch of 100 standard records."""
    return record_pool(100, lists=1)[0]


@pytest.fixture(scope="session")
def paged_log(bench_root):
    """1M records over ~8 segments of 16 MiB, clock half-way through the 15-min spread:
    every segment holds both due and pending records. Yields (log, cursor in the middle
    of the due records)."""
    path = os.path.join(bench_root, "paged")
    build_log(path, N_RECORDS, config=LogConfig(segment_bytes=16 << 20))
    log = Log.open(path, config=LogConfig(segment_bytes=16 << 20), clock=FakeClock(HALF_DUE))
    assert len(log.segments) >= 5
    m = log.metrics()
    assert m["due_records"] > 300_000 and m["pending_records"] > 300_000
    mid = DeliveryKey(T0 + 3 * 60_000, 0)
    yield log, mid
    log.close()


@pytest.fixture(scope="session")
def closed_log_1m(bench_root) -> str:
    """A cleanly closed 1M-record log (default LogConfig: one segment)."""
    path = os.path.join(bench_root, "closed-1m")
    build_log(path, N_RECORDS)
    return path


@pytest.fixture(scope="session")
def crash_image_1m(bench_root) -> str:
    """What a crash leaves of a live 1M-record log (~110 MB active segment, never closed,
    half a batch of torn tail)."""
    path = os.path.join(bench_root, "crash-1m")
    n = crash_image(path, batch_bytes(100) * (N_RECORDS // 100))
    assert n == N_RECORDS
    return path
