"""kdelay on PySpark 4: read logs as DataFrames, run offline checks, forecast due load.

    import kdelay.spark
    kdelay.spark.register(spark)                       # short name "kdelay"
    df = kdelay.spark.read_log(spark, "/data/orders")  # or spark.read.format("kdelay").load(...)
    kdelay.spark.read_log(spark, path, columns="offset,deliver_after")  # only these columns
    kdelay.spark.read_batches(spark, path)            # one row per batch, from its header
    spark.readStream.format("kdelay").load(path)       # due records as they come due
    df.write.format("kdelay").mode("append").save(path)
    report = kdelay.spark.verify(spark, "/data/orders")
    kdelay.spark.forecast(spark, "/data/orders", window="1 minute").show()

Needs the `spark` extra (pyspark >= 4.0, pyarrow; matplotlib for `--png`). The workers
must be able to import kdelay (install the package; don't rely on a driver-only sys.path).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameReader, SparkSession

    from .checks import VerifyReport

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

__all__ = ["BATCH_COLUMNS", "PUSHDOWN_CONF", "cli_forecast", "cli_spark_verify", "forecast",
           "local_session", "read_batches", "read_log", "register", "verify"]

BATCH_COLUMNS = ("segment", "base_offset", "last_offset", "position", "size", "deliver_after",
                 "max_timestamp", "record_count", "crc_valid")


def register(spark: SparkSession) -> None:
    """Register the `kdelay` data source with `spark` and enable Python filter pushdown
    (`spark.sql.python.filterPushdown.enabled=true`, without which Spark refuses any Python
    reader that can take pushed filters)."""
    from .source import KdelayDataSource

    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(KdelayDataSource)


def read_log(spark: SparkSession, path: str, **options: str) -> DataFrame:
    """One row per record of the log at `path` (a partition directory, or a directory of
    `name-i` partition directories, which adds `topic` and `partition` columns)."""
    return kdelay_reader(spark, options).load(str(path))


def read_batches(spark: SparkSession, path: str, **options: str) -> DataFrame:
    """One row per batch of the log at `path`, from the batch headers: BATCH_COLUMNS (plus
    `topic` and `partition` first for a topic root). No record is decoded; the batch's
    bytes are read only to check its CRC (`crc_valid`), in large sequential reads."""
    from .scan import discover

    with_topic, _ = discover(str(path))
    cols = (["topic", "partition"] if with_topic else []) + list(BATCH_COLUMNS)
    return kdelay_reader(spark, {"mode": "batches", "columns": ",".join(cols), **options}
                   ).load(str(path))


def kdelay_reader(spark: SparkSession, options: dict) -> DataFrameReader:
    """spark.read.format("kdelay") with `options`, and minPartitions set to the session's
    default parallelism unless given (the source's planner cannot ask the session)."""
    register(spark)
    reader = spark.read.format("kdelay")
    if "minpartitions" not in {k.lower() for k in options}:
        # (Spark Connect has no SparkContext: the source then uses the CPU count)
        with contextlib.suppress(AttributeError, NotImplementedError):
            reader = reader.option("minPartitions", str(spark.sparkContext.defaultParallelism))
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader


def verify(spark: SparkSession, path: str) -> VerifyReport:
    """Offline checks of every segment under `path`; see kdelay.spark.checks."""
    from .checks import verify as _verify

    return _verify(spark, path)


def forecast(spark: SparkSession, path: str, window: str = "1 minute", *,
             after: int | None = None) -> DataFrame:
    """Records coming due per time window: (window_start, window_end, count)."""
    from .forecasting import forecast as _forecast

    return _forecast(spark, path, window, after=after)


def local_session(cores: int = 2, *, verbose: bool = True) -> SparkSession:
    """A local SparkSession (UTC session time zone); `verbose=False` silences the JVM's
    stderr chatter (see kdelay.spark.cli)."""
    from .cli import local_session as _local

    return _local(cores, verbose=verbose)


def cli_spark_verify(argv: list[str] | None = None) -> int:
    """`kdelay spark-verify PATH [--json]`: exit 0 when healthy, 1 when not."""
    from .cli import cli_spark_verify as _cli

    return _cli(argv)


def cli_forecast(argv: list[str] | None = None) -> int:
    """`kdelay forecast PATH [--window W] [--png OUT] [--pending]`."""
    from .cli import cli_forecast as _cli

    return _cli(argv)
