"""The `kdelay` PySpark (4.x) Python Data Source: one input partition per run of adjacent
segments (up to PARTITION_BYTES of .log; a segment is never split).

    spark.read.format("kdelay").load(path)                      # one row per record
    spark.read.format("kdelay").option("mode", "batches")...     # one row per batch
    spark.read.format("kdelay").option("mode", "dlyindex")...    # persisted index entries

Options:
  mode       records (default) | batches | dlyindex (the last two serve verify/forecast)
  columns    comma-separated column names (records and batches modes): only these columns
             are produced, in this order. Records are decoded only when `timestamp`, `key`
             or `value` is asked for, a key or value column is built only when asked for,
             and CRCs are checked only for `crc_valid`. Spark ingests every column a Python
             source yields (there is no pruning hook), and its per-row ingestion is the
             ceiling: fewer columns and fewer rows (mode batches) are the levers. In mode
             batches the row reporting a framing error is produced only with `error`, and
             `cancelled_count` (how many of the batch's records are cancelled) is read from
             the segment's cancellation files only when asked for.
             Columns a segment's current .dlyindex holds (offsets, deliverAfter, positions,
             record counts, sizes, `cancelled`, `cancelled_count`, but no timestamps,
             payloads or CRC verdicts) are read from that index alone, without reading the
             .log (useIndex false: never).
  pushdown   true (default) | false: use pushed filters to skip segments and batches
  useIndex   true (default) | false: may the reader trust a valid .dlyindex to pick batches
  minPartitions  split a read that decodes records (`timestamp`, `key` or `value`) into
             at least this many Spark tasks where segments allow (default: the driver's CPU
             count; read_log and read_batches pass the session's default parallelism).
             Other reads cost too little per byte for an extra task's fixed cost to pay.
             A segment is one task's at most, and a task reads at most 128 MiB of .log (or
             of .dlyindex, for a read the indexes answer).
  statsDir   a directory: each input partition writes a small JSON file there with how many
             batches it looked at and read (a debug aid; tests use it to prove pushdown)

Pushed filters on `deliver_after` and `offset` (=, <, <=, >, >=, IN) and on `topic` and
`partition` narrow what is read; every filter is also handed back to Spark, which applies
it exactly, so pushdown can only change speed, never results. A reader that defines
`pushFilters` needs `spark.sql.python.filterPushdown.enabled=true`; `register()` sets it.

A log that compaction or retention changes between planning and reading: a segment
rewritten in place is read as it is then (without the records compaction removed); one
deleted, or merged with the one planned after it, fails the read with
scan.LogChangedError (a KdelayError: read again), or in mode batches with `error` asked
for, becomes that segment's error row.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator, Sequence
from typing import TypeGuard

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from ..index.entry import (
    E_BASE_OFFSET,
    E_DELIVER_AFTER,
    E_LAST_OFFSET_DELTA,
    E_POSITION,
    E_SIZE,
)
from ..log.cancellation.journal import read_cancelled
from ..log.cancellation.per_batch import cancelled_per_batch
from ..log.segments.layout import DLYINDEX_SUFFIX, LOG_SUFFIX, segment_file, segment_name
from . import columnar, scan
from .columnar import TOPIC_FIELDS
from .segment_bytes import RemoteBytes, remote_store

MODES = ("records", "batches", "dlyindex")
PARTITION_BYTES = 128 << 20  # .log bytes per Spark task (Spark's maxPartitionBytes default)
_ROWS_PER_BATCH = 1 << 20  # Arrow batches handed to Spark from an index-only read

BATCH_FIELDS: list[tuple[str, pa.DataType]] = [
    ("segment", pa.int64()),
    ("position", pa.int64()),
    ("base_offset", pa.int64()),
    ("last_offset", pa.int64()),
    ("deliver_after", pa.int64()),
    ("base_timestamp", pa.int64()),
    ("max_timestamp", pa.int64()),
    ("size", pa.int64()),
    ("record_count", pa.int64()),
    ("crc_valid", pa.bool_()),
    ("cancelled_count", pa.int64()),  # of the batch's records, how many are cancelled
    ("error", pa.string()),  # set on the one row that reports a framing error
]
INDEX_FIELDS: list[tuple[str, pa.DataType]] = [
    ("segment", pa.int64()),
    ("rank", pa.int64()),  # entry number in the file
    ("deliver_after", pa.int64()),
    ("base_offset", pa.int64()),
    ("position", pa.int64()),
    ("last_offset_delta", pa.int64()),
    ("size", pa.int64()),
    ("status", pa.string()),  # null: a valid entry; else why the file is unusable
]
_SPARK_TYPES = {pa.int64(): "bigint", pa.int32(): "int", pa.string(): "string",
                pa.binary(): "binary", pa.bool_(): "boolean"}


def _fields(mode: str, with_topic: bool) -> list[tuple[str, pa.DataType]]:
    body = {"records": columnar.RECORD_FIELDS, "batches": BATCH_FIELDS,
            "dlyindex": INDEX_FIELDS}[mode]
    return (TOPIC_FIELDS if with_topic else []) + body


def _select(fields: list[tuple[str, pa.DataType]], options) -> list[tuple[str, pa.DataType]]:
    """The fields the `columns` option asks for (all of them without it)."""
    raw = options.get("columns")
    if raw is None or not str(raw).strip():
        return fields
    names = [c.strip() for c in str(raw).split(",") if c.strip()]
    known = dict(fields)
    bad = [n for n in names if n not in known]
    if bad or len(set(names)) != len(names):
        raise ValueError(f"kdelay: columns {bad or names} not understood; choose distinct "
                         f"names from {', '.join(known)}")
    return [(n, known[n]) for n in names]


def _ddl(fields: list[tuple[str, pa.DataType]]) -> str:
    return ", ".join(f"`{n}` {_SPARK_TYPES[t]}" for n, t in fields)


def _arrow_schema(fields: list[tuple[str, pa.DataType]]) -> pa.Schema:
    return pa.schema([pa.field(n, t, nullable=True) for n, t in fields])


def _positive(options, name: str, default: int) -> int:
    v = options.get(name)
    if v is None:
        return default
    try:
        n = int(str(v).strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"kdelay: option {name} must be a positive integer, got {v!r}")
    return n


def _flag(options, name: str, default: bool) -> bool:
    v = options.get(name)
    return default if v is None else str(v).strip().lower() in ("1", "true", "yes", "on")


class KdelayDataSource(DataSource):
    """Reads a kdelay partition directory or a directory of `name-i` partition directories."""

    @classmethod
    def name(cls) -> str:
        return "kdelay"

    def _mode(self) -> str:
        mode = str(self.options.get("mode", "records")).lower()
        if mode not in MODES:
            raise ValueError(f"kdelay: mode must be one of {MODES}, got {mode!r}")
        return mode

    def _path(self) -> str:
        path = self.options.get("path")
        if not path:
            raise ValueError("kdelay: a path is required: spark.read.format('kdelay').load(path)")
        return path

    def schema(self) -> str:
        with_topic, _ = scan.discover(self._path())
        fields = _fields(self._mode(), with_topic)
        if self._mode() != "dlyindex":
            fields = _select(fields, {str(k).lower(): v for k, v in self.options.items()})
        return _ddl(fields)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = {str(k).lower(): v for k, v in self.options.items()}  # names are case-insensitive
        return KdelayReader(self._path(), self._mode(), options)

    def streamReader(self, schema: StructType):
        from .stream import KdelayStreamReader

        options = {str(k).lower(): v for k, v in self.options.items()}
        with_topic, _ = scan.discover(self._path())
        return KdelayStreamReader(self._path(), options, with_topic)

    def writer(self, schema: StructType, overwrite: bool):
        from .writer import KdelayWriter

        options = {str(k).lower(): v for k, v in self.options.items()}
        return KdelayWriter(self._path(), options, schema, overwrite)


class SegmentPartition(InputPartition):
    """Adjacent segments read by one Spark task, in order."""

    def __init__(self, plans: list[scan.SegmentPlan]):
        super().__init__(plans[0].base)
        self.plans = plans


def group_plans(plans: list[scan.SegmentPlan], target_bytes: int = PARTITION_BYTES,
                suffix: str = LOG_SUFFIX, min_groups: int = 1) -> list[list[scan.SegmentPlan]]:
    """Segments of one partition directory, in order, grouped up to `target_bytes` of the
    files the read will read (`suffix`: .log, or .dlyindex for a read the indexes answer)
    each, at least one segment a group: a Spark task costs milliseconds of fixed overhead,
    which small segments would otherwise pay one by one. As Spark sizes its file splits,
    a group holds at most 1/`min_groups` of all the bytes, so that a small read still
    gives every core a task (a segment is never split, so fewer groups may result)."""
    sizes = [plan.size(suffix) for plan in plans]
    target_bytes = min(target_bytes, max(1, -(-sum(sizes) // max(1, min_groups))))
    groups: list[list[scan.SegmentPlan]] = []
    size = 0
    for plan, n in zip(plans, sizes, strict=True):
        if groups and groups[-1][-1].part == plan.part and size + n <= target_bytes:
            groups[-1].append(plan)
            size += n
        else:
            groups.append([plan])
            size = n
    return groups


class KdelayReader(DataSourceReader):
    def __init__(self, path: str, mode: str, options: dict):
        self.path = path
        self.mode = mode
        self.pushdown = _flag(options, "pushdown", True)
        self.use_index = _flag(options, "useindex", True)
        self.stats_dir = options.get("statsdir")
        self.min_partitions = _positive(options, "minpartitions", os.cpu_count() or 1)
        self.with_topic, self.parts = scan.discover(path)
        self.bounds = scan.Bounds()
        self.fields = _fields(mode, self.with_topic)
        if mode != "dlyindex":
            self.fields = _select(self.fields, options)
        self.names = [n for n, _ in self.fields]

    # ------------------------------------------------------------------ planning

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        for f in filters:
            if self.pushdown and self.mode != "dlyindex":
                _narrow(self.bounds, f)
            yield f  # Spark still applies every filter: ours only skip whole batches

    def partitions(self) -> Sequence[InputPartition]:
        plans = scan.plan_segments(self.parts, self.bounds)
        # a read the .dlyindex files answer reads some 40 bytes per batch, not the batch:
        # its tasks are sized by those files (the active segment, with none, reads its .log)
        suffix = DLYINDEX_SUFFIX if self._from_indexes() else LOG_SUFFIX
        # only decoding records costs enough per byte to be worth more tasks than segments
        # need: other reads take ~0.1 s more per extra task here, and gain nothing
        decodes = self.mode == "records" and not columnar.PAYLOAD_COLUMNS.isdisjoint(self.names)
        groups = group_plans(plans, PARTITION_BYTES, suffix,
                             min_groups=self.min_partitions if decodes else 1)
        return [SegmentPartition(g) for g in groups]

    def _from_indexes(self) -> bool:
        """Do the columns asked for come from the .dlyindex files alone?"""
        if self.mode == "dlyindex":
            return True
        covered = columnar.INDEX_COLUMNS if self.mode == "records" else _BATCH_INDEX_COLUMNS
        return self.use_index and covered.issuperset(self.names)

    # ------------------------------------------------------------------ reading

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Spark reads one InputPartition(None) when partitions() returned none
        buffers = scan.ReadBuffers()  # the segments are read one after another
        for plan in getattr(partition, "plans", []):
            yield from self._read_segment(plan, buffers)

    def _read_segment(self, plan: scan.SegmentPlan, buffers: scan.ReadBuffers
                      ) -> Iterator[pa.RecordBatch]:
        if self.mode == "dlyindex":
            yield _index_batch(plan, _arrow_schema(self.fields), self.with_topic)
            return
        reader = scan.SegmentReader(plan.part.path, plan.base, self.bounds,
                                    use_index=self.use_index,
                                    check_crc="crc_valid" in self.names, buffers=buffers,
                                    next_base=plan.next_base, remote=plan.remote)
        topic, part = plan.part.topic, plan.part.partition
        # the segment's cancelled offsets, for the column that shows them (either mode's)
        cancelled = read_cancelled(plan.part.path, plan.base) \
            if not _CANCEL_COLUMNS.isdisjoint(self.names) else None
        if self.mode == "records":
            found = reader.index_batches() if self._from_indexes() else None
            if found is not None:  # nothing asked for needs the .log: rows from the index
                da, bo, pos, counts, _ = found
                rows = columnar.header_records(
                    columnar.arrow_schema(topic is not None, self.names), segment=plan.base,
                    topic=topic, partition=part, counts=counts, base_offsets=lambda: bo,
                    positions=lambda: pos, deliver_afters=lambda: da, cancelled=cancelled)
                for start in range(0, rows.num_rows, _ROWS_PER_BATCH):
                    yield rows.slice(start, _ROWS_PER_BATCH)
            else:
                for chunk in reader.chunks():
                    yield from columnar.records_to_arrow(
                        chunk, segment=plan.base, topic=topic,
                        partition=part, log_path=reader.path, columns=self.names,
                        cancelled=cancelled)
        else:
            full = _arrow_schema(_fields(self.mode, self.with_topic))
            try:
                found = reader.index_batches() if self._from_indexes() else None
                if found is not None:  # nothing asked for needs the .log: rows from the index
                    yield _index_batch_rows(plan, full, self.with_topic, *found,
                                            cancelled=cancelled).select(self.names)
                else:
                    for chunk in reader.chunks():
                        yield _batch_rows(plan, full, self.with_topic, chunk,
                                          cancelled).select(self.names)
            except scan.LogChangedError as e:
                if "error" not in self.names:
                    raise
                # reported as framing errors are (verify reads again when the log moved)
                reader.stats.error, reader.stats.error_position = str(e), None
            if reader.stats.error is not None and "error" in self.names:
                yield _error_row(plan, full, self.with_topic, reader.stats).select(self.names)
        if self.stats_dir:
            _write_stats(self.stats_dir, plan, reader.stats)


def _narrow(bounds: scan.Bounds, f: Filter) -> None:
    """Fold one pushed filter into the bounds (anything not understood is left to Spark)."""
    attr = getattr(f, "attribute", None)  # Not(...) has a child instead: left to Spark
    col = attr[0] if attr is not None and len(attr) == 1 else None
    if col in ("deliver_after", "offset"):
        if isinstance(f, In):
            vals = [v for v in f.value if _is_int(v)]
            if vals and len(vals) == len(f.value):
                bounds.narrow(col, min(vals), max(vals))
            return
        v = getattr(f, "value", None)
        if not _is_int(v):
            return
        if isinstance(f, EqualTo):
            bounds.narrow(col, v, v)
        elif isinstance(f, GreaterThan):
            bounds.narrow(col, v + 1, scan._LONG_MAX)
        elif isinstance(f, GreaterThanOrEqual):
            bounds.narrow(col, v, scan._LONG_MAX)
        elif isinstance(f, LessThan):
            bounds.narrow(col, scan._LONG_MIN, v - 1)
        elif isinstance(f, LessThanOrEqual):
            bounds.narrow(col, scan._LONG_MIN, v)
    elif col in ("topic", "partition"):
        kind = str if col == "topic" else int
        if isinstance(f, EqualTo):
            vals = [f.value]
        elif isinstance(f, In):
            vals = list(f.value)
        else:
            return
        if not all(isinstance(v, kind) and not isinstance(v, bool) for v in vals):
            return
        attr = "topics" if col == "topic" else "partitions"
        cur = getattr(bounds, attr)
        new = frozenset(vals) if cur is None else cur & frozenset(vals)
        setattr(bounds, attr, new)


def _is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _topic_cols(plan: scan.SegmentPlan, n: int, with_topic: bool) -> list:
    if not with_topic:
        return []
    return [pa.repeat(pa.scalar(plan.part.topic, pa.string()), n),
            pa.repeat(pa.scalar(plan.part.partition, pa.int32()), n)]


def _batch_rows(plan: scan.SegmentPlan, schema: pa.Schema, with_topic: bool,
                chunk: columnar.Chunk, cancelled: np.ndarray | None) -> pa.RecordBatch:
    h = chunk.batches
    return _batch_table(plan, schema, with_topic, len(h), chunk.positions, h.base_offset,
                        h.base_offset + h.last_offset_delta, h.deliver_after, h.base_timestamp,
                        h.max_timestamp, h.size, h.record_count, chunk.crc_ok,
                        cancelled=cancelled)


def _batch_table(plan: scan.SegmentPlan, schema: pa.Schema, with_topic: bool, n: int,
                 *columns, cancelled: np.ndarray | None) -> pa.RecordBatch:
    """Batch rows from their columns (position, base offset, last offset, deliverAfter,
    base and max timestamp, size, record count, CRC verdict; None: all null) and the
    segment's sorted cancelled offsets (None: cancelled_count null)."""
    types = [pa.int64()] * 8 + [pa.bool_()]
    cols = _topic_cols(plan, n, with_topic) + [pa.repeat(pa.scalar(plan.base, pa.int64()), n)]
    cols += [pa.nulls(n, t) if c is None else pa.array(c, t)
             for c, t in zip(columns, types, strict=True)]
    base_offsets, record_counts = columns[1], columns[7]
    cols.append(pa.nulls(n, pa.int64()) if cancelled is None else pa.array(
        cancelled_per_batch(cancelled, base_offsets, record_counts).cancelled, pa.int64()))
    cols.append(pa.nulls(n, pa.string()))  # error
    return pa.RecordBatch.from_arrays(cols, schema=schema)


