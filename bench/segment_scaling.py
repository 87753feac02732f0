"""Due-order reads against the number of segments: the same records cut into K segments.

    python bench/segment_scaling.py                  # K = 10, 100, 1000; 5 rounds (~1 min)
    python bench/segment_scaling.py --segments 10,1000 --rounds 3

The log: 200,000 records in 100-record batches (16-byte keys, 100-byte values, a timestamp
on every record), batch i appended at T0 + i ms and due at a uniform random time in the 15
minutes after, rolled into K segments of equal record counts. Every segment overlaps every
other in due time, so a page in due order merges from all of them.

Three figures per K, side by side in one run (every round measures every K in turn; the
table shows medians over rounds and the ratio to the smallest K):
- drain: with the clock past every deliverAfter, fetch pages of 500 following `next`
  from the start to the end, on a log whose indexes are loaded (a drain before it,
  untimed: what an open loaded before lazy loading); records per second.
- first drain: the same drain right after a reopen, so that it also loads each segment's
  index and opens its .log on first use (the clean open defers them).
- reopen + first page: Log.open of the cleanly closed log, then one fetch of 500
  (the close after it untimed).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

from kdelay import Log, LogConfig, Record

T0 = 1_700_000_000_000
SPREAD_MS = 15 * 60_000
BATCH = 100
PAGE = 500
perf = time.perf_counter


class FakeClock:
    def __init__(self, t: int) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


def build(path: str, records: int, segments: int, seed: int = 1) -> int:
    """Write the log at `path`; returns a time past every deliverAfter."""
    rng = random.Random(seed)
    values = [rng.randbytes(100) for _ in range(BATCH)]
    keys = [rng.randbytes(16) for _ in range(BATCH)]
    batches = records // BATCH
    per_segment = max(1, batches // segments)
    clock = FakeClock(T0)
    log = Log.open(path, LogConfig(), clock=clock)
    latest = T0
    for i in range(batches):
        if i and i % per_segment == 0:
            log.roll()
        clock.t = t = T0 + i
        stamps = range(t - BATCH, t)
        due = t + rng.randint(0, SPREAD_MS)
        latest = max(latest, due)
        batch = [Record(v, key=k, timestamp=s)
                 for v, k, s in zip(values, keys, stamps, strict=True)]
        log.append(batch, deliver_after=due)
    log.close()
    return latest + 1


def drain_all(log: Log) -> int:
    got, after = 0, None
    while True:
        page = log.fetch(after, max_records=PAGE, max_bytes=1 << 30)
        if not page.records:
            return got
        got += len(page.records)
        after = page.next


def drains(path: str, now: int, records: int) -> tuple[float, float]:
    """Records per second of the first drain after an open and of a drain after that
    (the open and close untimed)."""
    log = Log.open(path, LogConfig(), clock=FakeClock(now))
    try:
        rates = []
        for _ in range(2):
            t = perf()
            got = drain_all(log)
            rates.append(got / (perf() - t))
            if got != records:
                raise SystemExit(f"drain read {got} records, expected {records}")
    finally:
        log.close()
    return rates[0], rates[1]


def reopen_first_page(path: str, now: int) -> float:
    """Seconds of Log.open plus one page of 500."""
    t = perf()
    log = Log.open(path, LogConfig(), clock=FakeClock(now))
    page = log.fetch(None, max_records=PAGE, max_bytes=1 << 30)
    elapsed = perf() - t
    log.close()
    if len(page.records) != PAGE:
        raise SystemExit(f"first page held {len(page.records)} records")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--segments", default="10,100,1000")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", help="also write the figures as JSON here")
    args = ap.parse_args()
    ks = [int(k) for k in args.segments.split(",")]
    root = tempfile.mkdtemp(prefix="kdelay-segscale-")
    try:
        dirs, nows = {}, {}
        for k in ks:
            dirs[k] = os.path.join(root, f"k{k}")
            nows[k] = build(dirs[k], args.records, k)
        firsts: dict[int, list[float]] = {k: [] for k in ks}
        warms: dict[int, list[float]] = {k: [] for k in ks}
        reopens: dict[int, list[float]] = {k: [] for k in ks}
        gc.collect()
        for r in range(args.rounds):
            order = ks[r % len(ks):] + ks[:r % len(ks)]  # rotate who goes first
            for k in order:
                first, warm = drains(dirs[k], nows[k], args.records)
                firsts[k].append(first)
                warms[k].append(warm)
                reopens[k].append(reopen_first_page(dirs[k], nows[k]))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    base = ks[0]
    d0, f0 = statistics.median(warms[base]), statistics.median(firsts[base])
    r0 = statistics.median(reopens[base])
    print(f"{args.records:,} records, {BATCH}-record batches, pages of {PAGE}, "
          f"medians of {args.rounds} rounds")
    print(f"| segments | drain (M rec/s) | vs K={base} | first drain after reopen (M rec/s) "
          f"| vs K={base} | reopen + first page (ms) | vs K={base} |")
    print("|---|---|---|---|---|---|---|")
    for k in ks:
        d, f = statistics.median(warms[k]), statistics.median(firsts[k])
        ro = statistics.median(reopens[k])
        print(f"| {k:,} | {d / 1e6:.2f} | {d / d0:.2f}x | {f / 1e6:.2f} | {f / f0:.2f}x "
              f"| {ro * 1e3:.1f} | {ro / r0:.1f}x |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"drain": warms, "first_drain": firsts, "reopen": reopens}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
