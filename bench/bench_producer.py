"""Single jobs from several threads: one Producer against one `topic.send` per job.

The workload of issue 23: `--threads` threads (default 4) schedule `--jobs` single jobs
(16-byte random key, 100-byte random value, a delay uniform over 10 s, passed as
`delay_ms`) into a 3-partition Topic, end to end: the clock runs from the threads' start
until every job is appended (the Producer's `flush()` returned; each `topic.send`
returned). The Producer runs twice per round: its callers dropping each future, as they
drop each `topic.send` result (a scheduler that only needs its jobs on disk), and keeping
every future until the end (60,000 live Futures, which CPython's garbage collector walks
again and again while they accumulate). The ways run in every round, on fresh
directories, in rotating order; the figures are medians over `--rounds` rounds (default
3), after an untimed warm-up of each.

Also reported, from the Producer's last round (futures dropped): the batch fill on disk
(records per batch, from the batches in the partitions' .log files) and the lateness
batching added to each job (its batch's deliverAfter minus the one it asked for: the log
clock at send plus its delay, read back as the record's timestamp plus its job's delay).

    python bench/bench_producer.py [--jobs 60000] [--rounds 3] [--out bench/results/producer.md]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable

import numpy as np

from kdelay import Producer, Record, Topic
from kdelay.testing.checks import batches_in

PARTITIONS = 3
SPREAD_MS = 10_000
DROPPED, KEPT, TOPIC_SEND = "producer", "producer, futures kept", "topic.send"


def make_jobs(n: int, seed: int) -> list[tuple[bytes, bytes, int]]:
    """(key, value, delay_ms) per job, built before any timing."""
    rng = random.Random(seed)
    return [(rng.randbytes(16), rng.randbytes(100), rng.randrange(SPREAD_MS)) for _ in range(n)]


def in_threads(jobs: list, threads: int, work: Callable[[list], None]) -> float:
    """Run `work(share)` on `threads` threads started together; the seconds until all end."""
    shares = [jobs[i::threads] for i in range(threads)]
    start = threading.Barrier(threads + 1)

    def body(share: list) -> None:
        start.wait()
        work(share)

    pool = [threading.Thread(target=body, args=(s,)) for s in shares]
    for t in pool:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in pool:
        t.join()
    return time.perf_counter() - t0


def run_producer(root: str, jobs: list, threads: int, producer_args: dict,
                 keep_futures: bool) -> float:
    """Seconds end to end (sends, then flush); with `keep_futures`, each thread keeps its
    futures until then (and they must all have resolved)."""
    topic = Topic.open(root, "jobs", partitions=PARTITIONS)
    producer = Producer(topic, **producer_args)
    kept: list[list] = []

    def work(share: list) -> None:
        send = producer.send
        if keep_futures:
            kept.append([send(value, key, delay_ms=delay) for key, value, delay in share])
        else:
            for key, value, delay in share:
                send(value, key, delay_ms=delay)

    t0 = time.perf_counter()
    in_threads(jobs, threads, work)
    producer.flush()
    seconds = time.perf_counter() - t0
    producer.close()
    topic.close()
    assert all(f.done() for mine in kept for f in mine)
    return seconds


def run_topic_send(root: str, jobs: list, threads: int) -> float:
    topic = Topic.open(root, "jobs", partitions=PARTITIONS)

    def work(share: list) -> None:
        send = topic.send
        for key, value, delay in share:
            send([Record(value, key)], deliver_after=topic.partition(0).now() + delay)

    seconds = in_threads(jobs, threads, work)
    topic.close()
    return seconds


def on_disk(root: str, jobs: list) -> tuple[int, int, np.ndarray]:
    """(records, batches in the .log files of the topic's partitions, the lateness of
    every record: its batch's deliverAfter minus its timestamp plus its job's delay)."""
    delay_of = {value: delay for _key, value, delay in jobs}
    late = []
    with Topic.open(root, "jobs") as topic:
        batches = sum(len(batches_in(log)) for log in topic.logs)
        for log in topic.logs:
            offset = log.log_start_offset
            while page := log.read(offset, max_records=10_000):
                late += [r.deliver_after - r.timestamp - delay_of[r.value] for r in page]
                offset = page[-1].offset + 1
    return len(late), batches, np.array(late)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=60_000)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--linger-ms", type=int, default=50)
    p.add_argument("--batch-records", type=int, default=500)
    p.add_argument("--max-spread-ms", type=int, default=1000)
    p.add_argument("--seed", type=int, default=23)
    p.add_argument("--out", default=None, help="also write the Markdown table here")
    args = p.parse_args(argv)
    jobs = make_jobs(args.jobs, args.seed)
    producer_args = {"linger_ms": args.linger_ms, "batch_records": args.batch_records,
                     "max_spread_ms": args.max_spread_ms}
    ways: dict[str, Callable[[str, list], float]] = {
        DROPPED: lambda root, js: run_producer(root, js, args.threads, producer_args, False),
        KEPT: lambda root, js: run_producer(root, js, args.threads, producer_args, True),
        TOPIC_SEND: lambda root, js: run_topic_send(root, js, args.threads),
    }
    times: dict[str, list[float]] = {way: [] for way in ways}
    work = tempfile.mkdtemp(prefix="kdelay-bench-producer-")
    try:
        for way, run in ways.items():  # warm up (code loads on first use), untimed
            run(os.path.join(work, f"warm-{way}"), jobs[:2000])
        for r in range(args.rounds):
            order = list(ways)[r % len(ways):] + list(ways)[:r % len(ways)]
            for way in order:
                root = os.path.join(work, f"{r}-{way}")
                seconds = ways[way](root, jobs)
                if way == DROPPED:
                    records, batches, late = on_disk(root, jobs)
                times[way].append(seconds)
                shutil.rmtree(root)
                print(f"round {r + 1}: {way:22s} {args.jobs / seconds:>10,.0f} jobs/s",
                      file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {way: statistics.median(ts) for way, ts in times.items()}
    rate = {way: args.jobs / s for way, s in med.items()}
    lines = [
        f"# Producer: {args.jobs:,} single jobs from {args.threads} threads into a "
        f"{PARTITIONS}-partition topic",
        "",
        f"16 B key, 100 B value, delay uniform over {SPREAD_MS // 1000} s; Producer("
        + ", ".join(f"{k}={v}" for k, v in producer_args.items())
        + f"); medians of {args.rounds} rounds, end to end (Producer: sends + flush).",
        "",
        "| way | jobs/s | seconds | speed-up |",
        "|---|---:|---:|---:|",
        *(f"| {way} | {rate[way]:,.0f} | {med[way]:.2f} | "
          f"{med[TOPIC_SEND] / med[way]:.1f}x |" for way in times),
        "",
        f"- speed-up over one topic.send per job: **{med[TOPIC_SEND] / med[DROPPED]:.1f}x** "
        f"(futures dropped), **{med[TOPIC_SEND] / med[KEPT]:.1f}x** (every future kept)",
        f"- batch fill on disk: **{records / batches:.0f} records per batch** "
        f"({batches:,} batches for {records:,} records)",
        f"- added lateness (batch deliverAfter - requested), ms: p50 "
        f"{np.percentile(late, 50):.0f}, p99 {np.percentile(late, 99):.0f}, max "
        f"{late.max()} (never negative: min {late.min()})",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
