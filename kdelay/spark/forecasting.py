"""Records coming due per time window, from batch headers alone (no record decoding)."""

from __future__ import annotations

from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import kdelay_reader


def forecast(spark: SparkSession, path: str, window: str = "1 minute", *,
             after: int | None = None) -> DataFrame:
    """(window_start, window_end, count): how many records become due in each `window`
    (a Spark interval such as "1 minute" or "15 seconds"), ordered by time. With `after`
    (ms), only records due strictly after it (e.g. now: the pending load); that filter is
    pushed down, so segments and batches due earlier are skipped via the .dlyindex."""
    # two columns of one row per batch, no CRC work: the cheapest read there is
    df = kdelay_reader(spark, {"mode": "batches", "columns": "deliver_after,record_count"}
                       ).load(str(path))
    if after is not None:
        df = df.where(F.col("deliver_after") > F.lit(int(after)))
    due = F.expr("timestamp_millis(deliver_after)")
    return (df.groupBy(F.window(due, window).alias("w"))
            .agg(F.sum("record_count").alias("count"))
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
        ax.bar(starts, [r["count"] for r in rows], width=width * 0.9, align="edge",
               color="#3b75af", edgecolor="#1f4e79")
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
