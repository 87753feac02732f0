"""Throughput of the kdelay PySpark reader and writer on a local[2] SparkSession.

Workload: N records (default 1,000,000) with 100-byte values and 8-byte keys, in 100-record
batches, 16 MiB segments, written by `Log.append` as producers send them: every record
stamped, and 1 batch in 4 a retry carrying the `kdelay.attempt` header. Each read goes into Spark's no-op sink (`df.write.format("noop")`), so every row is produced by
the Python data source and ingested by the JVM; one warm-up run, then the median of
`--runs` timed runs, each beside a no-work source of the same schema and row count
(prebuilt Arrow batches): Spark's own per-row ceiling, measured in the same session.

* full records (all nine columns);
* `columns=offset,deliver_after` (no record decoding, no CRC);
* `read_batches` (one row per batch; records covered per second), all its columns, and
  `deliver_after,record_count` only (what `kdelay forecast` reads: from the .dlyindex);
* the stream (`--only stream`): a writer process appends for 20 s (kdelay.testing.
  live_writer: most batches due at once) while a query with a 100 ms trigger streams due
  records; latency = wall time a record leaves its micro-batch (foreachBatch on the
  driver) minus its deliverAfter;
* a log held mostly remotely (`--only remote`): the same log, every sealed segment but the
  last copied to a `file://` store on the same disk and its local files deleted (tiered
  storage), read in full beside the local log: what reading remote-only segments through
  ranged requests and temporary index files costs, store latency aside; with `--moto`
  also from moto's S3 server on loopback (kdelay.testing.tiering.moto_server; the tasks take
  its credentials from the environment, as they would AWS's);
* the writer: N cached rows (100-byte values, 8-byte keys, a timestamp per row, a
  deliverAfter per 200 rows) into a new 2-partition topic, beside a no-work Arrow sink of
  the same rows.

Spark's per-row ingestion is the ceiling for every read; producing fewer rows (one per
batch) and fewer columns is the lever, not faster decoding.

Also reported, for scale: the same decode without Spark (scan + Arrow, one core).

    /work/venv/bin/python bench/bench_spark.py [--records N] [--runs 3] [--dir DIR]
        [--only reads|writer|stream|remote] [--moto]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time

from kdelay import Log, LogConfig, Record

T0 = 1_700_000_000_000


RETRY = (("kdelay.attempt", b"2"),)


def build(path: str, records: int) -> None:
    """Producer-shaped: every record stamped (increasing within the 20 ms before its
    append), and 1 batch in 4 a retry carrying the `kdelay.attempt` header."""
    clock = [T0]
    vals = os.urandom(100 * 100)
    with Log.open(path, config=LogConfig(segment_bytes=16 << 20), clock=lambda: clock[0]) as log:
        for i in range(records // 100):
            clock[0] += 20
            headers = RETRY if i % 4 == 3 else ()
            recs = [Record(vals[j * 100:(j + 1) * 100], key=b"%08d" % (i * 100 + j),
                           headers=headers, timestamp=clock[0] - 20 + j // 5)
                    for j in range(100)]
            log.append(recs, deliver_after=T0 + (i * 7919) % 3_600_000)


def python_only(path: str) -> float:
    from kdelay.log.segments.layout import segment_bases
    from kdelay.spark import columnar, scan

    t = time.perf_counter()
    n = 0
    buffers = scan.ReadBuffers()  # as a Spark task shares them across its segments
    for base in segment_bases(path):
        r = scan.SegmentReader(path, base, buffers=buffers)
        for ch in r.chunks():
            for rb in columnar.records_to_arrow(ch, segment=base):
                n += rb.num_rows
    return n / (time.perf_counter() - t)


_SPARK = {"int64": "bigint", "int32": "int", "binary": "binary", "bool": "boolean",
          "string": "string"}


def ceiling_source(name: str, fields: list, rows: int, partitions: int):
    """A data source of the given (name, Arrow type) fields that yields prebuilt Arrow
    batches of `rows` rows in all: what Spark itself costs per row here, with no log
    reading or decoding at all."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class _Reader(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition):
            import numpy as np
            import pyarrow as pa

            n = max(1, rows // partitions // 4)
            cols = []
            for f, t in fields:
                if t == pa.binary():
                    width = 8 if f == "key" else 100
                    cols.append(pa.array([b"x" * width] * n, pa.binary()))
                elif t == pa.bool_():
                    cols.append(pa.array(np.ones(n, bool)))
                else:
                    cols.append(pa.array(np.arange(n, dtype=np.int64)).cast(t))
            schema = pa.schema([pa.field(f, t, nullable=True) for f, t in fields])
            rb = pa.RecordBatch.from_arrays(cols, schema=schema)
            for _ in range(min(4, rows)):
                yield rb

    ddl = ", ".join(f"`{f}` {_SPARK[str(t)]}" for f, t in fields)

    class CeilingSource(DataSource):
        @classmethod
        def name(cls):
            return name

        def schema(self):
            return ddl

        def reader(self, schema):
            return _Reader()

    return CeilingSource


def null_sink():
    """A data source writer that consumes its Arrow batches and keeps nothing: the
    writer's ceiling (Spark producing and shipping the rows to Python)."""
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    class _Writer(DataSourceArrowWriter):
        def write(self, iterator):
            for _ in iterator:
                pass
            return WriterCommitMessage()

    class NullSink(DataSource):
        @classmethod
        def name(cls):
            return "kdelay_null"

        def writer(self, schema, overwrite):
            return _Writer()

    return NullSink


def timed(actions: list[tuple[str, object]], runs: int, rows: int) -> list[float]:
    """Median seconds of `runs` timed runs of each (label, action), after one warm-up run of
    each; the actions take turns (A B A B ...), so that the JVM warming up or the machine's
    load drifting favours none of them. An action may return the seconds it timed itself."""
    times: list[list[float]] = [[] for _ in actions]
    for i in range(runs + 1):
        for (label, action), got in zip(actions, times, strict=True):
            t = time.perf_counter()
            took = action()
            dt = time.perf_counter() - t if took is None else took
            if i:
                got.append(dt)
            print(f"  {label} run {i}{' (warm-up)' if i == 0 else ''}: {dt:.2f} s, "
                  f"{rows / dt:,.0f} rows/s", flush=True)
    return [statistics.median(t) for t in times]


def noop(df):
    return lambda: df.write.format("noop").mode("overwrite").save()


def compare(spark, df, fields, rows: int, runs: int, label: str, unit: str = "rows",
            covered: int | None = None) -> None:
    """Time `df` into the noop sink side by side with a no-work source of the same schema
    and row count; print both and the ratio. With `covered` (records per row count), also
    a no-work source of one row: about what any query costs here, however little it reads
    (the bench's sources are pickled to the workers, so a little more than ours)."""
    name = "kdelay_ceiling_" + label.replace(" ", "_").replace(",", "")
    spark.dataSource.register(ceiling_source(name, fields, rows, 8))
    actions = [(label, noop(df)), (label + " ceiling", noop(spark.read.format(name).load()))]
    if covered:
        spark.dataSource.register(ceiling_source(name + "_1", fields, 1, 1))
        actions.append((label + " one-row floor",
                        noop(spark.read.format(name + "_1").load())))
    med, cmed, *floor = timed(actions, runs, rows)
    extra = ""
    if covered:
        extra = (f"; {covered / med:,.0f} records/s covered in {med * 1e3:.0f} ms (a one-row "
                 f"no-work query takes {floor[0] * 1e3:.0f} ms)")
    print(f"RESULT {label}: {rows / med:,.0f} {unit}/s{extra}; no-work source of the same "
          f"schema {rows / cmed:,.0f} {unit}/s; ratio {cmed / med:.0%}", flush=True)


def bench_remote(spark, path: str, tmp: str, rows: int, runs: int,
                 stores: list[tuple[str, str, dict]]) -> None:
    """A full read of the log held locally beside the same log held mostly remotely in
    each store (label, URL, options), the reads taking turns."""
    import kdelay.spark
    from kdelay.testing.tiering import tier_out

    total = sum(1 for n in os.listdir(path) if n.endswith(".log"))
    actions = [("local", noop(kdelay.spark.read_log(spark, path)))]
    for i, (label, url, options) in enumerate(stores):
        tiered = os.path.join(tmp, f"tiered-{i}", "p-0")
        shutil.copytree(path, tiered)
        cfg = LogConfig(segment_bytes=16 << 20, remote_storage=url,
                        remote_storage_options=options)
        copied = tier_out(tiered, cfg, remote_only=None)
        print(f"{label}: remote-only segments: {len(copied)} of {total}")
        actions.append((f"mostly remote, {label}", noop(kdelay.spark.read_log(spark, tiered))))
    local, *remote = timed(actions, runs, rows)
    for (label, _, _), seconds in zip(stores, remote, strict=True):
        print(f"RESULT full read, {total - 1} of {total} segments remote-only ({label}): "
              f"{rows / seconds:,.0f} rows/s; the same log local {rows / local:,.0f} rows/s; "
              f"ratio {local / seconds:.0%}", flush=True)


def bench_writer(spark, tmp: str, records: int, runs: int) -> None:
    from pyspark.sql import functions as F

    fut = time.time_ns() // 1_000_000 + 86_400_000
    df = spark.range(records, numPartitions=2).select(
        F.concat(F.lpad(F.col("id").cast("string"), 10, "0"),
                 F.lit("v" * 90)).cast("binary").alias("value"),
        F.lpad(F.col("id").cast("string"), 8, "0").cast("binary").alias("key"),
        (F.lit(fut) + (F.col("id") / 200).cast("long") * 7).alias("deliver_after"),
        (F.lit(T0) + F.col("id") / 10).cast("long").alias("timestamp")).cache()
    df.count()
    spark.dataSource.register(null_sink())
    n = [0]

    def write():
        # the previous run's topic goes first (untimed, synced): a run's own writes and
        # fsyncs count, not the writeback of the million rows each earlier run left (runs
        # slowed from 525 k to 355 k rows/s as they piled up)
        shutil.rmtree(os.path.join(tmp, f"w{n[0]}"), ignore_errors=True)
        os.sync()
        n[0] += 1
        t = time.perf_counter()
        df.write.format("kdelay").mode("append").option("partitions", "2").save(
            os.path.join(tmp, f"w{n[0]}"))
        return time.perf_counter() - t

    med, cmed = timed([("writer", write), ("writer ceiling", lambda: df.write.format(
        "kdelay_null").mode("append").save())], runs, records)
    print(f"RESULT writer (2 partitions by key, 100-byte values, ~100-record batches): "
          f"{records / med:,.0f} rows/s; no-work sink of the same rows {records / cmed:,.0f} "
          f"rows/s; ratio {cmed / med:.0%}", flush=True)
    df.unpersist()


def bench_stream(spark, tmp: str, seconds: float = 20) -> None:
    import subprocess

    from kdelay import Log, Record

    path = os.path.join(tmp, "live")
    with Log.open(path) as log:
        log.append([Record(b"first")])
    sink: list = []

    def each(df, _):
        rows = df.select("deliver_after").collect()
        sink.append((time.time_ns() // 1_000_000, [r[0] for r in rows]))

    q = (spark.readStream.format("kdelay").load(path).writeStream.foreachBatch(each)
         .trigger(processingTime="100 milliseconds")
         .option("checkpointLocation", os.path.join(tmp, "ck")).start())
    try:
        while not sink:
            time.sleep(0.1)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        out = subprocess.run([sys.executable, "-m", "kdelay.testing.live_writer", path,
                              str(seconds), "1"], capture_output=True, text=True, env=env,
                             check=True).stdout
        total = int(out.split("done ")[1])
        deadline = time.monotonic() + 120
        while sum(len(r) for _, r in sink) < total and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        q.stop()
    lat = sorted(t - da for t, rows in sink[1:] for da in rows)
    n = len(lat)
    print(f"RESULT stream: {n:,} records in {len(sink) - 1} micro-batches over ~{seconds:.0f} s; "
          f"latency due -> out of a micro-batch p50 {lat[n // 2]} ms, p90 {lat[n * 9 // 10]} "
          f"ms, p99 {lat[n * 99 // 100]} ms, max {lat[-1]} ms", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", help="where to write the log (default: a temp dir, removed)")
    ap.add_argument("--only", choices=("reads", "writer", "stream", "remote"),
                    help="run only these figures")
    ap.add_argument("--moto", action="store_true",
                    help="with --only remote: also read from moto's S3 server on loopback")
    args = ap.parse_args()

    tmp = None
    path = args.dir
    moto = contextlib.ExitStack()  # moto's server, when --moto starts one
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

        import pyarrow as pa

        import kdelay.spark
        from kdelay.spark import columnar

        scratch = tmp or tempfile.mkdtemp()
        stores = [("file://", f"file://{scratch}/store", {})]
        if args.only == "remote" and args.moto:
            from kdelay.testing.tiering import moto_server

            options = moto.enter_context(moto_server("kdelay-bench"))
            stores.append(("moto S3", "s3://kdelay-bench/spark", options))
            # the tasks find the store in remote-storage.json and its credentials in the
            # environment they inherit, as they would AWS's
            os.environ["AWS_ACCESS_KEY_ID"] = options["access_key_id"]
            os.environ["AWS_SECRET_ACCESS_KEY"] = options["secret_access_key"]
        spark = kdelay.spark.session(cores=2)
        try:
            df = kdelay.spark.read_log(spark, path)
            rows = df.count()
            if args.only == "stream":
                bench_stream(spark, tmp or tempfile.mkdtemp())
                return 0
            if args.only == "remote":
                bench_remote(spark, path, scratch, rows, args.runs, stores)
                return 0
            if args.only == "writer":
                bench_writer(spark, tmp or tempfile.mkdtemp(), rows, args.runs)
                return 0
            full = [(f.name, f.type) for f in columnar.arrow_schema(False)]
            compare(spark, df, full, rows, args.runs, "full records")
            two = kdelay.spark.read_log(spark, path, columns="offset,deliver_after")
            compare(spark, two, [("offset", pa.int64()), ("deliver_after", pa.int64())], rows,
                    args.runs, "offset,deliver_after")
            batches = kdelay.spark.read_batches(spark, path)
            nb = batches.count()
            bfields = [(n, pa.bool_() if n == "crc_valid" else pa.int64())
                       for n in kdelay.spark.BATCH_COLUMNS]
            compare(spark, batches, bfields, nb, args.runs, "read_batches", unit="batch rows",
                    covered=rows)
            # what `kdelay forecast` reads: columns a current .dlyindex holds, no .log bytes
            few = kdelay.spark.read_batches(spark, path, columns="deliver_after,record_count")
            compare(spark, few, [("deliver_after", pa.int64()), ("record_count", pa.int64())],
                    nb, args.runs, "read_batches deliver_after,record_count",
                    unit="batch rows", covered=rows)
            if args.only != "reads":
                bench_writer(spark, tmp or tempfile.mkdtemp(), rows, args.runs)
        finally:
            spark.stop()
    finally:
        moto.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
