"""A writer stalled in the middle of an append (issue 26, point 5).

A real child process (kdelay.testing.stalled_writer) opens a log and appends a batch whose
write stops after its first 1000 bytes: the active .log ends in a short batch while the
writer holds the lock with an append in progress. `kdelay verify`, `stats` and `dump-log`
(run as commands) call that an append in progress and exit 0; damage elsewhere in the same
log is still damage; and once the writer is killed -9 the same tail is the torn tail it
then is (exit 1), even before the dead writer is reaped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from kdelay.log.segments.layout import segment_file
from kdelay.testing.processes import child_env, started
from kdelay.testing.stalled_writer import STALL_AFTER

IN_PROGRESS = "an append is in progress"
TORN = "a torn tail from a crash"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kdelay", *args], capture_output=True,
                          text=True, env=child_env(), timeout=120)


@pytest.fixture
def stalled(tmp_path):
    """(log directory, writer process, active .log) with the writer stalled mid-append."""
    path = str(tmp_path / "s-0")
    with started("kdelay.testing.stalled_writer", path, ready="stalled") as proc:
        yield path, proc, segment_file(path, 3, ".log")


def _stats(path: str) -> tuple[int, dict, str]:
    as_json, text = run("stats", path, "--json"), run("stats", path)
    assert as_json.returncode == text.returncode
    return as_json.returncode, json.loads(as_json.stdout), text.stdout


def test_stalled_append_is_in_progress_then_torn_once_killed(stalled) -> None:
    path, proc, active = stalled
    size = os.path.getsize(active)

    v = run("verify", path)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "DAMAGED" not in v.stdout and "PROBLEM" not in v.stdout
    info = [ln for ln in v.stdout.splitlines() if IN_PROGRESS in ln]
    assert len(info) == 1 and info[0].startswith(f"info {active} at byte {size - STALL_AFTER}")
    report = json.loads(run("verify", path, "--json").stdout)
    assert report["ok"] is True

    rc, stats, text = _stats(path)
    assert rc == 0 and stats["damaged_segments"] == [] and "DAMAGED" not in text
    assert stats["log_end_offset"] == 6  # the batch in flight is not counted yet

    d = run("dump-log", active)
    assert d.returncode == 0 and IN_PROGRESS in d.stdout and d.stderr == "", d
    j = run("dump-log", active, "--json")
    assert j.returncode == 0 and len(j.stdout.splitlines()) == 3 and j.stderr == ""

    # killed -9 and not yet reaped: its pid still answers, but the lock is gone
    os.kill(proc.pid, signal.SIGKILL)
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # dead, still a zombie
    v = run("verify", path)
    assert v.returncode == 1 and "DAMAGED" in v.stdout, v.stdout
    torn = [ln for ln in v.stdout.splitlines() if ln.startswith("PROBLEM")]
    assert len(torn) == 1 and TORN in torn[0] and f"{active} at byte {size - STALL_AFTER}" \
        in torn[0] and IN_PROGRESS not in v.stdout
    rc, stats, text = _stats(path)
    assert rc == 1 and stats["damaged_segments"] == [active] and "DAMAGED" in text
    d = run("dump-log", active)
    assert d.returncode == 1 and "truncated batch" in d.stderr and IN_PROGRESS not in d.stdout
    proc.wait()
    assert run("verify", path).returncode == 1  # reaped: the same


def test_damage_beside_a_stalled_append_is_still_damage(stalled) -> None:
    """A short batch in a sealed segment is damage, whatever the writer is doing."""
    path, proc, active = stalled
    sealed = segment_file(path, 0, ".log")
    os.truncate(sealed, os.path.getsize(sealed) - 10)  # its last batch cut short
    v = run("verify", path)
    assert v.returncode == 1, v.stdout
    problems = [ln for ln in v.stdout.splitlines() if ln.startswith("PROBLEM")]
    assert any(ln.startswith(f"PROBLEM {sealed} at byte") and "truncated batch" in ln
               for ln in problems), problems
    tail = f"{active} at byte {os.path.getsize(active) - STALL_AFTER}"
    assert not any(tail in ln for ln in problems)  # the append in flight is still info
    assert any(ln.startswith(f"info {tail}") and IN_PROGRESS in ln
               for ln in v.stdout.splitlines())
    d = run("dump-log", sealed)
    assert d.returncode == 1 and "truncated batch" in d.stderr
    assert proc.poll() is None  # the writer was stalled throughout
