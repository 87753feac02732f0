"""`df.write.format("kdelay").mode("append").save(path)`: a DataFrame into a log or topic.

Columns: `value` (binary, required), `key` (binary), `deliver_after` (long), `timestamp`
(long), `partition` (int). A null `deliver_after` means due at once, a null `timestamp` the
append time. Without a `partition` column, a row goes where Kafka's default partitioner
puts its key, `(murmur2(key) & 0x7fffffff) % N` (computed for a whole Arrow column at once,
per key length); keyless rows of one task go to one partition, rotating by task.

`path` is a partition directory (one Log), or a topic root of `name-i` partition
directories. Option `partitions` N creates (or checks) topic `topic` (option; default: the
root's base name) with N partitions under `path`. Option `batch_records` (default 500):
rows become record batches, one per (partition, deliver_after) group of a task's rows,
split every `batch_records` rows, in the rows' order.

Locking: a task appends to each partition's Log while holding it open, which takes the
log's lock; a partition locked by another task (or process) is skipped for now and
retried after the task's other partitions, with a short back-off, for up to
`lockTimeoutMs` (default 10 minutes).

What a failed job can leave behind (Spark's commit protocol has no second phase a log can
join without a staging copy of every row): every kdelay batch is whole or absent (an append
is atomic; a torn tail from a crash is truncated by the next Log.open); a task appends
nothing before it has read all of its input, so a failure while computing the rows (the
common case) writes nothing from that task; the batches of tasks that had already finished
stay, and are listed by `abort` (a retried task appends its rows again: at-least-once, as
a non-transactional Kafka producer).
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from ..errors import KdelayError, LogLockedError
from ..log.local.directory_lock import lock_holder
from ..records import PackedBinary
from . import scan

COLUMNS = {"value": "binary", "key": "binary", "deliver_after": "bigint",
           "timestamp": "bigint", "partition": "int"}
_SEED = np.uint32(0x9747B28C)
_M = np.uint32(0x5BD1E995)


@dataclass
class WriteMessage(WriterCommitMessage):
    """What one task appended: (partition directory, base offset, last offset) per batch."""

    rows: int = 0
    ranges: list[tuple[str, int, int]] = field(default_factory=list)


class KdelayWriter(DataSourceArrowWriter):
    def __init__(self, path: str, options: dict, schema: StructType, overwrite: bool):
        if overwrite:
            raise ValueError("kdelay: a log is append-only; use mode('append')")
        types = {f.name: f.dataType.simpleString() for f in schema.fields}
        if types.get("value") != "binary":
            raise ValueError("kdelay: the DataFrame needs a binary `value` column")
        for name, t in types.items():
            if name not in COLUMNS:
                raise ValueError(f"kdelay: unknown column {name!r}; the writer takes "
                                 f"{', '.join(COLUMNS)}")
            if t != COLUMNS[name]:
                raise ValueError(f"kdelay: column {name!r} must be {COLUMNS[name]}, got {t}")
        self.batch_records = int(options.get("batch_records", 500))
        if self.batch_records <= 0:
            raise ValueError("kdelay: batch_records must be a positive int")
        self.lock_timeout = int(options.get("locktimeoutms", 600_000)) / 1000
        self.dirs = _targets(os.path.abspath(path), options)

    def write(self, iterator) -> WriteMessage:
        from pyspark import TaskContext

        batches = list(iterator)  # all input first: a failure upstream writes nothing
        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx is not None else 0
        msg = WriteMessage()
        if not batches:
            return msg
        table = pa.Table.from_batches(batches).combine_chunks()  # one copy; takes on it are
        # twice as fast as on the chunks Spark sends
        msg.rows = table.num_rows
        table, groups = _group(table, len(self.dirs), task)
        rows = _Rows(table)  # each group is a run of consecutive rows of it
        pending = sorted(groups, key=lambda p: (p - task) % len(self.dirs))
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.005
        while pending:
            holders: dict[int, int | None] = {}  # partition -> the pid holding its lock
            for p in pending:
                try:
                    msg.ranges.extend(self._append(p, rows, groups[p]))
                except LogLockedError as e:
                    holders[p] = e.pid
            pending = list(holders)
            if pending:
                if time.monotonic() > deadline:
                    raise KdelayError(_stayed_locked(holders, self.lock_timeout))
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
        return msg

    def _append(self, p: int, rows: _Rows, groups: list) -> list[tuple[str, int, int]]:
        from ..partition import Log

        out = []
        with Log.open(self.dirs[p]) as log:
            for da, lo, hi in groups:
                for start in range(lo, hi, self.batch_records):
                    end = min(hi, start + self.batch_records)
                    values, columns = rows.batch(start, end)
                    r = log.append_columns(values, **columns, deliver_after=da)
                    out.append((self.dirs[p], r.base_offset, r.last_offset))
        return out

    def commit(self, messages) -> None:
        return None  # every task's batches are in the log already

    def abort(self, messages) -> None:
        ranges = [r for m in messages if m is not None for r in m.ranges]
        if ranges:
            warnings.warn(f"kdelay writer: the job failed after {len(ranges)} whole batches "
                          f"were appended by tasks that finished: {ranges[:20]}", stacklevel=1)


def _stayed_locked(holders: dict[int, int | None], timeout_s: float) -> str:
    """Why a task gave up: which partitions stayed locked, by which processes, and what to
    do about it."""
    by = sorted({lock_holder(pid) for pid in holders.values()})
    return (f"kdelay writer: partitions {sorted(holders)} stayed locked for {timeout_s:g} s "
            f"by {', '.join(by)}; one process owns a log, and a Spark write opens each "
            f"partition's Log in its tasks: stop that process (or close its Log) before "
            f"writing, or send the rows through it (its Topic or Log)")


class _Rows:
    """A task's rows (sorted by group), ready to be cut into batches: the binary columns as
    numpy views of Arrow's buffers (lengths, offsets, data), worked out once per task, so a
    batch is a few slices with no Python object per row. A column Arrow packs in a way
    PackedBinary cannot take (a null value holding bytes), and a batch with only some
    timestamps null (those rows take the append time), go as Python lists instead."""

    def __init__(self, table: pa.Table):
        names = table.column_names
        cols = [table.column(c).combine_chunks() if c in names else None
                for c in ("value", "key", "timestamp")]
        self.arrow = cols
        self.values = _binary(cols[0])
        self.keys = None if cols[1] is None else _binary(cols[1])
        ts = cols[2]
        if ts is not None and ts.null_count == len(ts):
            ts = None  # every row takes the append time
        self.ts_nulls = None if ts is None or not ts.null_count else \
            ts.is_null().to_numpy(zero_copy_only=False)
        self.ts = None if ts is None else ts.fill_null(0).to_numpy()
        self.packed = self.values is not None and (cols[1] is None or self.keys is not None)

    def batch(self, start: int, end: int) -> tuple:
        """append_columns' values, and its keys= and timestamps=, for rows start..end."""
        values = self.values  # (packed: set)
        if self.packed and values is not None and (
                self.ts_nulls is None or not self.ts_nulls[start:end].any()):
            return _slice(values, start, end), {
                "keys": None if self.keys is None else _slice(self.keys, start, end),
                "timestamps": None if self.ts is None else self.ts[start:end]}
        values, keys, ts = (None if c is None else c.slice(start, end - start).to_pylist()
                            for c in self.arrow)
        return values, {"keys": keys, "timestamps": ts}


