"""`kdelay demo`: a real end-to-end run on a temporary directory.

Schedules a delayed workload shaped like production traffic (immediate records, retries
with exponential backoff, jobs scheduled hours ahead) as an application would: one
`Producer.send` per job with a relative `delay_ms`, the producer batching them (across
several segments, with a simulated clock). Then it takes an unclean copy of the live
directory (what a crash leaves behind), recovers it, and drains everything in due order
while checking the delivery invariant. Then a worker pool (kdelay.tools.queue_demo) works
through a job queue with failures, backoff and a restart, and checks that every job was
acked exactly once or dead-lettered after the limit.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import shutil
import sys
import tempfile
import time
import zlib
from collections.abc import Sequence

from ..clients.producer import Producer
from ..config import LogConfig
from ..partition import Log
from . import queue_demo
from .progress import ProgressBar

HOUR_MS = 3_600_000
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: a fixed, simulated epoch


def _count(n: int) -> str:
    return f"{n:,}"


def expected_value(job: int) -> bytes:
    """Each job's 100-byte value derives from its number, so the drain checks every byte."""
    body = f"record {job:012d} ".encode().ljust(96, b".")
    return body + zlib.crc32(body).to_bytes(4, "big")


def build_workload(jobs: int, seed: int):
    """Yields (kind, delay_ms or None) per job."""
    rng = random.Random(seed)
    for _ in range(jobs):
        r = rng.random()
        if r < 0.5:
            yield "now", None
        elif r < 0.85:
            attempt = rng.randint(0, 7)
            yield f"retry{attempt}", int(200 * 2 ** attempt * rng.uniform(0.8, 1.2))
        else:
            yield "job", rng.randint(1, 6) * HOUR_MS + rng.randint(0, 59) * 60_000


def run(records: int, batch_size: int, segment_bytes: int, workdir: str, seed: int) -> dict:
    clock = [START_MS]
    cfg = LogConfig(segment_bytes=segment_bytes)
    live_dir = os.path.join(workdir, "live")
    crash_dir = os.path.join(workdir, "crashed-copy")
    print(f"kdelay demo: {records:,} jobs, one Producer.send each (batches of up to "
          f"{batch_size}), into {live_dir}")

    log = Log.open(live_dir, config=cfg, clock=lambda: clock[0])
    # built before timing: the send figure measures the engine, not the test
    plan = [(expected_value(j), b"%s-%06d" % (kind.encode(), j % 5000), delay)
            for j, (kind, delay) in enumerate(build_workload(records, seed))]
    bar = ProgressBar("send", records, fmt=_count)
    futures = []
    t0 = time.perf_counter()
    with Producer(log, batch_records=batch_size) as producer:
        for j, (value, key, delay) in enumerate(plan):
            futures.append(producer.send(value, key, delay_ms=delay))
            if j % batch_size == batch_size - 1:
                clock[0] += 1  # jobs arrive batch_size per simulated millisecond
                bar(batch_size)
        producer.flush()
    append_s = time.perf_counter() - t0
    bar.close()
    due = [0] * records  # by offset: the deliverAfter the log gave each job
    job_at = [0] * records  # by offset: the job whose value it holds
    for j, fut in enumerate(futures):
        meta = fut.result()
        due[meta.offset] = meta.deliver_after
        job_at[meta.offset] = j
    moves = withdraw_some_jobs(log, clock, due, 1, seed)
    log.flush()
    segments = len(log.segments)
    # A crash: copy the live directory while the log is open. The copy has no clean-shutdown
    # marker and the active segment's index exists only in memory.
    shutil.copytree(live_dir, crash_dir, ignore=shutil.ignore_patterns(".lock"))
    log.close()

    t0 = time.perf_counter()
    recovered = Log.open(crash_dir, config=cfg, clock=lambda: clock[0])
    recovery_ms = (time.perf_counter() - t0) * 1000
    report = recovered.load_report
    print(f"  recovered the crashed copy in {recovery_ms:.1f} ms: scanned "
          f"{report.segments_scanned} segment(s), {report.bytes_scanned / 2**20:.1f} MiB, "
          f"truncated {report.bytes_truncated} bytes")

    checked = drain_and_check(recovered, clock, records, 1, due, moves, job_at)
    recovered.close()
    return {"records": records, "segments": segments, "append_s": append_s,
            "recovery_ms": recovery_ms, "cancelled": len(moves.cancelled),
            "rescheduled": len(moves.copies), **checked}


