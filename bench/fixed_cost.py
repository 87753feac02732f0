"""A process's fixed cost of kdelay: private memory (USS) and CPU from importing it to its
first fetch, above an interpreter that has numpy loaded already.

Each run is a fresh interpreter: it imports numpy, takes its baseline (USS from
/proc/self/smaps_rollup, user + system CPU), then imports kdelay, opens a log in a temp dir,
appends one batch of each shape (1 record, 100 records, null values, headers, a timestamp
per record), fetches once, and reports the growth. The figures are medians over the runs.
USS leaves out pages shared with other processes, so a library that other processes on the
machine have loaded too counts less; RSS growth is given beside it, which does not vary so.

    python bench/fixed_cost.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys

T0 = 1_700_000_000_000


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child() -> None:
    """One measured run; prints one JSON line."""
    import tempfile

    import numpy  # noqa: F401  (the baseline holds numpy)
    from proc_memory import memory_figures

    before, cpu0 = memory_figures(), _cpu_s()

    from kdelay import Log, Record

    with tempfile.TemporaryDirectory() as path:
        with Log.open(path, clock=lambda: T0) as log:
            log.append([Record(b"v", key=b"k")])
            log.append([Record(b"v" * 100, key=b"k%d" % i) for i in range(100)])
            log.append([Record(None, key=b"k"), Record(b"v")])
            log.append([Record(b"v", headers=[("kdelay.attempt", b"1")])] * 3)
            log.append([Record(b"v", timestamp=T0 - 20 + i) for i in range(10)])
            fetched = len(log.fetch(max_records=500).records)
        after, cpu = memory_figures(), _cpu_s() - cpu0
    print(json.dumps({"uss_mib": (after["uss"] - before["uss"]) / (1 << 20),
                      "rss_mib": (after["rss"] - before["rss"]) / (1 << 20),
                      "cpu_s": cpu, "fetched": fetched}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child()
        return
    here = os.path.abspath(__file__)
    runs = [json.loads(subprocess.run([sys.executable, here, "--child"], check=True,
                                      capture_output=True, text=True).stdout)
            for _ in range(args.runs)]
    print(f"runs: {args.runs}; records fetched: {runs[0]['fetched']}")
    for key, what, digits in (("uss_mib", "USS growth MiB", 1), ("rss_mib", "RSS growth MiB", 1),
                              ("cpu_s", "CPU s", 3)):
        got = [r[key] for r in runs]
        print(f"{what}: median {statistics.median(got):.{digits}f} "
              f"(all: {', '.join(f'{g:.{digits}f}' for g in got)})")


if __name__ == "__main__":
    main()
