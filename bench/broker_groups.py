"""The broker's groups: what many committing groups cost it, how long a rebalance takes,
and share groups side by side with librdkafka's mock cluster.

- `commits`: G groups (default 1,000) each commit one offset once a second, driven by P
  client processes (raw OffsetCommit v2 requests, pre-encoded, one connection per group as
  each group's consumer has, every answer checked); the broker process's CPU in R windows
  of S seconds (the median reported) from /proc/<pid>/stat and per thread from /proc/<pid>/task (the event loop is
  the main thread; the commits' fsyncs run on executor threads).
- `rebalance`: a 4-member group of confluent-kafka consumers (one thread each, 8
  partitions); one member closes (a clean leave) and the time until the 3 others hold
  all 8 partitions again is measured, for the classic protocol (range assignor) and for
  KIP-848's `group.protocol=consumer`. Members learn of a rebalance on their next
  heartbeat, so the heartbeat interval (given) bounds it from below, on any broker.
- `share`: 20,000 records (100 B) consumed and accepted (implicit mode, until close() has
  sent the last acknowledgements) by one ShareConsumer, against `kdelay serve` and against
  the mock, alternating, R rounds; both start with the consumer already in the group and the
  records produced, so the time is consumption only. Then records/s with 1, 2 and 4
  ShareConsumers in separate processes on one partition of `kdelay serve`.

    python bench/broker_groups.py [commits|rebalance|share|all] [--groups 1000] ...
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from broker import mock_bootstrap, start_broker  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, task: str | None = None) -> float:
    path = f"/proc/{pid}/task/{task}/stat" if task else f"/proc/{pid}/stat"
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def thread_cpu(pid: int) -> dict[str, float]:
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            out[tid] = cpu_seconds(pid, tid)
    return out


# ---------------------------------------------------------------------------- commits

def commit_frames(groups: list[str], offset: int) -> list[bytes]:
    """One OffsetCommit v2 frame per group (no member: a group that assigns itself)."""
    import datetime

    from kio.index import load_request_schema
    from kio.serial import entity_writer

    from kdelay.broker.responses import element, make
    req_cls = load_request_schema(8, 2)
    header_cls = req_cls.__header_schema__
    topic_cls = element(req_cls, "topics")
    part_cls = element(topic_cls, "partitions")
    out = []
    for i, g in enumerate(groups):
        req = make(req_cls, group_id=g, generation_id_or_member_epoch=-1, member_id="",
                   retention_time=datetime.timedelta(milliseconds=-1),
                   topics=(make(topic_cls, name="t", partitions=(make(
                       part_cls, partition_index=0, committed_offset=offset,
                       committed_metadata=None),)),))
        buf = io.BytesIO()
        entity_writer(header_cls)(buf, header_cls(request_api_key=8, request_api_version=2,
                                                  correlation_id=i, client_id="bench"))
        entity_writer(req_cls)(buf, req)
        body = buf.getvalue()
        out.append(struct.pack(">i", len(body)) + body)
    return out


def commit_client(bootstrap: str, first: int, count: int, seconds: float) -> None:
    """Child process: groups first..first+count-1, each on its own connection (as each
    group's consumer has its own coordinator connection), commit once a second; prints the
    time and size of every round once all its answers are in."""
    import selectors
    import socket
    groups = [f"group-{i}" for i in range(first, first + count)]
    frames = [commit_frames(groups, 1 + k) for k in range(4)]  # offsets move each second
    host, port = bootstrap.rsplit(":", 1)
    socks = [socket.create_connection((host, int(port))) for _ in groups]
    sel = selectors.DefaultSelector()
    for i, sock in enumerate(socks):
        sel.register(sock, selectors.EVENT_READ, i)
    second = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        for i, sock in enumerate(socks):
            sock.sendall(frames[second % 4][i])
        buffers = [b""] * count
        waiting = count
        while waiting:
            for key, _ in sel.select():
                i = key.data
                buffers[i] += socks[i].recv(65536)
                b = buffers[i]
                if len(b) >= 4 and len(b) >= 4 + struct.unpack(">i", b[:4])[0]:
                    if b[-2:] != b"\0\0":  # the one partition's error code
                        raise RuntimeError(f"commit refused: {b[-2:].hex()}")
                    waiting -= 1
        second += 1
        print(time.time(), count, flush=True)  # a round answered, when
        time.sleep(max(0.0, started + second - time.monotonic()))


def read_all(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got, deadline = 0, time.monotonic() + 60
    while got < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        got += m is not None and m.error() is None
    c.close()


def bench_commits(groups: int, procs: int, seconds: float, rounds: int = 3) -> dict:
    """`rounds` back-to-back windows of `seconds` each: the broker's CPU share of each
    window, and the median (a burst of other load on the machine moves one window, not the
    figure)."""
    from kdelay import Record, Topic
    root = tempfile.mkdtemp()
    with Topic.open(root, "t", partitions=1) as t:
        t.partition(0).append([Record(b"r%d" % i) for i in range(10)])
    proc, bootstrap, _ = start_broker(root, f"max.connections={groups + 100}")
    read_all(bootstrap, "t", 10)  # due records get their delivery offsets as a fetch reads
    warm = 5.0
    per = groups // procs
    clients = [subprocess.Popen([sys.executable, __file__, "_commit_client", bootstrap,
                                 str(i * per), str(per), str(warm + seconds * rounds + 1)],
                                stdout=subprocess.PIPE, text=True) for i in range(procs)]
    windows = []
    try:
        time.sleep(warm)  # every group's position file made, clients at their pace
        for _ in range(rounds):
            before, threads_before = cpu_seconds(proc.pid), thread_cpu(proc.pid)
            t0, w0 = time.monotonic(), time.time()
            time.sleep(seconds)
            used, threads_after = cpu_seconds(proc.pid), thread_cpu(proc.pid)
            elapsed, w1 = time.monotonic() - t0, time.time()
            main = threads_after.get(str(proc.pid), 0) - threads_before.get(str(proc.pid), 0)
            windows.append((w0, w1, elapsed, (used - before) / elapsed, main / elapsed))
        rounds_seen = [line.split() for c in clients
                       for line in c.communicate()[0].splitlines()]
    finally:
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(root, ignore_errors=True)
    out = []
    for w0, w1, elapsed, cpu, loop in windows:
        commits = sum(int(n) for t, n in rounds_seen if w0 <= float(t) <= w1)
        out.append({"cpu_share": round(cpu, 4), "loop_share": round(loop, 4),
                    "commits_per_s": round(commits / elapsed),
                    # CPU per commit: comparable when the broker could not keep up the rate
                    "cpu_us_per_commit": round(cpu * elapsed / max(commits, 1) * 1e6)})
    return {"groups": groups,
            "cpu_share_median": statistics.median(w["cpu_share"] for w in out),
            "loop_share_median": statistics.median(w["loop_share"] for w in out),
            "commits_per_s_median": statistics.median(w["commits_per_s"] for w in out),
            "cpu_us_per_commit_median": statistics.median(w["cpu_us_per_commit"] for w in out),
            "windows": out}


# ---------------------------------------------------------------------------- rebalance

def rebalance_once(bootstrap: str, group: str, protocol: str, heartbeat_ms: int) -> float:
    """Seconds from a member's close() to the 3 others holding all 8 partitions."""
    from confluent_kafka import Consumer
    held: list[set[int]] = [set() for _ in range(4)]
    lock = threading.Lock()
    stop = [threading.Event() for _ in range(4)]
    consumers = []
    for _ in range(4):
        config = {"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False}
        if protocol == "classic":
            config.update({"heartbeat.interval.ms": heartbeat_ms, "session.timeout.ms": 6000,
                           "partition.assignment.strategy": "range"})
        else:
            config["group.protocol"] = "consumer"
        consumers.append(Consumer(config))

    def run(i: int) -> None:
        c = consumers[i]

        def assign(_c, parts):
            with lock:
                held[i] |= {p.partition for p in parts}

        def revoke(_c, parts):
            with lock:
                held[i] -= {p.partition for p in parts}
        c.subscribe(["r"], on_assign=assign, on_revoke=revoke)
        while not stop[i].is_set():
            c.poll(0.02)
        c.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()

    def settled(members: range) -> bool:
        with lock:
            got = [held[i] for i in members]
            return all(got) and sorted(p for s in got for p in s) == list(range(8))
    deadline = time.monotonic() + 60
    while not settled(range(4)):
        if time.monotonic() > deadline:
            raise RuntimeError("4 members never settled")
        time.sleep(0.005)
    time.sleep(1.0)  # stable for a while
    started = time.perf_counter()
    stop[3].set()
    with lock:
        held[3] = set()
    while not settled(range(3)):
        time.sleep(0.002)
    elapsed = time.perf_counter() - started
    for e in stop:
        e.set()
    for t in threads:
        t.join()
    return elapsed


def bench_rebalance(rounds: int, heartbeat_ms: int) -> dict:
    from kdelay import Topic
    root = tempfile.mkdtemp()
    with Topic.open(root, "r", partitions=8):
        pass
    proc, bootstrap, _ = start_broker(
        root, "group.initial.rebalance.delay.ms=0",
        f"group.consumer.heartbeat.interval.ms={heartbeat_ms}")
    try:
        out = {}
        for protocol in ("classic", "consumer"):
            times = [rebalance_once(bootstrap, f"{protocol}-{r}", protocol, heartbeat_ms)
                     for r in range(rounds)]
            print(protocol, [f"{t:.3f}" for t in times], flush=True)
            out[protocol] = statistics.median(times)
        return out
    finally:
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------- share

def share_round(bootstrap: str, group: str, topic: str, n: int) -> float:
    """Join, produce n records, then time consuming (and accepting) them all."""
    from confluent_kafka import Producer, ShareConsumer
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "implicit"})
    c.subscribe([topic])
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    deadline = time.monotonic() + 60
    while True:  # joined: a sentinel produced after joining comes back
        p.produce(topic, b"sentinel", partition=0)
        p.flush(30)
        if any(m.error() is None for m in c.poll(0.5)):
            break
        if time.monotonic() > deadline:
            raise RuntimeError("the share consumer never got a record")
    value = b"x" * 100
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.005)
    p.flush(60)
    got = 0
    started = time.perf_counter()
    while got < n:
        got += sum(1 for m in c.poll(1.0) if m.error() is None and m.value() == value)
        if time.perf_counter() - started > 120:
            raise RuntimeError(f"only {got} of {n} records")
    c.close()  # the last poll's records are accepted on close
    return time.perf_counter() - started


