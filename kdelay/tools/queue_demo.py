"""The demo's worker pool: a job queue on a delayed topic, with failures and backoff.

Jobs are appended to a log; a pool of worker threads shares one queue group
(`QueueConsumer`). Each job has a planned number of failures: a worker that fails a job
releases it with exponential backoff (the job keeps its offset; nothing is appended), and
the delivery after `max_delivery_count` dead-letters it instead. Halfway through, the pool
is stopped and the log and group reopened (a restart). At the end every job must have been
acked exactly once, or dead-lettered exactly once after failing `max_delivery_count` times.
"""

from __future__ import annotations

import functools
import os
import random
import threading
import time
from collections import Counter

from ..clients.queue.consumer import QueueConsumer
from ..config import LogConfig
from ..partition import Log
from ..records import Record

MAX_DELIVERIES = 4
BACKOFF_MS = 4


def plan_failures(jobs: int, seed: int) -> list[int]:
    """How many times each job fails before it succeeds (>= MAX_DELIVERIES: never)."""
    rng = random.Random(seed)
    out = []
    for _ in range(jobs):
        r = rng.random()
        out.append(0 if r < 0.7 else rng.randint(1, MAX_DELIVERIES - 1) if r < 0.95
                   else MAX_DELIVERIES + 10)
    return out


class _Pool:
    """What the workers share: the failure plan and what happened to each job."""

    def __init__(self, failures: list[int]):
        self.failures = failures
        self.acks: Counter[int] = Counter()
        self.fails: Counter[int] = Counter()
        self.mutex = threading.Lock()

    def work(self, q: QueueConsumer, stop: threading.Event, done) -> None:
        """Poll, run each job (fail it per the plan), ack the successes of a poll in one
        call and release each failure with exponential backoff on its delivery count."""
        while not stop.is_set():
            recs = q.poll(max_records=20, timeout_ms=50)
            ok, failed = [], []
            with self.mutex:
                for rec in recs:
                    job = _job_of(rec.value)
                    if self.fails[job] < self.failures[job]:
                        self.fails[job] += 1
                        failed.append(rec)
                    else:
                        ok.append(rec)
            for rec in failed:
                q.release([rec], delay_ms=BACKOFF_MS << (rec.delivery_count - 1))
            q.ack(ok)
            with self.mutex:
                for rec in ok:
                    self.acks[_job_of(rec.value)] += 1
            if done():
                stop.set()


def _job_of(value: bytes | None) -> int:
    """The job number a record's value names (b"job-<n>": every record here has one)."""
    if value is None:
        raise ValueError("a job record without a value")
    return int(value[4:])


def run_pool(workdir: str, jobs: int, workers: int, seed: int) -> dict:
    pool = _Pool(plan_failures(jobs, seed))
    path, dl_path = os.path.join(workdir, "jobs-0"), os.path.join(workdir, "dead-0")
    cfg = LogConfig(flush_messages=None)
    log = Log.open(path, config=cfg)
    for i in range(0, jobs, 50):
        log.append([Record(b"job-%d" % j, key=b"%d" % j) for j in range(i, min(jobs, i + 50))])
    log.flush()
    t0 = time.perf_counter()
    for phase in (0, 1):
        dl = Log.open(dl_path, config=cfg)
        def half_acked() -> bool:
            return sum(pool.acks.values()) >= jobs // 2

        done = half_acked if phase == 0 else functools.partial(_finished, log, jobs)
        stop = threading.Event()
        consumers = [QueueConsumer(log, "workers", max_delivery_count=MAX_DELIVERIES,
                                   dead_letter=dl) for _ in range(workers)]
        threads = [threading.Thread(target=pool.work, args=(q, stop, done))
                   for q in consumers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for q in consumers:
            q.close()
        if phase == 0:  # a restart: the group's state comes back from its files
            log.close()
            dl.close()
            log = Log.open(path, config=cfg)
    elapsed = time.perf_counter() - t0
    dead = [_job_of(r.value) for r in dl.read(0, max_records=jobs + 1)]
    metrics = log.metrics()["queues"]["workers"]
    log.close()
    dl.close()
    return _check(jobs, pool.failures, pool.acks, pool.fails, dead, metrics) | {
        "elapsed_s": elapsed, "restarts": 1, "workers": workers}


def _finished(log: Log, jobs: int) -> bool:
    m = log.metrics()["queues"].get("workers")
    return m is not None and m["acked"] + m["rejected"] >= jobs


def _check(jobs: int, failures: list[int], acks: Counter, fails: Counter,
           dead: list[int], metrics: dict) -> dict:
    dead_count = Counter(dead)
    for job in range(jobs):
        poison = failures[job] >= MAX_DELIVERIES
        if poison:
            if acks[job] or dead_count[job] != 1:
                raise AssertionError(f"job {job} (always fails): acked {acks[job]} times, "
                                     f"dead-lettered {dead_count[job]} times")
            if fails[job] < MAX_DELIVERIES:
                raise AssertionError(f"job {job} dead-lettered after {fails[job]} failures")
        elif acks[job] != 1 or dead_count[job]:
            raise AssertionError(f"job {job}: acked {acks[job]} times, dead-lettered "
                                 f"{dead_count[job]} times")
    if metrics["acked"] != sum(acks.values()) or metrics["rejected"] != len(dead):
        raise AssertionError(f"group metrics disagree: {metrics}")
    return {"jobs": jobs, "acked": sum(acks.values()), "dead_lettered": len(dead),
            "released": sum(fails.values())}