_BATCH_INDEX_COLUMNS = frozenset(("topic", "partition", "segment", "position", "base_offset",
                                  "last_offset", "deliver_after", "size", "record_count",
                                  "cancelled_count"))
_CANCEL_COLUMNS = frozenset(("cancelled", "cancelled_count"))


def _index_batch_rows(plan: scan.SegmentPlan, schema: pa.Schema, with_topic: bool,
                      da: np.ndarray, bo: np.ndarray, pos: np.ndarray, counts: np.ndarray,
                      size: np.ndarray, *, cancelled: np.ndarray | None) -> pa.RecordBatch:
    """Batch rows from .dlyindex entries; the fields only the .log holds are left null."""
    return _batch_table(plan, schema, with_topic, len(da), pos, bo, bo + counts - 1, da, None,
                        None, size, counts, None, cancelled=cancelled)


def _error_row(plan: scan.SegmentPlan, schema: pa.Schema, with_topic: bool,
               stats: scan.ScanStats) -> pa.RecordBatch:
    cols = _topic_cols(plan, 1, with_topic) + [pa.array([plan.base], pa.int64()),
                                                pa.array([stats.error_position], pa.int64())]
    cols += [pa.nulls(1, t) for _, t in BATCH_FIELDS[2:-1]]
    cols.append(pa.array([stats.error], pa.string()))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def _index_batch(plan: scan.SegmentPlan, schema: pa.Schema, with_topic: bool) -> pa.RecordBatch:
    """The persisted .dlyindex of one segment as rows, or one row saying why it is unusable."""
    from ..index.deliver_after_index import DeliverAfterIndex
    from ..index.index_file import IndexFileError

    directory, base = plan.part.path, plan.base
    path = segment_file(directory, base, DLYINDEX_SUFFIX)
    try:
        if plan.remote is not None:  # a remote copy's index: current, or no index at all
            with RemoteBytes(remote_store(directory), plan.remote) as src:
                idx = src.dly_index()
            status = None if idx is not None else \
                f"{plan.remote.object_name(DLYINDEX_SUFFIX)}: missing or damaged in the store"
        else:
            size = os.path.getsize(segment_file(directory, base, LOG_SUFFIX))
            idx = DeliverAfterIndex.load(path, base_offset=base, log_bytes=size)
            status = None
    except (IndexFileError, OSError, ValueError) as e:
        idx, status = None, _unusable_because(e, path)
    if idx is None:
        cols = _topic_cols(plan, 1, with_topic) + [pa.array([base], pa.int64())]
        cols += [pa.nulls(1, pa.int64()) for _ in range(6)] + [pa.array([status], pa.string())]
        return pa.RecordBatch.from_arrays(cols, schema=schema)
    index_cols = [np.asarray(c).astype(np.int64) for c in idx.disk_columns]
    da, bo = index_cols[E_DELIVER_AFTER], index_cols[E_BASE_OFFSET]
    pos, lod, sz = index_cols[E_POSITION], index_cols[E_LAST_OFFSET_DELTA], index_cols[E_SIZE]
    n = len(da)
    cols = _topic_cols(plan, n, with_topic) + [
        pa.repeat(pa.scalar(base, pa.int64()), n), pa.array(np.arange(n, dtype=np.int64)),
        pa.array(da), pa.array(bo), pa.array(pos), pa.array(lod), pa.array(sz),
        pa.nulls(n, pa.string())]
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def _unusable_because(e: Exception, path: str) -> str:
    """Why the index file at `path` is unusable, without the path the row already gives
    (IndexFileError messages start with it; an OSError may be about the segment's .log)."""
    if isinstance(e, OSError):
        return f"{os.path.basename(e.filename or path)}: {e.strerror or e}"
    return str(e).removeprefix(f"{path}: ")


def _write_stats(directory: str, plan: scan.SegmentPlan, stats: scan.ScanStats) -> None:
    os.makedirs(directory, exist_ok=True)
    doc = dict(vars(stats), topic=plan.part.topic, partition=plan.part.partition)
    tmp = os.path.join(directory, f".{uuid.uuid4().hex}.tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, os.path.join(directory, f"{segment_name(plan.base)}-{uuid.uuid4().hex}.json"))