def share_worker(bootstrap: str, group: str, topic: str, ready: str) -> None:
    """Child process: a ShareConsumer reading until 3 s pass without a record; prints
    its count and the times of its first and last record."""
    from confluent_kafka import ShareConsumer
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "implicit"})
    c.subscribe([topic])
    for _ in range(3):
        c.poll(0.3)  # joined, with a share session
    open(ready, "w").close()
    got, first, last = 0, None, None
    give_up = time.time() + 120
    while (last is None or time.time() - last < 3) and time.time() < give_up:
        batch = [m for m in c.poll(0.5) if m.error() is None]
        if batch:
            now = time.time()
            first, last, got = first or now, now, got + len(batch)
    c.close()
    print(got, first, last, flush=True)


def bench_share(records: int, rounds: int, workers: tuple[int, ...]) -> dict:
    from confluent_kafka import Producer
    root = tempfile.mkdtemp()
    # earliest: the scaling workers' group starts at the records produced once they joined
    proc, bootstrap, _ = start_broker(root, "num.partitions=1",
                                      "share.auto.offset.reset=earliest")
    holder, mock = mock_bootstrap()
    try:
        ours, theirs = [], []
        for r in range(rounds):
            ours.append(share_round(bootstrap, f"sg-{r}", f"s{r}", records))
            theirs.append(share_round(mock, f"sg-{r}", f"s{r}", records))
            print(f"round {r}: kdelay {records / ours[-1]:,.0f} rec/s, "
                  f"mock {records / theirs[-1]:,.0f} rec/s", flush=True)
        out = {"kdelay": records / statistics.median(ours),
               "mock": records / statistics.median(theirs),
               "ratio": statistics.median(m / o for o, m in zip(ours, theirs, strict=True))}
        scaling = {}
        for k in workers:
            scaling[k] = share_scaling(bootstrap, f"scale-{k}", k, records * 2)
            print(f"{k} share consumers: {scaling[k]:,.0f} rec/s", flush=True)
        out["scaling"] = scaling
        return out
    finally:
        del holder
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(root, ignore_errors=True)
        del Producer


