"""Offline checks of a kdelay log (or a directory of partitions), computed in Spark.

Two DataFrames from the `kdelay` source feed the checks, each one input partition per
segment so the work spreads over the executors, and neither has a row per record:

* batches (mode=batches): one row per batch header with its CRC result, plus a row for a
  framing error (bad magic, impossible length, truncation) where a segment stops parsing;
* dlyindex (mode=dlyindex): every persisted .dlyindex entry in file order, or one row
  saying why the file is missing, stale or corrupt.

Checks: every CRC; framing; offset continuity per partition (each batch starts one past
the previous batch's last offset, each segment's first batch at the segment's base offset;
in a segment compaction rewrote, which its `.compacted` marker says, offsets may skip
forward, and the next segment must start at the end offset the marker gives);
every persisted .dlyindex equal, entry for entry, to the index recomputed here from its
.log (the batches sorted by (deliverAfter, baseOffset), with position, lastOffsetDelta and
size), which also proves each index entry's deliverAfter equals its batch header's; and the
due-order sequence per partition: no (deliver_after, offset) key occurs twice. Two batches
share a key exactly when they have the same deliverAfter and overlapping offset ranges, so
that too is a check on batch rows (it used to read every record: ~100x the rows).

A missing or stale .dlyindex on the last segment of a partition that was not closed cleanly
is expected (the engine persists the active segment's indexes on roll and clean close, and
rebuilds them on open), so it is a warning; anywhere else it is a problem. So is a batch
cut short at the end of the last segment while its live writer is appending it
(log/segments/live_tail.py).

On a live log (a writer appending and rolling, retention, a compaction swapping segments
in between the planning and the reading of the checks) the checks run again when they
found problems and the directories changed meanwhile, as `kdelay verify` does
(kdelay/settle.py): only problems found every time count; the others become
warnings marked "in motion". The counts are those of the last run.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from ..errors import KdelayError
from ..log.batch.offset_continuity import continues, may_skip
from ..log.batch.walker import iter_headers
from ..log.cancellation.journal import check_cancels
from ..log.compaction.swap import read_marker
from ..log.segments.layout import MARKER_SUFFIX, segment_file
from ..log.segments.live_tail import append_in_flight, in_flight_message
from ..log.tiered import inventory
from ..settle import in_motion, settle
from . import kdelay_reader, scan
from .segment_bytes import remote_store

MAX_PROBLEMS_PER_CHECK = 1000  # a badly damaged log would otherwise flood the report


@dataclass
class Problem:
    kind: str  # crc | framing | offset | index | due-order | cancellation
    file: str
    position: int | None  # a byte of `file` (None: all of it); kind index: of its .log
    message: str

    def __str__(self) -> str:
        # an index problem's position is a byte of the .log, not of the index file: its
        # message says so
        at = self.position is not None and self.kind != "index"
        where = f"{self.file} at byte {self.position}" if at else self.file
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
    path = os.path.abspath(str(path))
    with_topic, parts = scan.discover(path)

    def key(p: Problem) -> tuple:
        return p.kind, p.file, p.position, p.message

    report, persistent = settle([p.path for p in parts],
                                lambda first: _verify_once(spark, path, with_topic, parts),
                                lambda rep: {key(p) for p in rep.problems})
    moved = [p for p in report.problems if key(p) not in persistent]
    if moved:
        report.problems = [p for p in report.problems if key(p) in persistent]
        report.warnings += [Problem(p.kind, p.file, p.position, in_motion(p.message))
                            for p in moved]
        report.ok = not report.problems
        report.counts.update(problems=len(report.problems), warnings=len(report.warnings))
    return report


def _verify_once(spark: SparkSession, path: str, with_topic: bool,
                 parts: list[scan.PartitionDir]) -> VerifyReport:
    keys = ["topic", "partition"] if with_topic else []

    def load(mode: str, columns: str | None = None) -> DataFrame:
        options = {"mode": mode} if columns is None else {"mode": mode, "columns": columns}
        return kdelay_reader(spark, options).load(path)

    # Every check becomes rows of one "findings" DataFrame, collected in a single action:
    # each Spark action re-plans the Python data sources, which costs far more than the
    # checks themselves on a small log.
    # both small (a row per batch / index entry) and used by several checks: scan once
    batches = load("batches", ",".join(keys + [
        "segment", "position", "base_offset", "last_offset", "deliver_after", "size",
        "record_count", "crc_valid", "error"])).cache()
    index = load("dlyindex").cache()
    listed = [inventory.list_all_segments(p.path) for p in parts]
    markers = _markers(parts, listed)
    compacted = spark.createDataFrame(
        [(*((p.topic, p.partition) if keys else ()), base)
         for p, found in zip(parts, markers, strict=True) for base in found],
        schema=("topic string, partition int, " if keys else "") + "segment bigint")
    try:
        rows = _findings(batches, index, keys, compacted).collect()
    finally:
        batches.unpersist()
        index.unpersist()
    return _report(rows, with_topic, parts, listed, markers)


def _markers(parts: list[scan.PartitionDir], listed: list[list[inventory.ListedSegment]]
             ) -> list[dict[int, int | None]]:
    """Per partition: base offset -> end offset of each compacted segment (None: the marker
    is damaged). Reads only the small marker files (a remote-only segment's manifest says
    whether it was compacted, and its end)."""
    out = []
    for p, segments in zip(parts, listed, strict=True):
        found: dict[int, int | None] = {}
        for s in segments:
            if s.remote_only:
                if s.remote is not None and s.remote.compacted:
                    found[s.base_offset] = s.remote.next_offset
            elif os.path.exists(segment_file(p.path, s.base_offset, MARKER_SUFFIX)):
                marker = read_marker(p.path, s.base_offset)
                found[s.base_offset] = None if marker is None else marker.end_offset
        out.append(found)
    return out


def _segment_file(directory: str, segment: inventory.ListedSegment | None, base: int,
                  suffix: str) -> str:
    """A segment's file for messages: local, or a remote-only segment's object's full name."""
    if segment is not None and segment.remote_only and segment.remote is not None:
        return remote_store(directory).describe(segment.remote.object_name(suffix))
    return segment_file(directory, base, suffix)


