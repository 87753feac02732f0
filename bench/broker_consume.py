"""The broker's consume side, side by side with librdkafka's mock cluster (an in-memory C
broker inside the client process), the same confluent-kafka Consumer and settings against
both.

- consume: `--records` (150,000) due records, 16-byte keys and 100-byte values, over
  the 4 partitions the mock gives an auto-created topic (it keeps only its newest ~5 MiB
  per partition: 37,500 of these records fit) read by one
  confluent Consumer with assign() from the beginning, default settings; the clock runs
  from assign() (once Metadata has named the partitions' leader) to the last record
  handed over. kdelay's records are written in process
  (`--batch-records`, 1,000 by default, a batch each; due at once) before `kdelay serve` starts in a child process, so
  the time includes numbering them (the due-order view) on the first fetches. The mock's
  are produced by a confluent Producer (linger.ms=5) before its clock starts. Each broker
  first serves one record of another topic, untimed (kdelay's first answer of each
  request kind builds kio's reader and writer for it). Both sides' timed consumes start
  from a collected heap, with nothing of the bench's own setup alive (the client's full
  collections traverse all of it: see `_write_topics`). Rounds alternate which goes
  first; medians over `--rounds`. With `--baseline TREE`, each round also runs the
  broker of another checkout of kdelay (its own built tree, e.g. main's: the child runs
  with TREE first on its path) over the same records, the three in a rotating order, for
  paired before/after figures. With `--repeat K`, each broker then serves K more
  consumes of the same records, whose CPU is reported apart: the serving path without
  the first consume's one-off work (numbering the records, creating the views'
  files, mapping the segments).
- the time to the first batch: when the first consume's first `consume(10_000)` call came
  back (10,000 records handed over, Python messages made): the first answers' size sets
  it (the mock answers one stored batch a partition; kdelay up to the client's 1 MB), and
  the whole consume does not follow it (docs/performance.md).
- CPU: the broker's own, per record: the broker process's threads for kdelay, the mock's
  `rdk:mock` thread for the mock, read from /proc's schedstat (nanoseconds; /proc/PID/stat
  counts 10 ms ticks, a few per consume).
- lateness: a child process runs the broker and a writer appending `--rate` (5,000)
  records/s for `--seconds` (20), each due at a time uniform over the next 10 s (single-
  record batches: every record asks its own time); one confluent Consumer with default
  settings reads them; lateness is the time it handed a record over minus the time the
  record asked for (wall clock of one machine). None may be early.

    python bench/broker_consume.py [--records 150000] [--rounds 3] [--seconds 20]
        [--baseline /path/to/other/checkout] [--repeat 3]
        [--consumer-config fetch.queue.backoff.ms=10] [--batch-records 1000]
        [--out bench/results/broker_consume.md]

librdkafka's defaults make a consume's wall clock bimodal with either broker (see
STALLED_S): `--consumer-config fetch.queue.backoff.ms=10` takes that backoff out of the
comparison, for both brokers alike.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TOPIC = "bench"
# librdkafka stops fetching a partition for fetch.queue.backoff.ms (1 s by default) once
# its queue of fetched records holds queued.min.messages (100,000): four 4 MB answers
# (~32,000 records a partition each) that arrive before the application has taken enough
# of them trip it, with either broker, and such a round takes over a second
STALLED_S = 1.0
CONSUMER_CONFIG: dict[str, str] = {}  # --consumer-config: the same for both brokers
BATCH_RECORDS = 1000  # --batch-records: records per stored batch on kdelay's side
WARM = "warm"  # one record read first, untimed: each broker has answered every request kind
MOCK_PARTITIONS = 4  # what the mock gives an auto-created topic


# ---------------------------------------------------------------------------- consume


def consume(bootstrap: str, topic: str, partitions: int, count: int,
            timeout_s: float = 120.0, first_batch: list[float] | None = None) -> float:
    """Seconds for one Consumer to receive `count` records from the beginning; the
    seconds at which its first batch (10,000 records, or fewer at the half-second
    timeout) came back are appended to `first_batch` when given."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                  "enable.auto.commit": False, **CONSUMER_CONFIG})
    try:
        # the partitions' leader known before the clock starts: a partition assigned before
        # librdkafka has it waits for an offset-query timer (500 ms) with either broker
        c.list_topics(topic, timeout=30)
        got = 0
        start = time.perf_counter()
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = start + timeout_s
        while got < count:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"only {got} of {count} records in {timeout_s} s")
            for m in c.consume(10_000, 0.5):
                if m.error() is None:
                    got += 1
            if got and first_batch is not None and len(first_batch) == 0:
                first_batch.append(time.perf_counter() - start)
        return time.perf_counter() - start
    finally:
        c.close()


