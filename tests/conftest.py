"""Shared fixtures: a controllable clock and throwaway log directories."""

from __future__ import annotations

import contextlib
import heapq
import importlib
import io
import os
import shutil
import struct

import crc32c
import pytest
from hypothesis import settings

from kdelay import Log, LogConfig
from kdelay.index import index_file
from kdelay.validation import MAX_INT64

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


def run_cli(*argv: str) -> tuple[int, str, str]:
    """`kdelay ARGV...` run in this process: (exit code, stdout, stderr)."""
    from kdelay.tools.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def entries_after(idx, after):
    """A DeliverAfterIndex's entries that may hold a record with key > `after`, in key
    order, merged from its persisted columns and its recent (unpersisted) entries the way
    the fetch planner starts its runs (start_in_columns, recent_start, recent_window and
    arrivals_window, with every entry due)."""
    cols = idx.disk_columns
    start = idx.start_in_columns(after)
    persisted = list(zip(*(c[start:].tolist() for c in cols), strict=True))
    recent = []
    if idx.has_recent:
        ordered, _ = idx.recent_window(idx.recent_start(after), MAX_INT64, len(idx) + 1)
        recent = [*zip(*ordered.tolist(), strict=True),
                  *zip(*idx.arrivals_window(after, MAX_INT64).tolist(), strict=True)]
    return list(heapq.merge(persisted, sorted(recent)))


@contextlib.contextmanager
def chunks_of(entries: int):
    """Index files written meanwhile have chunks of `entries` entries (kdelay writes 1024;
    small chunks put several in a small test file)."""
    saved = index_file.CHUNK_ENTRIES
    index_file.CHUNK_ENTRIES = entries
    try:
        yield
    finally:
        index_file.CHUNK_ENTRIES = saved


def rewrite_as_version_1(path: str) -> None:
    """Rewrite an index file as kdelay wrote it before chunk checksums (format version 1,
    docs/formats.md): magic ending in b"1", bytes 40..56 zero, the CRC-32C of all the
    columns at byte 56, no chunk table."""
    with open(path, "rb") as f:
        raw = f.read()
    magic, base, log_bytes, next_offset, n, chunk, _, _, _ = struct.unpack_from("<8sqqqqqqII", raw)
    body = raw[64:len(raw) - (4 * -(-n // chunk) if n else 0)]
    head = struct.pack("<8sqqqqqqI", magic[:7] + b"1", base, log_bytes, next_offset, n, 0, 0,
                       crc32c.crc32c(body))
    with open(path, "wb") as f:
        f.write(head + struct.pack("<I", crc32c.crc32c(head[:56])) + body)


def in_ci() -> bool:
    """Running in CI: CI=true, as CI services set it (and .ci/run does)."""
    return os.environ.get("CI", "").lower() == "true"


def spark_missing(*, java: bool = True) -> str | None:
    """What the Spark tests need and this machine lacks (pyspark, pyarrow, and with `java`
    a Java runtime), as a skip reason; None when nothing is missing. In CI a lack fails
    instead (at collection when this is called from a skipif condition or a module's
    import check): CI on a machine without a JDK must not pass with no Spark test run."""
    missing = []
    for module in ("pyspark", "pyarrow"):
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    home = os.environ.get("JAVA_HOME")
    if java and not (shutil.which("java") or (home and os.path.exists(os.path.join(
            home, "bin", "java")))):
        missing.append("Java (java on PATH or JAVA_HOME)")
    if not missing:
        return None
    reason = "the Spark tests need " + " and ".join(missing)
    if in_ci():
        pytest.fail(f"{reason}, and CI must run them (.ci/run installs the spark extra and "
                    "Java 17)", pytrace=False)
    return reason


def have_spark() -> bool:
    """pyspark, pyarrow and a Java runtime are all present (in CI: or the run fails)."""
    return spark_missing() is None


def skip_module_without_spark_libraries() -> None:
    """At the top of a Spark test module: skip it where pyspark or pyarrow is missing (in
    CI: fail)."""
    reason = spark_missing(java=False)
    if reason:
        pytest.skip(reason, allow_module_level=True)


@pytest.fixture(scope="session")
def spark():
    """The one local[2] SparkSession every Spark test shares (starting one takes seconds),
    made as a user makes one (kdelay.spark.session); skipped where pyspark, pyarrow or Java
    is missing, a failure in CI."""
    reason = spark_missing()
    if reason:
        pytest.skip(reason)
    import kdelay.spark

    session = kdelay.spark.session("kdelay-tests", cores=2)
    session.conf.set("spark.sql.shuffle.partitions", "2")  # small test data: fewer tasks
    yield session
    session.stop()
