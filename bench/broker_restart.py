"""A broker restart (SIGTERM, then start) under load: how long each client's producer and
consumer see no progress, and whether anything was lost.

A producer sends 1,000 records/s (each a sequence number) and a consumer in a group reads
them, both with default reconnect settings; the broker is stopped with SIGTERM and started
again on the same port and root. Reported per client: the longest gap between successive
acknowledged sends and between successive received records (the outage a user sees), the
errors the client reported, and records lost (acknowledged, never received).

    python bench/broker_restart.py [--rounds 3] [--clients confluent,kafka-python]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

RATE = 1000          # records per second
WARM_S, AFTER_S = 5.0, 6.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(root: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "kdelay", "serve", root, "--listen",
                             f"127.0.0.1:{port}", "--log-level", "ERROR",
                             "--config", "group.initial.rebalance.delay.ms=0"],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if "serving" not in line:
        raise SystemExit(f"the broker did not start: {line!r}")
    return proc


def run_confluent(bootstrap: str, stop: threading.Event, out: dict) -> list:
    import confluent_kafka
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                         "message.timeout.ms": 60000})
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "r",
                                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["restart"])

    def delivered(err, msg):
        if err is None:
            out["acked"].append((time.monotonic(), int(msg.value())))
        else:
            out["producer_errors"] += 1

    def consume():
        while not stop.is_set() or time.monotonic() < out["drain_until"]:
            m = consumer.poll(0.1)
            if m is not None and m.error() is None:
                out["received"].append((time.monotonic(), int(m.value())))
            elif m is not None:
                out["consumer_errors"] += 1
        consumer.close()

    t = threading.Thread(target=consume)
    t.start()
    n = 0
    while not stop.is_set():
        producer.produce("restart", str(n).encode(), on_delivery=delivered)
        producer.poll(0)
        n += 1
        time.sleep(1 / RATE)
    producer.flush(60)
    return [t]


def run_kafka_python(bootstrap: str, stop: threading.Event, out: dict) -> list:
    import kafka
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, retries=100,
                                   acks=1, enable_idempotence=False)
    consumer = kafka.KafkaConsumer("restart", bootstrap_servers=bootstrap, group_id="r",
                                   auto_offset_reset="earliest")

    def consume():
        while not stop.is_set() or time.monotonic() < out["drain_until"]:
            try:
                for records in consumer.poll(timeout_ms=100).values():
                    now = time.monotonic()
                    out["received"] += [(now, int(r.value)) for r in records]
            except Exception:
                out["consumer_errors"] += 1
        consumer.close()

    t = threading.Thread(target=consume)
    t.start()
    n = 0
    while not stop.is_set():
        fut = producer.send("restart", str(n).encode())
        fut.add_callback(lambda md, v=n: out["acked"].append((time.monotonic(), v)))
        fut.add_errback(lambda e: out.__setitem__("producer_errors",
                                                  out["producer_errors"] + 1))
        n += 1
        time.sleep(1 / RATE)
    producer.flush(60)
    return [t]


def longest_gap(events: list, after: float) -> float:
    times = sorted(t for t, _ in events if t >= after)
    return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)


def one_round(client: str) -> dict:
    root = tempfile.mkdtemp(prefix="kdelay-restart-")
    port = free_port()
    proc = start_broker(root, port)
    bootstrap = f"127.0.0.1:{port}"
    stop = threading.Event()
    out: dict = {"acked": [], "received": [], "producer_errors": 0, "consumer_errors": 0,
                 "drain_until": float("inf")}
    run = run_confluent if client == "confluent" else run_kafka_python
    threads: list = []
    driver = threading.Thread(target=lambda: threads.extend(run(bootstrap, stop, out)))
    driver.start()
    time.sleep(WARM_S)
    restart_at = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(60)
    proc = start_broker(root, port)
    restarted = time.monotonic() - restart_at
    time.sleep(AFTER_S)
    out["drain_until"] = time.monotonic() + 5
    stop.set()
    driver.join()
    for t in threads:
        t.join()
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    shutil.rmtree(root, ignore_errors=True)
    acked = {v for _, v in out["acked"]}
    received = {v for _, v in out["received"]}
    return {"client": client, "broker_exit": code, "restart_s": restarted,
            "producer_gap_s": longest_gap(out["acked"], restart_at - 1),
            "consumer_gap_s": longest_gap(out["received"], restart_at - 1),
            "producer_errors": out["producer_errors"],
            "consumer_errors": out["consumer_errors"],
            "acked": len(acked), "lost": len(acked - received)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--clients", default="confluent,kafka-python")
    args = p.parse_args()
    for client in args.clients.split(","):
        rounds = [one_round(client) for _ in range(args.rounds)]
        med = {k: statistics.median(r[k] for r in rounds)
               for k in ("restart_s", "producer_gap_s", "consumer_gap_s")}
        print(json.dumps({"client": client, "median": med,
                          "lost": [r["lost"] for r in rounds],
                          "errors": [(r["producer_errors"], r["consumer_errors"])
                                     for r in rounds],
                          "exit": [r["broker_exit"] for r in rounds]}))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
