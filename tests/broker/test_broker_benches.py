"""The broker's benchmarks run end to end at a tiny size (bench/broker.py's produce rounds,
bench/broker_consume.py's consume rounds): against `kdelay serve` and librdkafka's mock,
each writing its table with every row it promises. Their figures are not checked here
(docs/performance.md has them, measured on a quiet machine); that they still run is."""

from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_bench(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_the_produce_bench_runs_both_workloads_against_both_brokers():
    out = run_bench("bench/broker.py", "--records", "2000", "--rounds", "2",
                    "--workloads", "delay0,mixed", "--skip-resources")
    for workload in ("delay0", "mixed"):
        row = re.search(rf"\| produce 2,000 \({workload}, kdelay\) \| ([\d,]+) rec/s \| "
                        rf"([\d,]+) rec/s \| [\d.]+x \(per round: [\d.]+, [\d.]+\) \|", out)
        assert row, out
        assert all(int(n.replace(",", "")) > 0 for n in row.groups())
        assert f"the broker's CPU for it ({workload}, kdelay" in out


def test_the_consume_bench_reads_every_record_from_both_brokers():
    out = run_bench("bench/broker_consume.py", "--only", "consume", "--records", "4000",
                    "--rounds", "2", "--repeat", "1")
    assert re.search(r"\| consume 4,000 due records, confluent Consumer, 4 partitions, this "
                     r"tree \(records/s, median of 2\) \| [\d,]+ \| [\d,]+ \| [\d.]+x", out), out
    for side in ("kdelay", "mock"):
        assert f"... {side}: time to the first batch of 10,000 records" in out
        assert f"... {side}: broker CPU of a consume repeated on the same broker" in out
