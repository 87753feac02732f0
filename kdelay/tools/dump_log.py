"""`kdelay dump-log`: the batches (and with --print-data the records) of one .log file,
as a table or JSON lines; damage is reported on stderr and the walk goes on."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

import numpy as np

from ..errors import KdelayError
from ..log.batch import codec
from ..log.batch.offset_continuity import continues
from ..log.batch.walker import Batch, FramingBreak, walk
from ..log.cancellation.per_batch import cancelled_per_batch
from ..log.segments.layout import LOG_SUFFIX, SegmentFiles, parse_segment_name
from ..log.segments.live_tail import in_flight_message
from . import cancels
from .formatting import Out, bytes_json, err, fmt_time, iso_or_none, show_bytes
from .progress import ProgressBar, fmt_size
from .scanning import (
    OFFSET,
    InspectError,
    compaction_marker,
    existing,
    in_flight,
    kind_for_path,
    open_log_file,
    read_index_file,
)

EXIT_OK, EXIT_PROBLEMS = 0, 1


def _log_file(path: str) -> str:
    existing(path)
    if os.path.isdir(path):
        raise InspectError(f"{path}: is a directory; dump-log takes one .log file "
                               f"(try: kdelay verify {path})")
    if kind_for_path(path) is not None:
        raise InspectError(f"{path}: is an index file; use: kdelay dump-index {path}")
    return path



def _cancelled_in(gone: np.ndarray, b: Batch) -> list[int]:
    """The batch's cancelled offsets (the segment's sorted `gone`)."""
    start, count = cancelled_per_batch(gone, b.base_offset, b.last_offset + 1 - b.base_offset)
    return gone[start:start + count].tolist()


def _segment_cancelled(path: str) -> np.ndarray:
    parsed = parse_segment_name(os.path.basename(path))
    if parsed is None:
        return np.empty(0, dtype=np.int64)
    return cancels.cancelled_offsets(os.path.dirname(os.path.abspath(path)), parsed[0])


def _batch_json(b: Batch, gone: np.ndarray) -> dict:
    h = b.header
    return {
        "cancelled": _cancelled_in(gone, b),
        "position": b.position, "base_offset": h.base_offset, "last_offset": h.last_offset,
        "record_count": h.record_count, "size": h.size, "batch_length": h.batch_length,
        "deliver_after": h.deliver_after, "deliver_after_iso": iso_or_none(h.deliver_after),
        "base_timestamp": h.base_timestamp, "max_timestamp": h.max_timestamp,
        "crc": h.crc, "crc_valid": b.crc_valid, "magic": h.magic, "attributes": h.attributes,
        "partition_leader_epoch": h.leader_epoch, "producer_id": h.producer_id,
        "producer_epoch": h.producer_epoch, "base_sequence": h.base_sequence,
    }


_LOG_COLS = (f"{'POSITION':>12}  {'BASE_OFFSET':>12}  {'LAST_OFFSET':>12}  {'RECORDS':>7}  "
             f"{'SIZE':>9}  {'CRC':<3}  {'DELIVER_AFTER (UTC, ms)':<42}  "
             f"{'MAX_TIMESTAMP (UTC)':<24}  CANCELLED")


def _batch_row(b: Batch, gone: np.ndarray) -> str:
    h = b.header
    da = f"{fmt_time(h.deliver_after)} ({h.deliver_after})"
    cancelled = _cancelled_in(gone, b)
    return (f"{b.position:>12}  {h.base_offset:>12}  {h.last_offset:>12}  {h.record_count:>7}  "
            f"{fmt_size(h.size):>9}  {'ok' if b.crc_valid else 'BAD':<3}  {da:<42}  "
            f"{fmt_time(h.max_timestamp):<24}  "
            f"{','.join(map(str, cancelled)) if cancelled else '-'}")


def _start_position(path: str, lo: int | None, size: int) -> int:
    """Where to start reading for offset `lo`: from the segment's offset index when it is
    current for this log (as Kafka seeks), else from the beginning."""
    if not lo:
        return 0
    stem = path[: -len(LOG_SUFFIX)] if path.endswith(LOG_SUFFIX) else None
    if stem is None:
        return 0
    idx = read_index_file(stem + OFFSET.suffix, OFFSET)
    if idx.problems or idx.meta is None or idx.columns is None or idx.meta.log_bytes != size:
        return 0
    offsets, positions = idx.columns
    i = int(offsets.searchsorted(lo, side="right")) - 1
    return 0 if i < 0 else int(positions[i])


def _segment(path: str, size: int) -> SegmentFiles | None:
    """The segment whose .log `path` is (None: a file not named as one)."""
    parsed = parse_segment_name(os.path.basename(path))
    if parsed is None or parsed[1] != LOG_SUFFIX:
        return None
    return SegmentFiles(os.path.dirname(os.path.abspath(path)), parsed[0], size)


def _compacted(seg: SegmentFiles | None) -> bool:
    """Was this .log written by compaction (offset gaps between batches expected)? Asked
    after the .log is open: a compaction's swap puts the marker in place before the .log."""
    if seg is None:
        return False
    end, damaged = compaction_marker(seg)
    return end is not None or damaged


