"""`kdelay stats` and `kdelay verify` on queue groups: the counts from the state files, and
damage reported with file and byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kdelay import Log, QueueConsumer, Record
from kdelay.groups.queue import state_store

T0 = 1_700_000_000_000


def kdelay(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kdelay", *args], capture_output=True,
                          text=True, timeout=120)


def build(path: str, *, consumer_closes: bool = True) -> None:
    """A group "work" with acked, released, delayed, held and never delivered records; a
    consumer that does not close (its process died) leaves offsets 4 and 5 acquired in the
    files."""
    clock = [T0]
    with Log.open(path, clock=lambda: clock[0]) as log:
        for i in range(10):
            log.append([Record(b"v%d" % i)])
        log.append([Record(b"later")], deliver_after=T0 + 10**6)
        q = QueueConsumer(log, "work")
        recs = q.poll(max_records=6)
        q.ack(recs[:2])
        q.release(recs[2:3], delay_ms=5000)
        q.release(recs[3:4])
        # 4 and 5 stay acquired; 6..9 never delivered, 10 not due
        assert log.metrics()["queues"]["work"]["acquired"] == 2
        if consumer_closes:
            q.close()


def test_stats_shows_queue_groups(tmp_path):
    path = os.fspath(tmp_path / "p-0")
    build(path)
    r = kdelay("stats", path, "--json", "--now", str(T0 + 1))
    assert r.returncode == 0, r.stderr
    (g,) = json.loads(r.stdout)["queues"]
    # close released the two held records (noted in the journal)
    assert (g["group"], g["acquired"], g["available"], g["delayed"], g["acked"]) == \
        ("work", 0, 1 + 2 + 4, 1, 2)
    human = kdelay("stats", path, "--now", str(T0 + 1)).stdout
    assert "queue work" in human and "acked 2" in human


def test_stats_available_leaves_cancelled_records_out(tmp_path):
    path = os.fspath(tmp_path / "p-0")
    clock = [T0]
    with Log.open(path, clock=lambda: clock[0]) as log:
        log.append([Record(b"v%d" % i) for i in range(4)], deliver_after=T0 + 100)
        log.append([Record(b"v4")], deliver_after=T0 + 100)
        log.append([Record(b"v5")], deliver_after=T0 + 100)
        assert log.cancel([1, 3, 5]) == 3
        clock[0] = T0 + 100
        q = QueueConsumer(log, "work")
        recs = q.poll(max_records=2)
        assert [r.offset for r in recs] == [0, 2]
        q.ack(recs)
        q.close()
    r = kdelay("stats", path, "--json", "--now", str(T0 + 100))
    assert r.returncode == 0, r.stderr
    (g,) = json.loads(r.stdout)["queues"]
    # offsets 0 and 2 acked; 4 still to come; 1, 3 and 5 cancelled
    assert (g["acked"], g["available"]) == (2, 1)


def test_verify_reports_damaged_queue_state(tmp_path):
    path = os.fspath(tmp_path / "p-0")
    build(path)
    assert kdelay("verify", path).returncode == 0
    snap, journal = state_store.paths(path, "work")
    with open(snap, "r+b") as f:
        f.seek(30)
        b = f.read(1)
        f.seek(30)
        f.write(bytes([b[0] ^ 0x10]))
    r = kdelay("verify", path)
    assert r.returncode == 1
    assert "queue group 'work'" in r.stdout and snap in r.stdout
    s = json.loads(kdelay("stats", path, "--json").stdout)
    assert "error" in s["queues"][0]


def test_verify_notes_a_torn_journal_tail_without_failing(tmp_path):
    path = os.fspath(tmp_path / "p-0")
    build(path)
    _, journal = state_store.paths(path, "work")
    with open(journal, "ab") as f:
        f.write(b"\x00\x00\x01\x00garbage")
    r = kdelay("verify", path)
    assert r.returncode == 0, r.stdout
    assert "torn tail" in r.stdout


def test_stats_on_a_live_group_shows_what_it_holds(tmp_path):
    path = os.fspath(tmp_path / "p-0")
    with Log.open(path, clock=lambda: T0) as log:
        for i in range(5):
            log.append([Record(b"v%d" % i)])
        q = QueueConsumer(log, "live")
        held = q.poll(max_records=3)
        g = json.loads(kdelay("stats", path, "--json", "--now", str(T0)).stdout)["queues"][0]
        assert (g["acquired"], g["available"], g["acked"]) == (3, 2, 0)
        q.ack(held)
        q.close()


def test_demo_worker_pool(tmp_path):
    from collections import Counter

    import pytest

    from kdelay.tools import queue_demo
    r = queue_demo.run_pool(os.fspath(tmp_path), 400, 3, seed=5)
    plan = queue_demo.plan_failures(400, 5)
    poison = sum(1 for f in plan if f >= queue_demo.MAX_DELIVERIES)
    assert (r["acked"], r["dead_lettered"]) == (400 - poison, poison) and poison > 0
    assert r["released"] >= sum(min(f, queue_demo.MAX_DELIVERIES) for f in plan)
    # the check itself catches a job acked twice, or dead-lettered too early
    acks = Counter({j: 1 for j in range(400) if plan[j] < queue_demo.MAX_DELIVERIES})
    fails = Counter({j: min(f, queue_demo.MAX_DELIVERIES) for j, f in enumerate(plan)})
    dead = [j for j in range(400) if plan[j] >= queue_demo.MAX_DELIVERIES]
    m = {"acked": sum(acks.values()), "rejected": len(dead)}
    queue_demo._check(400, plan, acks, fails, dead, m)
    twice = acks.copy()
    twice[next(iter(acks))] += 1
    with pytest.raises(AssertionError, match="acked 2 times"):
        queue_demo._check(400, plan, twice, fails, dead, m)
    early = fails.copy()
    early[dead[0]] -= 1
    with pytest.raises(AssertionError, match="after"):
        queue_demo._check(400, plan, acks, early, dead, m)


ABANDONED = {"acquired": 2, "available": 1 + 4, "delayed": 1, "acked": 2, "rejected": 0,
             "in_flight": 4}


def stats_queues(path: str, now: int) -> dict[str, dict]:
    rows = json.loads(kdelay("stats", path, "--json", "--now", str(now)).stdout)["queues"]
    return {row.pop("group"): row for row in rows}


def as_json(counts: dict[str, dict]) -> dict[str, dict]:
    """Log.metrics' queue counts as `kdelay stats --json` prints them."""
    out = {}
    for group, c in counts.items():
        c = dict(c)
        key = c.pop("cursor")
        out[group] = {**c, "cursor": None if key is None else
                      {"deliver_after": key.deliver_after, "offset": key.offset}}
    return out


