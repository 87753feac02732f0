"""The broker's CPU per produced record, without a client competing for the cores: a
confluent Producer's requests, captured once, replayed over a raw socket to `kdelay serve`
processes of one or more source trees, alternating, in paired rounds.

    python bench/produce_replay.py capture FRAMES [--records 200000] [--workload delay0]
    python bench/produce_replay.py replay FRAMES TREE [TREE ...] [--rounds 5] [--repeat 3]

`capture` runs a Producer (linger.ms=5, acks=1, bench/broker.py's records) against a broker
in this process and writes every request frame it sent, in order (ApiVersions, Metadata,
the Produce requests), to FRAMES. `replay` starts `python -m kdelay serve` from each TREE
(its own compiled modules: PYTHONPATH=TREE), sends the captured frames `--repeat` times,
keeping at most 5 requests in flight as librdkafka does, reads every answer, and reports the
broker process's CPU (user + system, /proc/PID/stat) per produced record, median over the
rounds; trees alternate within each round. The Produce answers are checked: no error code.
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from broker import TOPIC, cpu_s, payload  # noqa: E402

WINDOW = 5


def capture(path: str, records: int, workload: str) -> None:
    """Through a recording proxy in this process to a `kdelay serve` process (advertising
    the proxy), so that the client batches as it does against a broker of its own."""
    from confluent_kafka import Producer
    frames: list[bytes] = []
    lock = threading.Lock()
    listener = socket.create_server(("127.0.0.1", 0))
    proxy_port = listener.getsockname()[1]
    root = tempfile.mkdtemp(prefix="kdelay-capture-")
    proc = subprocess.Popen([sys.executable, "-m", "kdelay", "serve", root, "--listen",
                             "127.0.0.1:0", "--advertised-listener",
                             f"127.0.0.1:{proxy_port}", "--log-level", "WARNING",
                             "--config", "num.partitions=1"],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline().rsplit(":", 1)[1])

        def pipe(src: socket.socket, dst: socket.socket, record: bool) -> None:
            pending = bytearray()
            try:
                while chunk := src.recv(1 << 20):
                    dst.sendall(chunk)
                    if record:
                        pending += chunk
                        while len(pending) >= 4:
                            n = struct.unpack_from(">i", pending)[0]
                            if len(pending) < 4 + n:
                                break
                            with lock:
                                frames.append(bytes(pending[4:4 + n]))
                            del pending[:4 + n]
            except OSError:
                pass
            finally:
                dst.close()

        def accept() -> None:
            while True:
                try:
                    client, _ = listener.accept()
                except OSError:
                    return
                upstream = socket.create_connection(("127.0.0.1", port))
                threading.Thread(target=pipe, args=(client, upstream, True),
                                 daemon=True).start()
                threading.Thread(target=pipe, args=(upstream, client, False),
                                 daemon=True).start()
        threading.Thread(target=accept, daemon=True).start()
        p = Producer({"bootstrap.servers": f"127.0.0.1:{proxy_port}", "linger.ms": 5,
                      "acks": 1})
        for k, v, h in payload(records, workload):
            while True:
                try:
                    p.produce(TOPIC, v, k, partition=0, headers=h)
                    break
                except BufferError:
                    p.poll(0.005)
        if p.flush(120):
            raise RuntimeError("undelivered records")
        del p
    finally:
        listener.close()
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(root, ignore_errors=True)
    with lock:
        kept = [f for f in frames if struct.unpack_from(">h", f)[0] in (0, 3, 18)]
    produce = [f for f in kept if struct.unpack_from(">h", f)[0] == 0]
    with open(path, "wb") as f:
        pickle.dump({"frames": kept, "records": records}, f)
    print(f"{len(produce)} Produce requests ({records / len(produce):,.0f} records each) "
          f"written to {path}")


def _read(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError("the broker closed the connection")
        buf += chunk
    return bytes(buf)


def _answer(s: socket.socket) -> bytes:
    return _read(s, struct.unpack(">i", _read(s, 4))[0])


def replay_once(tree: str, frames: list[bytes], repeat: int) -> float:
    """Seconds of the broker's CPU for `repeat` passes over the Produce frames."""
    root = tempfile.mkdtemp(prefix="kdelay-replay-")
    env = dict(os.environ, PYTHONPATH=tree)
    proc = subprocess.Popen([sys.executable, "-m", "kdelay", "serve", root, "--listen",
                             "127.0.0.1:0", "--log-level", "WARNING", "--config",
                             "num.partitions=1", "--config",
                             "delayed.delivery.max.spread.ms=1000"],
                            cwd=tree, env=env, stdout=subprocess.PIPE, text=True)
    try:
        host, port = proc.stdout.readline().rsplit(" ", 1)[1].strip().rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
        setup = [f for f in frames if struct.unpack_from(">h", f)[0] != 0]
        produce = [f for f in frames if struct.unpack_from(">h", f)[0] == 0]
        for f in setup:
            s.sendall(struct.pack(">i", len(f)) + f)
            _answer(s)
        _send_all(s, produce[:20])  # warm: the produce path's modules and buffers
        time.sleep(0.2)
        before = cpu_s(proc.pid)
        for _ in range(repeat):
            _send_all(s, produce)
        used = cpu_s(proc.pid) - before
        s.close()
        return used
    finally:
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(root, ignore_errors=True)