def _binary(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(lengths with -1 for null, offsets, data) of a binary Arrow array, views of its
    buffers; None if a null value has bytes in the data buffer (allowed by Arrow, not by
    PackedBinary)."""
    offsets, data = _buffers(arr)
    lengths = np.diff(offsets).astype(np.int64)
    if arr.null_count:
        null = arr.is_null().to_numpy(zero_copy_only=False)
        if lengths[null].any():
            return None
        lengths[null] = -1
    return lengths, offsets, data


def _buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(int32 offsets, data) of a binary Arrow array: views of its buffers, no copy."""
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32)[arr.offset:arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else \
        np.zeros(0, np.uint8)
    return offsets, data


def _slice(col: tuple[np.ndarray, np.ndarray, np.ndarray], start: int, end: int
           ) -> PackedBinary:
    lengths, offsets, data = col
    return PackedBinary(lengths[start:end], data[offsets[start]:offsets[end]])


def _targets(path: str, options: dict) -> list[str]:
    """The partition directories rows go to, by partition number."""
    from ..clients.topic import Topic

    n = options.get("partitions")
    topic = options.get("topic")
    if n is not None:
        n = int(n)
        name = topic or os.path.basename(path)
        with Topic.open(path, name, partitions=n):
            pass
        return [os.path.join(path, f"{name}-{i}") for i in range(n)]
    if not os.path.isdir(path):
        return [path]  # a new single-partition log
    with_topic, parts = scan.discover(path)
    if not with_topic:
        return [path]
    names = sorted({p.topic for p in parts if p.topic is not None})
    name = topic or (names[0] if len(names) == 1 else None)
    if name is None:
        raise ValueError(f"kdelay: {path} holds topics {names}; choose one with option topic")
    nums = sorted(p.partition for p in parts if p.topic == name and p.partition is not None)
    if nums != list(range(len(nums))):
        raise ValueError(f"kdelay: topic {name!r} under {path} has partitions {nums}")
    return [os.path.join(path, f"{name}-{i}") for i in nums]


def _group(table: pa.Table, n_parts: int, task: int) -> tuple[pa.Table, dict[int, list]]:
    """The rows sorted by (partition, deliver_after), keeping their input order within a
    group (one Arrow take), and {partition: [(deliver_after or None, first row, end row)]}
    in that sorted table."""
    rows = table.num_rows
    cols = set(table.column_names)
    if "partition" in cols:
        col = table.column("partition")
        if col.null_count:
            raise KdelayError("kdelay writer: a row has a null partition")
        part = col.to_numpy().astype(np.int64)
        if rows and (part.min() < 0 or part.max() >= n_parts):
            raise KdelayError(f"kdelay writer: partition out of range [0, {n_parts})")
    elif n_parts == 1:
        part = np.zeros(rows, dtype=np.int64)
    else:
        part = np.full(rows, task % n_parts, dtype=np.int64)  # keyless rows
        if "key" in cols and rows:
            keys = table.column("key").combine_chunks()
            valid = ~np.asarray(keys.is_null().to_numpy(zero_copy_only=False))
            h = murmur2_array(keys) & np.uint32(0x7FFFFFFF)
            part = np.where(valid, h.astype(np.int64) % n_parts, part)
    if "deliver_after" in cols:
        col = table.column("deliver_after")
        low = pc.min(col).as_py()
        if low is not None and low < 0:
            raise KdelayError(f"kdelay writer: deliver_after must be >= 0, got {low}")
        da = col.fill_null(-1).to_numpy().astype(np.int64)
    else:
        da = np.full(rows, -1, dtype=np.int64)
    order = np.lexsort((np.arange(rows), da, part))
    sp, sd = part[order], da[order]
    cuts = np.flatnonzero((sp[1:] != sp[:-1]) | (sd[1:] != sd[:-1])) + 1
    bounds = [0, *cuts.tolist(), rows] if rows else [0]
    out: dict[int, list] = {}
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        d = int(sd[lo])
        out.setdefault(int(sp[lo]), []).append((None if d < 0 else d, lo, hi))
    if not np.array_equal(order, np.arange(rows)):
        table = table.take(order)
    return table, out


def murmur2_array(keys: pa.Array) -> np.ndarray:
    """Kafka's murmur2 of every value of a binary array (nulls hash as empty), vectorised
    over the keys of each length: O(total key bytes) numpy work, no Python per key."""
    n = len(keys)
    offsets, data = _buffers(keys)
    lengths = np.diff(offsets)
    out = np.empty(n, dtype=np.uint32)
    with np.errstate(over="ignore"):
        for length in np.unique(lengths).tolist():
            idx = np.flatnonzero(lengths == length)
            h = np.full(len(idx), np.uint32(_SEED ^ np.uint32(length)), dtype=np.uint32)
            if length:
                rows = data[offsets[idx][:, None] + np.arange(length)]
                n4 = length >> 2
                if n4:
                    blocks = np.ascontiguousarray(rows[:, :n4 * 4]).view("<u4")
                    for j in range(n4):
                        k = blocks[:, j] * _M
                        k ^= k >> np.uint32(24)
                        k *= _M
                        h = (h * _M) ^ k
                tail = length & 3
                if tail:
                    rest = rows[:, n4 * 4:].astype(np.uint32)
                    if tail == 3:
                        h ^= rest[:, 2] << np.uint32(16)
                    if tail >= 2:
                        h ^= rest[:, 1] << np.uint32(8)
                    h ^= rest[:, 0]
                    h = h * _M
            h ^= h >> np.uint32(13)
            h = h * _M
            h ^= h >> np.uint32(15)
            out[idx] = h
    return out
