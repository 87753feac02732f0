"""The Spark tests skip where Java is missing, but fail in CI (tests/conftest.py:
spark_missing): a pytest run of one Spark test module with no java on PATH."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _pytest_without_java(ci: bool) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "CI")}
    env.update(PATH=os.devnull, PYTHONPATH=str(ROOT))  # no directory holds a java
    if ci:
        env["CI"] = "true"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests/spark/test_spark_compaction.py"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return run.returncode, run.stdout + run.stderr


def test_spark_tests_skip_without_java_outside_ci() -> None:
    rc, out = _pytest_without_java(ci=False)
    assert rc == 0 and "skipped" in out and "need Java" in out, out


def test_spark_tests_fail_without_java_in_ci() -> None:
    rc, out = _pytest_without_java(ci=True)
    assert rc != 0 and "CI must run them" in out, out