def test_stats_and_metrics_agree_on_the_same_directory(tmp_path):
    """One rule counts a group from its files: `kdelay stats` and Log.metrics of a group
    not open in the process give the same numbers, records a dead process held included;
    and a group open with live locks shows what the files say too."""
    path = os.fspath(tmp_path / "p-0")
    build(path, consumer_closes=False)
    now = T0 + 1
    with Log.open(path, clock=lambda: now) as log:
        metrics = log.metrics()["queues"]
        stats = stats_queues(path, now)
        assert as_json(metrics) == stats
        assert {k: metrics["work"][k] for k in ABANDONED} == ABANDONED
        q = QueueConsumer(log, "work")  # open: what the dead process held is available
        held = q.poll(max_records=3)
        live = log.metrics()["queues"]
        assert as_json(live) == stats_queues(path, now)
        assert (live["work"]["acquired"], live["work"]["available"]) == (3, 4)
        q.release(held)
        q.close()


def test_metrics_show_queues_in_a_process_that_never_imported_the_queue_module(tmp_path):
    """Log.metrics()["queues"] needs no import of kdelay.clients (no registry filled at
    import time): a fresh process that loads the Log facade alone reports the groups."""
    import kdelay

    path = os.fspath(tmp_path / "p-0")
    build(path, consumer_closes=False)
    now = T0 + 1
    with Log.open(path, clock=lambda: now) as log:
        want = as_json(log.metrics()["queues"])
    code = (
        "import json, sys, types\n"
        "pkg = types.ModuleType('kdelay')\n"  # the package without its __init__'s imports
        "pkg.__path__ = [sys.argv[1]]\n"
        "sys.modules['kdelay'] = pkg\n"
        "from kdelay.partition import Log\n"
        "with Log.open(sys.argv[2], clock=lambda: int(sys.argv[3])) as log:\n"
        "    queues = log.metrics()['queues']\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('kdelay.clients'))\n"
        "print(json.dumps({'loaded': loaded, 'queues': {g: {**c, 'cursor': c['cursor'] and\n"
        "    dict(zip(('deliver_after', 'offset'), c['cursor']))} for g, c in queues.items()}}))\n"
    )
    r = subprocess.run([sys.executable, "-c", code, os.path.dirname(kdelay.__file__), path,
                        str(now)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["loaded"] == []
    assert got["queues"] == want and want["work"]["acquired"] == ABANDONED["acquired"]
