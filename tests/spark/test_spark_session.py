"""A Python user's first hour with kdelay on Spark: `kdelay.spark.session()`, a silent and
idempotent `register`, a forecast of pending records only, the README's example run as a
script without the virtualenv activated, and no WARN lines from a stopped stream or from
kdelay's own Spark commands."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import have_spark, skip_module_without_spark_libraries

skip_module_without_spark_libraries()

import kdelay.spark  # noqa: E402
from kdelay import Log, LogConfig, Record, Topic  # noqa: E402
from kdelay.spark.checks import Problem  # noqa: E402

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(not have_spark(), reason="pyspark or Java not available")]

REPO = Path(__file__).resolve().parents[2]
WARN_LINE = re.compile(r"\bWARN\b")
HOUR = 3_600_000


def _now() -> int:
    return time.time_ns() // 1_000_000


def _no_noise(stderr: str) -> None:
    """No Spark WARN line and no console progress bar."""
    assert not [line for line in stderr.splitlines() if WARN_LINE.search(line)], stderr
    assert "[Stage " not in stderr, stderr


def _script_env(tmp_path: Path) -> dict:
    """A shell where the virtualenv is not activated: its bin directory off PATH, no
    PYSPARK_PYTHON, and a `python3` / `python` first on PATH that fails, so that a worker
    started from PATH instead of this interpreter fails the script. (PYTHONPATH points at
    this checkout, as an installed kdelay would be found.)"""
    fake = tmp_path / "not-the-venv"
    fake.mkdir()
    for name in ("python3", "python"):
        exe = fake / name
        exe.write_text("#!/bin/sh\necho \"not this script's python: $0\" >&2\nexit 1\n")
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    venv_bin = os.path.dirname(sys.executable)
    path = [str(fake)] + [d for d in os.environ.get("PATH", "").split(os.pathsep)
                          if d and os.path.abspath(d) != venv_bin]
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_SUBMIT_ARGS",
                        "VIRTUAL_ENV", "SPARK_HOME")}
    env.update(PATH=os.pathsep.join(path), PYTHONPATH=str(REPO))
    assert shutil.which("java", path=env["PATH"]) or env.get("JAVA_HOME")
    return env


def _run_script(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    app = tmp_path / "app.py"
    app.write_text(code)
    return subprocess.run([sys.executable, str(app)], cwd=tmp_path, env=_script_env(tmp_path),
                          capture_output=True, text=True, timeout=600)


# ---------------------------------------------------------------------------- in process


def test_session_is_ready_for_kdelay(spark, tmp_path):
    """The shared session is made by session(): workers run this interpreter, pushdown on,
    no UI or progress bars, the source registered; called again, it returns the active
    session."""
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.ui.enabled") == "false"
    assert conf.get("spark.ui.showConsoleProgress") == "false"
    assert spark.conf.get(kdelay.spark.PUSHDOWN_CONF) == "true"
    assert kdelay.spark.session() is spark
    path = str(tmp_path / "p")
    with Log.open(path) as log:
        log.append([Record(b"a"), Record(b"b")])
    assert spark.read.format("kdelay").load(path).count() == 2


def test_register_is_idempotent_and_registers_once_per_session(spark, tmp_path, monkeypatch):
    """The source is registered once per session (Spark logs a warning each time it is
    replaced); the session's conf remembers it."""
    from pyspark.sql.datasource import DataSourceRegistration

    calls = []
    real = DataSourceRegistration.register
    monkeypatch.setattr(DataSourceRegistration, "register",
                        lambda self, source: calls.append(source) or real(self, source))
    kdelay.spark.register(spark)
    kdelay.spark.register(spark)
    assert calls == []  # the fixture's session() registered it already
    spark.conf.unset(kdelay.spark.REGISTERED_CONF)  # as in a session that never registered
    for _ in range(3):
        kdelay.spark.register(spark)
    assert len(calls) == 1
    assert spark.conf.get(kdelay.spark.REGISTERED_CONF) == "true"
    path = str(tmp_path / "p")
    with Log.open(path) as log:
        log.append([Record(b"x")])
    assert spark.read.format("kdelay").load(path).count() == 1


def test_forecast_counts_only_pending_records_relative_to_now(spark, tmp_path):
    """Processed records (due long ago, or just now) are not in the forecast, nor are
    cancelled ones; all_records=True counts every record ever written."""
    path = str(tmp_path / "jobs")
    now = _now()
    with Log.open(path, config=LogConfig(segment_bytes=600)) as log:
        for i in range(20):  # processed jobs: due in the past, spread over segments
            log.append([Record(b"done %d" % i)] * 3, deliver_after=now - HOUR + i * 1000)
        log.append([Record(b"due now")])
        soon = log.append([Record(b"in an hour %d" % i) for i in range(4)],
                          deliver_after=now + HOUR)
        log.append([Record(b"tomorrow")] * 2, deliver_after=now + 24 * HOUR)
        assert log.cancel([soon.base_offset, soon.base_offset + 2]) == 2
        assert len(log.segments) > 3
    rows = kdelay.spark.forecast(spark, path, "1 hour").collect()
    assert [r["count"] for r in rows] == [2, 2]  # 4 - 2 cancelled, then 2 tomorrow
    assert all(r["window_end"].timestamp() * 1000 > now for r in rows)
    everything = kdelay.spark.forecast(spark, path, "1 hour", all_records=True).collect()
    assert sum(r["count"] for r in everything) == 20 * 3 + 1 + 4 + 2
    later = kdelay.spark.forecast(spark, path, "1 hour", after=now + 2 * HOUR).collect()
    assert [r["count"] for r in later] == [2]
    with pytest.raises(ValueError, match="all_records"):
        kdelay.spark.forecast(spark, path, after=now, all_records=True)


