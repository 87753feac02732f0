"""Shared by the compaction tests: a log with a model of what it holds, an offline driver of
the rewriter + swap on a closed directory, and a reader of .log files that tolerates the
offset gaps compaction leaves."""

from __future__ import annotations

from dataclasses import dataclass, field

from kdelay import Log, LogConfig, Record
from kdelay.log.batch import codec
from kdelay.log.compaction import compactor, swap
from kdelay.log.segments.layout import LOG_SUFFIX, segment_bases, segment_file
from kdelay.log.segments.segment import LogSegment

T0 = 1_700_000_000_000
HOUR = 3_600_000

# offset -> (key, value, headers, timestamp, deliver_after)
Row = tuple


class Clock:
    def __init__(self, t: int = T0):
        self.t = t

    def __call__(self) -> int:
        return self.t


@dataclass
class Model:
    rows: dict[int, Row] = field(default_factory=dict)

    def append(self, log: Log, records: list[Record], deliver_after: int) -> None:
        res = log.append(records, deliver_after=deliver_after)
        for i, r in enumerate(records):
            ts = r.timestamp if r.timestamp is not None else res.append_time
            self.rows[res.base_offset + i] = (r.key, r.value, list(r.headers), ts,
                                              res.deliver_after)

    def removable(self, offset: int, horizon: int, cancelled: set[int]) -> bool:
        return self.rows[offset][4] < horizon or offset in cancelled


def records(n: int, tag: str, *, headers: bool = False) -> list[Record]:
    return [Record(f"{tag}-{i}".encode() * (1 + i % 3), key=None if i % 4 == 0 else b"k%d" % i,
                   headers=[("h", b"v%d" % i), ("n", None)] if headers and i % 2 else (),
                   timestamp=T0 + i)
            for i in range(n)]


def read_dir(directory: str) -> dict[int, Row]:
    """Every record of every .log in `directory`, checking each batch (CRC, framing) and
    that offsets only grow; gaps are allowed."""
    out: dict[int, Row] = {}
    last = -1
    bases = segment_bases(directory)
    for base in bases:
        with open(segment_file(directory, base, LOG_SUFFIX), "rb") as f:
            data = f.read()
        pos = 0
        while pos < len(data):
            h = codec.parse_header(data, pos)
            codec.check_crc(data, pos, h)
            assert h.base_offset > last and h.base_offset >= base
            cols = codec.decode_records(data[pos:pos + h.size], h)
            for i, (ts, k, v, hd) in enumerate(zip(*cols, strict=True)):
                out[h.base_offset + i] = (k, v, list(hd), ts, h.deliver_after)
            last = h.last_offset
            pos += h.size
    return out


def compact_offline(directory: str, config: LogConfig, now: int,
                    cancelled: set[int] | None = None, min_ratio: float = 0.5) -> int:
    """Run plan + rewrite + install over the sealed segments of a closed log directory;
    returns how many segments were replaced."""
    bases = segment_bases(directory)
    segs = [LogSegment.load(directory, b) for b in bases]
    hook = None
    if cancelled is not None:
        import numpy as np
        arr = np.array(sorted(cancelled), dtype=np.int64)

        def hook(first, end):
            return arr[(arr >= first) & (arr < end)]
    try:
        hz = compactor.horizon(now, config.retention_ms)
        groups = compactor.plan([compactor.Source.of(s) for s in segs[:-1]], horizon_ms=hz,
                                 min_ratio=min_ratio, segment_bytes=config.segment_bytes,
                                 cancelled=hook)
        n = 0
        for group in groups:
            rw = compactor.rewrite(directory, group, horizon_ms=hz,
                                    index_interval_bytes=config.index_interval_bytes,
                                    cancelled=hook)
            swap.install(directory, rw.segment.base_offset, rw.replaced)
            rw.segment.close()
            n += len(rw.replaced)
        return n
    finally:
        for s in segs:
            s.close()
