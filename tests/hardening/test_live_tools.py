"""Class 5: the read-only commands on a live log, and exit codes that agree with the output.

A real writer process appends, rolls (small segments), commits a group and applies
retention to a healthy log, while this test runs `kdelay verify`, `stats`, `stats --json`,
`dump-log` and `dump-index` over and over (for a few seconds). A healthy log in motion is
never reported DAMAGED and every command exits 0 (a file that retention deleted between
listing and reading may be reported missing, nothing else). Separately, on a damaged log,
every command's exit code agrees with what it printed.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import time

import pytest
from conftest import run_cli

from kdelay import Log, LogConfig, Record
from kdelay.testing.processes import child_env

T0 = 1_700_000_000_000
RUN_SECONDS = 3.0

WRITER = r"""
import os, random, sys
from kdelay import Consumer, Log, LogConfig, Record
path, stop = sys.argv[1], sys.argv[2]
cfg = LogConfig(segment_bytes=1 << 20, index_interval_bytes=200, retention_bytes=150_000)
rng = random.Random(7)
with Log.open(path, config=cfg) as log:
    consumer = Consumer(log, "g")
    i = n = 0
    while True:
        n += 1
        now = log.now()
        recs = [Record(b"v%d" % (i + k) * rng.randint(1, 20), key=b"k",
                       headers=[("h", b"x")] if k % 3 == 0 else ())
                for k in range(rng.randint(1, 20))]
        log.append(recs, deliver_after=now + rng.choice((-1000, 0, 0, 50, 300)))
        i += len(recs)
        if n % 8 == 0:
            log.roll()
        if n % 40 == 0:
            log.enforce_retention()  # a few segments at once
        if n % 5 == 0:
            consumer.poll(max_records=50)
            consumer.commit()
        if len(log.segments) > 10 and not os.path.exists(path + ".ready"):
            open(path + ".ready", "w").close()
        if os.path.exists(stop):
            break
"""


@pytest.fixture
def live_log(tmp_path):
    path = str(tmp_path / "live-0")
    stop = str(tmp_path / "stop")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path, stop], env=child_env(),
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(path + ".ready"):
            if proc.poll() is not None:
                pytest.fail(f"writer died: {proc.stderr.read().decode()}")
            if time.monotonic() > deadline:
                pytest.fail("writer never got going")
            time.sleep(0.05)
        yield path
    finally:
        open(stop, "w").close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read().decode()


def _files(path: str, suffix: str) -> list[str]:
    try:
        return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(suffix))
    except FileNotFoundError:
        return []


def test_read_only_commands_on_a_live_log(live_log) -> None:
    rng = random.Random(3)
    problems: list[str] = []
    counts = dict.fromkeys(("verify", "stats", "stats --json", "dump-log", "dump-index"), 0)
    end = time.monotonic() + RUN_SECONDS
    while time.monotonic() < end or min(counts.values()) < 3:
        rc, out, err = run_cli("verify", live_log)
        counts["verify"] += 1
        if rc != 0 or "DAMAGED" in out:
            problems.append(f"verify rc={rc}: {out[-600:]} {err[-300:]}")
        rc, out, err = run_cli("stats", live_log)
        counts["stats"] += 1
        if rc != 0 or "DAMAGED" in out:
            problems.append(f"stats rc={rc}: {out[-600:]} {err[-300:]}")
        rc, out, err = run_cli("stats", live_log, "--json")
        counts["stats --json"] += 1
        if rc != 0 or json.loads(out).get("damaged_segments"):
            problems.append(f"stats --json rc={rc}: {out[-600:]} {err[-300:]}")
        for cmd, suffix in (("dump-log", ".log"), ("dump-index", ".dlyindex")):
            files = _files(live_log, suffix)
            if not files:
                continue
            # the active .log is the one being appended to: pick it often
            f = files[-1] if rng.random() < 0.5 else rng.choice(files)
            rc, out, err = run_cli(cmd, f, "--json")
            counts[cmd] += 1
            gone = not os.path.exists(f)
            if rc != 0 and not gone:
                problems.append(f"{cmd} {os.path.basename(f)} rc={rc}: {err[-300:]}")
            for line in out.splitlines():
                row = json.loads(line)
                if row.get("crc_valid") is False or row.get("problem"):
                    problems.append(f"{cmd} {os.path.basename(f)}: {line[:300]}")
        if len(problems) > 20:
            break
    print(counts)
    assert not problems, f"{len(problems)} false alarms, first: " + "\n".join(problems[:5])


# ---------------------------------------------------------------------- lockstep

STEPPER = r"""
import os, sys
os.fsync = lambda fd: None  # durability is not under test here; speed is welcome
from kdelay import Consumer, Log, LogConfig, Record
path = sys.argv[1]
cfg = LogConfig(segment_bytes=1 << 20, index_interval_bytes=100, retention_bytes=6_000,
                flush_messages=None)
