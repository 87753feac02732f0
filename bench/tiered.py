"""Tiered storage, the write side: copy throughput (MB/s of sealed .log copied, verified
and committed by `log.sync_remote()`), and the local disk under a steady writer with
`local_retention_bytes` set (sampled while the background sync runs). Stores: file://
always; moto's S3 with --moto (a `moto_server` started on a free loopback port, stopped by
its PID at the end).

    python bench/tiered.py [--mb 256] [--rate 16] [--moto]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time

from kdelay import Log, LogConfig, Record
from kdelay.log.segments.layout import parse_segment_name
from kdelay.testing.tiering import moto_server

VALUE = b"x" * 1000


def _fill(log: Log, mb: int) -> None:
    for _ in range(mb * 1024 // 100):
        log.append([Record(VALUE)] * 100, delay_ms=0)


def copy_throughput(label: str, url: str, options: dict, mb: int) -> None:
    root = tempfile.mkdtemp(prefix="kdelay-tiered-bench-")
    try:
        directory = os.path.join(root, "p-0")
        sizes = dict(segment_bytes=16 << 20, local_retention_ms=-1)
        with Log.open(directory, config=LogConfig(**sizes)) as log:
            _fill(log, mb)
            log.roll()
            sealed = sum(log._segments[b].size for b in log.segments[:-1])
        # reopened with the store: the background sync sleeps until a roll, so the
        # explicit pass below does every copy
        with Log.open(directory, config=LogConfig(remote_storage=url,
                                                  remote_storage_options=options,
                                                  **sizes)) as log:
            t0 = time.perf_counter()
            result = log.sync_remote()
            seconds = time.perf_counter() - t0
            m = log.metrics()["remote"]
        print(f"{label}: copied {result.copied} segments, {sealed / 1e6:.0f} MB in "
              f"{seconds:.2f} s: {sealed / 1e6 / seconds:.0f} MB/s "
              f"({m['requests']} requests; every object read back to check its CRC)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _local_bytes(directory: str) -> int:
    total = 0
    for name in os.listdir(directory):
        parsed = parse_segment_name(name)
        if parsed is not None and parsed[1] in (".log", ".index", ".timeindex", ".dlyindex"):
            with contextlib.suppress(FileNotFoundError):  # local retention took it
                total += os.path.getsize(os.path.join(directory, name))
    return total


def steady_writer(label: str, url: str, options: dict, mb: int, rate: float) -> None:
    root = tempfile.mkdtemp(prefix="kdelay-tiered-bench-")
    limit = 16 << 20
    try:
        directory = os.path.join(root, "p-0")
        cfg = LogConfig(remote_storage=url, remote_storage_options=options,
                        segment_bytes=2 << 20, local_retention_bytes=limit)
        samples = []
        with Log.open(directory, config=cfg) as log:
            t0 = time.perf_counter()
            for i in range(mb * 1024 // 100):  # 100 KB batches at `rate` MB/s
                log.append([Record(VALUE)] * 100, delay_ms=0)
                ahead = t0 + (i + 1) * 0.1 / rate - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
                if i % 20 == 0:
                    samples.append(_local_bytes(directory))
            seconds = time.perf_counter() - t0
            log.sync_remote()
            settled = _local_bytes(directory)
            m = log.metrics()["remote"]
        print(f"{label}: steady writer, {mb} MB in {seconds:.1f} s "
              f"({mb / seconds:.0f} MB/s), local_retention_bytes {limit / 2**20:.0f} MiB "
              f"+ active segment 2 MiB: local disk peak {max(samples) / 2**20:.1f} MiB, "
              f"median {sorted(samples)[len(samples) // 2] / 2**20:.1f} MiB, after a sync "
              f"{settled / 2**20:.1f} MiB; {m['segments_remote']} segments in the store")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--moto", action="store_true")
    ap.add_argument("--rate", type=float, default=16.0, help="the steady writer's MB/s")
    args = ap.parse_args()
    store = tempfile.mkdtemp(prefix="kdelay-store-")
    try:
        copy_throughput("file://", f"file://{store}/a", {}, args.mb)
        steady_writer("file://", f"file://{store}/b", {}, args.mb, args.rate)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    if args.moto:
        with moto_server("kdelay-bench") as options:
            copy_throughput("moto S3", "s3://kdelay-bench/a", options, args.mb)
            steady_writer("moto S3", "s3://kdelay-bench/b", options, args.mb, args.rate)


if __name__ == "__main__":
    main()
