"""Producer.send from many threads at once: every future resolves, and every record is in
the log exactly once, where its metadata says."""

from __future__ import annotations

import threading
from collections import Counter

from kdelay import LogConfig, Producer, Topic
from kdelay.testing.checks import read_everything

THREADS = 8
PER_THREAD = 400


def test_eight_threads_of_single_sends(tmp_path) -> None:
    cfg = LogConfig(segment_bytes=64 * 1024)  # rolls while they send
    with Topic.open(tmp_path, "jobs", partitions=3, config=cfg) as topic:
        producer = Producer(topic, linger_ms=2, batch_records=50, buffer_records=300)
        futures: dict[bytes, object] = {}
        start = threading.Barrier(THREADS)

        def work(t: int) -> None:
            start.wait()
            for i in range(PER_THREAD):
                value = b"%d-%d" % (t, i)
                key = None if i % 3 == 0 else b"user-%d" % (i % 17)
                futures[value] = producer.send(value, key, delay_ms=(i * 37) % 2_000)
                if i % 100 == 99:
                    producer.flush()

        threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        producer.close()
        assert len(futures) == THREADS * PER_THREAD
        metas = {v: f.result(timeout=0) for v, f in futures.items()}
        held = {p: read_everything(topic.partition(p)) for p in range(3)}

    stored = Counter(value for part in held.values() for value, _ in part.values())
    assert set(stored) == set(futures) and set(stored.values()) == {1}
    for value, meta in metas.items():
        assert held[meta.partition][meta.offset] == (value, meta.deliver_after)
