"""Records coming due per time window, from batch headers alone (no record decoding)."""

from __future__ import annotations

from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..clock import wall_clock
from . import kdelay_reader


def forecast(spark: SparkSession, path: str, window: str = "1 minute", *,
             after: int | None = None, all_records: bool = False) -> DataFrame:
    """(window_start, window_end, count): how many pending records become due in each
    `window` (a Spark interval such as "1 minute" or "15 seconds"), ordered by time, windows
    without any left out. Pending: due strictly after `after` (ms; default: now, the wall
    clock) and not cancelled; that time bound is pushed down, so segments and batches due
    earlier are skipped via the .dlyindex. `all_records=True` counts every record ever
    written instead, due, cancelled or not (then `after` must be None)."""
    if all_records and after is not None:
        raise ValueError("forecast: all_records counts every record; it takes no `after`")
    # one row per batch, no CRC work: the cheapest read there is (.dlyindex and
    # cancellation files only)
    columns = "deliver_after,record_count" + ("" if all_records else ",cancelled_count")
    df = kdelay_reader(spark, {"mode": "batches", "columns": columns}).load(str(path))
    if all_records:
        count = F.sum("record_count")
    else:
        df = df.where(F.col("deliver_after") > F.lit(int(wall_clock() if after is None else after)))
        count = F.sum(F.col("record_count") - F.col("cancelled_count"))
    due = F.expr("timestamp_millis(deliver_after)")
    return (df.groupBy(F.window(due, window).alias("w"))
            .agg(count.alias("count"))
            .where(F.col("count") > 0)
            .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                    "count")
            .orderBy("window_start"))


def as_utc(ts: datetime) -> datetime:
    """PySpark hands back timestamps as naive local-time datetimes; the same instant in UTC."""
    return datetime.fromtimestamp(ts.timestamp(), tz=UTC)


def plot(rows: list, png: str, title: str) -> None:
    """A bar chart of (window_start, window_end, count) rows, written to `png`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5), dpi=100)
    if rows:
        starts = [as_utc(r["window_start"]) for r in rows]
        width = (rows[0]["window_end"] - rows[0]["window_start"]).total_seconds() / 86400
        # (datetimes: matplotlib's date converter takes them; its stubs say numbers only)
        ax.bar(starts, [r["count"] for r in rows], width=width * 0.9,  # type: ignore[arg-type]
               align="edge", color="#3b75af", edgecolor="#1f4e79")
        loc = mdates.AutoDateLocator()
        ax.xaxis.set_major_locator(loc)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc))
    else:
        ax.text(0.5, 0.5, "no records", ha="center", va="center", transform=ax.transAxes)
    ax.set_title(title)
    ax.set_xlabel("deliverAfter window start (UTC)")
    ax.set_ylabel("records coming due")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
