"""SIGKILL a real writer process at random moments, again and again, on one directory.

The writer (flush_messages=1) prints each append's (base, last, deliver_after) only after
append returned, so a printed batch is acknowledged and must survive any later kill. Each
value names its offset and deliverAfter, so anything the log returns can be checked
without knowing what the writer had in flight.
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

from kdelay import DeliveryKey, Log, LogConfig, Record

CONFIG = dict(segment_bytes=4096, index_interval_bytes=256, flush_messages=1)

WRITER = textwrap.dedent("""
    import random, sys
    from kdelay import Log, LogConfig, Record
    path, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    log = Log.open(path, config=LogConfig(segment_bytes=4096, index_interval_bytes=256,
                                          flush_messages=1))
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


def test_sigkill_writer_rounds(tmp_path):
    rng = random.Random(1234)
    path = os.fspath(tmp_path / "p-0")
    acked: dict[int, int] = {}  # offset -> deliverAfter of every acknowledged record
    rounds = 20
    kills_during_open = 0
    for round_no in range(rounds):
        child = subprocess.Popen([sys.executable, "-c", WRITER, path, str(round_no)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            if rng.random() < 0.15:
                # kill while it opens (and perhaps recovers) the directory
                time.sleep(rng.uniform(0, 0.3))
                kills_during_open += 1
            else:
                opened = child.stdout.readline().split()
                assert opened and opened[0] == "open", child.stderr.read()
                for _ in range(rng.randint(1, 60)):
                    line = child.stdout.readline().split()
                    assert line and line[0] == "ack", child.stderr.read()
                    base, last, da = map(int, line[1:])
                    for off in range(base, last + 1):
                        acked[off] = da
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
        # acks printed before the kill but not yet read are acknowledged too
        for line in child.stdout.read().splitlines():
            parts = line.split()
            if parts and parts[0] == "ack" and len(parts) == 4:
                base, last, da = map(int, parts[1:])
                for off in range(base, last + 1):
                    acked[off] = da
        assert child.returncode == -signal.SIGKILL
        if rng.random() < 0.5:
            # check a copy, leaving the killed directory unclean for the next writer
            copy = os.fspath(tmp_path / f"check-{round_no}")
            shutil.copytree(path, copy)
            _check(copy, dict(acked), rng)
            shutil.rmtree(copy)
        else:
            _check(path, acked, rng)
    assert len(acked) > 100
