"""Tiered reads: the first page from a remote-only segment, and a due-order drain of a
log held remotely beside the same log held locally (records/s; requests and bytes
fetched per segment), then the same drain again with every byte in the local cache. Stores: file:// always; moto's S3 with --moto (a `moto_server`
started on a free loopback port, stopped by its PID at the end: testing.tiering.moto_server).

    python bench/tiered_read.py [--records N] [--moto]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from kdelay import Log, LogConfig, Record
from kdelay.testing.tiering import drop_local, moto_server


def _build(directory: str, cfg: LogConfig, records: int) -> list[int]:
    """A log of `records` records (100-byte values, delays spread over 10 s), every sealed
    segment copied and then dropped locally; returns the copied bases."""
    clock = [1_700_000_000_000]
    log = Log.open(directory, config=cfg, clock=lambda: clock[0])
    for i in range(0, records, 100):
        log.append([Record(b"x" * 100)] * 100, delay_ms=(i * 7919) % 10_000)
    log.sync_remote()
    bases = log.segments[:-1]
    log.close()
    return bases


def _drain(log: Log) -> tuple[int, float]:
    start, n, cursor = time.perf_counter(), 0, None
    while (page := log.fetch(cursor, max_records=500)).records:
        n += len(page.records)
        cursor = page.next
    return n, time.perf_counter() - start


def run(label: str, url: str, options: dict, records: int) -> None:
    root = tempfile.mkdtemp(prefix="kdelay-tiered-bench-")
    try:
        directory = os.path.join(root, "p-0")
        cfg = LogConfig(remote_storage=url, remote_storage_options=options,
                        segment_bytes=8 << 20)
        bases = _build(directory, cfg, records)
        later = lambda: 1_700_000_000_000 + 60_000  # noqa: E731 - everything due
        local = os.path.join(root, "local")
        shutil.copytree(directory, local)
        drop_local(directory, bases)

        log = Log.open(local, config=LogConfig(segment_bytes=8 << 20), clock=later)
        n_local, t_local = _drain(log)
        log.close()

        log = Log.open(directory, config=cfg, clock=later)
        before = log._tier.counters.requests, log._tier.counters.bytes_fetched
        t0 = time.perf_counter()
        log.fetch(None, max_records=500)
        first_page_ms = (time.perf_counter() - t0) * 1000
        # what the page fetched (the index prefetches still under way are not all in it)
        first_requests = log._tier.counters.requests - before[0]
        first_bytes = log._tier.counters.bytes_fetched - before[1]
        log.close()
        shutil.rmtree(os.path.join(directory, "remote-cache"), ignore_errors=True)
        log = Log.open(directory, config=cfg, clock=later)
        n_remote, t_remote = _drain(log)
        # the drain's own requests (metrics() reads every index: the offset and time ones too)
        requests, fetched = log._tier.counters.requests, log._tier.counters.bytes_fetched
        m = log.metrics()["remote"]
        n_cached, t_cached = _drain(log)  # the cache (1 GiB) holds all of it
        log.close()
        assert n_remote == n_local == n_cached
        segs = len(bases)
        print(f"{label}: {records} records, {segs} remote segments")
        print(f"  first page (500 records) from remote-only segments: {first_page_ms:.1f} ms "
              f"({first_requests} requests, {first_bytes / 1e6:.1f} MB fetched)")
        print(f"  due-order drain: local {n_local / t_local:,.0f} rec/s, remote "
              f"{n_remote / t_remote:,.0f} rec/s, remote again from the cache "
              f"{n_cached / t_cached:,.0f} rec/s")
        print(f"  per remote segment: {requests / segs:.1f} requests, "
              f"{fetched / segs / 1e6:.2f} MB fetched "
              f"(.log {m['bytes_remote'] / segs / 1e6:.2f} MB)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--moto", action="store_true")
    args = ap.parse_args()
    store = tempfile.mkdtemp(prefix="kdelay-store-")
    try:
        run("file://", f"file://{store}", {}, args.records)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    if args.moto:
        with moto_server("kdelay-bench") as options:
            run("moto S3", "s3://kdelay-bench/bench", options, args.records)


if __name__ == "__main__":
    main()