def _payload(n: int, seed: int) -> list[tuple[bytes, bytes]]:
    rng = random.Random(seed)
    return [(rng.randbytes(16), rng.randbytes(100)) for _ in range(n)]


def mock_round(records: list[tuple[bytes, bytes]], partitions: int, repeat: int = 0
               ) -> tuple[float, float, float, float]:
    """(seconds, mock CPU seconds) of one consume from the mock, its median CPU seconds
    over `repeat` more consumes of the same records (0: none asked), and the seconds to
    the first consume's first batch."""
    from confluent_kafka import Producer
    found: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            if "Mock cluster enabled" in msg:
                found.append(msg.rsplit(" ", 1)[-1].strip())

    logger = logging.getLogger("mock-bootstrap")
    logger.addHandler(Grab())
    logger.setLevel(logging.INFO)
    p = Producer({"test.mock.num.brokers": 1, "linger.ms": 5, "logger": logger,
                  "bootstrap.servers": "unused:9092"})
    p.poll(0.5)
    if not found:
        raise RuntimeError("the mock cluster's address did not appear in the client log")
    bootstrap = found[0]
    if partitions != MOCK_PARTITIONS:
        raise ValueError(f"the mock auto-creates topics of {MOCK_PARTITIONS} partitions")
    for i, (k, v) in enumerate(records):
        while True:
            try:
                p.produce(TOPIC, v, k, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
    p.produce(WARM, b"w", partition=0)
    p.flush()
    try:
        consume(bootstrap, WARM, 1, 1)
        return _consumes(bootstrap, partitions, len(records), repeat, mock_cpu_s)
    finally:
        del p


def cpu_s(pid: int) -> float:
    """CPU seconds the threads of process `pid` have run (schedstat: ns)."""
    return _schedstat_s(f"/proc/{pid}/task", lambda tid: True)


def mock_cpu_s() -> float:
    """CPU seconds of this process's librdkafka mock-cluster threads ("rdk:mock")."""
    def is_mock(tid: str) -> bool:
        with open(f"/proc/self/task/{tid}/comm") as f:
            return f.read().strip() == "rdk:mock"
    return _schedstat_s("/proc/self/task", is_mock)


def _schedstat_s(tasks: str, keep) -> float:
    total = 0
    for tid in os.listdir(tasks):
        try:
            if keep(tid):
                with open(f"{tasks}/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
        except FileNotFoundError:  # a thread that ended
            continue
    return total / 1e9


def _consumes(bootstrap: str, partitions: int, count: int, repeat: int, cpu
              ) -> tuple[float, float, float, float]:
    """The first consume's seconds and broker CPU (`cpu()`: seconds so far), the median
    broker CPU of `repeat` consumes after it (NaN when 0), and the seconds the first
    consume's first batch took. Each side's timed consumes start from a collected heap."""
    gc.collect()
    before = cpu()
    first_batch: list[float] = []
    seconds = consume(bootstrap, TOPIC, partitions, count, first_batch=first_batch)
    first = cpu() - before
    more = []
    for _ in range(repeat):
        before = cpu()
        consume(bootstrap, TOPIC, partitions, count)
        more.append(cpu() - before)
    return seconds, first, statistics.median(more) if more else float("nan"), first_batch[0]


def _write_topics(root: str, records: list[tuple[bytes, bytes]], partitions: int) -> None:
    """The bench topic (in batches of BATCH_RECORDS) and the warm one, written in process.
    A function of its own so that nothing it made outlives it: the client's full
    collections traverse every live container, and the per-partition lists (150,000
    references) kept alive through the timed consumes made each one ~6 ms dearer,
    ~10 ms a consume charged to kdelay's side only."""
    from kdelay import Record, Topic
    with Topic.open(root, TOPIC, partitions=partitions) as t:
        for p in range(partitions):
            rows = records[p::partitions]
            log = t.partition(p)
            for i in range(0, len(rows), BATCH_RECORDS):
                log.append([Record(v, key=k) for k, v in rows[i:i + BATCH_RECORDS]])
    with Topic.open(root, WARM, partitions=1) as t:
        t.send([Record(b"w")])


def kdelay_round(records: list[tuple[bytes, bytes]], partitions: int, workdir: str,
                 tree: str | None = None, repeat: int = 0
                 ) -> tuple[float, float, float, float]:
    """As mock_round, from `kdelay serve`: this checkout's, or with `tree` another's (its
    directory first on the child's path)."""
    root = tempfile.mkdtemp(dir=workdir)
    _write_topics(root, records, partitions)
    # `python -m` puts its working directory first on the path: run it in the tree
    tree = tree or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen([sys.executable, "-m", "kdelay", "serve", root, "--listen",
                             "127.0.0.1:0", "--log-level", "WARNING"], cwd=tree,
                            env={**os.environ, "PYTHONPATH": tree}, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        bootstrap = line.rsplit(" ", 1)[1].strip()
        consume(bootstrap, WARM, 1, 1)
        return _consumes(bootstrap, partitions, len(records), repeat,
                         lambda: cpu_s(proc.pid))
    finally:
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------- lateness


def lateness_child(root: str, rate: int, seconds: float, spread_ms: int) -> None:
    """In the child: the broker, and a writer appending `rate` records/s for `seconds`,
    each due uniform over the next `spread_ms`; its value is the time it asked for."""
    from kdelay import Broker, Record, Topic
    Topic.open(root, TOPIC, partitions=1).close()
    rng = random.Random(7)
    with Broker(root, listen="127.0.0.1:0") as b:
        print(b.bootstrap_servers, flush=True)
        sys.stdin.readline()  # the consumer is reading
        topic = b._server.state.topics.get(TOPIC)  # the served topic, written in process
        log = topic.partition(0)
        tick = 0.01
        per_tick = max(1, int(rate * tick))
        start = time.monotonic()
        n = 0
        while n < rate * seconds:
            now = time.time_ns() // 1_000_000
            for _ in range(per_tick):
                due = now + rng.randrange(spread_ms)
                log.append(Record(b"%d" % due), deliver_after=due)
                n += 1
            time.sleep(max(0.0, start + (n / per_tick) * tick - time.monotonic()))
        print("done", n, flush=True)
        sys.stdin.readline()  # the consumer has read everything


def lateness_run(rate: int, seconds: float, spread_ms: int, workdir: str) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    root = tempfile.mkdtemp(dir=workdir)
    child = subprocess.Popen([sys.executable, __file__, "--child", root, str(rate),
                              str(seconds), str(spread_ms)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        bootstrap = child.stdout.readline().strip()
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                      "enable.auto.commit": False})
        c.list_topics(TOPIC, timeout=30)  # (see consume: no offset-query timer)
        c.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        c.poll(1.0)  # connected and fetching before the writer starts
        child.stdin.write("go\n")
        child.stdin.flush()
        total = int(rate * seconds)
        late: list[int] = []
        deadline = time.monotonic() + seconds + spread_ms / 1000 + 60
        while len(late) < total and time.monotonic() < deadline:
            m = c.poll(0.5)  # returns as soon as a record is there (consume(n) waits for n)
            if m is not None and m.error() is None:
                late.append(time.time_ns() // 1_000_000 - int(m.value()))
        c.close()
        child.stdin.write("end\n")
        child.stdin.flush()
        child.wait(60)
    finally:
        if child.poll() is None:
            child.kill()
        shutil.rmtree(root, ignore_errors=True)
    late.sort()
    q = statistics.quantiles(late, n=100, method="inclusive")
    return {"records": len(late), "expected": total, "early": sum(x < 0 for x in late),
            "p50": q[49], "p99": q[98], "max": late[-1], "min": late[0]}


# ---------------------------------------------------------------------------- main


def consume_rounds(args: argparse.Namespace) -> list[str]:
    """The consume rounds (this broker, the baseline's if any, the mock; the order rotates
    each round) and their table rows."""
    records = _payload(args.records, 1)
    sides = ["kdelay", "mock"] + (["baseline"] if args.baseline else [])
    secs: dict[str, list[float]] = {k: [] for k in sides}
    cpus: dict[str, list[float]] = {k: [] for k in sides}
    again: dict[str, list[float]] = {k: [] for k in sides}  # CPU of the repeated consumes
    starts: dict[str, list[float]] = {k: [] for k in sides}  # seconds to the first batch
    for r in range(args.rounds):
        order = sides[r % len(sides):] + sides[:r % len(sides)]
        if r % 2:
            order.reverse()
        for which in order:
            if which == "mock":
                seconds, cpu, repeated, start = mock_round(records, args.partitions,
                                                           args.repeat)
            else:
                seconds, cpu, repeated, start = kdelay_round(
                    records, args.partitions, args.workdir,
                    args.baseline if which == "baseline" else None, args.repeat)
            secs[which].append(seconds)
            cpus[which].append(cpu)
            again[which].append(repeated)
            starts[which].append(start)
        print(f"round {r}: " + ", ".join(
            f"{k} {args.records / secs[k][-1]:,.0f} rec/s, {cpus[k][-1] / args.records * 1e9:,.0f}"
            f" ns/rec (repeated {again[k][-1] / args.records * 1e9:,.0f}), first batch "
            f"{starts[k][-1] * 1e3:.0f} ms" for k in sides),
            flush=True)
    out = []
    mock_rate = args.records / statistics.median(secs["mock"])
    for k in [s for s in sides if s != "mock"]:
        rate = args.records / statistics.median(secs[k])
        per_round = statistics.median(m / o for o, m in zip(secs[k], secs["mock"], strict=True))
        cpu_ratio = statistics.median(o / m for o, m in zip(cpus[k], cpus["mock"], strict=True))
        label = "this tree" if k == "kdelay" else f"baseline {args.baseline}"
        out.append(f"| consume {args.records:,} due records, confluent Consumer, "
                   f"{args.partitions} partitions, {label} (records/s, median of "
                   f"{args.rounds}) | {rate:,.0f} | {mock_rate:,.0f} | {rate / mock_rate:.2f}x "
                   f"(median of per-round ratios {per_round:.2f}x) |")
        a_cpu, b_cpu = statistics.median(cpus[k]), statistics.median(cpus["mock"])
        out.append(f"| ... the broker's CPU for it (kdelay: its process; mock: its thread) "
                   f"| {a_cpu * 1e3:.1f} ms ({a_cpu / args.records * 1e9:,.0f} ns/record) | "
                   f"{b_cpu * 1e3:.1f} ms ({b_cpu / args.records * 1e9:,.0f} ns/record) | "
                   f"{cpu_ratio:.1f}x (median per round) |")
    for k in sides:
        lead = ""
        if k != "mock":
            behind = statistics.median(a - b for a, b in zip(starts[k], starts["mock"],
                                                              strict=True))
            lead = f" (per round, minus the mock's: median {behind * 1e3:+.1f} ms)"
        out.append(f"| ... {k}: time to the first batch of 10,000 records, median{lead} | "
                   f"{statistics.median(starts[k]) * 1e3:.1f} ms | | |")
    out.append(f"| rounds that waited out the client's fetch.queue.backoff.ms (over "
               f"{STALLED_S:g} s) | " + " | ".join(
                   f"{k} {sum(t > STALLED_S for t in secs[k])} of {args.rounds}"
                   for k in sides) + " |")
    if args.repeat:
        for k in sides:
            c = statistics.median(again[k])
            out.append(f"| ... {k}: broker CPU of a consume repeated on the same broker "
                       f"(median of {args.repeat} a round, then of rounds) | "
                       f"{c * 1e3:.1f} ms ({c / args.records * 1e9:,.0f} ns/record) | | |")
    if args.baseline:
        for name, cpu in (("first consume", cpus), ("repeated consumes", again)):
            if name == "repeated consumes" and not args.repeat:
                continue
            paired = statistics.median(b / a for a, b in zip(cpu["kdelay"], cpu["baseline"],
                                                              strict=True))
            out.append(f"| broker CPU per record, baseline / this tree, {name} (median of "
                       f"per-round ratios) | {paired:.2f}x | | |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=150_000)
    ap.add_argument("--partitions", type=int, default=MOCK_PARTITIONS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--spread-ms", type=int, default=10_000)
    ap.add_argument("--only", choices=["consume", "lateness"])
    ap.add_argument("--baseline", help="another kdelay checkout (built) to run as well")
    ap.add_argument("--repeat", type=int, default=0,
                    help="consumes more per broker, for their CPU (the broker warm)")
    ap.add_argument("--consumer-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a confluent Consumer setting for both brokers' consumes (e.g. "
                         "fetch.queue.backoff.ms=10)")
    ap.add_argument("--batch-records", type=int, default=1000,
                    help="records per stored batch on kdelay's side (a producer's batches "
                         "with mixed delays are stored as runs of ~1.4 records)")
    ap.add_argument("--out")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        root, rate, seconds, spread = args.child
        lateness_child(root, int(rate), float(seconds), int(spread))
        return
    CONSUMER_CONFIG.update(kv.split("=", 1) for kv in args.consumer_config)
    global BATCH_RECORDS
    BATCH_RECORDS = args.batch_records
    workdir = args.workdir = tempfile.mkdtemp(prefix="kdelay-bench-")
    lines = ["| measure | kdelay broker | librdkafka mock | ratio |", "|---|---|---|---|"]
    lines.append(f"| records per stored batch (kdelay's side) | {BATCH_RECORDS:,} | a "
                 f"producer's batches | |")
    try:
        if args.only in (None, "consume"):
            lines += consume_rounds(args)
        if args.only in (None, "lateness"):
            res = lateness_run(args.rate, args.seconds, args.spread_ms, workdir)
            print(res, flush=True)
            lines.append(f"| lateness, {args.rate:,} records/s for {args.seconds:g} s, delays "
                         f"uniform over {args.spread_ms / 1000:g} s: received minus due, "
                         f"p50 / p99 / max (ms); early | {res['p50']:.0f} / {res['p99']:.0f} "
                         f"/ {res['max']} ms; {res['early']} early; {res['records']:,} of "
                         f"{res['expected']:,} received | n/a (no delays) | |")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main()
