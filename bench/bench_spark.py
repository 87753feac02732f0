"""Throughput of the kdelay PySpark reader (rows/s) on a local[2] SparkSession.

Workload (the project's standard one): N records (default 1,000,000) with 100-byte values
and 8-byte keys, in 100-record batches, 16 MiB segments, written by `Log.append`. The
measured action is a full read of every column into Spark's no-op sink
(`df.write.format("noop")`), so every row is produced by the Python data source and
ingested by the JVM. One warm-up run, then the median of `--runs` timed runs. Then the
same for a no-work source of the same schema (prebuilt Arrow batches): Spark's own
per-row ceiling on this machine, to put the reader's figure in context.

Also reported, for scale: the same decode without Spark (scan + Arrow, one core).

    /work/venv/bin/python bench/bench_spark.py [--records N] [--runs 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

from kdelay import Log, LogConfig, Record

T0 = 1_700_000_000_000


def build(path: str, records: int) -> None:
    clock = [T0]
    vals = os.urandom(100 * 100)
    with Log.open(path, config=LogConfig(segment_bytes=16 << 20), clock=lambda: clock[0]) as log:
        for i in range(records // 100):
            clock[0] += 1
            recs = [Record(vals[j * 100:(j + 1) * 100], key=b"%08d" % (i * 100 + j))
                    for j in range(100)]
            log.append(recs, deliver_after=T0 + (i * 7919) % 3_600_000)


def python_only(path: str) -> float:
    from kdelay.log.files import segment_bases
    from kdelay.spark import columnar, scan

    t = time.perf_counter()
    n = 0
    for base in segment_bases(path):
        r = scan.SegmentReader(path, base)
        for ch in r.chunks():
            for rb in columnar.records_to_arrow(ch.buf, ch.batches, segment=base):
                n += rb.num_rows
    return n / (time.perf_counter() - t)


def ceiling_source(rows: int, partitions: int):
    """A data source with the reader's exact schema that yields prebuilt Arrow batches:
    what Spark itself costs per row here, with no log reading or decoding at all."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class _Reader(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition):
            import numpy as np
            import pyarrow as pa

            from kdelay.spark import columnar

            n = rows // partitions // 4
            cols = [pa.array(np.arange(n, dtype=np.int64)) for _ in range(6)]
            cols += [pa.array([b"12345678"] * n, pa.binary()),
                     pa.array([b"x" * 100] * n, pa.binary()), pa.array(np.ones(n, bool))]
            rb = pa.RecordBatch.from_arrays(cols, schema=columnar.arrow_schema(False))
            for _ in range(4):
                yield rb

    class CeilingSource(DataSource):
        @classmethod
        def name(cls):
            return "kdelay_ceiling"

        def schema(self):
            return ("segment bigint, batch_base_offset bigint, position bigint, offset bigint, "
                    "deliver_after bigint, timestamp bigint, key binary, value binary, "
                    "crc_valid boolean")

        def reader(self, schema):
            return _Reader()

    return CeilingSource


def timed(df, runs: int, rows: int, label: str) -> float:
    times = []
    for i in range(runs + 1):
        t = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        dt = time.perf_counter() - t
        if i:
            times.append(dt)
        print(f"  {label} run {i}{' (warm-up)' if i == 0 else ''}: {dt:.2f} s, "
              f"{rows / dt:,.0f} rows/s")
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", help="where to write the log (default: a temp dir, removed)")
    ap.add_argument("--no-ceiling", action="store_true",
                    help="skip measuring Spark's own per-row cost with a no-work source")
    args = ap.parse_args()

    tmp = None
    path = args.dir
    if path is None:
        tmp = tempfile.mkdtemp(prefix="kdelay-bench-spark-")
        path = os.path.join(tmp, "log")
    try:
        if not os.path.isdir(path) or not os.listdir(path):
            t = time.perf_counter()
            build(path, args.records)
            print(f"wrote {args.records:,} records in {time.perf_counter() - t:.1f} s")
        py = max(python_only(path) for _ in range(2))
        print(f"decode without Spark (1 core): {py:,.0f} rows/s")

        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        import kdelay.spark

        spark = kdelay.spark.local_session(2)
        try:
            df = kdelay.spark.read_log(spark, path)
            rows = df.count()
            med = timed(df, args.runs, rows, "kdelay")
            print(f"Spark reader, local[2], {rows:,} rows: median {med:.2f} s = "
                  f"{rows / med:,.0f} rows/s (target >= 2,000,000)")
            if not args.no_ceiling:
                spark.dataSource.register(ceiling_source(rows, 8))
                cdf = spark.read.format("kdelay_ceiling").load()
                cmed = timed(cdf, args.runs, rows, "ceiling")
                print(f"Spark ceiling (same schema, prebuilt Arrow batches, no decoding): "
                      f"{rows / cmed:,.0f} rows/s; the reader reaches {cmed / med:.0%} of it")
        finally:
            spark.stop()
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
