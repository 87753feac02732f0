"""kdelay on PySpark 4: read logs as DataFrames, run offline checks, forecast due load.

    import kdelay.spark
    spark = kdelay.spark.session()                     # local, quiet, ready for kdelay
    kdelay.spark.register(spark)                       # another session: short name "kdelay"
    df = kdelay.spark.read_log(spark, "/data/orders")  # or spark.read.format("kdelay").load(...)
    kdelay.spark.read_log(spark, path, columns="offset,deliver_after")  # only these columns
    kdelay.spark.read_batches(spark, path)            # one row per batch, from its header
    spark.readStream.format("kdelay").load(path)       # due records as they come due
    df.write.format("kdelay").mode("append").save(path)
    report = kdelay.spark.verify(spark, "/data/orders")
    kdelay.spark.forecast(spark, "/data/orders", window="1 minute").show()  # pending only

Needs the `spark` extra (pyspark >= 4.0, pyarrow; matplotlib for `--png`). The workers
must be able to import kdelay (install the package; don't rely on a driver-only sys.path):
`session()` has them run the calling interpreter.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameReader, SparkSession

    from .checks import VerifyReport

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
REGISTERED_CONF = "kdelay.spark.registered"  # "true" once register() has run in a session

__all__ = ["BATCH_COLUMNS", "PUSHDOWN_CONF", "cli_forecast", "cli_spark_verify", "forecast",
           "read_batches", "read_log", "register", "session", "verify"]

BATCH_COLUMNS = ("segment", "base_offset", "last_offset", "position", "size", "deliver_after",
                 "max_timestamp", "record_count", "crc_valid")


def register(spark: SparkSession) -> None:
    """Register the `kdelay` data source with `spark` and enable Python filter pushdown
    (`spark.sql.python.filterPushdown.enabled=true`, without which Spark refuses any Python
    reader that can take pushed filters). Idempotent and silent: the source is registered
    once per session (Spark logs a warning each time one is replaced); the session's conf
    remembers that it was (REGISTERED_CONF)."""
    spark.conf.set(PUSHDOWN_CONF, "true")
    if spark.conf.get(REGISTERED_CONF, "false") == "true":
        return
    from .source import KdelayDataSource

    spark.dataSource.register(KdelayDataSource)
    spark.conf.set(REGISTERED_CONF, "true")


def session(app_name: str = "kdelay", *, cores: int | None = None,
            quiet: bool = True) -> SparkSession:
    """A local SparkSession ready for kdelay: workers run the calling interpreter, the
    data source registered, filter pushdown on, quiet logs; see kdelay.spark.local_session."""
    from .local_session import session as _session

    return _session(app_name, cores=cores, quiet=quiet)


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
             after: int | None = None, all_records: bool = False) -> DataFrame:
    """Pending records coming due per time window: (window_start, window_end, count).
    Pending: due after `after` (default: now) and not cancelled; `all_records=True`: every
    record ever written. See kdelay.spark.forecasting."""
    from .forecasting import forecast as _forecast

    return _forecast(spark, path, window, after=after, all_records=all_records)


def cli_spark_verify(argv: list[str] | None = None) -> int:
    """`kdelay spark-verify PATH [--json]`: exit 0 when healthy, 1 when not."""
    from .cli import cli_spark_verify as _cli

    return _cli(argv)


def cli_forecast(argv: list[str] | None = None) -> int:
    """`kdelay forecast PATH [--window W] [--png OUT] [--pending]`."""
    from .cli import cli_forecast as _cli

    return _cli(argv)
