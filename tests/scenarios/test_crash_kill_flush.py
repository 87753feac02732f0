"""SIGKILL a writer process whose flush policy fsyncs for it: every record the policy had
flushed before the kill is in the reopened log.

The writer reports what the policy flushed through the durability seam: it wraps
kdelay.fsio.fsync, and after each fsync of a .log it prints "synced N", N being the log end
offset it had acknowledged before that fsync began (those records were written before it,
so they are durable once it returns). With flush_messages=1 an acknowledged append was
fsync'd before it returned, so "ack" lines count as flushed too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from kdelay import Log

WRITER = textwrap.dedent("""
    import os, sys, time
    from kdelay import Log, LogConfig, Record, fsio
    path, setting = sys.argv[1], sys.argv[2]
    config = LogConfig(**{setting: int(sys.argv[3])})
    acked_end = 0
    real_fsync = fsio.fsync

    def fsync(fd):
        end = acked_end
        real_fsync(fd)
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".log"):
            os.write(1, b"synced %d\\n" % end)

    fsio.fsync = fsync
    log = Log.open(path, config=config)
    os.write(1, b"open %d\\n" % log.log_end_offset)
    i = 0
    while True:
        i += 1
        base = log.log_end_offset
        res = log.append([Record(b"%d" % (base + k)) for k in range(1 + i % 3)])
        acked_end = res.last_offset + 1
        os.write(1, b"ack %d %d\\n" % (res.base_offset, res.last_offset))
        time.sleep(0.001)
""")


def _run_and_kill(path: str, setting: str, value: int, syncs_before_kill: int) -> dict:
    """Start a writer, SIGKILL it once it has reported `syncs_before_kill` fsyncs; returns
    the end offsets it reported: at open, acknowledged, flushed (by "synced")."""
    child = subprocess.Popen([sys.executable, "-c", WRITER, path, setting, str(value)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = {"open": None, "acked": 0, "synced": 0, "syncs": 0}

    def note(line: str) -> None:
        word, *nums = line.split()
        if word == "open":
            seen["open"] = int(nums[0])
        elif word == "ack":
            seen["acked"] = max(seen["acked"], int(nums[1]) + 1)
        elif word == "synced":
            seen["synced"] = max(seen["synced"], int(nums[0]))
            seen["syncs"] += 1

    deadline = time.monotonic() + 60  # generous: the writer reports a line per append
    try:
        while seen["syncs"] < syncs_before_kill:
            assert time.monotonic() < deadline, f"only {seen['syncs']} fsyncs seen in 60 s"
            line = child.stdout.readline()
            assert line, f"writer died: {child.stderr.read()}"
            note(line)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    # lines written before the kill but not yet read (each one os.write: never torn)
    for line in child.stdout.read().splitlines():
        note(line)
    child.stdout.close()
    child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    return seen


@pytest.mark.parametrize("setting, value", [("flush_messages", 1), ("flush_ms", 20)])
def test_records_flushed_by_policy_survive_kill_9(tmp_path, setting: str, value: int):
    path = os.fspath(tmp_path / "p-0")
    end = 0
    for round_no in range(4):
        seen = _run_and_kill(path, setting, value, syncs_before_kill=5 + 7 * round_no)
        assert seen["open"] == end, f"round {round_no}: opened at {seen['open']}, not {end}"
        flushed = seen["synced"]
        if setting == "flush_messages":
            flushed = max(flushed, seen["acked"])  # fsync'd before append returned
        assert flushed > end, f"round {round_no}: the policy flushed nothing new"
        with Log.open(path) as log:
            values = [r.value for r in log.read(0, max_records=10 ** 6)]
        assert len(values) >= flushed, \
            f"round {round_no}: flushed up to {flushed}, reopened with {len(values)}"
        assert values == [b"%d" % o for o in range(len(values))], "records altered"
        end = len(values)