def _send_all(s: socket.socket, frames: list[bytes]) -> None:
    in_flight: deque[int] = deque()
    for f in frames:
        if len(in_flight) >= WINDOW:
            _check(_answer(s), in_flight.popleft())
        s.sendall(struct.pack(">i", len(f)) + f)
        in_flight.append(struct.unpack_from(">h", f, 2)[0])
    while in_flight:
        _check(_answer(s), in_flight.popleft())


def _check(answer: bytes, version: int) -> None:
    """RuntimeError unless every partition of a Produce answer has error code 0."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader
    response_type = load_response_schema(0, version)
    _, used = entity_reader(response_type.__header_schema__)(answer, 0)
    response, _ = entity_reader(response_type)(answer, used)
    for t in response.responses:
        for p in t.partition_responses:
            if p.error_code != 0:
                raise RuntimeError(f"produce refused: {p.error_code} {p.error_message}")


def replay(path: str, trees: list[str], rounds: int, repeat: int) -> None:
    with open(path, "rb") as f:
        data = pickle.load(f)
    frames, records = data["frames"], data["records"] * repeat
    per: dict[str, list[float]] = {t: [] for t in trees}
    for r in range(rounds):
        order = trees if r % 2 == 0 else trees[::-1]
        for t in order:
            per[t].append(replay_once(t, frames, repeat) / records * 1e9)
        print(f"round {r}: " + ", ".join(f"{t}: {per[t][-1]:.0f} ns" for t in trees),
              flush=True)
    for t in trees:
        print(f"{t}: median {statistics.median(per[t]):.0f} ns/record "
              f"(rounds {', '.join(f'{x:.0f}' for x in per[t])})")
    if len(trees) == 2:
        ratios = [b / a for a, b in zip(per[trees[0]], per[trees[1]], strict=True)]
        print(f"{trees[1]} / {trees[0]} per round: median {statistics.median(ratios):.2f} "
              f"({', '.join(f'{x:.2f}' for x in ratios)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("frames")
    c.add_argument("--records", type=int, default=200_000)
    c.add_argument("--workload", default="delay0", choices=("delay0", "mixed"))
    r = sub.add_parser("replay")
    r.add_argument("frames")
    r.add_argument("trees", nargs="+")
    r.add_argument("--rounds", type=int, default=5)
    r.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if args.cmd == "capture":
        capture(args.frames, args.records, args.workload)
    else:
        replay(args.frames, [os.path.abspath(t) for t in args.trees], args.rounds,
               args.repeat)


if __name__ == "__main__":
    main()