def test_cancelled_count_batch_column(spark, tmp_path):
    path = str(tmp_path / "p")
    with Log.open(path) as log:
        a = log.append([Record(b"%d" % i) for i in range(5)], deliver_after=_now() + HOUR)
        log.append([Record(b"x")], deliver_after=_now() + HOUR)
        log.cancel([a.base_offset + 1, a.base_offset + 3])
    for use_index in ("true", "false"):  # from the .dlyindex alone, or from the .log
        rows = kdelay.spark.read_batches(spark, path, useIndex=use_index,
                                         columns="base_offset,cancelled_count").collect()
        assert sorted(tuple(r) for r in rows) == [(0, 2), (5, 0)]


def test_cores_must_be_a_positive_int(capsys):
    """Refused before any JVM starts (issue 31's sweep of lock_ms=0: an int setting whose
    0 is no setting at all): Spark would fail on "local[0]" with a Java stack trace."""
    from kdelay import InvalidConfigError
    from kdelay.spark.cli import cli_spark_verify

    for bad in (0, -2, 1.5, True):
        with pytest.raises(InvalidConfigError, match="cores"):
            kdelay.spark.session(cores=bad)
    with pytest.raises(SystemExit) as e:
        cli_spark_verify(["/nonexistent", "--cores", "0"])
    assert e.value.code == 2 and "must be > 0" in capsys.readouterr().err


def test_a_problem_names_its_file_once():
    p = Problem("index", "/d/00000000000000000000.dlyindex", 96,
                "1 entries differ from the index recomputed from the .log (first differing "
                "batch at .log byte 96)")
    assert str(p).startswith("[index] /d/00000000000000000000.dlyindex: 1 entries")
    c = Problem("crc", "/d/00000000000000000000.log", 96, "CRC-32C mismatch in batch 1..1")
    assert str(c) == "[crc] /d/00000000000000000000.log at byte 96: CRC-32C mismatch in " \
                     "batch 1..1"


# ---------------------------------------------------------------------------- scripts


def _readme_spark_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    found = [b for b in blocks if "kdelay.spark.session()" in b]
    assert len(found) == 1, "the README has one Spark example, using kdelay.spark.session()"
    return found[0]


def test_readme_spark_example_runs_as_a_script_without_the_venv_activated(tmp_path):
    shop = tmp_path / "shop"
    in_an_hour = _now() + HOUR
    with Topic.open(str(shop), "orders", partitions=3) as orders:
        for i in range(6):
            orders.send([Record(b"order %d paid" % i)], key=b"customer-%d" % i)
            orders.send([Record(b"remind %d" % i)], key=b"customer-%d" % i,
                        deliver_after=in_an_hour)
    code = _readme_spark_example()
    assert '"/tmp/kdelay/shop"' in code
    r = _run_script(tmp_path, code.replace('"/tmp/kdelay/shop"', repr(str(shop))))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "|partition|count|" in r.stdout.replace(" ", "")
    # the forecast: the 6 reminders in one window, the orders (due) not at all
    when = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    windows = re.findall(rf"^\|{when}\|{when}\|\s*(\d+)\|$", r.stdout, re.M)
    assert windows == ["6"], r.stdout
    _no_noise(r.stderr)
    assert "not this script's python" not in r.stderr


def test_a_stream_stopped_in_a_script_leaves_no_warnings(tmp_path):
    path = tmp_path / "due"
    with Log.open(str(path)) as log:
        log.append([Record(b"now %d" % i) for i in range(5)])
    code = f"""
import kdelay.spark

spark = kdelay.spark.session("stream-stop")
kdelay.spark.register(spark)  # again: silent
query = (spark.readStream.format("kdelay").load({str(path)!r})
         .writeStream.format("memory").queryName("due").start())
query.processAllAvailable()
print("rows", spark.sql("SELECT count(*) FROM due").first()[0])
query.stop()
spark.stop()
"""
    r = _run_script(tmp_path, code)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "rows 5" in r.stdout
    _no_noise(r.stderr)


def test_spark_verify_command_is_quiet_and_names_each_file_once(tmp_path):
    """Through the command: no Spark output on stderr, and each problem line names its
    file once (an index file's reason used to repeat its path, a framing error's too)."""
    path = str(tmp_path / "p")
    with Log.open(path, config=LogConfig(segment_bytes=400)) as log:
        for i in range(12):
            log.append([Record(b"v%02d" % i * 8)])
    first = os.path.join(path, "00000000000000000000")
    os.unlink(first + ".dlyindex")  # a sealed segment's index missing: a problem
    with open(first + ".log", "r+b") as f:  # the second batch's length made impossible
        size = 12 + int.from_bytes(f.read(12)[8:12], "big")
        f.seek(size + 8)
        f.write((5).to_bytes(4, "big"))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "kdelay", "spark-verify", path],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr == ""
    lines = r.stdout.splitlines()
    problems = [line for line in lines if line.startswith("[")]
    assert any(line.startswith("[index] ") and "missing" in line for line in problems)
    assert any(line.startswith("[framing] ") for line in problems)
    for line in problems:
        assert line.count(path) == 1, line
