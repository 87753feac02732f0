"""SIGKILL a real process that appends, cancels and reschedules, again and again, on one
directory. Every value names the offset it was first appended at, so a record and all its
reschedule copies form one group: of each group at most one record is ever delivered,
exactly one unless a plain cancel hit it, never one whose cancel or move was acknowledged.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time

from kdelay import Log, LogConfig, Record

CONFIG = dict(segment_bytes=3000, index_interval_bytes=256, flush_messages=1)

WRITER = textwrap.dedent("""
    import random, sys
    from kdelay import Log, LogConfig, Record
    path, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    log = Log.open(path, config=LogConfig(segment_bytes=3000, index_interval_bytes=256,
                                          flush_messages=1))
    print("open", log.log_end_offset, flush=True)
    pending = []
    while True:
        r = rng.random()
        if r < 0.5 or not pending:
            base = log.log_end_offset
            n = rng.randint(1, 5)
            res = log.append([Record(b"%d:" % (base + i) + b"p" * rng.randint(0, 40))
                              for i in range(n)], deliver_after=log.now() + 600_000)
            pending += range(res.base_offset, res.last_offset + 1)
            print("ack", res.base_offset, res.last_offset, flush=True)
        elif r < 0.75:
            offs = rng.sample(pending, min(len(pending), rng.randint(1, 3)))
            print("try-cancel", *offs, flush=True)
            n = log.cancel(offs)
            print("cancelled", n, *offs, flush=True)
            pending = [o for o in pending if o not in offs]
        else:
            off = rng.choice(pending)
            print("try-move", off, flush=True)
            res = log.reschedule(off, log.now() + rng.choice((300_000, 900_000)))
            print("moved", off, res.base_offset, flush=True)
            pending.remove(off)
            pending.append(res.base_offset)
        if rng.random() < 0.03:
            log.roll()
""")


class Seen:
    def __init__(self) -> None:
        self.acked: set[int] = set()
        self.cancelled: set[int] = set()  # acknowledged plain cancels
        self.tried_cancel: set[int] = set()
        self.moved: dict[int, int] = {}  # acknowledged: original -> copy

    def feed(self, line: str) -> None:
        parts = line.split()
        if not parts:
            return
        if parts[0] == "ack" and len(parts) == 3:
            self.acked.update(range(int(parts[1]), int(parts[2]) + 1))
        elif parts[0] == "try-cancel":
            self.tried_cancel.update(map(int, parts[1:]))
        elif parts[0] == "cancelled" and len(parts) > 2:
            offs = list(map(int, parts[2:]))
            assert int(parts[1]) == len(offs), line
            self.cancelled.update(offs)
        elif parts[0] == "moved" and len(parts) == 3:
            self.moved[int(parts[1])] = int(parts[2])
            self.acked.add(int(parts[2]))


def _check(path: str, seen: Seen) -> None:
    frozen = time.time_ns() // 1_000_000 + 10 ** 8
    log = Log.open(path, config=LogConfig(**CONFIG), clock=lambda: frozen)
    try:
        records = {r.offset: r for r in log.read(0, max_records=10 ** 9)}
        assert sorted(records) == list(range(len(records)))
        assert seen.acked <= set(records), "acknowledged record lost"
        delivered, after = [], None
        while True:
            page = log.fetch(after, max_records=50)
            if not page.records:
                break
            delivered += [r.offset for r in page.records]
            after = page.next
        assert len(delivered) == len(set(delivered))
        assert not set(delivered) & seen.cancelled, "acknowledged cancel lost"
        assert not set(delivered) & set(seen.moved), "acknowledged move lost"
        groups: dict[int, list[int]] = {}
        for off, r in records.items():
            groups.setdefault(int(r.value.split(b":", 1)[0]), []).append(off)
        for tag, members in groups.items():
            got = [o for o in members if o in delivered]
            assert len(got) <= 1, f"group {tag}: {members} delivered {got}"
            if not set(members) & seen.tried_cancel:
                assert len(got) == 1, f"group {tag}: {members} delivered none"
        # appends after the crash are delivered (no stale cancellation hides them)
        end = log.log_end_offset
        log.append([Record(b"%d:check" % end)], deliver_after=frozen)
        assert end in {r.offset for r in log.fetch(after, max_records=10).records}
    finally:
        log.close()


def test_sigkill_cancel_and_reschedule_rounds(tmp_path):
    rng = random.Random(99)
    path = os.fspath(tmp_path / "p-0")
    seen = Seen()
    for round_no in range(12):
        child = subprocess.Popen([sys.executable, "-c", WRITER, path, str(round_no)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = child.stdout.readline()
            assert line.startswith("open"), child.stderr.read()
            for _ in range(rng.randint(5, 80)):
                line = child.stdout.readline()
                assert line, child.stderr.read()
                seen.feed(line)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
        for line in child.stdout.read().splitlines():
            seen.feed(line)
        assert child.returncode == -signal.SIGKILL
        # check a copy: the checker's far-future clock must not reach the writer's log
        copy = os.fspath(tmp_path / f"check-{round_no}")
        shutil.copytree(path, copy)
        _check(copy, seen)
        shutil.rmtree(copy)
    assert seen.cancelled and seen.moved
