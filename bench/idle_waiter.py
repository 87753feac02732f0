"""What an idle long-polling consumer costs the producer: single-record sends per second to
a Topic with no consumer, and with one idle QueueConsumer (or Consumer) long-polling it in
another thread while every record sent is due a minute later (nothing for it to do).

    python bench/idle_waiter.py                    # 20,000 sends x 3 rounds, ~30 s
    python bench/idle_waiter.py --sends 5000 --rounds 1 --partitions 1

Per waiter kind it prints the sends/s (median over rounds), the waiter's rounds (how often
it woke and polled every partition) and the CPU time its thread took against the sending
thread's (time.thread_time in each). Ratios are what to read: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kdelay import Consumer, KdelayError, QueueConsumer, Record, Topic  # noqa: E402

WAITERS = ("none", "queue", "consumer")
LATER_MS = 60_000


class IdleWaiter:
    """A consumer of `kind` long-polling `topic` in a thread, counting its poll rounds and
    measuring its thread's CPU time, until `stop()`."""

    def __init__(self, topic: Topic, kind: str):
        self.consumer = QueueConsumer(topic, "idle") if kind == "queue" else \
            Consumer(topic, "idle")
        self.rounds = 0
        self.cpu_s = 0.0
        self._stopping = threading.Event()
        poll_round = self.consumer._poll_round

        def counted(*args):
            self.rounds += 1
            return poll_round(*args)

        self.consumer._poll_round = counted
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        start = time.thread_time()
        while not self._stopping.is_set():
            try:
                self.consumer.poll(timeout_ms=2_000)
            except KdelayError:
                break
        self.cpu_s = time.thread_time() - start

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        if isinstance(self.consumer, QueueConsumer):  # leaves its group; a Consumer holds nothing
            self.consumer.close()


def one_round(root: str, partitions: int, sends: int, kind: str) -> dict:
    value = b"x" * 100
    with Topic.open(root, "jobs", partitions=partitions) as topic:
        waiter = None if kind == "none" else IdleWaiter(topic, kind)
        time.sleep(0.2)  # the waiter is asleep in its long poll
        cpu0, t0 = time.thread_time(), time.perf_counter()
        for _ in range(sends):
            topic.send([Record(value)], deliver_after=int(time.time() * 1000) + LATER_MS)
        elapsed, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
        rounds = 0 if waiter is None else waiter.rounds
        if waiter is not None:
            waiter.stop()
        return {"sends_per_s": sends / elapsed, "sender_cpu_s": cpu,
                "waiter_cpu_s": 0.0 if waiter is None else waiter.cpu_s, "waiter_rounds": rounds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sends", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--waiters", default=",".join(WAITERS))
    args = ap.parse_args()
    kinds = args.waiters.split(",")
    results: dict[str, list[dict]] = {k: [] for k in kinds}
    base = tempfile.mkdtemp(prefix="kdelay-idle-")
    try:
        for r in range(args.rounds):
            for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:  # rotate the order
                root = os.path.join(base, f"{kind}-{r}")
                results[kind].append(one_round(root, args.partitions, args.sends, kind))
                shutil.rmtree(root)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"{args.sends:,} single-record sends due in {LATER_MS // 1000} s, "
          f"{args.partitions} partitions, median of {args.rounds} rounds")
    print("| idle waiter | sends/s | waiter rounds | waiter CPU s | sender CPU s |")
    print("|---|---:|---:|---:|---:|")
    for kind in kinds:
        rows = results[kind]

        def med(field: str, rows=rows) -> float:
            return statistics.median(row[field] for row in rows)

        print(f"| {kind} | {med('sends_per_s'):,.0f} | {med('waiter_rounds'):,.0f} | "
              f"{med('waiter_cpu_s'):.3f} | {med('sender_cpu_s'):.3f} |")


if __name__ == "__main__":
    main()