class Withdrawn:
    """What the demo cancelled and moved: the drain checks none of it comes back."""

    def __init__(self) -> None:
        self.cancelled: set[int] = set()
        self.copies: dict[int, tuple[int, int]] = {}  # copy offset -> (original, its due)


def withdraw_some_jobs(log: Log, clock: list[int], due_of_batch: list[int], batch_size: int,
                       seed: int) -> Withdrawn:
    """Cancel about 2% of the jobs scheduled hours ahead (paid orders whose reminders are no
    longer needed) and move about 1% of them to another hour (a job moved to tonight)."""
    rng = random.Random(seed + 1)
    w = Withdrawn()
    jobs = [b for b, da in enumerate(due_of_batch) if da > clock[0] + HOUR_MS // 2]
    if not jobs:
        return w
    picks = rng.sample(range(len(jobs) * batch_size), max(2, len(jobs) * batch_size // 33))
    offsets = [jobs[p // batch_size] * batch_size + p % batch_size for p in picks]
    half = len(offsets) * 2 // 3
    t0 = time.perf_counter()
    n = log.cancel(offsets[:half])
    cancel_ms = (time.perf_counter() - t0) * 1000
    if n != half:
        raise AssertionError(f"cancelled {n} of {half} pending jobs")
    w.cancelled.update(offsets[:half])
    for off in offsets[half:]:
        res = log.reschedule(off, clock[0] + rng.randint(1, 6) * HOUR_MS)
        w.copies[res.base_offset] = (off, res.deliver_after)
    print(f"  cancelled {n:,} scheduled jobs in one call ({cancel_ms:.1f} ms) and "
          f"rescheduled {len(w.copies):,} to another hour")
    return w


def drain_and_check(log: Log, clock: list[int], total: int, batch_size: int,
                    due_of_batch: list[int], moved: Withdrawn | None = None,
                    job_at: list[int] | None = None) -> dict:
    """Drain in due order while the clock moves, checking every record: exactly once, in
    (deliverAfter, offset) order, never before its deliverAfter, bytes as written (those of
    job `job_at[offset]`; None: of job `offset`); no cancelled record and no rescheduled
    original, and each reschedule's copy at its new time with the original's bytes."""
    moved = moved if moved is not None else Withdrawn()
    jobs: Sequence[int] = job_at if job_at is not None else range(total)
    withdrawn = moved.cancelled | {orig for orig, _ in moved.copies.values()}
    copies_seen = 0
    seen = 0
    cursor = None
    last_key = (-1, -1)
    bar = ProgressBar("drain", total, fmt=_count)

    def check(page_records) -> None:
        nonlocal seen, last_key, copies_seen
        for r in page_records:
            key = (r.deliver_after, r.offset)
            if key <= last_key:
                raise AssertionError(f"out of order: {key} after {last_key}")
            if r.deliver_after > clock[0]:
                raise AssertionError(f"record {r.offset} delivered early")
            if r.offset in withdrawn:
                raise AssertionError(f"record {r.offset} was cancelled or moved, and came")
            if r.offset >= total:
                orig, due = moved.copies[r.offset]
                if r.deliver_after != due or r.value != expected_value(jobs[orig]):
                    raise AssertionError(f"copy {r.offset} of {orig} came back altered")
                copies_seen += 1
                last_key = key
                continue
            if r.deliver_after != due_of_batch[r.offset // batch_size]:
                raise AssertionError(f"record {r.offset} came back with another deliverAfter")
            if r.value != expected_value(jobs[r.offset]):
                raise AssertionError(f"record {r.offset} came back with other bytes")
            last_key = key
        seen += len(page_records)
        bar(len(page_records))

    # Phase 1: a simulated minute in 100 ms steps; records come due as time passes.
    stepped_until = clock[0] + 60_000
    while clock[0] < stepped_until:
        while True:
            page = log.fetch(cursor, max_records=500)
            if not page.records:
                break
            check(page.records)
            cursor = page.next
        clock[0] += 100
    stepped = seen
    # Phase 2: jump past every scheduled job and drain the rest at full speed (timed; the
    # checks run afterwards so they do not count against the engine).
    clock[0] += 7 * HOUR_MS
    pages = []
    t0 = time.perf_counter()
    while True:
        page = log.fetch(cursor, max_records=500)
        if not page.records:
            break
        pages.append(page.records)
        cursor = page.next
    drain_s = time.perf_counter() - t0
    for recs in pages:
        check(recs)
    bar.close()
    want = total - len(withdrawn) + len(moved.copies)
    if seen != want or copies_seen != len(moved.copies):
        raise AssertionError(f"delivered {seen} records ({copies_seen} copies), expected "
                             f"{want} ({len(moved.copies)} copies)")
    return {"drain_s": drain_s, "drained_at_speed": seen - stepped, "stepped": stepped}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kdelay demo", description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=500_000, metavar="N",
                   help="records to schedule, drain and check (default 500000)")
    p.add_argument("--batch-size", type=int, default=100, metavar="N",
                   help="the Producer's batch_records (default 100)")
    p.add_argument("--segment-mib", type=float, default=8.0, metavar="MIB",
                   help="segment size in MiB, as LogConfig.segment_bytes (default 8)")
    p.add_argument("--seed", type=int, default=7,
                   help="random seed of the workload and the failures (default 7)")
    p.add_argument("--jobs", type=int, default=3000, metavar="N",
                   help="jobs for the worker-pool part (default 3000; 0: skip it)")
    p.add_argument("--workers", type=int, default=4, metavar="N",
                   help="worker threads of the pool (default 4)")
    p.add_argument("--keep", action="store_true",
                   help="keep the temporary directory and print where it is")
    args = p.parse_args(argv)
    if args.records < 1 or args.batch_size < 1 or args.segment_mib <= 0:
        p.error("--records, --batch-size and --segment-mib must be positive")
    if args.jobs < 0 or args.workers < 1:
        p.error("--jobs must be >= 0 and --workers positive")
    workdir = tempfile.mkdtemp(prefix="kdelay-demo-")
    if isinstance(sys.stdout, io.TextIOWrapper):  # (not when replaced, as by a test)
        sys.stdout.reconfigure(line_buffering=True)
    try:
        s = run(args.records, args.batch_size, int(args.segment_mib * 2**20), workdir, args.seed)
        pool = None
        if args.jobs:
            print(f"kdelay demo: worker pool, {args.jobs:,} jobs, {args.workers} workers")
            pool = queue_demo.run_pool(os.path.join(workdir, "queue"), args.jobs,
                                       args.workers, args.seed)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"  records            {s['records']:>12,}")
    print(f"  segments           {s['segments']:>12,}")
    print(f"  send (Producer)    {s['records'] / s['append_s']:>12,.0f} jobs/s, end to end")
    print(f"  drain (due order)  {s['drained_at_speed'] / max(s['drain_s'], 1e-9):>12,.0f} "
          f"records/s ({s['drained_at_speed']:,} records at full speed, {s['stepped']:,} "
          f"while the clock stepped)")
    print(f"  crash recovery     {s['recovery_ms']:>12.1f} ms")
    print("  delivery invariant: every record once, in (deliverAfter, offset) order, never "
          "early, bytes intact: OK")
    print(f"  cancel/reschedule: none of the {s['cancelled']:,} cancelled jobs and none of "
          f"the {s['rescheduled']:,} moved originals delivered; each copy delivered once, "
          f"at its new time: OK")
    if pool is not None:
        print(f"  worker pool        {pool['jobs'] / pool['elapsed_s']:>12,.0f} jobs/s "
              f"({pool['workers']} workers, {pool['released']:,} failures released with "
              f"backoff, {pool['restarts']} restart)")
        print(f"  job invariant: {pool['acked']:,} jobs acked exactly once, "
              f"{pool['dead_lettered']:,} dead-lettered once after "
              f"{queue_demo.MAX_DELIVERIES} deliveries: OK")
    if args.keep:
        print(f"  kept {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
