"""Shared fixtures: a controllable clock and throwaway log directories."""

from __future__ import annotations

import heapq
import os
import shutil
import sys

import pytest
from hypothesis import settings

from kdelay import Log, LogConfig

T0 = 1_700_000_000_000  # a fixed, realistic epoch-ms start for fake clocks

# Property tests draw a fixed set of examples (the same on every run), so a rare random
# find never decides whether a change lands; hunting for new failures is a deliberate run:
# KDELAY_RANDOM=1 (new random examples each run, failures kept in .hypothesis/).
settings.register_profile("fixed", derandomize=True, database=None)
settings.register_profile("random", derandomize=False)
settings.load_profile("random" if os.environ.get("KDELAY_RANDOM") == "1" else "fixed")


class FakeClock:
    """A settable ms clock; `Log` only ever calls it."""

    def __init__(self, t: int = T0):
        self.t = t

    def __call__(self) -> int:
        return self.t

    def advance(self, ms: int) -> int:
        self.t += ms
        return self.t


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def log_dir(tmp_path) -> str:
    return os.fspath(tmp_path / "p-0")


@pytest.fixture
def open_log(log_dir, clock):
    """open_log(**config) -> Log in `log_dir` with the fake clock; closed at teardown."""
    opened: list[Log] = []

    def _open(path: str | None = None, **cfg) -> Log:
        log = Log.open(path or log_dir, config=LogConfig(**cfg), clock=clock)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()


def entries_after(idx, after):
    """A DeliverAfterIndex's entries that may hold a record with key > `after`, in key
    order, merged from its persisted columns and its recent (unpersisted) entries the way
    the fetch planner starts its runs (start_in_columns, iter_recent)."""
    cols = idx.disk_columns
    start = idx.start_in_columns(after)
    persisted = list(zip(*(c[start:].tolist() for c in cols), strict=True))
    recent = list(idx.iter_recent(after)) if idx.has_recent else []
    return list(heapq.merge(persisted, recent))


def have_spark() -> bool:
    """pyspark, pyarrow and a Java runtime are all present."""
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError:
        return False
    home = os.environ.get("JAVA_HOME")
    return bool(shutil.which("java") or (home and os.path.exists(os.path.join(home, "bin",
                                                                                "java"))))


@pytest.fixture(scope="session")
def spark():
    """The one local[2] SparkSession every Spark test shares (starting one takes seconds)."""
    if not have_spark():
        pytest.skip("pyspark or Java not available")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("kdelay-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    import kdelay.spark

    kdelay.spark.register(session)
    yield session
    session.stop()
