"""SIGKILL a process that produces single records from several threads through a Producer.

The child (flush_messages=1) prints a record's partition, offset and value only from its
future's done-callback, once the future resolved with metadata: a printed record is
acknowledged and must survive every later kill, where the metadata said. Records whose
futures had not resolved may be lost; no record is ever in the log twice (every value is
unique)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter

from kdelay import LogConfig, Topic
from kdelay.testing.checks import read_everything

CONFIG = dict(segment_bytes=8192, index_interval_bytes=256, flush_messages=1)

CHILD = textwrap.dedent("""
    import sys, threading
    from kdelay import LogConfig, Producer, Topic
    root, round_no = sys.argv[1], int(sys.argv[2])
    topic = Topic.open(root, "jobs", partitions=3,
                       config=LogConfig(segment_bytes=8192, index_interval_bytes=256,
                                        flush_messages=1))
    producer = Producer(topic, linger_ms=3, batch_records=20)
    out = threading.Lock()

    def acked(value):
        def callback(fut):
            if fut.exception() is None:
                m = fut.result()
                with out:
                    print("ack", m.partition, m.offset, value.decode(), flush=True)
        return callback

    def work(t):
        for i in range(10 ** 9):
            value = b"r%d-t%d-%d" % (round_no, t, i)
            key = None if i % 2 else b"k%d" % (i % 11)
            producer.send(value, key, delay_ms=i % 50).add_done_callback(acked(value))

    print("open", flush=True)
    for t in range(3):
        threading.Thread(target=work, args=(t,), daemon=True).start()
    threading.Event().wait()
""")


def test_sigkill_a_producing_process(tmp_path) -> None:
    rng = random.Random(23)
    root = os.fspath(tmp_path)
    acked: dict[tuple[int, int], bytes] = {}
    for round_no in range(6):
        child = subprocess.Popen([sys.executable, "-c", CHILD, root, str(round_no)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().split() == ["open"], child.stderr.read()
            for _ in range(rng.randint(50, 400)):
                line = child.stdout.readline().split()
                assert line and line[0] == "ack", child.stderr.read()
                acked[int(line[1]), int(line[2])] = line[3].encode()
            time.sleep(rng.uniform(0, 0.05))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
        assert child.returncode == -signal.SIGKILL
        # acks printed before the kill but not read yet count too
        for line in child.stdout.read().splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "ack":
                acked[int(parts[1]), int(parts[2])] = parts[3].encode()
        child.stdout.close()
        child.stderr.close()
        with Topic.open(root, "jobs", config=LogConfig(**CONFIG)) as topic:
            held = {(p, off): value for p in range(3)
                    for off, (value, _) in read_everything(topic.partition(p)).items()}
        counts = Counter(held.values())
        assert all(n == 1 for n in counts.values()), "a record is in the log twice"
        lost = {k: v for k, v in acked.items() if held.get(k) != v}
        assert not lost, f"acknowledged records lost or moved: {list(lost.items())[:5]}"
    assert len(acked) > 300
