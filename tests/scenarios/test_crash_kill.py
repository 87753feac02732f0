"""SIGKILL a real writer process at random moments, again and again, on one directory.

The writer (flush_messages=1) prints each append's (base, last, deliver_after) only after
append returned, so a printed batch is acknowledged and must survive any later kill. Each
value names its offset and deliverAfter, so anything the log returns can be checked
without knowing what the writer had in flight.

Every third round kills the writer inside Log.open instead, at a chosen point of the
recovery of the directory the previous kill left: the writer prints "opening", and at that
point (the n-th call of one fsio operation while Log.open runs) prints "stalled" and waits
for the kill. Where each kill landed is counted, and some must land inside Log.open.
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
from collections import Counter

from kdelay import DeliveryKey, Log, LogConfig, Record

CONFIG = dict(segment_bytes=4096, index_interval_bytes=256, flush_messages=1)

WRITER = textwrap.dedent("""
    import random, sys
    from kdelay import Log, LogConfig, Record
    from kdelay.testing.stalls import Stall
    path, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    stall = Stall(sys.argv[3], ("read_small", "open_append", "fsync", "write", "rename",
                                "fsync_dir"))
    print("opening", flush=True)
    stall.start()
    log = Log.open(path, config=LogConfig(segment_bytes=4096, index_interval_bytes=256,
                                          flush_messages=1))
    stall.stop()
    print("open", log.log_end_offset, flush=True)
    while True:
        base = log.log_end_offset
        n = rng.randint(1, 12)
        da = log.now() + rng.choice((-500, 0, 20, 400))
        recs = [Record(b"%d:%d:" % (base + i, max(da, 0)) + b"p" * rng.randint(0, 90))
                for i in range(n)]
        res = log.append(recs, deliver_after=da)
        print("ack", res.base_offset, res.last_offset, res.deliver_after, flush=True)
        if rng.random() < 0.03:
            log.roll()
""")


def _check(path: str, acked: dict[int, int], rng: random.Random) -> int:
    """Open (recovering) and verify; returns the log end offset."""
    # A frozen clock far ahead of the writer's. The log clock may still be ahead of it (a
    # previous check's clean close carried its clock forward to the writers), so what is
    # due is decided against log.now(), not assumed to be everything.
    frozen = time.time_ns() // 1_000_000 + 10**7
    log = Log.open(path, config=LogConfig(**CONFIG), clock=lambda: frozen)
    try:
        records = log.read(0, max_records=10**9)
        assert [r.offset for r in records] == list(range(len(records))), "offset gap"
        for r in records:
            off, da, _ = r.value.split(b":", 2)
            # nothing invented: every record is one the writer made, at its own offset
            assert int(off) == r.offset
            assert r.deliver_after >= int(da)
            assert r.deliver_after == acked.get(r.offset, r.deliver_after)
        missing = set(acked) - {r.offset for r in records}
        assert not missing, f"acknowledged offsets lost: {sorted(missing)[:10]}"
        # due order over everything that is due
        now = log.now()
        seen, after = [], None
        while True:
            page = log.fetch(after, max_records=rng.choice((7, 100, 1000)))
            if not page.records:
                break
            seen += [r.delivery_key for r in page.records]
            after = page.next
        assert seen == sorted(DeliveryKey(r.deliver_after, r.offset) for r in records
                              if r.deliver_after <= now)
        # the log takes new appends where it ended
        end = log.log_end_offset
        assert end == len(records)
        res = log.append([Record(b"%d:0:parent" % end)])
        assert res.base_offset == end
        acked[end] = res.deliver_after
        return end + 1
    finally:
        log.close()


# where a kill-while-opening round stops Log.open: before the n-th call (from 0) of an fsio
# operation. Opening a directory a writer was killed in reads the recovery point, opens
# each segment, fsyncs the recovered active one, then writes the new recovery point.
STALLS = ["open_append:0", "fsync:0", "read_small:0", "write:0", "open_append:3", "rename:0",
          "fsync_dir:0"]


def _acks(line: str, acked: dict[int, int]) -> None:
    parts = line.split()
    if parts and parts[0] == "ack" and len(parts) == 4:
        base, last, da = map(int, parts[1:])
        for off in range(base, last + 1):
            acked[off] = da


def test_sigkill_writer_rounds(tmp_path):
    rng = random.Random(1234)
    path = os.fspath(tmp_path / "p-0")
    acked: dict[int, int] = {}  # offset -> deliverAfter of every acknowledged record
    rounds = 20
    landed: Counter[str] = Counter()  # where each kill landed
    for round_no in range(rounds):
        stall = STALLS[round_no // 3] if round_no % 3 == 1 else "-"
        child = subprocess.Popen([sys.executable, "-c", WRITER, path, str(round_no), stall],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline() == "opening\n", child.stderr.read()
            if stall != "-":
                # kill while it opens (and recovers) the directory, at the stall point
                line = child.stdout.readline()
                assert line.startswith(("stalled", "open ")), child.stderr.read()
                landed["in Log.open, before " + stall if line.startswith("stalled")
                       else "after Log.open (stall point not reached)"] += 1
            else:
                opened = child.stdout.readline().split()
                assert opened and opened[0] == "open", child.stderr.read()
                for _ in range(rng.randint(1, 60)):
                    line = child.stdout.readline()
                    assert line.startswith("ack"), child.stderr.read()
                    _acks(line, acked)
                landed["appending"] += 1
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
        # acks printed before the kill but not yet read are acknowledged too
        for line in child.stdout.read().splitlines():
            _acks(line, acked)
        assert child.returncode == -signal.SIGKILL
        if round_no % 3 == 0 or rng.random() < 0.5:
            # check a copy, leaving the killed directory unclean for the next writer (always
            # before a kill-while-opening round: its open recovers)
            copy = os.fspath(tmp_path / f"check-{round_no}")
            shutil.copytree(path, copy)
            _check(copy, dict(acked), rng)
            shutil.rmtree(copy)
        else:
            _check(path, acked, rng)
    print("kills landed:", dict(landed))
    in_open = sum(n for where, n in landed.items() if where.startswith("in Log.open"))
    assert in_open >= 5, f"only {in_open} of {len(STALLS)} kills landed inside Log.open: " \
                         f"{dict(landed)}"
    assert len(acked) > 100
