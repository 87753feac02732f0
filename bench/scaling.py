"""Scaling curves for kdelay: how the costs that should stay flat (or grow gently) really grow.

    python bench/scaling.py            # full run (~5-10 min on 2 cores, ~3 GB of temp disk)
    python bench/scaling.py --quick    # smaller sizes (~1-2 min)
    python bench/scaling.py --only fetch,memory --profile

Four curves, each written to bench/results/<name>.png, all numbers to
bench/results/scaling.json and a Markdown summary to bench/results/scaling.md:

1. fetch: time per page of 500 vs the number of segments that hold due (and pending)
   records. The total is fixed (200,000 records in 10-record batches; 50,000 with
   --quick); only how finely the log is cut into segments changes. Every segment's first
   batch is due and the rest are due at random over a window whose middle is "now", so
   every page merges entries from many segments.
2. open: clean-open time, and the first page after it, vs log size (100k / 1M / 10M
   records of the standard workload, default LogConfig; --quick skips 10M and says so).
3. recovery: Log.open after a crash vs the size of the active segment (1 / 8 / 64 / 256
   MiB; --quick stops at 64). The crash image is a copy of a live, flushed log (no
   clean-shutdown marker, active indexes never persisted) plus half a batch of torn tail.
4. memory: tracemalloc heap bytes (current and peak) per pending record while the log
   holds N pending records (100k, 1M), for 100-, 10- and 1-record batches. The target is
   <= 8 bytes of heap per pending record.

The builders here (build_log, crash_image, ...) are shared with the pytest-benchmark
microbenchmarks (bench/conftest.py).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import logging
import math
import os
import platform
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable

from kdelay import DeliveryKey, Log, LogConfig, Record
from kdelay.log.batch import codec
from kdelay.log.segments.layout import segment_name

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
T0 = 1_700_000_000_000  # the fake clock's start (ms)
KEY_BYTES = 16
VALUE_BYTES = 100
PAGE = 500
MEMORY_TARGET = 8.0  # bytes of heap per pending record
MICRO_RECORDS = 1_000_000  # size of the logs the microbenchmarks use
perf = time.perf_counter


class FakeClock:
    """A settable ms clock (Log only ever calls it)."""

    def __init__(self, t: int = T0) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


# ---------------------------------------------------------------------------- builders


def record_pool(batch: int, lists: int = 8, seed: int = 1) -> list[list[Record]]:
    """A few pre-built batches of `batch` records (16-byte keys, 100-byte values), reused
    round-robin so building a big log costs no per-record allocation."""
    rng = random.Random(seed)
    return [[Record(rng.randbytes(VALUE_BYTES), key=rng.randbytes(KEY_BYTES))
             for _ in range(batch)] for _ in range(lists)]


def batch_bytes(batch: int) -> int:
    """Encoded size of one batch of `batch` standard records (all batches have it)."""
    keys = [bytes(KEY_BYTES)] * batch
    values = [bytes(VALUE_BYTES)] * batch
    return len(codec.encode_batch(base_offset=0, base_timestamp=T0, deliver_after=T0,
                                  keys=keys, values=values))


def build_log(path: str, n_records: int, *, batch: int = 100,
              config: LogConfig | None = None,
              deliver_after: Callable[[int, random.Random], int] | None = None,
              seed: int = 1, close: bool = True) -> tuple[Log | None, FakeClock]:
    """Append `n_records` in batches of `batch`: batch i at clock T0 + i ms, due at
    `deliver_after(i, rng)` (default: append time + uniform 0..15 min, the standard
    delayed-topic workload). Returns the log (None if closed) and its clock."""
    if n_records % batch:
        raise ValueError("n_records must be a multiple of batch")
    rng = random.Random(seed)
    pool = record_pool(batch, seed=seed)
    clock = FakeClock()
    log = Log.open(path, config=config or LogConfig(), clock=clock)
    if deliver_after is None:
        def deliver_after(i: int, r: random.Random) -> int:
            return T0 + i + r.randint(0, 15 * 60_000)
    for i in range(n_records // batch):
        clock.t = T0 + i
        log.append(pool[i % len(pool)], deliver_after=deliver_after(i, rng))
    if close:
        log.close()
        return None, clock
    return log, clock


def dly_entries(n: int, seed: int = 3) -> list[tuple[int, int, int, int, int]]:
    """`n` DeliverAfterIndex entries as a log scan yields them: offset order, random
    deliverAfter within 15 min, standard 100-record batches."""
    rng = random.Random(seed)
    size = batch_bytes(100)
    return [(T0 + i + rng.randint(0, 15 * 60_000), i * 100, i * size, 99, size)
            for i in range(n)]


def copy_dir(src: str, dst: str) -> None:
    """Copy a log directory (not its lock file) to a fresh `dst`."""
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".lock"))


def crash_image(path: str, active_bytes: int, *, batch: int = 100, torn: bool = True) -> int:
    """Build at `path` what a crash leaves: a live log with about `active_bytes` in its
    active segment, flushed but never closed (no clean marker, active indexes only in
    memory), plus half a batch of torn tail. Returns the records it holds."""
    src = path + ".live"
    bb = batch_bytes(batch)
    n_batches = max(1, math.ceil(active_bytes / bb))
    log, _ = build_log(src, n_batches * batch, batch=batch, close=False)
    assert log is not None
    log.flush()
    copy_dir(src, path)
    log.close()
    shutil.rmtree(src)
    if torn:
        name = os.path.join(path, segment_name(log.segments[-1]) + ".log")
        half = codec.encode_batch(base_offset=n_batches * batch, base_timestamp=T0,
                                  deliver_after=T0, keys=[None] * batch,
                                  values=[bytes(VALUE_BYTES)] * batch)[: bb // 2]
        with open(name, "ab") as f:
            f.write(half)
    return n_batches * batch


def _median_time(fn: Callable[[], object], reps: int) -> float:
    times = []
    for _ in range(reps):
        gc.collect()
        t = perf()
        fn()
        times.append(perf() - t)
    return statistics.median(times)


# ---------------------------------------------------------------------------- 1. fetch


def _drain(log: Log, due: int, prof: cProfile.Profile | None = None) -> list[float]:
    """Follow `next` from the start until nothing is due; seconds per page."""
    times = []
    seen = 0
    cursor = None
    while True:
        if prof:
            prof.enable()
        t = perf()
        res = log.fetch(cursor)
        elapsed = perf() - t
        if prof:
            prof.disable()
        if not res.records:
            break  # the empty last call is not a page
        times.append(elapsed)
        seen += len(res.records)
        cursor = res.next
    assert seen == due, (seen, due)
    return times


def fetch_vs_segments(root: str, quick: bool, profile: bool) -> list[dict]:
    total_batches = 5_000 if quick else 20_000
    batch = 10
    window = 100_000  # deliverAfter spread (ms); "now" is its middle
    due_start = T0 + total_batches  # after the last append time
    now = due_start + window // 2
    bb = batch_bytes(batch)
    rows = []
    for n_segs in (1, 10, 100, 1000):
        per_seg = total_batches // n_segs
        path = os.path.join(root, f"fetch-{n_segs}")

        def da(i: int, rng: random.Random, per_seg: int = per_seg) -> int:
            # the first batch of every segment is due; the rest straddle "now"
            hi = window // 2 if i % per_seg == 0 else window - 1
            return due_start + rng.randint(0, hi)

        t = perf()
        build_log(path, total_batches * batch, batch=batch, deliver_after=da,
                  config=LogConfig(segment_bytes=per_seg * bb))
        build_s = perf() - t
        clock = FakeClock(now)
        t = perf()
        log = Log.open(path, clock=clock)
        open_ms = (perf() - t) * 1000
        assert len(log.segments) == n_segs, (len(log.segments), n_segs)
        m = log.metrics()
        first_ms = _median_time(lambda log=log: log.fetch(None), 5) * 1000

        # a consumer following `next` from the start until nothing is due; three drains
        # (the machine is shared: the median drain is the figure), then one profiled
        drain_means, page_times = [], []
        for _ in range(3):
            times = _drain(log, m["due_records"])
            drain_means.append(statistics.fmean(times))
            page_times += times
        if profile and n_segs == 1000:
            prof = cProfile.Profile()
            _drain(log, m["due_records"], prof)
            _dump_profile(prof, "profile_fetch_1000_segments.txt")
        mid = DeliveryKey(due_start + window // 4, 0)
        mid_ms = _median_time(lambda log=log, mid=mid: log.fetch(mid), 5) * 1000
        log.close()
        shutil.rmtree(path)
        page_times.sort()
        row = {
            "segments": n_segs,
            "records": total_batches * batch,
            "due_records": m["due_records"],
            "pending_records": m["pending_records"],
            "pages": len(page_times) // 3,
            "page_ms_mean": statistics.median(drain_means) * 1000,
            "page_ms_p50": page_times[len(page_times) // 2] * 1000,
            "page_ms_p99": page_times[min(len(page_times) - 1,
                                          int(len(page_times) * 0.99))] * 1000,
            "first_page_cold_ms": first_ms,
            "mid_cursor_cold_ms": mid_ms,
            "clean_open_ms": open_ms,
            "build_s": build_s,
        }
        rows.append(row)
        print(f"  fetch: {n_segs:5d} segments  {row['page_ms_mean']:.2f} ms/page (mean), "
              f"first page {first_ms:.2f} ms, mid cursor {mid_ms:.2f} ms", flush=True)
    return rows


# ---------------------------------------------------------------------------- 2. open


def open_vs_size(root: str, quick: bool, profile: bool) -> tuple[list[dict], list[str]]:
    sizes = [100_000, 1_000_000, 10_000_000]
    skipped = []
    if quick:
        skipped.append("10,000,000 records skipped (--quick)")
        sizes = sizes[:2]
    rows = []
    for n in sizes:
        path = os.path.join(root, f"open-{n}")
        t = perf()
        build_log(path, n)
        build_s = perf() - t
        disk = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
        clock = FakeClock(T0 + n + 16 * 60_000)  # everything is due
        opens, firsts = [], []
        segs = 0
        for _ in range(5):
            gc.collect()
            t = perf()
            log = Log.open(path, clock=clock)
            t1 = perf()
            page = log.fetch(None)
            t2 = perf()
            assert len(page.records) == PAGE
            assert log.load_report.segments_scanned == 0
            segs = len(log.segments)
            log.close()
            opens.append(t1 - t)
            firsts.append(t2 - t1)
        if profile and n == sizes[-1]:
            prof = cProfile.Profile()
            prof.enable()
            log = Log.open(path, clock=clock)
            log.fetch(None)
            prof.disable()
            log.close()
            _dump_profile(prof, f"profile_open_{n}.txt")
        shutil.rmtree(path)
        row = {"records": n, "segments": segs, "disk_bytes": disk, "build_s": build_s,
               "open_ms": statistics.median(opens) * 1000,
               "first_page_ms": statistics.median(firsts) * 1000}
        row["open_plus_first_ms"] = row["open_ms"] + row["first_page_ms"]
        rows.append(row)
        print(f"  open: {n:>10,} records  open {row['open_ms']:.2f} ms + first page "
              f"{row['first_page_ms']:.2f} ms ({segs} segments, build {build_s:.1f} s)",
              flush=True)
    return rows, skipped


# ---------------------------------------------------------------------------- 3. recovery


def recovery_vs_active(root: str, quick: bool, profile: bool) -> tuple[list[dict], list[str]]:
    mibs = [1, 8, 64, 256]
    skipped = []
    if quick:
        skipped.append("256 MiB active segment skipped (--quick)")
        mibs = mibs[:3]
    rows = []
    for mib in mibs:
        image = os.path.join(root, f"crash-{mib}")
        n = crash_image(image, mib << 20)
        work = image + ".work"
        reps = 3 if mib >= 64 else 5
        times, firsts = [], []
        report = None
        extra = 1 if profile and mib == mibs[-1] else 0
        for r in range(reps + extra):
            copy_dir(image, work)
            gc.collect()
            prof = cProfile.Profile() if r == reps else None  # the extra rep, not timed
            t = perf()
            if prof:
                prof.enable()
            log = Log.open(work, clock=FakeClock(T0 + n + 16 * 60_000))
            t1 = perf()
            log.fetch(None)
            t2 = perf()
            if prof:
                prof.disable()
                _dump_profile(prof, f"profile_recovery_{mib}MiB.txt")
            report = log.load_report
            assert not report.clean and report.bytes_truncated > 0
            assert log.log_end_offset == n
            log.close()
            if prof is None:
                times.append(t1 - t)
                firsts.append(t2 - t1)
        shutil.rmtree(work)
        shutil.rmtree(image)
        assert report is not None
        med = statistics.median(times)
        row = {"active_mib": mib, "records": n, "bytes_scanned": report.bytes_scanned,
               "bytes_truncated": report.bytes_truncated,
               "recovery_ms": med * 1000, "first_page_ms": statistics.median(firsts) * 1000,
               "scan_mb_per_s": report.bytes_scanned / med / 1e6}
        rows.append(row)
        print(f"  recovery: {mib:4d} MiB active  {row['recovery_ms']:.1f} ms "
              f"({row['scan_mb_per_s']:.0f} MB/s scanned)", flush=True)
    return rows, skipped


# ---------------------------------------------------------------------------- 4. memory


def _memory_case(root: str, n: int, batch: int) -> dict:
    path = os.path.join(root, f"mem-{n}-{batch}")
    pool = record_pool(batch, lists=1)[0]
    clock = FakeClock()
    far = T0 + 10 * 86_400_000  # everything stays pending
    log = Log.open(path, clock=clock)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    for i in range(n // batch):
        clock.t = T0 + i
        # a distinct deliverAfter per batch, as in real use (one shared int would hide the
        # ~32 B the index keeps per batch for it)
        log.append(pool, deliver_after=far + i)
    gc.collect()
    cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    pending = log.metrics()["pending_records"]
    assert pending == n, (pending, n)
    log.close()
    # after a clean reopen every index is a memory map: what is left on the heap?
    gc.collect()
    tracemalloc.start()
    base2 = tracemalloc.get_traced_memory()[0]
    log = Log.open(path, clock=clock)
    gc.collect()
    cur2 = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    log.close()
    shutil.rmtree(path)
    return {"pending_records": n, "batch": batch,
            "live_current_b_per_rec": (cur - base) / n,
            "live_peak_b_per_rec": (peak - base) / n,
            "reopened_current_b_per_rec": (cur2 - base2) / n,
            "live_current_bytes": cur - base, "live_peak_bytes": peak - base}


def memory_vs_pending(root: str, quick: bool, profile: bool) -> tuple[list[dict], list[str]]:
    cases = [(100_000, 100), (1_000_000, 100), (100_000, 10), (1_000_000, 10), (100_000, 1)]
    skipped = ["1,000,000 pending in 1-record batches skipped (a million single appends "
               "under tracemalloc takes minutes; per-record cost is flat in N anyway)"]
    if quick:
        cases = [(n, b) for n, b in cases if n <= 100_000 or b == 100]
        skipped.append("1,000,000 pending in 10-record batches skipped (--quick)")
    rows = []
    for n, batch in cases:
        row = _memory_case(root, n, batch)
        rows.append(row)
        print(f"  memory: {n:>9,} pending in {batch:3d}-record batches: "
              f"{row['live_current_b_per_rec']:.2f} B/rec now, "
              f"{row['live_peak_b_per_rec']:.2f} B/rec peak, "
              f"{row['reopened_current_b_per_rec']:.3f} B/rec after reopen", flush=True)
    return rows, skipped


# ---------------------------------------------------------------------------- output


def _dump_profile(prof: cProfile.Profile, name: str) -> None:
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("cumulative").print_stats(25)
    stats.sort_stats("tottime").print_stats(25)
    with open(os.path.join(RESULTS, name), "w") as f:
        f.write(out.getvalue())
    print(f"  profile -> bench/results/{name}", flush=True)


def plot(results: dict) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    written = []
    plain = FuncFormatter(lambda v, _: f"{v:g}")

    def save(fig, name: str) -> None:
        for ax in fig.axes:  # "2" rather than "2x10^0" on log axes
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(FuncFormatter(
                lambda v, _: f"{v:g}" if str(f"{v:g}")[0] in "25" else ""))
        fig.tight_layout()
        p = os.path.join(RESULTS, name)
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(p)

    if "fetch" in results:
        rows = results["fetch"]
        x = [r["segments"] for r in rows]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for key, label, style in (
                ("page_ms_mean", "page while following next (mean)", "o-"),
                ("page_ms_p50", "page while following next (p50)", "o:"),
                ("page_ms_p99", "page while following next (p99)", "o--"),
                ("first_page_cold_ms", "first page, fetch(None)", "s-"),
                ("mid_cursor_cold_ms", "page from a mid cursor, no resume", "^-")):
            ax.plot(x, [r[key] for r in rows], style, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(x, [f"{v:,}" for v in x])
        ax.set_xlabel("segments holding due and pending records (log scale)")
        ax.set_ylabel("ms per fetch of 500 records (log scale)")
        ax.set_title(f"Fetch cost vs segments ({rows[0]['records']:,} records, "
                     f"10-record batches)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "fetch_vs_segments.png")

    if "open" in results:
        rows = results["open"]["rows"]
        x = [r["records"] for r in rows]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        ax.plot(x, [r["open_ms"] for r in rows], "o-", label="Log.open (clean)")
        ax.plot(x, [r["first_page_ms"] for r in rows], "s-", label="first page of 500")
        ax.plot(x, [r["open_plus_first_ms"] for r in rows], "^--", label="open + first page")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(x, [f"{v:,}" for v in x])
        ax.set_xlabel("records in the log (log scale)")
        ax.set_ylabel("ms (log scale)")
        title = "Clean open vs log size (default LogConfig, 100-record batches)"
        if results["open"]["skipped"]:
            title += "\n(" + "; ".join(results["open"]["skipped"]) + ")"
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "open_vs_size.png")

    if "recovery" in results:
        rows = results["recovery"]["rows"]
        x = [r["active_mib"] for r in rows]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        ax.plot(x, [r["recovery_ms"] for r in rows], "o-", label="Log.open after crash")
        ax.plot(x, [r["first_page_ms"] for r in rows], "s-", label="first page after it")
        for r in rows:
            ax.annotate(f"{r['scan_mb_per_s']:.0f} MB/s", (r["active_mib"], r["recovery_ms"]),
                        textcoords="offset points", xytext=(-10, 8), fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [str(v) for v in x])
        ax.margins(x=0.1)
        ax.set_yscale("log")
        ax.set_xlabel("active segment size at the crash, MiB (log2 scale)")
        ax.set_ylabel("ms (log scale)")
        title = "Crash recovery vs active segment size (torn tail, CRC scan)"
        if results["recovery"]["skipped"]:
            title += "\n(" + "; ".join(results["recovery"]["skipped"]) + ")"
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "recovery_vs_active.png")

    if "memory" in results:
        rows = results["memory"]["rows"]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        colours = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"])
        for batch in sorted({r["batch"] for r in rows}, reverse=True):
            rs = [r for r in rows if r["batch"] == batch]
            xs = [r["pending_records"] for r in rs]
            c = next(colours)
            ax.plot(xs, [r["live_current_b_per_rec"] for r in rs], "o-", color=c,
                    label=f"{batch}-record batches: current")
            ax.plot(xs, [r["live_peak_b_per_rec"] for r in rs], "x--", color=c, ms=9,
                    label=f"{batch}-record batches: peak")
        after = [r for r in rows if r["batch"] == max(r["batch"] for r in rows)]
        ax.plot([r["pending_records"] for r in after],
                [r["reopened_current_b_per_rec"] for r in after], "s:", color="grey",
                label="after a clean reopen (indexes mapped)")
        ax.axhline(MEMORY_TARGET, color="red", lw=1, ls=":",
                   label=f"target {MEMORY_TARGET:g} B / pending record")
        ax.set_xscale("log")
        ax.set_yscale("log")
        xs = sorted({r["pending_records"] for r in rows})
        ax.set_xticks(xs, [f"{v:,}" for v in xs])
        ax.margins(x=0.1)
        ax.set_xlabel("pending records held by the live log (log scale)")
        ax.set_ylabel("tracemalloc heap bytes per pending record (log scale)")
        ax.set_title("Heap per pending record (live log, active segment in memory)",
                     fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "memory_vs_pending.png")
    return written


def markdown(results: dict) -> str:
    out = ["# kdelay scaling curves", "",
           f"`python bench/scaling.py{' --quick' if results['quick'] else ''}` on "
           f"{results['machine']}. Page cache warm; times are medians unless marked.", ""]
    if "fetch" in results:
        rows = results["fetch"]
        out += ["## Fetch cost vs segments holding due records", "",
                f"{rows[0]['records']:,} records in 10-record batches, cut into N segments; "
                "about half due. A consumer follows `next` from the start until nothing is due "
                "(3 drains: ms/page mean is the median drain's mean; p50/p99 pool all pages). "
                "Cold pages (median of 5) get no resume points: every segment's index is "
                "searched.", "",
                "| segments | due / pending records | pages | ms/page mean | p50 | p99 "
                "| first page (cold) ms | mid-cursor page (cold) ms | clean open ms |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            out.append(f"| {r['segments']:,} | {r['due_records']:,} / {r['pending_records']:,}"
                       f" | {r['pages']} | {r['page_ms_mean']:.2f} | {r['page_ms_p50']:.2f} | "
                       f"{r['page_ms_p99']:.2f} | {r['first_page_cold_ms']:.2f} | "
                       f"{r['mid_cursor_cold_ms']:.2f} | {r['clean_open_ms']:.1f} |")
        out += ["", "![fetch](fetch_vs_segments.png)", ""]
    if "open" in results:
        rows = results["open"]["rows"]
        out += ["## Clean open vs log size", "",
                "Standard workload (16-byte keys, 100-byte values, 100-record batches, due "
                "within 15 min), default LogConfig (1 GiB segments); clock past every "
                "deliverAfter. Median of 5 opens.", "",
                "| records | segments | disk MB | open ms | first page ms | open + first ms |",
                "|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            out.append(f"| {r['records']:,} | {r['segments']} | {r['disk_bytes'] / 1e6:.0f} | "
                       f"{r['open_ms']:.2f} | {r['first_page_ms']:.2f} | "
                       f"{r['open_plus_first_ms']:.2f} |")
        out += [f"\n_{s}_" for s in results["open"]["skipped"]]
        out += ["", "![open](open_vs_size.png)", ""]
    if "recovery" in results:
        rows = results["recovery"]["rows"]
        out += ["## Crash recovery vs active segment size", "",
                "Copy of a live, flushed log (no clean marker, active indexes never persisted) "
                "plus half a batch of torn tail; `Log.open` CRC-scans the active segment, "
                "truncates the tail and rebuilds its indexes.", "",
                "| active MiB | records | bytes scanned | recovery ms | scan MB/s "
                "| first page ms |",
                "|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            out.append(f"| {r['active_mib']} | {r['records']:,} | {r['bytes_scanned']:,} | "
                       f"{r['recovery_ms']:.1f} | {r['scan_mb_per_s']:.0f} | "
                       f"{r['first_page_ms']:.2f} |")
        out += [f"\n_{s}_" for s in results["recovery"]["skipped"]]
        out += ["", "![recovery](recovery_vs_active.png)", ""]
    if "memory" in results:
        rows = results["memory"]["rows"]
        out += ["## Heap per pending record", "",
                "tracemalloc growth from an open empty log to one holding N pending records "
                "(all in the active segment, whose indexes live in memory), divided by N. "
                f"Target: <= {MEMORY_TARGET:g} B per pending record. 'after reopen': heap "
                "of a clean reopen of the same log (indexes memory-mapped).", "",
                "| pending records | batch | current B/rec | peak B/rec | after reopen B/rec "
                "| within target |",
                "|---:|---:|---:|---:|---:|:---:|"]
        for r in rows:
            ok = "yes" if r["live_current_b_per_rec"] <= MEMORY_TARGET else "**no**"
            out.append(f"| {r['pending_records']:,} | {r['batch']} | "
                       f"{r['live_current_b_per_rec']:.2f} | {r['live_peak_b_per_rec']:.2f} | "
                       f"{r['reopened_current_b_per_rec']:.3f} | {ok} |")
        out += [f"\n_{s}_" for s in results["memory"]["skipped"]]
        out += ["", "![memory](memory_vs_pending.png)", ""]
    return "\n".join(out) + "\n"


def _keep_previous(results: dict, only: list[str]) -> None:
    """With --only, keep the other curves from the previous scaling.json of the same mode,
    so scaling.md and the plots always cover every curve measured."""
    try:
        with open(os.path.join(RESULTS, "scaling.json")) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return
    if old.get("quick") != results["quick"]:
        return
    for name in ("fetch", "open", "recovery", "memory"):
        if name not in only and name in old:
            results[name] = old[name]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes (~1-2 min)")
    ap.add_argument("--only", default="fetch,open,recovery,memory",
                    help="comma-separated subset of fetch,open,recovery,memory")
    ap.add_argument("--profile", action="store_true",
                    help="cProfile the largest case of each curve -> results/profile_*.txt")
    ap.add_argument("--dir", default=None, help="where logs are built (default: a temp dir)")
    args = ap.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - {"fetch", "open", "recovery", "memory"}
    if unknown:
        ap.error(f"unknown curve(s): {', '.join(sorted(unknown))}")
    os.makedirs(RESULTS, exist_ok=True)
    # the recovery curve truncates a torn tail on purpose: its warning is expected noise
    logging.getLogger("kdelay").setLevel(logging.ERROR)
    root = tempfile.mkdtemp(prefix="kdelay-scaling-", dir=args.dir)
    results: dict = {"quick": args.quick,
                     "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
                                f"{platform.python_version()}"}
    started = perf()
    try:
        if "fetch" in only:
            print("fetch cost vs segments", flush=True)
            results["fetch"] = fetch_vs_segments(root, args.quick, args.profile)
        if "open" in only:
            print("clean open vs log size", flush=True)
            rows, skipped = open_vs_size(root, args.quick, args.profile)
            results["open"] = {"rows": rows, "skipped": skipped}
            for s in skipped:
                print(f"  NOTE: {s}")
        if "recovery" in only:
            print("crash recovery vs active segment size", flush=True)
            rows, skipped = recovery_vs_active(root, args.quick, args.profile)
            results["recovery"] = {"rows": rows, "skipped": skipped}
            for s in skipped:
                print(f"  NOTE: {s}")
        if "memory" in only:
            print("heap per pending record", flush=True)
            rows, skipped = memory_vs_pending(root, args.quick, args.profile)
            results["memory"] = {"rows": rows, "skipped": skipped}
            for s in skipped:
                print(f"  NOTE: {s}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results["elapsed_s"] = perf() - started
    _keep_previous(results, only)
    with open(os.path.join(RESULTS, "scaling.json"), "w") as f:
        json.dump(results, f, indent=2)
    md = markdown(results)
    with open(os.path.join(RESULTS, "scaling.md"), "w") as f:
        f.write(md)
    for p in plot(results):
        print(f"wrote {os.path.relpath(p)}")
    print(md)
    print(f"total {results['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
