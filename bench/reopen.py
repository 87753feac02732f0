"""Reopen + first page, measured alone: issue 22's reopen target (at most 2 ms at 1 M
records, for every batch size). bench/compare.py takes this figure once a round among
everything else; here each log is written once and reopened many times.

    python bench/reopen.py                       # 1,000,000 records; 1-, 10-, 100-record batches
    python bench/reopen.py --records 100000 --reopens 11

Each workload (compare.py's `single-record`, `small-batch`, `producer`) is appended through
the public API by compare.py's kdelay adapter and closed; then, `--reopens` times, with the
clock past every deliverAfter: Log.open plus one fetch of 500 records (timed), close
(untimed). Prints the median and the fastest of those.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import tempfile
import time

from compare import PAGE, generate
from peers import FakeClock, KdelayEngine

WORKLOADS = ["single-record", "small-batch", "producer"]


def reopen_times(work, root: str, reopens: int) -> list[float]:
    """Write `work` into a fresh log, then the ms of each reopen + first page."""
    eng = KdelayEngine()
    eng.prepare(work)
    path = tempfile.mkdtemp(dir=root)
    clock = FakeClock(0)
    eng.open(path, clock)
    for i, t in enumerate(work.append_time):
        clock.now = t
        eng.append(i)
    eng.close()
    clock.now = max(work.deliver_after) + 1
    out = []
    for _ in range(reopens):
        gc.collect()
        t = time.perf_counter()
        eng.open(path, clock)
        page = eng.fetch(PAGE)
        out.append((time.perf_counter() - t) * 1000)
        eng.close()
        assert len(page) == min(PAGE, work.n_records)
    shutil.rmtree(path)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--reopens", type=int, default=21)
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()
    root = tempfile.mkdtemp(prefix="kdelay-reopen-")
    try:
        for name in a.workloads.split(","):
            work = generate(name, a.records, a.seed)
            ms = reopen_times(work, root, a.reopens)
            print(f"{name:>13} ({work.batch_size:>3}-record batches, {work.n_batches:,} "
                  f"batches): reopen + first page median {statistics.median(ms):.2f} ms, "
                  f"fastest {min(ms):.2f} ms ({a.reopens} reopens)", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
