"""What cancellations cost (issue 13): a short run, ratios within one run.

    python bench/bench_cancel.py [--records 200000] [--cancellations 1000000]

1. drain rate: records/s of a full due-order drain (pages of 500 and 333) of N records in
   100-record batches with 0%, 1% and 50% of them cancelled (random offsets, one
   `cancel` call of all of them before the clock moves, then a roll so the cancellations
   are in the persisted caches, as after any roll or clean reopen); the rate counts the
   records the drain returns and the ones it skips.
2. open time: a clean `Log.open` of a log holding M cancelled records (M in one
   segment, the worst case for a per-segment cache), against the same log with none;
   plus the first page after the open (which maps the cache).
3. bytes per cancellation: journal and cache bytes on disk divided by M, and the heap a
   cancelled-but-due record costs after a clean reopen (tracemalloc, all records due).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import statistics
import tempfile
import time
import tracemalloc

import numpy as np

from kdelay import Log, LogConfig, Record

T0 = 1_700_000_000_000
perf = time.perf_counter


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> int:
        return self.t


def build(path: str, n: int, clock: Clock) -> None:
    log = Log.open(path, config=LogConfig(segment_bytes=1 << 30), clock=clock)
    rng = random.Random(1)
    value = b"v" * 100
    for i in range(0, n, 100):
        log.append([Record(value, key=b"%016d" % (i + k)) for k in range(100)],
                   deliver_after=T0 + 1 + rng.randrange(900_000))
    log.close()


def drain(path: str, clock: Clock, page_size: int = 500) -> tuple[float, int]:
    log = Log.open(path, clock=clock)
    try:
        t0 = perf()
        got, after = 0, None
        while True:
            page = log.fetch(after, max_records=page_size)
            if not page.records:
                break
            got += len(page.records)
            after = page.next
        return perf() - t0, got
    finally:
        log.close()


def cancelled_copy(src: str, dst: str, offsets: np.ndarray, clock: Clock) -> None:
    shutil.copytree(src, dst)
    log = Log.open(dst, clock=clock)
    try:
        if len(offsets):
            assert log.cancel(offsets.tolist()) == len(offsets)
    finally:
        log.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--cancellations", type=int, default=1_000_000)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="kdelay-bench-cancel-")
    try:
        clock = Clock()
        n = args.records
        base = os.path.join(root, "base")
        build(base, n, clock)
        rng = np.random.default_rng(7)
        print(f"## drain of {n:,} records (100-record batches): medians of 5 rounds, the "
              f"cases interleaved")
        dirs = {}
        for share in (0.0, 0.01, 0.5):
            d = os.path.join(root, f"c{share}")
            clock.t = T0
            cancelled_copy(base, d, np.sort(rng.choice(n, int(n * share), replace=False)),
                           clock)
            dirs[share] = d
        clock.t = T0 + 10 ** 7
        for page in (500, 333):
            times: dict[float, list[float]] = {share: [] for share in dirs}
            for _ in range(5):
                for share, d in dirs.items():
                    gc.collect()
                    t, got = drain(d, clock, page)
                    assert got == n - int(n * share)
                    times[share].append(t)
            rate = {share: n / statistics.median(ts) for share, ts in times.items()}
            for share in dirs:
                print(f"- pages of {page}, {share:>4.0%} cancelled: {rate[share]:,.0f} "
                      f"records/s scanned ({n - int(n * share):,} returned), "
                      f"{rate[share] / rate[0.0]:.2f}x the 0% rate")
        m = args.cancellations
        print(f"\n## open with {m:,} cancelled records (one segment)")
        big = os.path.join(root, "big")
        clock.t = T0
        build(big, m, clock)
        none_dir = os.path.join(root, "big-none")
        shutil.copytree(big, none_dir)
        log = Log.open(big, clock=clock)
        t0 = perf()
        log.cancel(range(m))
        t_cancel = perf() - t0
        log.close()
        print(f"- cancel({m:,} offsets) in one call: {t_cancel:.2f} s "
              f"({m / t_cancel:,.0f} offsets/s)")
        clock.t = T0 + 10 ** 7  # all due: the first page after the open meets the cancelled
        for label, d in (("no cancellations", none_dir), (f"{m:,} cancelled", big)):
            times = []
            for _ in range(5):
                t0 = perf()
                log = Log.open(d, clock=clock)
                t_open = perf() - t0
                t0 = perf()
                log.fetch(None, max_records=500)
                t_page = perf() - t0
                log.close()
                times.append((t_open, t_page))
            t_open, t_page = sorted(times)[len(times) // 2]
            print(f"- clean open, {label}: {t_open * 1000:.2f} ms; then the first fetch "
                  f"(everything due{', all of it cancelled' if d == big else ''}): "
                  f"{t_page * 1000:.1f} ms")
        sizes = {name: os.path.getsize(os.path.join(big, name)) for name in os.listdir(big)
                 if name.endswith((".cancels", ".cancelindex"))}
        total = sum(sizes.values())
        parts = ", ".join(f"{k.split('.')[1]} {v / m:.1f} B" for k, v in sizes.items())
        print(f"\n## bytes per cancellation\n- on disk: {total / m:.1f} B ({parts})")
        clock.t = T0 + 10 ** 7  # every cancelled record is due now
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        log = Log.open(big, clock=clock)
        log.fetch(None, max_records=500)  # maps the cache
        heap = tracemalloc.get_traced_memory()[0] - before
        log.close()
        tracemalloc.stop()
        print(f"- heap after a clean reopen and a first fetch, all {m:,} cancelled records "
              f"due: {heap / 1024:.0f} KiB ({heap / m:.3f} B per cancellation)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
