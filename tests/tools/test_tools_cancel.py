"""The command line on cancellations: dump-log and dump-index show them, stats counts them,
verify checks them (a damaged entry or an offset outside the segment: file, byte position,
exit 1)."""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest

from kdelay import Log, LogConfig, Record
from kdelay.log.cancellation.journal import CANCEL, SLOT, encode_entry
from kdelay.tools.cli import main

T0 = 1_700_000_000_000


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def log_dir(tmp_path) -> str:
    path = os.fspath(tmp_path / "p-0")
    log = Log.open(path, config=LogConfig(segment_bytes=500), clock=lambda: T0)
    for i in range(12):
        log.append([Record(b"v%d" % i), Record(b"w%d" % i)], deliver_after=T0 + 1000 + i)
    assert log.cancel([1, 2, 8]) == 3
    log.reschedule(5, T0 + 50)
    log.close()
    return path


def _seg0(path: str, suffix: str) -> str:
    return os.path.join(path, f"{0:020d}{suffix}")


def test_dump_log_and_dump_index_show_cancellations(log_dir):
    code, out, _ = run("dump-log", _seg0(log_dir, ".log"), "--json")
    assert code == 0
    rows = jsonl(out)
    assert [r["cancelled"] for r in rows[:4]] == [[1], [2], [5], []]
    code, out, _ = run("dump-log", _seg0(log_dir, ".log"))
    assert code == 0 and "CANCELLED" in out
    code, out, _ = run("dump-index", _seg0(log_dir, ".cancels"), "--json")
    assert code == 0
    assert [(e["kind"], e["offset"]) for e in jsonl(out)] == \
        [("cancel", 1), ("cancel", 2), ("cancel", 8), ("move", 5), ("confirm", 5)]
    code, out, _ = run("dump-index", _seg0(log_dir, ".cancelindex"), "--json")
    assert code == 0 and [e["offset"] for e in jsonl(out)] == [1, 2, 5, 8]
    code, out, _ = run("dump-index", _seg0(log_dir, ".cancelindex"))
    assert "current:      yes" in out


def test_stats_counts_cancelled(log_dir):
    code, out, _ = run("stats", log_dir, "--json")
    assert code == 0
    stats = json.loads(out.splitlines()[0])
    part = stats if "cancelled_records" in stats else stats["partitions"][0]
    assert part["cancelled_records"] == 4


def test_verify_reports_damage_with_file_and_position(log_dir):
    assert run("verify", log_dir)[0] == 0
    journal = _seg0(log_dir, ".cancels")
    with open(journal, "r+b") as f:
        f.seek(2 * SLOT + 9)  # inside the second entry
        f.write(b"\xee")
    code, out, _ = run("verify", log_dir)
    assert code == 1
    assert f"{journal} at byte {2 * SLOT}" in out and "damaged entry" in out


def test_verify_reports_offset_outside_the_segment(log_dir):
    journal = _seg0(log_dir, ".cancels")
    size = os.path.getsize(journal)
    with open(journal, "ab") as f:
        f.write(encode_entry(CANCEL, 10 ** 6))
    code, out, _ = run("verify", log_dir)
    assert code == 1
    assert f"{journal} at byte {size}" in out and "names offset 1000000" in out


def test_demo_cancels_and_reschedules_and_checks_it(capsys):
    from kdelay.tools import demo
    assert demo.main(["--records", "20000", "--segment-mib", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "rescheduled" in out and "moved originals delivered" in out and out.rstrip()


def test_demo_check_catches_a_delivered_cancelled_record(tmp_path):
    """The demo's final check is not a formality: claim a record that will be delivered was
    cancelled, and the drain fails."""
    from kdelay.tools import demo
    clock = [T0]
    log = Log.open(os.fspath(tmp_path / "p"), clock=lambda: clock[0])
    res = log.append([Record(demo.expected_value(i)) for i in range(10)])
    fake = demo.Withdrawn()
    fake.cancelled.add(3)
    with pytest.raises(AssertionError, match="record 3 was cancelled"):
        demo.drain_and_check(log, clock, 10, 10, [res.deliver_after], fake)
    log.close()
