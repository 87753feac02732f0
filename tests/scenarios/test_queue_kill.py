"""SIGKILL a real queue worker process at random moments, round after round, on one group.

The worker prints what each call returned only after it returned: a poll's offsets with
their delivery counts, and the offsets of each ack, release and reject. After every kill a
copy of the directory is opened and drained with a clock far ahead: no record whose ack or
reject was printed may come back; every other record must (except those the worker held
when it died, whose unprinted last call may have finished them), with a delivery count no
lower than the last one printed and at most one higher (an unprinted poll). The next worker
continues on the killed (uncopied) directory."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time

from kdelay import Log, LogConfig, QueueConsumer, Record

M = 300

WORKER = textwrap.dedent("""
    import random, sys
    from kdelay import Log, QueueConsumer
    path, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    log = Log.open(path)
    q = QueueConsumer(log, "work", lock_ms=10**9, max_delivery_count=10**6,
                      compact_min_bytes=3000)
    print("open", flush=True)
    while True:
        recs = q.poll(max_records=rng.randint(1, 9), timeout_ms=50)
        print("poll", *[f"{r.offset}:{r.delivery_count}" for r in recs], flush=True)
        rng.shuffle(recs)
        a, b = sorted(rng.sample(range(len(recs) + 1), 2)) if recs else (0, 0)
        for verb, part in (("ack", recs[:a]), ("rel", recs[a:b]), ("rej", recs[b:])):
            if not part:
                continue
            if verb == "ack":
                q.ack(part)
            elif verb == "rel":
                q.release(part, delay_ms=rng.choice((0, 0, 5, 30)))
            else:
                q.reject(part)
            print(verb, *[r.offset for r in part], flush=True)
""")


class Model:
    def __init__(self) -> None:
        self.count: dict[int, int] = {}
        self.finished: set[int] = set()
        self.held: set[int] = set()
        self.uncertain: set[int] = set()  # held at a kill: the unprinted call may ack them
        self.seen_since_kill: set[int] = set()

    def line(self, text: str) -> None:
        verb, *args = text.split()
        if verb == "poll":
            for item in args:
                off, count = map(int, item.split(":"))
                assert off not in self.finished, f"finished offset {off} delivered again"
                # +2: an unprinted poll before the last kill may have counted one more
                assert count == self.count.get(off, 0) + 1 or (
                    off not in self.seen_since_kill and count == self.count.get(off, 0) + 2), \
                    f"offset {off}: count {count} after {self.count.get(off, 0)}"
                self.seen_since_kill.add(off)
                self.count[off] = count
                self.held.add(off)
                self.uncertain.discard(off)
        elif verb in ("ack", "rej", "rel"):
            offs = set(map(int, args))
            self.held -= offs
            if verb != "rel":
                self.finished |= offs

    def killed(self) -> None:
        self.uncertain |= self.held
        self.held = set()
        self.seen_since_kill = set()


def _check(path: str, m: Model, where: str) -> None:
    frozen = time.time_ns() // 1_000_000 + 10**8
    with Log.open(path, clock=lambda: frozen) as log:
        q = QueueConsumer(log, "work", max_delivery_count=10**6)
        got = q.poll(max_records=10 * M)
        seen = [r.offset for r in got]
        assert len(seen) == len(set(seen)), where
        assert not set(seen) & m.finished, f"{where}: finished came back"
        must = set(range(M)) - m.finished - m.uncertain
        assert must <= set(seen), f"{where}: lost {sorted(must - set(seen))[:10]}"
        for r in got:
            before = m.count.get(r.offset, 0)
            assert before <= r.delivery_count - 1 <= before + 1, \
                f"{where}: offset {r.offset} count {r.delivery_count - 1}, printed {before}"
        q.close()


def test_sigkill_queue_worker_rounds(tmp_path):
    rng = random.Random(99)
    path = os.fspath(tmp_path / "q-0")
    with Log.open(path, config=LogConfig(flush_messages=1)) as log:
        for i in range(0, M, 10):
            log.append([Record(b"job-%d" % (i + k)) for k in range(10)])
    m = Model()
    for round_no in range(12):
        child = subprocess.Popen([sys.executable, "-c", WORKER, path, str(round_no)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "open", child.stderr.read()
            for _ in range(rng.randint(1, 40)):
                line = child.stdout.readline()
                assert line.endswith("\n"), child.stderr.read()
                m.line(line)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
        rest = child.stdout.read()
        lines = rest.split("\n")
        for line in lines[:-1]:  # the last piece may be cut short by the kill
            m.line(line)
        m.killed()
        assert child.returncode == -signal.SIGKILL
        copy = os.fspath(tmp_path / f"check-{round_no}")
        shutil.copytree(path, copy)
        _check(copy, m, f"round {round_no}")
        shutil.rmtree(copy)
    assert len(m.finished) > 50 and max(m.count.values()) > 1
