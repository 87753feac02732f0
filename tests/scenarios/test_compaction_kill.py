"""SIGKILL a real process that appends, rolls and compacts in a loop, again and again, on
one directory. Records due far in the future are never removable: every acknowledged one
must survive every kill; records due at once become removable after `retention_ms` and may
be gone. Nothing read back may differ from what was written, or appear twice."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

from kdelay import Log, LogConfig, Record

CONFIG = dict(segment_bytes=3000, index_interval_bytes=256, flush_messages=1,
              retention_ms=50, compaction_min_ratio=0.3)
FAR = 10 ** 9  # ms: "in 11 days"

WRITER = textwrap.dedent("""
    import random, sys
    from kdelay import Log, LogConfig, Record
    path, seed, far = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    log = Log.open(path, config=LogConfig(**eval(sys.argv[4])))
    print("open", log.log_end_offset, flush=True)
    i = 0
    while True:
        base = log.log_end_offset
        n = rng.randint(1, 8)
        pinned = rng.random() < 0.15
        da = log.now() + (far if pinned else 0)
        recs = [Record(b"%d:" % (base + k) + b"p" * rng.randint(0, 60)) for k in range(n)]
        res = log.append(recs, deliver_after=da)
        print("ack", res.base_offset, res.last_offset, int(pinned), flush=True)
        i += 1
        if i % 7 == 0:
            log.roll()
        if i % 5 == 0:
            log.compact()
        if i % 11 == 0:
            log.enforce_retention()
""")


def _check(path: str, pinned: set[int], rng: random.Random) -> None:
    log = Log.open(path, config=LogConfig(**CONFIG))
    try:
        records = log.read(0, max_records=10 ** 9)
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets)), "an offset twice or out of order"
        for r in records:
            assert r.value.split(b":", 1)[0] == b"%d" % r.offset, f"record {r.offset} altered"
        lost = pinned - set(offsets)
        assert not lost, f"pinned acknowledged records lost: {sorted(lost)[:10]}"
        now = log.now()
        seen, after = [], None
        while True:
            page = log.fetch(after, max_records=rng.choice((7, 100)))
            if not page.records:
                break
            seen += [(r.deliver_after, r.offset) for r in page.records]
            after = page.next
        assert seen == sorted((r.deliver_after, r.offset) for r in records
                              if r.deliver_after <= now)
        end = log.log_end_offset
        assert log.append([Record(b"%d:parent" % end)]).base_offset == end
    finally:
        log.close()


def test_sigkill_while_compacting(tmp_path):
    rng = random.Random(99)
    path = os.fspath(tmp_path / "p")
    pinned: set[int] = set()
    acks = 0
    for round_no in range(14):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, path, str(round_no), str(FAR), repr(CONFIG)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            opened = child.stdout.readline().split()
            assert opened and opened[0] == "open", child.stderr.read()
            for _ in range(rng.randint(10, 120)):
                line = child.stdout.readline().split()
                assert line and line[0] == "ack", child.stderr.read()
                acks += 1
                if line[3] == "1":
                    pinned.update(range(int(line[1]), int(line[2]) + 1))
            time.sleep(rng.uniform(0, 0.02))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
        for line in child.stdout.read().splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "ack" and parts[3] == "1":
                pinned.update(range(int(parts[1]), int(parts[2]) + 1))
        _check(path, pinned, rng)
    compacted = [n for n in os.listdir(path) if n.endswith(".compacted")]
    assert acks > 200 and pinned and compacted