# (kind, topic, partition, segment, position, a, b, c, text): a/b/c/text mean what the kind says
_COLUMNS = ["kind", "topic", "partition", "segment", "position", "a", "b", "c", "text"]


def _row(df: DataFrame, keys: list[str], kind: str, *, position="position", a=None, b=None,
         c=None, text=None) -> DataFrame:
    def col(x, t):
        if x is None:
            return F.lit(None).cast(t)
        return (F.col(x) if isinstance(x, str) else x).cast(t)

    topic = [F.col("topic"), F.col("partition")] if keys else \
        [F.lit(None).cast("string"), F.lit(None).cast("int")]
    return df.select(F.lit(kind).alias("kind"), topic[0].alias("topic"),
                     topic[1].alias("partition"), F.col("segment").cast("bigint"),
                     col(position, "bigint").alias("position"), col(a, "bigint").alias("a"),
                     col(b, "bigint").alias("b"), col(c, "bigint").alias("c"),
                     col(text, "string").alias("text"))


def _findings(batches: DataFrame, index: DataFrame, keys: list[str],
              compacted: DataFrame) -> DataFrame:
    framed = batches.where(F.col("error").isNull())
    parts = []

    # summary: batches and records per segment (tiny: one row per segment)
    parts.append(_row(framed.groupBy(*keys, "segment").agg(
        F.count(F.lit(1)).alias("nb"), F.sum("record_count").alias("nr")),
        keys, "summary", position=None, a="nb", b="nr"))

    # framing errors and CRC mismatches
    parts.append(_row(batches.where(F.col("error").isNotNull()), keys, "framing",
                      text="error"))
    parts.append(_row(framed.where(~F.col("crc_valid")), keys, "crc", a="base_offset",
                      b="last_offset"))

    # offset continuity per partition, in file order
    w = Window.partitionBy(*keys).orderBy("segment", "position") if keys else \
        Window.orderBy("segment", "position")
    cont = framed.select(*keys, "segment", "position", "base_offset",
                         F.lag("last_offset").over(w).alias("prev_last"),
                         F.lag("segment").over(w).alias("prev_segment"))
    # compaction leaves forward gaps inside the segments it rewrote (and so at their ends)
    comp = compacted.withColumn("comp", F.lit(True))
    cont = cont.join(F.broadcast(comp), on=[*keys, "segment"], how="left").join(
        F.broadcast(comp.withColumnRenamed("segment", "prev_segment")
                    .withColumnRenamed("comp", "prev_comp")),
        on=[*keys, "prev_segment"], how="left")
    cur_comp = F.coalesce(F.col("comp"), F.lit(False))
    prev_comp = F.coalesce(F.col("prev_comp"), F.lit(False))
    new_segment = F.col("prev_segment").isNull() | (F.col("prev_segment") != F.col("segment"))
    base = F.col("base_offset")
    gap = F.col("prev_last").isNotNull() & ~continues(
        base, F.col("prev_last") + 1, may_skip(cur_comp, new_segment, prev_comp))
    bad_first = new_segment & ~continues(base, F.col("segment"), cur_comp)
    parts.append(_row(cont.where(gap | bad_first),
                      keys, "offset", a="base_offset", b="prev_last",
                      c=F.when(gap, F.lit(1)).otherwise(F.lit(0))))

    # persisted .dlyindex == the index recomputed from the .log, entry for entry
    seg_keys = [*keys, "segment"]
    parts.append(_row(index.where(F.col("status").isNotNull()), keys, "index-file",
                      position=None, text="status"))
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
    differs = ~F.coalesce(
        (F.col("deliver_after") == F.col("r_da")) & (F.col("base_offset") == F.col("r_base"))
        & (F.col("position") == F.col("r_pos")) & (F.col("last_offset_delta") == F.col("r_lod"))
        & (F.col("size") == F.col("r_size")), F.lit(False))
    per_segment = joined.where(differs).groupBy(*seg_keys).agg(
        F.count(F.lit(1)).alias("entries"),
        F.min(F.coalesce("r_pos", "position")).alias("first_bad"))
    parts.append(_row(per_segment, keys, "index", position="first_bad", a="entries"))

    # due order: each (deliver_after, offset) key once per partition, i.e. no two batches
    # with one deliverAfter whose offset ranges overlap
    dw = Window.partitionBy(*keys, "deliver_after").orderBy("base_offset", "segment",
                                                            "position")
    prev_max = F.max("last_offset").over(dw.rowsBetween(Window.unboundedPreceding, -1))
    ov = framed.select(*keys, "segment", "position", "deliver_after", "base_offset",
                       "last_offset", prev_max.alias("prev_max"))
    dup = ov.where(F.col("prev_max") >= F.col("base_offset")).select(
        *keys, "segment", "position", "deliver_after", "base_offset",
        (F.least("last_offset", "prev_max") - F.col("base_offset") + 1).alias("n"))
    parts.append(_row(dup, keys, "due-order", a="deliver_after", b="base_offset", c="n"))

    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    # keep at most MAX_PROBLEMS_PER_CHECK rows of each kind, but count them all
    kw = Window.partitionBy("kind")
    ranked = out.select(*_COLUMNS, F.count(F.lit(1)).over(kw).alias("total"),
                        F.row_number().over(kw.orderBy("topic", "partition", "segment",
                                                       "position")).alias("rn"))
    return ranked.where((F.col("kind") == "summary") | (F.col("rn") <= MAX_PROBLEMS_PER_CHECK))