with Log.open(path, config=cfg, clock=lambda: 1_700_000_000_000) as log:
    consumer = Consumer(log, "g")
    n = 0
    for line in sys.stdin:
        if line.strip() != "step":
            break
        n += 1
        op = n % 6
        if op in (1, 2, 4):
            log.append([Record(b"v%d" % n * (1 + n % 9)) for _ in range(1 + n % 4)])
        elif op == 3:
            log.roll()
        elif op == 5:
            log.enforce_retention()
        else:
            consumer.poll(max_records=7)
            consumer.commit()
        sys.stdout.write("done %d %d\n" % (n, len(log.segments)))
        sys.stdout.flush()
"""


class Stepper:
    """A writer process that makes one move (append, roll, retention or commit) per
    request, so the moves can be interleaved with every file access of a command."""

    def __init__(self, path: str):
        self.proc = subprocess.Popen([sys.executable, "-c", STEPPER, path], env=child_env(),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.steps = 0

    def step(self) -> None:
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line.startswith("done"), f"writer died: {line!r}"
        self.steps += 1

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.write("stop\n")
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def moving_under(stepper: Stepper, every: int):
    """While the block runs, the writer makes one move before every `every`-th file
    access (open, listdir, scandir, stat) of this process."""
    import builtins

    calls = [0]
    saved = {(os, "open"): os.open, (os, "listdir"): os.listdir, (os, "scandir"): os.scandir,
             (os, "stat"): os.stat, (builtins, "open"): builtins.open}

    def wrap(fn):
        def inner(*a, **kw):
            calls[0] += 1
            if calls[0] % every == 0:
                stepper.step()
            return fn(*a, **kw)
        return inner

    for (mod, name), fn in saved.items():
        setattr(mod, name, wrap(fn))
    try:
        yield
    finally:
        for (mod, name), fn in saved.items():
            setattr(mod, name, fn)


@pytest.mark.parametrize("every", [1, 3])
def test_commands_interleaved_with_every_move(tmp_path, every: int) -> None:
    """Deterministic interleaving: the writer appends, rolls, deletes segments by
    retention and commits between the command's file accesses."""
    path = str(tmp_path / "step-0")
    stepper = Stepper(path)
    problems: list[str] = []
    try:
        for _ in range(60):  # a log with retention at work before the checks start
            stepper.step()
        for round_ in range(2):
            for argv in (("verify", path), ("stats", path), ("stats", path, "--json")):
                with moving_under(stepper, every):
                    rc, out, err = run_cli(*argv)
                damaged = "DAMAGED" in out or (argv[-1] == "--json" and out.startswith("{")
                                               and json.loads(out).get("damaged_segments"))
                if rc != 0 or damaged:
                    lines = [ln for ln in out.splitlines() if "PROBLEM" in ln or
                             "DAMAGED" in ln]
                    problems.append(f"{' '.join(argv[:1] + argv[2:])} (every {every}, round "
                                    f"{round_}) rc={rc}: {lines[:3]} {err.strip()[:300]}")
    finally:
        stepper.close()
    assert stepper.steps > 60
    assert not problems, f"{len(problems)} false alarms on a healthy log in motion:\n" + \
        "\n".join(problems[:6])


# ---------------------------------------------------------------------- exit codes


def _damaged_log(path: str) -> None:
    with Log.open(path, config=LogConfig(index_interval_bytes=1), clock=lambda: T0) as log:
        for i in range(3):
            log.append([Record(b"r%d" % i)], deliver_after=T0 + 10 ** 9)
            log.roll()
        log.append([Record(b"last")])
        log.commit("g", None)
    name = os.path.join(path, f"{1:020d}")
    with open(name + ".log", "r+b") as f:   # a bad magic byte in a sealed segment...
        f.seek(16)
        f.write(b"\x7f")
    for suffix in (".index", ".timeindex", ".dlyindex"):  # ...that has to be scanned
        os.unlink(name + suffix)


@pytest.mark.parametrize("argv", [("verify",), ("stats",), ("stats", "--json"),
                                  ("verify", "--json")])
def test_exit_code_agrees_with_output(tmp_path, argv) -> None:
    path = str(tmp_path / "d-0")
    _damaged_log(path)
    rc, out, err = run_cli(argv[0], path, *argv[1:])
    says_damaged = "DAMAGED" in out or '"ok": false' in out or \
        bool(out.startswith("{") and json.loads(out).get("damaged_segments"))
    assert says_damaged, f"{argv}: damage not reported: {out}"
    assert rc != 0, f"{argv}: exit 0 while reporting damage: {out}"


@pytest.mark.parametrize("argv", [("verify",), ("stats",), ("stats", "--json")])
def test_exit_code_zero_when_healthy(tmp_path, argv) -> None:
    path = str(tmp_path / "h-0")
    with Log.open(path, config=LogConfig(index_interval_bytes=1), clock=lambda: T0) as log:
        for i in range(3):
            log.append([Record(b"r%d" % i)], deliver_after=T0 + i)
            log.roll()
        log.commit("g", None)
    rc, out, err = run_cli(argv[0], path, *argv[1:])
    assert rc == 0 and "DAMAGED" not in out, (rc, out, err)