def share_scaling(bootstrap: str, group: str, k: int, n: int) -> float:
    from confluent_kafka import Producer
    tmp = tempfile.mkdtemp()
    readies = [os.path.join(tmp, f"ready-{i}") for i in range(k)]
    topic = f"scale-{k}"
    procs = [subprocess.Popen([sys.executable, __file__, "_share_worker", bootstrap, group,
                               topic, r],
                              stdout=subprocess.PIPE, text=True) for r in readies]
    deadline = time.monotonic() + 60
    while not all(os.path.exists(r) for r in readies):
        if time.monotonic() > deadline:
            raise RuntimeError("share workers did not start")
        time.sleep(0.05)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for _ in range(n):
        while True:
            try:
                p.produce(topic, b"y" * 100, partition=0)
                break
            except BufferError:
                p.poll(0.005)
    p.flush(60)
    rows = [proc.communicate()[0].split() for proc in procs]
    shutil.rmtree(tmp, ignore_errors=True)
    got = sum(int(r[0]) for r in rows)
    if got < n:
        raise RuntimeError(f"share workers got {got} of {n}")
    first = min(float(r[1]) for r in rows if r[1] != "None")
    last = max(float(r[2]) for r in rows if r[2] != "None")
    return n / (last - first)


def main() -> None:
    if sys.argv[1:2] == ["_commit_client"]:
        return commit_client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                             float(sys.argv[5]))
    if sys.argv[1:2] == ["_share_worker"]:
        return share_worker(*sys.argv[2:6])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", nargs="?", default="all",
                    choices=["commits", "rebalance", "share", "all"])
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10,
                    help="length of each measured window of `commits` (--rounds of them)")
    ap.add_argument("--heartbeat-ms", type=int, default=500)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.what in ("commits", "all"):
        print(bench_commits(args.groups, args.procs, args.seconds, args.rounds), flush=True)
    if args.what in ("rebalance", "all"):
        print(bench_rebalance(args.rounds, args.heartbeat_ms), flush=True)
    if args.what in ("share", "all"):
        print(bench_share(args.records, args.rounds, (1, 2, 4)), flush=True)


if __name__ == "__main__":
    main()
