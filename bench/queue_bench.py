"""Work queues: QueueConsumer poll+ack throughput and in-flight memory, side by side with
`Consumer` + `retry` on the same data, in one process (ratios are what to read: the machine
is shared and noisy).

    python bench/queue_bench.py                 # 50,000 jobs, 100 k in flight, ~1-2 min
    python bench/queue_bench.py --jobs 20000 --inflight 20000   # quicker

Figures (records per second unless stated):
- poll+ack with 1, 4 and 16 QueueConsumer threads sharing one group: each polls 100 and
  acks them (one journal write + fsync per ack call), until the log is drained;
- Consumer (one thread, the only way it works): poll 100 + commit (an atomic file replace);
- the same poll+ack with 100 k other records held in flight (acquired, locks not run out);
- failure handling, 10 % of jobs fail once: QueueConsumer `release(delay_ms=0)` (nothing
  appended) against Consumer `retry(delay_ms=0)` (a copy appended); throughput and bytes
  the log grew by;
- memory per in-flight record (tracemalloc, group state only), and the state files' size.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kdelay import Consumer, Log, LogConfig, QueueConsumer, Record  # noqa: E402

PAGE = 100


def fill(path: str, n: int) -> Log:
    log = Log.open(path, config=LogConfig(segment_bytes=64 << 20))
    value = b"x" * 100
    for i in range(0, n, 100):
        log.append([Record(value, key=b"%016d" % (i + k)) for k in range(min(100, n - i))])
    log.flush()
    return log


def queue_drain(log: Log, group: str, threads: int, *, fail_every: int = 0) -> tuple[float, int]:
    """Drain the log's due records with `threads` QueueConsumers; returns (seconds, acked).
    With `fail_every`, every n-th record (by offset) fails on its first delivery and is
    released for immediate redelivery."""
    qs = [QueueConsumer(log, group, max_delivery_count=10) for _ in range(threads)]
    done = [0] * threads

    def work(i: int) -> None:
        q = qs[i]
        while True:
            recs = q.poll(max_records=PAGE)
            if not recs:
                return
            if fail_every:
                bad = [r for r in recs if r.offset % fail_every == 0 and r.delivery_count == 1]
                good = [r for r in recs if not (r.offset % fail_every == 0
                                                and r.delivery_count == 1)]
                if bad:
                    q.release(bad)
                recs = good
            q.ack(recs)
            done[i] += len(recs)
    t0 = time.perf_counter()
    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    for q in qs:
        q.close()
    return dt, sum(done)


def consumer_drain(log: Log, group: str, *, fail_every: int = 0) -> tuple[float, int]:
    c = Consumer(log, group)
    n = 0
    t0 = time.perf_counter()
    while True:
        recs = c.poll(max_records=PAGE)
        if not recs:
            break
        for r in recs:
            if fail_every and r.offset % fail_every == 0 and not r.headers:
                c.retry(r, delay_ms=0)
            else:
                n += 1
        c.commit()
    return time.perf_counter() - t0, n


def log_bytes(log: Log) -> int:
    return log.metrics()["bytes"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=50_000)
    ap.add_argument("--inflight", type=int, default=100_000)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="kdelay-qbench-", dir=args.dir)
    rows: list[tuple[str, str]] = []
    try:
        log = fill(os.path.join(root, "p-0"), args.jobs)
        for threads in (1, 4, 16):
            dt, n = queue_drain(log, f"g{threads}", threads)
            assert n == args.jobs, (n, args.jobs)
            rows.append((f"QueueConsumer poll+ack, {threads} thread(s)", f"{n / dt:,.0f} rec/s"))
        dt, n = consumer_drain(log, "c1")
        rows.append(("Consumer poll+commit, 1 thread", f"{n / dt:,.0f} rec/s"))
        log.close()

        # 100 k in flight: one group holds the first `inflight` records, then drains the rest
        log = fill(os.path.join(root, "p-1"), args.inflight + args.jobs)
        holder = QueueConsumer(log, "big", lock_ms=10**9)
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        held = 0
        while held < args.inflight:
            held += len(holder.poll(max_records=min(500, args.inflight - held)))
        per = (tracemalloc.get_traced_memory()[0] - before) / held
        tracemalloc.stop()
        rows.append((f"memory per in-flight record ({held:,} held)", f"{per:,.0f} B"))
        dt, n = queue_drain(log, "big", 1)
        assert n == args.jobs
        rows.append((f"QueueConsumer poll+ack, 1 thread, {held:,} in flight",
                     f"{n / dt:,.0f} rec/s"))
        part = holder._parts[0]
        state = (os.path.getsize(part.store.snapshot_path)
                 + os.path.getsize(part.store.journal_path))
        rows.append(("state files with that set in flight", f"{state / 1e6:.1f} MB"))
        t0 = time.perf_counter()
        holder.close()
        QueueConsumer(log, "big").close()
        log.close()
        t0 = time.perf_counter()
        log = Log.open(os.path.join(root, "p-1"))
        q = QueueConsumer(log, "big")
        rows.append((f"reopen of the group with {held:,} in flight",
                     f"{(time.perf_counter() - t0) * 1000:,.0f} ms"))
        q.close()
        log.close()

        # failures: 10 % of jobs fail once
        log = fill(os.path.join(root, "p-2"), args.jobs)
        b0 = log_bytes(log)
        dt, n = queue_drain(log, "fq", 1, fail_every=10)
        rows.append(("10 % fail once: QueueConsumer release", f"{n / dt:,.0f} jobs/s, "
                     f"log +{log_bytes(log) - b0:,} B"))
        dt, n = consumer_drain(log, "fc", fail_every=10)
        rows.append(("10 % fail once: Consumer retry", f"{n / dt:,.0f} jobs/s, "
                     f"log +{log_bytes(log) - b0:,} B"))
        log.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"| measure ({args.jobs:,} jobs of 100 B, pages of {PAGE}) | result |")
    print("|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")


if __name__ == "__main__":
    main()