def _message(r) -> str:
    kind = r["kind"]
    if kind == "crc":
        return f"CRC-32C mismatch in batch {r['a']}..{r['b']}"
    if kind == "offset":
        if r["c"]:
            return (f"batch starts at offset {r['a']}, expected {r['b'] + 1} (previous batch "
                    f"ends at {r['b']})")
        return f"batch starts at offset {r['a']}, expected the segment base offset {r['segment']}"
    if kind == "index":
        return (f"{r['a']} entries differ from the index recomputed from the .log (first "
                f"differing batch at .log byte {r['position']})")
    if kind == "due-order":
        return (f"{r['c']} keys from (deliver_after={r['a']}, offset={r['b']}) on also occur "
                f"in an earlier batch")
    return r["text"]


def _report(rows: list, with_topic: bool, parts: list[scan.PartitionDir],
            listed: list[list[inventory.ListedSegment]],
            markers: list[dict[int, int | None]]) -> VerifyReport:
    dirs = {(p.topic, p.partition): p.path for p in parts}
    by_base = {(p.topic, p.partition): {s.base_offset: s for s in segments}
               for p, segments in zip(parts, listed, strict=True)}
    last_segment = {pk: max(segs, default=None) for pk, segs in by_base.items()}
    clean = {(p.topic, p.partition): scan.cleanly_closed(p.path) for p in parts}
    problems: list[Problem] = []
    warnings: list[Problem] = []
    totals: dict[str, int] = {}
    batches = records = 0
    for r in sorted(rows, key=lambda r: (r["kind"], r["topic"] or "", r["partition"] or 0,
                                         r["segment"], r["position"] or 0)):
        kind = r["kind"]
        if kind == "summary":
            batches += r["a"]
            records += r["b"] or 0
            continue
        totals[kind] = r["total"]
        pk = (r["topic"], r["partition"]) if with_topic else (None, None)
        suffix = ".dlyindex" if kind.startswith("index") else ".log"
        file = _segment_file(dirs[pk], by_base[pk].get(r["segment"]), r["segment"], suffix)
        if kind == "framing" and r["segment"] == last_segment[pk] and \
                r["position"] is not None and _in_flight(file, r["segment"], r["position"]):
            warnings.append(Problem(kind, file, r["position"], in_flight_message(
                r["position"], os.path.getsize(file))))
            continue
        if kind == "index-file":
            prob = Problem("index", file, None, r["text"])
            # the active segment of a log that was not closed cleanly has no current index yet
            if r["segment"] == last_segment[pk] and not clean[pk]:
                warnings.append(prob)
            else:
                problems.append(prob)
            continue
        problems.append(Problem(kind, file, r["position"], _message(r)))
    for p, segments, found in zip(parts, listed, markers, strict=True):
        bases = [s.base_offset for s in segments]
        for base, end in found.items():
            file = _segment_file(p.path, by_base[(p.topic, p.partition)].get(base), base,
                                 MARKER_SUFFIX)
            later = [b for b in bases if b > base]
            if end is not None and not (later and later[0] != end):
                continue
            problems.append(Problem("offset", file, None, "compaction marker unreadable"
                                    if end is None else
                                    f"compacted segment ends at offset {end} but the next "
                                    f"segment starts at {later[0]}"))
            totals["offset"] = totals.get("offset", 0) + 1
    cancelled = 0
    for p, segments in zip(parts, listed, strict=True):
        # the cancellation files are small: checked here, on the driver (a remote-only
        # segment's stay local)
        bases = [s.base_offset for s in segments]
        for base, nxt in zip(bases, [*bases[1:], None], strict=True):
            bad, n = check_cancels(p.path, base, _segment_end(p.path, base, nxt))
            cancelled += n
            problems += [Problem("cancellation", f, pos, what) for f, pos, what in bad]
    order = {k: i for i, k in enumerate(("framing", "crc", "offset", "index", "due-order",
                                         "cancellation"))}
    problems.sort(key=lambda p: (order[p.kind], p.file, p.position or 0))
    n_segments = sum(len(s) for s in listed)
    unusable = totals.get("index-file", 0)
    counts = {
        "partitions": len(parts), "segments": n_segments, "batches": batches,
        "records": records,
        "framing_errors": totals.get("framing", 0), "crc_errors": totals.get("crc", 0),
        "offset_errors": totals.get("offset", 0), "index_files_unusable": unusable,
        "index_mismatches": totals.get("index", 0),
        "index_files_checked": n_segments - unusable,
        "duplicate_keys": totals.get("due-order", 0),
        "cancelled_records": cancelled,
        "cancellation_errors": sum(p.kind == "cancellation" for p in problems),
        "problems": len(problems), "warnings": len(warnings),
    }
    return VerifyReport(not problems, problems, warnings, counts)


def _in_flight(log_path: str, base: int, position: int) -> bool:
    """A framing error at `position` of the last segment: the batch its live writer is
    appending now (live_tail.append_in_flight, against the .log as it is now)?"""
    try:
        end = os.path.getsize(log_path)
    except FileNotFoundError:
        return False
    return append_in_flight(os.path.dirname(log_path), base, position, end)


def _segment_end(directory: str, base: int, next_base: int | None) -> int:
    """Where a segment's offsets end: the next segment's base, else the end its .log's
    batch headers say (a walk of headers only)."""
    if next_base is not None:
        return next_base
    path = segment_file(directory, base, ".log")
    end = base
    with open(path, "rb") as f:
        try:
            for _, h in iter_headers(f.fileno(), path, 0, os.fstat(f.fileno()).st_size):
                end = h.last_offset + 1
        except KdelayError:
            pass  # damage is reported by the batch checks; count up to it
    return end
