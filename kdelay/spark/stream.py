"""Structured Streaming source of due records: `spark.readStream.format("kdelay").load(path)`.

Each micro-batch holds the records that became due since the previous one, with the batch
reader's columns, in (deliver_after, offset) order within each kdelay partition (one Spark
input partition per kdelay partition, split into consecutive key ranges only when a
micro-batch is large). Nothing here takes the log's lock: another process may be appending.

Offsets. Spark's offset for this source is, per kdelay partition, the DeliveryKey of the
last record handed out (JSON: {"partitions": {"<topic>-<p>" or "": {"deliver_after": d,
"offset": o}}}; (-1, -1) before the first record). A micro-batch is the key range
(start, end] of every partition, and a restart from the checkpoint resumes after `end`:
nothing repeats, nothing is skipped.

Never skipping a late batch. Planning a micro-batch picks, per partition, `end` = the
largest key due at or before a bound E. A record can only be skipped if its key is <= end
but it was not in the files when they were read, i.e. its deliverAfter <= E and it landed
late. E comes from kdelay.log.segments.append_horizon: the writer publishes, before it reads its log clock
for an append, that an append is in progress and a lower bound F of its deliverAfter; the
source reads its wall clock R, then that word, then the files, and uses E = min(R, F) - 1
(R - 1 when no append is in progress). An append that had not started when the word was
read reads the writer's clock after R, so its deliverAfter >= R > E; the one in progress
has deliverAfter >= F > E; every earlier append is whole on disk. So every record with a
key <= end was read, and `end` never moves backwards. The bound costs at most 1 ms of
latency; the real latency is the trigger interval plus Spark's per-batch overhead. (This
needs the writer's log clock not to lag the wall clock: the default log clock is the wall
clock, and its monotonic floor only moves it ahead.)

Cancelled records are left out: each micro-batch reads the segments' cancellations after
it was planned, and a cancel publishes the append horizon as an append does (it can only
take a record due after the clock it reads), so a record it withdraws is never planned.

Beside a compaction. Planning vouches only for a catalogue the directory held still
around (live.py: a compaction's swap in progress plans nothing new), and a worker that
finds its planned batches moved, rewritten or merged away reads the rest of its range
again from the files as they are (range_read.py): the query neither fails nor skips nor
repeats a record; records compaction removed meanwhile (cancelled, or due longer than
retention_ms ago) are left out.

Options: `maxRecordsPerPartition` (default 250000): the most records one Spark input
partition reads; `startingOffsets` "earliest" (default: every record, as it is due) or
"latest" (only records that come due after the query starts).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from . import scan
from .live import NO_BOUND, BatchRef, LivePartition, settled, wall_ms
from .range_read import SETTLE_S, read_range

_BEFORE_ALL = (-1, -1)


def part_key(p: scan.PartitionDir) -> str:
    return "" if p.topic is None else f"{p.topic}-{p.partition}"


class StreamPartition(InputPartition):
    """A key range (start, end] of one kdelay partition and the batches that hold it."""

    def __init__(self, part: scan.PartitionDir, start: tuple[int, int], end: tuple[int, int],
                 batches: list[BatchRef]):
        super().__init__(None)
        self.part = part
        self.start = start
        self.end = end
        self.batches = [tuple(b) for b in batches]


class KdelayStreamReader(DataSourceStreamReader):
    def __init__(self, path: str, options: dict, with_topic: bool):
        self.path = path
        self.with_topic = with_topic
        self.max_records = int(options.get("maxrecordsperpartition", 250_000))
        if self.max_records <= 0:
            raise ValueError("kdelay: maxRecordsPerPartition must be a positive int")
        self.starting = str(options.get("startingoffsets", "earliest")).lower()
        if self.starting not in ("earliest", "latest"):
            raise ValueError("kdelay: startingOffsets must be 'earliest' or 'latest'")
        self._live: dict[str, LivePartition] = {}
        self._bound: dict[str, int] = {}

    # ------------------------------------------------------------------ offsets

    def _refresh(self, start: dict) -> None:
        _, parts = scan.discover(self.path)
        now = wall_ms()
        for p in parts:
            k = part_key(p)
            live = self._live.get(k)
            if live is None:
                live = self._live[k] = LivePartition(p, _key(start, k))
            # a bound never moves back (the wall clock may step backwards; a refresh the
            # directory moved under, a compaction's swap, vouches for none: NO_BOUND)
            self._bound[k] = max(self._bound.get(k, NO_BOUND), live.refresh(now))

    def initialOffset(self) -> dict:
        if self.starting == "earliest":
            return {"partitions": {}}
        _, parts = scan.discover(self.path)
        out = {}
        for p in parts:
            live, bound = settled(p, _BEFORE_ALL, SETTLE_S)
            out[part_key(p)] = _encode(live.latest(bound, _BEFORE_ALL))
        return {"partitions": dict(sorted(out.items()))}

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        start = start or {"partitions": {}}
        self._refresh(start)
        out = dict(start.get("partitions", {}))
        for k, live in self._live.items():
            key = live.latest(self._bound[k], _key(start, k))
            if key != _BEFORE_ALL:
                out[k] = _encode(key)
        # one spelling per offset: Spark compares offsets as JSON text
        return {"partitions": dict(sorted(out.items()))}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if not self._live:
            self._refresh(start)
        out: list[InputPartition] = []
        for k in sorted(self._live):
            live = self._live[k]
            s, e = _key(start, k), _key(end, k)
            if e <= s:
                continue
            chunk: list[BatchRef] = []
            n = 0
            for b in live.between(s, e):
                if chunk and n + b[2] - b[1] + 1 > self.max_records:
                    last = chunk[-1]
                    out.append(StreamPartition(live.part, s, e, chunk))
                    s = (last[0], last[2])
                    chunk, n = [], 0
                chunk.append(b)
                n += b[2] - b[1] + 1
            if chunk:
                out.append(StreamPartition(live.part, s, e, chunk))
        return out

    def commit(self, end: dict) -> None:
        for k, live in self._live.items():
            live.forget(_key(end, k))

    # ------------------------------------------------------------------ reading

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        p: StreamPartition = partition  # type: ignore[assignment]
        yield from read_range(p.part, p.start, p.end, p.batches)


def _key(offsets: dict | None, k: str) -> tuple[int, int]:
    d = (offsets or {}).get("partitions", {}).get(k)
    return _BEFORE_ALL if d is None else (int(d["deliver_after"]), int(d["offset"]))


def _encode(key: tuple[int, int]) -> dict:
    return {"deliver_after": key[0], "offset": key[1]}
