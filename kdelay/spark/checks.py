"""Offline checks of a kdelay log (or a directory of partitions), computed in Spark.

Three DataFrames from the `kdelay` source feed the checks, each one input partition per
segment so the work spreads over the executors:

* batches (mode=batches): one row per batch header with its CRC result, plus a row for a
  framing error (bad magic, impossible length, truncation) where a segment stops parsing;
* dlyindex (mode=dlyindex): every persisted .dlyindex entry in file order, or one row
  saying why the file is missing, stale or corrupt;
* records (the normal reader): (deliver_after, offset) of every record.

Checks: every CRC; framing; offset continuity per partition (each batch starts one past
the previous batch's last offset, each segment's first batch at the segment's base offset);
every persisted .dlyindex equal, entry for entry, to the index recomputed here from its
.log (the batches sorted by (deliverAfter, baseOffset), with position, lastOffsetDelta and
size), which also proves each index entry's deliverAfter equals its batch header's; and the
due-order sequence per partition: no (deliver_after, offset) key occurs twice.

A missing or stale .dlyindex on the last segment of a partition that was not closed cleanly
is expected (the engine persists the active segment's indexes on roll and clean close, and
rebuilds them on open), so it is a warning; anywhere else it is a problem.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from . import register, scan

MAX_PROBLEMS_PER_CHECK = 1000  # a badly damaged log would otherwise flood the report


@dataclass
class Problem:
    kind: str  # crc | framing | offset | index | due-order
    file: str
    position: int | None  # byte position of the batch in the .log (None: whole file)
    message: str

    def __str__(self) -> str:
        where = self.file if self.position is None else f"{self.file} at byte {self.position}"
        return f"[{self.kind}] {where}: {self.message}"


@dataclass
class VerifyReport:
    ok: bool
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    def __str__(self) -> str:
        lines = [str(p) for p in self.problems]
        lines += [f"warning: {w}" for w in self.warnings]
        counts = ", ".join(f"{k}={v}" for k, v in self.counts.items())
        lines.append(("OK" if self.ok else "PROBLEMS FOUND") + f" ({counts})")
        return "\n".join(lines)


def verify(spark: SparkSession, path: str) -> VerifyReport:
    register(spark)
    path = os.path.abspath(str(path))
    with_topic, parts = scan.discover(path)
    dirs = {(p.topic, p.partition): p.path for p in parts}
    keys = ["topic", "partition"] if with_topic else []

    def load(mode: str) -> DataFrame:
        return spark.read.format("kdelay").option("mode", mode).load(path)

    batches = load("batches").cache()
    try:
        return _verify(spark, batches, load("dlyindex"),
                       spark.read.format("kdelay").load(path), keys, dirs, parts)
    finally:
        batches.unpersist()


def _file(dirs: dict, row, suffix: str, with_topic: bool) -> str:
    d = dirs[(row["topic"], row["partition"])] if with_topic else dirs[(None, None)]
    return os.path.join(d, f"{row['segment']:020d}{suffix}")


def _verify(spark: SparkSession, batches: DataFrame, index: DataFrame, records: DataFrame,
            keys: list[str], dirs: dict, parts: list[scan.PartitionDir]) -> VerifyReport:
    with_topic = bool(keys)
    problems: list[Problem] = []
    warnings: list[Problem] = []

    def take(df: DataFrame, kind: str, suffix: str, message) -> int:
        # one Spark job when healthy (nothing to collect); a count only when truncated
        rows = df.limit(MAX_PROBLEMS_PER_CHECK + 1).collect()
        total = len(rows) if len(rows) <= MAX_PROBLEMS_PER_CHECK else df.count()
        for row in rows[:MAX_PROBLEMS_PER_CHECK]:
            problems.append(Problem(kind if isinstance(kind, str) else kind(row),
                                    _file(dirs, row, suffix, with_topic), row["position"],
                                    message(row)))
        return total

    framed = batches.where(F.col("error").isNull())
    counts: dict[str, int] = {"partitions": len(parts)}
    summary = framed.agg(F.count(F.lit(1)).alias("b"),
                         F.coalesce(F.sum("record_count"), F.lit(0)).alias("r")).first()
    counts["segments"] = sum(len(scan.segment_bases(p.path)) for p in parts)
    counts["batches"] = summary["b"]
    counts["records"] = summary["r"]

    # framing and CRC
    take(batches.where(F.col("error").isNotNull() | ~F.col("crc_valid")),
         lambda r: "crc" if r["error"] is None else "framing", ".log",
         lambda r: r["error"] or (f"CRC-32C mismatch in batch {r['base_offset']}.."
                                  f"{r['last_offset']}"))
    counts["framing_errors"] = sum(p.kind == "framing" for p in problems)
    counts["crc_errors"] = sum(p.kind == "crc" for p in problems)

    # offset continuity per partition, in file order
    w = Window.partitionBy(*keys).orderBy("segment", "position") if keys else \
        Window.orderBy("segment", "position")
    cont = framed.select(*keys, "segment", "position", "base_offset",
                         F.lag("last_offset").over(w).alias("prev_last"),
                         F.lag("segment").over(w).alias("prev_segment"))
    first_in_segment = F.col("prev_segment").isNull() | (F.col("prev_segment") != F.col("segment"))
    bad = cont.where(
        (F.col("prev_last").isNotNull() & (F.col("base_offset") != F.col("prev_last") + 1))
        | (first_in_segment & (F.col("base_offset") != F.col("segment"))))
    counts["offset_errors"] = take(
        bad, "offset", ".log",
        lambda r: (f"batch starts at offset {r['base_offset']}, expected "
                   + (f"{r['prev_last'] + 1} (previous batch ends at {r['prev_last']})"
                      if r["prev_last"] is not None and r["base_offset"] != r["prev_last"] + 1
                      else f"the segment base offset {r['segment']}")))

    # persisted .dlyindex == index recomputed from the .log
    seg_keys = [*keys, "segment"]
    status = index.where(F.col("status").isNotNull()).select(*seg_keys, "status").collect()
    last_segment = {(p.topic, p.partition): (scan.segment_bases(p.path) or [None])[-1]
                    for p in parts}
    clean = {(p.topic, p.partition): scan.cleanly_closed(p.path) for p in parts}
    for row in status:
        pk = (row["topic"], row["partition"]) if with_topic else (None, None)
        prob = Problem("index", _file(dirs, row, ".dlyindex", with_topic), None, row["status"])
        if row["segment"] == last_segment[pk] and not clean[pk]:
            warnings.append(prob)
        else:
            problems.append(prob)
    counts["index_files_unusable"] = len(status)
    rw = Window.partitionBy(*seg_keys).orderBy("deliver_after", "base_offset")
    recomputed = framed.select(
        *seg_keys, (F.row_number().over(rw) - 1).alias("rank"),
        F.col("deliver_after").alias("r_da"), F.col("base_offset").alias("r_base"),
        F.col("position").alias("r_pos"),
        (F.col("last_offset") - F.col("base_offset")).alias("r_lod"), F.col("size").alias("r_size"))
    unusable = index.where(F.col("status").isNotNull()).select(*seg_keys)
    recomputed = recomputed.join(unusable, on=seg_keys, how="left_anti")
    persisted = index.where(F.col("status").isNull())
    joined = persisted.join(recomputed, on=[*seg_keys, "rank"], how="full_outer")
    differs = ~(F.coalesce(
        (F.col("deliver_after") == F.col("r_da")) & (F.col("base_offset") == F.col("r_base"))
        & (F.col("position") == F.col("r_pos")) & (F.col("last_offset_delta") == F.col("r_lod"))
        & (F.col("size") == F.col("r_size")), F.lit(False)))
    per_segment = joined.where(differs).groupBy(*seg_keys).agg(
        F.count(F.lit(1)).alias("entries"),
        F.min(F.coalesce("r_pos", "position")).alias("position"))
    counts["index_mismatches"] = take(
        per_segment, "index", ".dlyindex",
        lambda r: f"{r['entries']} entries differ from the index recomputed from the .log "
                  f"(first differing batch at .log byte {r['position']})")
    counts["index_files_checked"] = counts["segments"] - len(status)

    # due order: every (deliver_after, offset) key once per partition
    dup = records.groupBy(*keys, "deliver_after", "offset").agg(
        F.count(F.lit(1)).alias("n"), F.min("segment").alias("segment"),
        F.min("position").alias("position")).where(F.col("n") > 1)
    counts["duplicate_keys"] = take(
        dup, "due-order", ".log",
        lambda r: f"key (deliver_after={r['deliver_after']}, offset={r['offset']}) occurs "
                  f"{r['n']} times")

    failing = ("framing_errors", "crc_errors", "offset_errors", "index_mismatches",
               "duplicate_keys")
    ok = not any(counts[k] for k in failing) and not problems
    counts["problems"] = len(problems)
    counts["warnings"] = len(warnings)
    return VerifyReport(ok, problems, warnings, counts)
