"""Command-line entry points: `kdelay spark-verify PATH` and `kdelay forecast PATH`."""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import SparkSession

from ..clock import wall_clock


def _session(cores: int) -> tuple[SparkSession, bool]:
    """The active session if there is one (then the caller must not stop it), else a new one."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    return local_session(cores), True


def local_session(cores: int = 2) -> SparkSession:
    """A quiet local SparkSession: workers run this interpreter, no UI, UTC times."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (SparkSession.builder.master(f"local[{cores}]").appName("kdelay")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.shuffle.partitions", str(max(2, 2 * cores)))
             .config("spark.sql.python.filterPushdown.enabled", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The options both Spark commands take: a path and the local cores."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("path", help="a partition directory or a directory of name-i partitions")
    p.add_argument("--cores", type=int, default=2, help="local Spark cores (default 2)")
    return p


def _is_dir(p: argparse.ArgumentParser, path: str) -> bool:
    if not os.path.isdir(path):
        print(f"{p.prog}: no such directory: {path}", file=sys.stderr)
        return False
    return True


def cli_spark_verify(argv: list[str] | None = None) -> int:
    p = _parser("kdelay spark-verify", "Offline checks of a kdelay log, run in Spark")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = p.parse_args(argv)
    if not _is_dir(p, args.path):
        return 2
    from .checks import verify

    spark, owned = _session(args.cores)
    try:
        report = verify(spark, args.path)
    finally:
        if owned:
            spark.stop()
    print(report.to_json() if args.json else report)
    return 0 if report.ok else 1


def cli_forecast(argv: list[str] | None = None) -> int:
    p = _parser("kdelay forecast", "Records coming due per time window")
    p.add_argument("--window", default="1 minute", help='Spark interval (default "1 minute")')
    p.add_argument("--png", help="also draw the forecast as a bar chart into this PNG file")
    p.add_argument("--pending", action="store_true",
                   help="only records not yet due (deliverAfter after now)")
    args = p.parse_args(argv)
    if not _is_dir(p, args.path):
        return 2
    from .forecasting import as_utc, forecast, plot

    spark, owned = _session(args.cores)
    try:
        after = wall_clock() if args.pending else None
        rows = forecast(spark, args.path, args.window, after=after).collect()
    finally:
        if owned:
            spark.stop()
    for r in rows:
        print(f"{as_utc(r['window_start']).isoformat()}\t{r['count']}")
    if args.png:
        what = "pending records" if args.pending else "records"
        plot(rows, args.png, f"{what} coming due per {args.window}: "
                             f"{os.path.basename(os.path.abspath(args.path))}")
        print(f"wrote {args.png}", file=sys.stderr)
    return 0
