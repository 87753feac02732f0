"""`kdelay stats` and `kdelay verify` on queue groups: the counts from the state files, and
damage reported with file and byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kdelay import Log, QueueConsumer, Record
from kdelay.clients.queue import state_store

T0 = 1_700_000_000_000


def kdelay(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kdelay", *args], capture_output=True,
                          text=True, timeout=120)


def build(path: str) -> None:
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
