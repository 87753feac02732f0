"""Command-line entry points: `kdelay spark-verify PATH` and `kdelay forecast PATH`.

Both are quiet unless `--verbose`: their session is kdelay.spark.session(), whose logs are
quiet, and its JVM starts with stderr pointed at /dev/null, which also hides the notice the
JVM itself prints at start ("Using incubator modules") and anything Spark logs (the JVM,
and the Python workers it spawns, keep that stderr; errors still reach the caller as Python
exceptions). `--verbose` leaves everything as Spark prints it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

from pyspark.sql import SparkSession

from ..clock import wall_clock
from ..log.tiered.tier import partition_name
from .local_session import session

# readable forecast windows: (Spark interval, seconds, short label)
_SCALES = [("1 second", 1), ("5 seconds", 5), ("10 seconds", 10), ("30 seconds", 30),
           ("1 minute", 60), ("5 minutes", 300), ("10 minutes", 600), ("30 minutes", 1800),
           ("1 hour", 3600), ("6 hours", 21600), ("12 hours", 43200), ("1 day", 86400),
           ("7 days", 604800), ("30 days", 2592000)]
_MAX_BARS = 30


def _session(cores: int, verbose: bool = False) -> tuple[SparkSession, bool]:
    """The active session if there is one (then the caller must not stop it), else a new
    kdelay.spark.session(): unless `verbose`, with the JVM's stderr pointed at /dev/null for
    its lifetime (the lines it prints before any log level applies included)."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    if verbose:
        return session(cores=cores, quiet=False), True
    try:
        with _stderr_to_devnull():  # the JVM inherits this stderr when it starts
            return session(cores=cores), True
    except Exception as e:
        raise RuntimeError(f"could not start Spark ({e}); run with --verbose to see "
                           f"what Java printed") from e


@contextlib.contextmanager
def _stderr_to_devnull():
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The options both Spark commands take: a path, the local cores, --verbose."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("path", help="a partition directory or a directory of name-i partitions")
    p.add_argument("--cores", type=_cores, default=2, help="local Spark cores (default 2)")
    p.add_argument("--verbose", action="store_true", help="let Spark and Java log as usual")
    return p


def _cores(text: str) -> int:
    """--cores: a positive int, refused by argparse (not by the JVM once it started)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return n


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

    spark, owned = _session(args.cores, args.verbose)
    try:
        report = verify(spark, args.path)
    finally:
        if owned:
            spark.stop()
    print(report.to_json() if args.json else report)
    return 0 if report.ok else 1


def pick_window(span_ms: int) -> str:
    """The smallest readable window that shows `span_ms` in at most ~30 bars."""
    for interval, seconds in _SCALES:
        if span_ms <= seconds * 1000 * _MAX_BARS:
            return interval
    return _SCALES[-1][0]


def human_ms(ms: int) -> str:
    """A short duration: 0s, 45s, 5m, 2h30m, 3d4h."""
    neg, ms = ms < 0, abs(ms)
    s = ms // 1000
    if s < 60:
        out = f"{s}s"
    elif s < 3600:
        out = f"{s // 60}m" + (f"{s % 60}s" if s % 60 else "")
    elif s < 86400:
        out = f"{s // 3600}h" + (f"{s // 60 % 60}m" if s // 60 % 60 else "")
    else:
        out = f"{s // 86400}d" + (f"{s // 3600 % 24}h" if s // 3600 % 24 else "")
    return "-" + out if neg else out


def cli_forecast(argv: list[str] | None = None) -> int:
    p = _parser("kdelay forecast", "Records coming due, per time window from now (pending "
                                   "records only, unless --all)")
    p.add_argument("--window", default=None,
                   help='a Spark interval such as "1 minute" (default: chosen to show the '
                        'pending span in about 30 windows)')
    p.add_argument("--all", action="store_true",
                   help="every record ever written, due or not (default: only pending ones)")
    p.add_argument("--pending", action="store_true", help=argparse.SUPPRESS)  # the default
    p.add_argument("--png", help="also draw the forecast as a bar chart into this PNG file")
    args = p.parse_args(argv)
    if not _is_dir(p, args.path):
        return 2
    from pyspark.sql import functions as F

    from .forecasting import forecast, plot

    spark, owned = _session(args.cores, args.verbose)
    now = wall_clock()
    after = None if args.all else now
    try:
        window = args.window
        if window is None:
            from . import read_batches

            df = read_batches(spark, args.path, columns="deliver_after,record_count")
            if after is not None:
                df = df.where(F.col("deliver_after") > after)
            first = df.agg(F.min("deliver_after"), F.max("deliver_after")).first()
            lo, hi = (None, None) if first is None else first  # (an aggregate has a row)
            span = 0 if lo is None or hi is None else \
                hi - min(lo, now) if after is None else hi - now
            window = pick_window(span)
        rows = forecast(spark, args.path, window, after=after, all_records=args.all).collect()
    finally:
        if owned:
            spark.stop()
    _print_forecast(rows, now, window, args.all, args.path)
    if args.png:
        what = "records" if args.all else "pending records"
        plot(rows, args.png, f"{what} coming due per {window}: "
                             f"{partition_name(args.path)}")
        print(f"wrote {args.png}", file=sys.stderr)
    return 0


def _print_forecast(rows: list, now: int, window: str, every: bool, path: str) -> None:
    total = sum(r["count"] for r in rows)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(now / 1000))
    what = "records" if every else "pending records"
    if not rows:
        print(f"{path}: no {what} (now {stamp} UTC)")
        return
    print(f"{path}: {total:,} {what}, per {window} from now ({stamp} UTC)")
    top = max(r["count"] for r in rows)
    width = len(f"{top:,}")
    for r in rows:
        start = round(r["window_start"].timestamp() * 1000)
        end = round(r["window_end"].timestamp() * 1000)
        when = f"{human_ms(max(start, now) - now if not every else start - now):>7} .. " \
               f"{human_ms(end - now):<7}"
        bar = "#" * max(1, round(40 * r["count"] / top))
        print(f"  in {when} {r['count']:>{width},}  {bar}")
