"""The broker's produce side and its resource costs, side by side with librdkafka's mock
cluster (`test.mock.num.brokers=1`: an in-memory C broker inside the client process).

Produce: one confluent-kafka Producer (linger.ms=5, acks=1) sends N records (16 B keys,
100 B values) into partition 0, against `kdelay serve` (a child process) and against the
mock, in an order reversed every other round, R rounds; the time runs from the first produce() to flush()'s return
(every delivery report in). Two workloads:
- `delay0`: every record carries `kdelay.delay_ms: 0`;
- `mixed`: half carry no header, 30 % a retry backoff of 1-8 s, 20 % a delay uniform over
  15 minutes; the topic's delayed.delivery.max.spread.ms is 1000.
The mock gets the same records and headers (it ignores them).

The broker's own CPU time for each produce run is reported beside it, and the mock's (its
"rdk:mock" thread in this process), over the same window as the time: on a shared machine
the wall-clock ratio also measures how soon the broker process gets a core, the CPU time
per record what each broker spends. (The one-time work before the window, the client's
first record: its connection, Metadata, the topic's auto-creation, the first use of each
API's schema, is printed per round as "setup".)

Resources (kdelay only): start to first answer (process start to an ApiVersions answer;
kdelay's modules byte-compiled first, as installed),
the RSS of an idle broker, and the memory of 1,000 idle client connections held while a
producer runs (RSS with them minus RSS without, per connection).

    python bench/broker.py [--records 500000] [--rounds 3] [--workloads delay0,mixed]
        [--baseline /tmp/main-checkout] [--skip-produce] [--skip-resources]

With --baseline TREE, each round also runs TREE's broker (its own compiled modules,
PYTHONPATH=TREE), the two alternating first, so that a change is measured against main in
paired rounds on the same loaded machine.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import random
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

TOPIC = "bench"


def payload(n: int, workload: str, seed: int = 7) -> list[tuple[bytes, bytes, list]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = b"%016d" % i
        value = rng.randbytes(100)
        if workload == "delay0":
            headers = [("kdelay.delay_ms", b"0")]
        else:
            u = rng.random()
            if u < 0.5:
                headers = []
            elif u < 0.8:
                headers = [("kdelay.delay_ms", b"%d" % rng.randint(1000, 8000))]
            else:
                headers = [("kdelay.delay_ms", b"%d" % rng.randint(0, 900_000))]
        out.append((key, value, headers))
    return out


def produce(config: dict, records: list, at_start: Callable[[], None] | None = None) -> float:
    """Seconds from the first produce() to flush()'s return, every report in, none failed
    (`at_start` is called just before the first produce(), once the client is connected)."""
    from confluent_kafka import Producer
    failed = []

    def report(err, msg) -> None:
        if err is not None:
            failed.append(err)

    p = Producer({"linger.ms": 5, "acks": 1, **config})
    p.produce(TOPIC, b"warm", partition=0, on_delivery=report)  # metadata, connection
    p.flush(60)
    gc.collect()  # each side's window starts from a collected heap (the records' ~1 M
    # tracked objects are traversed by every full collection in it, alike for both)
    if at_start is not None:
        at_start()
    started = time.perf_counter()
    for k, v, h in records:
        while True:
            try:
                p.produce(TOPIC, v, k, partition=0, headers=h, on_delivery=report)
                break
            except BufferError:
                p.poll(0.005)
    left = p.flush(300)
    elapsed = time.perf_counter() - started
    if left or failed:
        raise RuntimeError(f"{left} records undelivered, {len(failed)} failed: {failed[:3]}")
    return elapsed


def mock_bootstrap() -> tuple[object, str]:
    """A client holding a mock cluster (kept alive by the caller) and its address."""
    from confluent_kafka import Producer
    found: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "Mock cluster enabled" in record.getMessage():
                found.append(record.getMessage().rsplit(" ", 1)[-1].strip())

    logger = logging.getLogger("mock-bootstrap")
    logger.addHandler(Grab())
    logger.setLevel(logging.INFO)
    holder = Producer({"test.mock.num.brokers": 1, "logger": logger,
                       "bootstrap.servers": "unused:9092"})
    holder.poll(0.5)
    if not found:
        raise RuntimeError("the mock cluster's address did not appear in the client log")
    return holder, found[0]


def byte_compile_kdelay(tree: str | None) -> None:
    """The served tree's kdelay modules byte-compiled (`tree`, else the working directory,
    which `python -m kdelay` serves from), as an installed package has them (pip compiles
    at install): where PYTHONDONTWRITEBYTECODE is set (this machine's sessions set it) every
    start of a source tree would otherwise compile ~180 modules, ~0.2 s of its start."""
    import compileall
    package = os.path.join(tree or os.getcwd(), "kdelay")
    if os.path.isdir(package):
        compileall.compile_dir(package, quiet=1)


def start_broker(root: str, *config: str, tree: str | None = None
                 ) -> tuple[subprocess.Popen, str, float]:
    """`kdelay serve` (of source tree `tree`, else the kdelay this process imports);
    (process, bootstrap, seconds from start to an ApiVersions answer)."""
    args = [sys.executable, "-m", "kdelay", "serve", root, "--listen", "127.0.0.1:0",
            "--log-level", "WARNING"]
    for c in config:
        args += ["--config", c]
    env = None if tree is None else dict(os.environ, PYTHONPATH=tree)
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env, cwd=tree)
    line = proc.stdout.readline()
    bootstrap = line.rsplit(" ", 1)[1].strip()
    api_versions(bootstrap)
    return proc, bootstrap, time.perf_counter() - started


def api_versions(bootstrap: str) -> socket.socket:
    """A connection that has asked ApiVersions v0 and read the answer (kept open)."""
    host, port = bootstrap.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.sendall(struct.pack(">ihhih", 10, 18, 0, 1, 0))
    size = struct.unpack(">i", _read(s, 4))[0]
    _read(s, size)
    return s


def _read(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def cpu_s(pid: int) -> float:
    """CPU seconds a process's threads have run, to the nanosecond (/proc schedstat; the
    clock-tick counts of /proc/PID/stat are 10 ms coarse, a tenth of a broker's run)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:  # a thread that ended
            continue
    return total / 1e9


def mock_cpu_s() -> float:
    """CPU seconds (schedstat, as cpu_s) of this process's librdkafka mock-cluster threads (named
    "rdk:mock"): the mock broker's own work, comparable with the broker process's CPU."""
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != "rdk:mock":
                    continue
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:  # a thread that ended
            continue
    return total / 1e9


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def produce_rounds(args: argparse.Namespace, workdir: str) -> list[str]:
    """Each round: the kdelay broker (and --baseline's) and the mock, in an order reversed
    every other round; medians."""
    rows = []
    holder, mock = mock_bootstrap()
    brokers = [("kdelay", None)] + ([("baseline", args.baseline)] if args.baseline else [])
    for workload in args.workloads.split(","):
        records = payload(args.records, workload)
        times: dict[str, list[float]] = {name: [] for name, _ in brokers}
        cpus: dict[str, list[float]] = {name: [] for name, _ in brokers}
        setups: dict[str, list[float]] = {name: [] for name, _ in brokers}
        theirs, mock_cpu = [], []
        sides = brokers + [("mock", None)]
        for r in range(args.rounds):
            for name, tree in (sides if r % 2 == 0 else sides[::-1]):
                if name == "mock":
                    mock_marks: list[float] = []
                    theirs.append(produce({"bootstrap.servers": mock}, records,
                                          lambda m=mock_marks: m.append(mock_cpu_s())))
                    mock_cpu.append(mock_cpu_s() - mock_marks[0])
                    continue
                root = tempfile.mkdtemp(dir=workdir)
                proc, bootstrap, _ = start_broker(root, "num.partitions=1",
                                                  "delayed.delivery.max.spread.ms=1000",
                                                  tree=tree)
                try:
                    marks = [cpu_s(proc.pid)]
                    times[name].append(produce({"bootstrap.servers": bootstrap}, records,
                                               lambda m=marks, pid=proc.pid:
                                               m.append(cpu_s(pid))))
                    cpus[name].append(cpu_s(proc.pid) - marks[1])
                    setups[name].append(marks[1] - marks[0])
                finally:
                    proc.terminate()
                    proc.wait(60)
                    shutil.rmtree(root, ignore_errors=True)
            print(f"{workload} round {r}: " + ", ".join(
                f"{name} {args.records / times[name][-1]:,.0f} rec/s "
                f"({cpus[name][-1] / args.records * 1e9:,.0f} ns/record of CPU; setup "
                f"{setups[name][-1] * 1e3:.0f} ms)"
                for name, _ in brokers) + f", mock {args.records / theirs[-1]:,.0f} rec/s",
                flush=True)
        b = args.records / statistics.median(theirs)
        theirs_cpu = statistics.median(mock_cpu)
        for name, _ in brokers:
            ours = times[name]
            a = args.records / statistics.median(ours)
            ratio = statistics.median(t / o for o, t in zip(ours, theirs, strict=True))
            rows.append(f"| produce {args.records:,} ({workload}, {name}) | {a:,.0f} rec/s | "
                        f"{b:,.0f} rec/s | {ratio:.2f}x (per round: "
                        f"{', '.join(f'{t / o:.2f}' for o, t in zip(ours, theirs, strict=True))}"
                        f") |")
            cpu = statistics.median(cpus[name])
            rows.append(f"| ... the broker's CPU for it ({workload}, {name}; kdelay: its "
                        f"process, mock: its thread) | {cpu:.2f} s "
                        f"({cpu / args.records * 1e9:,.0f} ns/record) | {theirs_cpu:.2f} s "
                        f"({theirs_cpu / args.records * 1e9:,.0f} ns/record) | |")
    del holder
    return rows


def resources(args: argparse.Namespace, workdir: str) -> list[str]:
    root = tempfile.mkdtemp(dir=workdir)
    proc, bootstrap, first_answer = start_broker(root, "num.partitions=1")
    try:
        time.sleep(1.0)  # settled
        idle = rss_kb(proc.pid)
        records = payload(min(args.records, 100_000), "mixed")
        produce({"bootstrap.servers": bootstrap}, records)  # warm: the produce path loaded
        before = rss_kb(proc.pid)
        held = [api_versions(bootstrap) for _ in range(args.connections)]
        produce({"bootstrap.servers": bootstrap}, records)  # while they are held
        with_them = rss_kb(proc.pid)
        for s in held:
            s.close()
    finally:
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(root, ignore_errors=True)
    per = (with_them - before) * 1024 / args.connections
    return [f"| start to first answer | {first_answer * 1000:.0f} ms | | |",
            f"| idle broker RSS | {idle / 1024:.1f} MB | | |",
            f"| {args.connections:,} idle connections held while a producer runs | "
            f"{per / 1024:.1f} KB each | | |"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--skip-produce", action="store_true")
    ap.add_argument("--skip-resources", action="store_true")
    ap.add_argument("--workloads", default="delay0,mixed",
                    help="comma-separated: delay0, mixed")
    ap.add_argument("--baseline", metavar="TREE",
                    help="also run the broker of this source tree (built in place) in each "
                         "round, alternating with this one, e.g. a checkout of main")
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="kdelay-bench-broker-")
    byte_compile_kdelay(None)
    if args.baseline:
        byte_compile_kdelay(args.baseline)
    try:
        lines = ["| measure | kdelay broker | librdkafka mock | mock / kdelay time |",
                 "|---|---|---|---|"]
        if not args.skip_produce:
            lines += produce_rounds(args, workdir)
        if not args.skip_resources:
            lines += resources(args, workdir)
        print("\n".join(lines))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