def _grew(path: str, size: int) -> bool:
    """Has the file grown past the `size` it was read up to? Then a batch cut short at the
    end of what was read is one a writer was appending (a write spanning pages becomes
    visible a page at a time), not damage."""
    try:
        return os.path.getsize(path) > size
    except OSError:
        return False


def cmd_dump_log(args: argparse.Namespace, out: Out) -> int:
    path = _log_file(args.file)
    lo, hi = args.offsets if args.offsets else (None, None)
    # the cancellations first: compaction prunes them only after it has swapped its new
    # .log in, so they cover the file opened next (and perhaps more)
    gone = _segment_cancelled(path)
    # then one descriptor throughout: a compaction that swaps a new .log in meanwhile
    # leaves this walk reading the file it opened, whole
    fd, size = open_log_file(path)
    try:
        return _dump(args, out, path, fd, size, lo, hi, gone)
    finally:
        os.close(fd)


def _dump(args: argparse.Namespace, out: Out, path: str, fd: int, size: int,
          lo: int | None, hi: int | None, gone: np.ndarray) -> int:
    start = _start_position(path, lo, size)
    seg = _segment(path, size)
    gaps = _compacted(seg)
    bar = ProgressBar("dump-log", size - start)
    problems = 0
    batches = records = 0
    expected: int | None = None
    first: int | None = None  # the file's first offset (known when read from its start)
    last: int | None = None  # the last offset of the last batch read
    if not args.json:
        out.line(f"# {path}: {fmt_size(size)} ({size} bytes)"
                 + (f", from byte {start} via the offset index" if start else ""))
        out.line(_LOG_COLS)
    try:
        for item in walk(fd, start, size, keep_data=args.print_data, progress=bar):
            if isinstance(item, FramingBreak):
                if item.resume_at is None and _grew(path, size):
                    break  # the last batch was being appended as we read (a live log)
                if seg is not None and in_flight(seg, item):
                    # a live writer is in the middle of writing it (a stalled pwrite)
                    if not args.json:
                        out.line(f"{item.position:>12}  .. "
                                 f"{in_flight_message(item.position, size)}")
                    break
                problems += 1
                bar.close()
                what = item.describe()
                if item.position == 0 and item.resume_at is None:
                    what = f"not a kdelay log, or damaged from its first byte: {what}"
                err(f"{path} at byte {item.position}: {what}")
                if not args.json:
                    out.line(f"{item.position:>12}  !! {item.describe()}")
                expected = None
                continue
            b = item
            if not b.crc_valid:
                problems += 1
                bar.close()
                err(f"{path} at byte {b.position}: CRC-32C mismatch in batch of offsets "
                    f"{b.base_offset}..{b.last_offset}")
            if expected is not None and start == 0 and \
                    not continues(b.base_offset, expected, gaps):
                problems += 1
                err(f"{path} at byte {b.position}: batch starts at offset {b.base_offset}, "
                    f"expected {expected}")
            expected = b.last_offset + 1
            if first is None and start == 0:
                first = b.base_offset
            last = b.last_offset
            if hi is not None and b.base_offset > hi and b.crc_valid:
                break  # offsets only grow in a healthy log: nothing further is wanted
            if (lo is not None and b.last_offset < lo) or (hi is not None and b.base_offset > hi):
                continue
            batches += 1
            records += b.header.record_count
            if args.json:
                obj = _batch_json(b, gone)
                if args.print_data:
                    obj["records"] = _records_json(b, lo, hi)
                out.json(obj)
            else:
                out.line(_batch_row(b, gone))
                if args.print_data:
                    for line in _records_text(b, lo, hi, args.max_bytes):
                        out.line(line)
    finally:
        bar.close()
    if not args.json:
        where = f": {_nothing_in_range(lo, hi, first, last)}" if args.offsets and not batches \
            else ""
        out.line(f"# {batches} batches, {records} records{where}"
                 + (f"; {problems} problems (details on stderr)" if problems else ""))
    return EXIT_PROBLEMS if problems else EXIT_OK


