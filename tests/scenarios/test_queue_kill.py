"""SIGKILL a real queue worker process at random moments, round after round, on one group.

The worker prints what each call returned only after it returned: a poll's offsets with
their delivery counts, and the offsets of each ack, release and reject. After every kill a
copy of the directory is opened and drained with a clock far ahead: no record whose ack or
reject was printed may come back; every other record must (except those the worker held
when it died, whose unprinted last call may have finished them), with a delivery count no
lower than the last one printed and at most one higher (an unprinted poll). The next worker
continues on the killed (uncopied) directory.

A second worker leaves the group again and again while holding records: one member closes,
then the Log closes under another member (which closes the group's state). Every other
round stops it inside that close, at a chosen file operation, and kills it there; where
each kill landed is counted, and some must land inside the close. Records held when a
close began are never finished by it: each must come back."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter

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


LEAVER = textwrap.dedent("""
    import random, sys
    from kdelay import Log, QueueConsumer
    from kdelay.testing.stalls import Stall
    path, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    stall = Stall(sys.argv[3], ("write", "fsync", "rename", "fsync_dir"))

    def member(log):
        return QueueConsumer(log, "work", lock_ms=10**9, max_delivery_count=10**6,
                             compact_min_bytes=3000)

    def polled(recs):
        print("poll", *[f"{r.offset}:{r.delivery_count}" for r in recs], flush=True)
        return recs

    while True:
        log = Log.open(path)
        q, other = member(log), member(log)
        print("open", flush=True)
        for _ in range(rng.randint(0, 4)):
            recs = polled(q.poll(max_records=rng.randint(1, 6)))
            if recs:
                q.ack(recs[:1])
                print("ack", recs[0].offset, flush=True)
                q.release(recs[1:], delay_ms=rng.choice((0, 5)))
                print("rel", *[r.offset for r in recs[1:]], flush=True)
        polled(q.poll(max_records=rng.randint(1, 4)))      # held as q leaves
        polled(other.poll(max_records=rng.randint(1, 4)))  # held as the log closes
        print("closing", flush=True)
        stall.start()
        q.close()
        log.close()
        stall.stop()
        print("closed", flush=True)
""")


class Model:
    def __init__(self) -> None:
        self.count: dict[int, int] = {}
        self.finished: set[int] = set()
        self.held: set[int] = set()
        self.uncertain: set[int] = set()  # held at a kill: the unprinted call may ack them
        self.seen_since_kill: set[int] = set()
        self.closing = False  # a close is the call in flight: it finishes nothing

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
        elif verb == "closing":
            self.closing = True
        elif verb == "closed":  # what the members held is available again, unfinished
            self.closing = False
            self.held = set()

    def killed(self) -> None:
        if not self.closing:
            self.uncertain |= self.held
        self.held = set()
        self.closing = False
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


def _queue_of_jobs(tmp_path) -> str:
    path = os.fspath(tmp_path / "q-0")
    with Log.open(path, config=LogConfig(flush_messages=1)) as log:
        for i in range(0, M, 10):
            log.append([Record(b"job-%d" % (i + k)) for k in range(10)])
    return path


def _after_kill(child: subprocess.Popen, m: Model, path: str, copy: str, where: str) -> None:
    """Take in what the killed worker printed before it died, then check a copy of the
    directory (the next worker goes on with the killed one)."""
    for line in child.stdout.read().split("\n")[:-1]:  # the last piece may be cut short
        m.line(line)
    m.killed()
    assert child.returncode == -signal.SIGKILL
    shutil.copytree(path, copy)
    _check(copy, m, where)
    shutil.rmtree(copy)


def test_sigkill_queue_worker_rounds(tmp_path):
    rng = random.Random(99)
    path = _queue_of_jobs(tmp_path)
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
        _after_kill(child, m, path, os.fspath(tmp_path / f"check-{round_no}"),
                    f"round {round_no}")
    assert len(m.finished) > 50 and max(m.count.values()) > 1


# where a leaving round stops the worker: before the n-th call (from 0) of an fsio operation
# once "closing" is printed. The member's close writes one journal entry (write:0); the
# Log's close, of a log this worker never appended to, writes only its clean-shutdown
# marker (atomically: write, fsync, rename, fsync_dir).
STALLS = ["write:0", "write:1", "fsync:0", "rename:0", "fsync_dir:0"]


def test_sigkill_while_leaving_the_group(tmp_path):
    rng = random.Random(7)
    path = _queue_of_jobs(tmp_path)
    m = Model()
    landed: Counter[str] = Counter()
    for round_no in range(2 * len(STALLS)):
        stall = STALLS[round_no // 2] if round_no % 2 == 0 else "-"
        child = subprocess.Popen([sys.executable, "-c", LEAVER, path, str(round_no), stall],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            for _ in range(400 if stall != "-" else rng.randint(1, 60)):
                line = child.stdout.readline()
                assert line.endswith("\n"), child.stderr.read()
                if line == "stalled\n":
                    where = f"in the close, before {stall}"
                    break
                m.line(line)
            else:
                where = "in the close (unplanned)" if m.closing else "working"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
        landed[where] += 1
        _after_kill(child, m, path, os.fspath(tmp_path / f"check-{round_no}"),
                    f"round {round_no} ({where})")
    print("kills landed:", dict(landed))
    planned = sum(n for w, n in landed.items() if w.startswith("in the close, before"))
    assert planned >= len(STALLS) - 1, f"only {planned} kills inside a close: {dict(landed)}"
    assert len(m.finished) > 10 and max(m.count.values()) > 1
