"""The read-only commands against a compaction (issue 26, the sweep of point 6).

Each command lists a directory (or opens a file) and reads what it listed later. Here a
compaction swaps rewritten and merged segments in exactly between the two (the commands
run in this process; the Log that compacts is open here too), and then while a writer
process appends, cancels and compacts every 50 ms. The answers: `verify` and `stats`
check again and report a healthy log healthy (exit 0); `dump-log` reads the file it
opened, whole; `dump-index` reads one index file whole, or says the file is gone (exit
1, one line); no command crashes.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time

import pytest
from conftest import run_cli

from kdelay import Log, LogConfig, Record
from kdelay.testing.processes import started
from kdelay.tools import dump_index, dump_log, stats, verify

T0 = 1_700_000_000_000
HOUR = 3_600_000


@pytest.fixture
def log(tmp_path):
    """An open log whose sealed segments are mostly cancelled records: compaction rewrites
    every one of them and merges neighbours."""
    cfg = LogConfig(segment_bytes=6000, index_interval_bytes=128, compaction_min_ratio=0.1)
    clock = [T0]
    with Log.open(str(tmp_path / "c-0"), config=cfg, clock=lambda: clock[0]) as lg:
        later = []
        for i in range(40):
            lg.append([Record(b"d%d-%d" % (i, k) * 5) for k in range(3)],
                      deliver_after=T0 + 10 + i)
            later.append(lg.append([Record(b"p%d" % i * 1000)],
                                   deliver_after=T0 + HOUR).base_offset)
        lg.cancel(later[:-3])
        lg.roll()
        clock[0] = T0 + 100
        yield lg


@contextlib.contextmanager
def compacting_before(module, name: str, log: Log, results: list):
    """The first call of `module.name` compacts `log` before it runs."""
    real = getattr(module, name)

    def first(*args, **kwargs):
        setattr(module, name, real)
        results.append(log.compact())
        return real(*args, **kwargs)

    setattr(module, name, first)
    try:
        yield
    finally:
        setattr(module, name, real)
    assert results and results[0].segments_rewritten >= 2  # it did land in between


def _files(path: str, suffix: str) -> list[str]:
    return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(suffix))


@pytest.mark.parametrize("argv", [("verify",), ("verify", "--json"), ("stats",),
                                  ("stats", "--json")])
def test_verify_and_stats_check_again(log, argv) -> None:
    module, hook = (verify, "_scan_for_verify") if argv[0] == "verify" else \
        (stats, "summarize_segment")
    segments = len(log.segments)
    done: list = []
    with compacting_before(module, hook, log, done):
        rc, out, err = run_cli(argv[0], log.path, *argv[1:])
    assert len(log.segments) < segments  # merged: listed segments went away
    assert rc == 0 and "DAMAGED" not in out and err == "", (out, err)
    if argv == ("stats", "--json"):
        assert json.loads(out)["damaged_segments"] == []
    if argv == ("verify", "--json"):
        assert json.loads(out)["ok"] is True


def test_dump_log_reads_the_file_it_opened(log) -> None:
    first = _files(log.path, ".log")[0]
    rc, before, _ = run_cli("dump-log", first, "--json")
    assert rc == 0
    done: list = []
    with compacting_before(dump_log, "_start_position", log, done):  # after the open
        rc, out, err = run_cli("dump-log", first, "--json")
    assert rc == 0 and err == "" and out == before  # the file as opened, whole
    rc, after, err = run_cli("dump-log", first, "--json")  # opened after: the new file
    assert rc == 0 and err == "" and after != before
    old = [json.loads(x) for x in before.splitlines()]
    new = {json.loads(x)["base_offset"] for x in after.splitlines()}
    cancelled = {b["base_offset"] for b in old if b["cancelled"]}
    assert cancelled and not cancelled & new  # compaction took those out...
    assert {b["base_offset"] for b in old} - cancelled <= new  # ...and kept the others


def test_dump_log_of_a_segment_merged_away(log) -> None:
    gone = _files(log.path, ".log")[1]
    done: list = []
    with compacting_before(dump_log, "open_log_file", log, done):  # before the open
        rc, out, err = run_cli("dump-log", gone)
    assert not os.path.exists(gone)
    assert rc == 2 and out == "" and err.strip() == f"kdelay: {gone}: no such file"


def test_dump_index_reads_one_file_whole(log) -> None:
    """Listed before the compaction, read after: the index of a segment merged away is
    gone (one line, exit 1); the one that took it in is read whole, the new one."""
    merged_into, merged_away = _files(log.path, ".dlyindex")[:2]
    done: list = []
    with compacting_before(dump_index, "read_index_file", log, done):
        rc, out, err = run_cli("dump-index", merged_away, "--json")
    assert rc == 1 and out == "" and err == f"kdelay: {merged_away}: missing\n"
    rc, out, err = run_cli("dump-index", merged_into, "--json")
    assert rc == 0 and err == ""
    _, batches, _ = run_cli("dump-log", merged_into[:-len(".dlyindex")] + ".log", "--json")
    assert sorted(json.loads(x)["offset"] for x in out.splitlines()) == \
        sorted(json.loads(x)["base_offset"] for x in batches.splitlines())  # the new index


def test_verify_waits_out_a_swap_in_progress(log, monkeypatch) -> None:
    """A compaction descheduled in the middle of its swap (new indexes and marker in place,
    the old .log not yet replaced): verify, run then, waits for the swap to finish rather
    than report the mix as damage (nothing moves while it would check)."""
    from kdelay import fsio

    rename = fsio.rename
    got: list = []

    def stalled(src: str, dst: str) -> None:
        if src.endswith(".log.swap") and not got:
            t = threading.Thread(target=lambda: got.append(run_cli("verify", log.path)))
            t.start()
            time.sleep(0.5)  # the swap stalls; verify starts meanwhile
            got.append(t)
        rename(src, dst)

    monkeypatch.setattr(fsio, "rename", stalled)
    assert log.compact().segments_rewritten >= 2
    monkeypatch.undo()
    [t.join(30) for t in got if isinstance(t, threading.Thread)]
    (rc, out, err), = [x for x in got if isinstance(x, tuple)]
    assert got[0] is not got[-1] and isinstance(got[-1], tuple)  # it waited for the swap
    assert rc == 0 and "DAMAGED" not in out and err == "", out


# ---------------------------------------------------------------------- a writer process


def test_commands_beside_a_compacting_writer(tmp_path) -> None:
    """A writer process appends, rolls, cancels and compacts every 50 ms while the
    commands run over and over: no false DAMAGED, no crash."""
    path = str(tmp_path / "w-0")
    problems: list[str] = []
    runs = 0
    with started("kdelay.testing.live_writer", path, "4", "5", "compact",
                 ready="open") as writer:
        time.sleep(0.5)
        while writer.poll() is None:
            runs += 1
            for argv in (("verify", path), ("stats", path, "--json")):
                rc, out, err = run_cli(*argv)
                if rc != 0 or "DAMAGED" in out or "internal error" in err:
                    problems.append(f"{argv[0]} rc={rc}: {out[-500:]} {err[-300:]}")
            for cmd, suffix in (("dump-log", ".log"), ("dump-index", ".dlyindex")):
                for f in _files(path, suffix)[-3:]:
                    rc, out, err = run_cli(cmd, f, "--json")
                    gone = "no such file" in err or "missing" in err
                    if (rc != 0 and not gone) or "internal error" in err:
                        problems.append(f"{cmd} {os.path.basename(f)} rc={rc}: {err[-300:]}")
        out, _ = writer.communicate(timeout=60)
    assert writer.returncode == 0
    assert int(out.split("compacted ")[1].split()[0]) >= 10 and runs >= 3
    assert not problems, f"{len(problems)} false alarms:\n" + "\n".join(problems[:5])