def _nothing_in_range(lo: int | None, hi: int | None, first: int | None,
                      last: int | None) -> str:
    """Where a segment's offsets are, when no batch of it holds any of offsets lo..hi
    (`first`: its first offset if known, `last`: the last offset read)."""
    if last is None:
        return "the file holds no batch"
    if lo is not None and lo > last:
        return f"this segment ends at offset {last}"
    if hi is not None and first is not None and hi < first:
        return f"this segment starts at offset {first}"
    return "no batch holds those offsets (a compacted segment has gaps)"


def _decoded(b: Batch):
    """(offset, timestamp, key, value, headers) rows of a batch, or an error string."""
    assert b.data is not None
    try:
        cols = codec.decode_records(b.data, b.header)
    except KdelayError as e:
        return str(e)
    base = b.base_offset
    return [(base + i, ts, k, v, hs) for i, (ts, k, v, hs) in
            enumerate(zip(cols.timestamps, cols.keys, cols.values, cols.headers, strict=True))]


def _records_json(b: Batch, lo: int | None, hi: int | None) -> list[dict] | str:
    rows = _decoded(b)
    if isinstance(rows, str):
        return rows
    out = []
    for off, ts, k, v, hs in rows:
        if (lo is not None and off < lo) or (hi is not None and off > hi):
            continue
        kt, kh = bytes_json(k)
        vt, vh = bytes_json(v)
        out.append({"offset": off, "timestamp": ts, "key": kt, "key_hex": kh, "value": vt,
                    "value_hex": vh,
                    "headers": [{"key": hk, "value": bytes_json(hv)[0],
                                 "value_hex": bytes_json(hv)[1]} for hk, hv in hs]})
    return out


def _records_text(b: Batch, lo: int | None, hi: int | None, limit: int) -> Iterator[str]:
    rows = _decoded(b)
    note = "" if b.crc_valid else "  (unverified: CRC failed)"
    if isinstance(rows, str):
        yield f"{'':>12}  | records cannot be decoded: {rows}"
        return
    for off, ts, k, v, hs in rows:
        if (lo is not None and off < lo) or (hi is not None and off > hi):
            continue
        head = ""
        if hs:
            head = "  headers " + " ".join(f"{show_bytes(hk.encode(), limit)}="
                                           f"{show_bytes(hv, limit)}" for hk, hv in hs)
        yield (f"{'':>12}  | offset {off}  ts {fmt_time(ts)}  key {show_bytes(k, limit)}  "
               f"value {show_bytes(v, limit)}{head}{note}")

