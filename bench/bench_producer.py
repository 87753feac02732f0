"""Single jobs from several threads: one Producer against one `topic.send` per job.

The workload of issue 23: `--threads` threads (default 4) schedule `--jobs` single jobs
(16-byte random key, 100-byte random value, a delay uniform over 10 s, passed as
`delay_ms`) into a 3-partition Topic, end to end: the clock runs from the threads' start
until every job is appended (the Producer's `flush()` returned; each `topic.send`
returned). Both ways run in every round, on fresh directories, in alternating order; the
figures are medians over `--rounds` rounds (default 3), after an untimed warm-up of both.

Also reported, from the Producer's last round: the batch fill on disk (records per batch,
from the batches in the partitions' .log files) and the lateness batching added to each job
(its batch's deliverAfter minus the one it asked for: the log clock at send plus its delay,
which RecordMetadata gives as timestamp + delay).

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


def run_producer(root: str, jobs: list, threads: int, producer_args: dict
                 ) -> tuple[float, list, list]:
    """Seconds end to end (sends, then flush), the futures' metadata and the jobs' delays."""
    topic = Topic.open(root, "jobs", partitions=PARTITIONS)
    producer = Producer(topic, **producer_args)
    futures: list[list] = []

    def work(share: list) -> None:
        send = producer.send
        mine = [(send(value, key, delay_ms=delay), delay) for key, value, delay in share]
        futures.append(mine)

    t0 = time.perf_counter()
    in_threads(jobs, threads, work)
    producer.flush()
    seconds = time.perf_counter() - t0
    producer.close()
    topic.close()
    pairs = [p for mine in futures for p in mine]
    return seconds, [f.result() for f, _ in pairs], [d for _, d in pairs]


def run_topic_send(root: str, jobs: list, threads: int) -> float:
    topic = Topic.open(root, "jobs", partitions=PARTITIONS)

    def work(share: list) -> None:
        send = topic.send
        for key, value, delay in share:
            send([Record(value, key)], deliver_after=topic.partition(0).now() + delay)

    seconds = in_threads(jobs, threads, work)
    topic.close()
    return seconds


def batches_on_disk(root: str) -> int:
    """Batches in the .log files of the topic's partitions."""
    with Topic.open(root, "jobs") as topic:
        return sum(len(batches_in(log)) for log in topic.logs)


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
    times: dict[str, list[float]] = {"producer": [], "topic.send": []}
    work = tempfile.mkdtemp(prefix="kdelay-bench-producer-")
    try:
        # warm up (numba's cached code loads on first use), untimed
        run_producer(os.path.join(work, "warm-p"), jobs[:2000], args.threads, producer_args)
        run_topic_send(os.path.join(work, "warm-t"), jobs[:2000], args.threads)
        for r in range(args.rounds):
            order = ["producer", "topic.send"] if r % 2 == 0 else ["topic.send", "producer"]
            for way in order:
                root = os.path.join(work, f"{way}-{r}")
                if way == "producer":
                    seconds, metas, delays = run_producer(root, jobs, args.threads,
                                                          producer_args)
                    batches = batches_on_disk(root)
                else:
                    seconds = run_topic_send(root, jobs, args.threads)
                times[way].append(seconds)
                shutil.rmtree(root)
                print(f"round {r + 1}: {way:10s} {args.jobs / seconds:>10,.0f} jobs/s",
                      file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {way: statistics.median(ts) for way, ts in times.items()}
    late = np.array([m.deliver_after - (m.timestamp + d) for m, d in zip(metas, delays,
                                                                           strict=True)])
    rate = {way: args.jobs / s for way, s in med.items()}
    lines = [
        f"# Producer: {args.jobs:,} single jobs from {args.threads} threads into a "
        f"{PARTITIONS}-partition topic",
        "",
        f"16 B key, 100 B value, delay uniform over {SPREAD_MS // 1000} s; Producer("
        + ", ".join(f"{k}={v}" for k, v in producer_args.items())
        + f"); medians of {args.rounds} rounds, end to end (Producer: sends + flush).",
        "",
        "| way | jobs/s | seconds |",
        "|---|---:|---:|",
        *(f"| {way} | {rate[way]:,.0f} | {med[way]:.2f} |" for way in times),
        "",
        f"- speed-up: **{med['topic.send'] / med['producer']:.1f}x**",
        f"- batch fill on disk: **{len(metas) / batches:.0f} records per batch** "
        f"({batches:,} batches for {len(metas):,} records)",
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
