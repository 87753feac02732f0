"""`kdelay`: inspect and repair logs from the shell (the kafka-dump-log of kdelay).

    kdelay dump-log FILE.log [--print-data] [--offsets A..B] [--json]
    kdelay dump-index FILE.dlyindex|FILE.index|FILE.timeindex [--summary] [--json]
    kdelay verify DIR|FILE [--json] [-q]
    kdelay rebuild-index DIR [--index-interval-bytes N]
    kdelay stats DIR [--now MS] [--json]
    kdelay demo ...

Exit status: 0 fine, 1 damage found (or the log is locked), 2 bad usage or input.
Everything but rebuild-index only reads and takes no lock, so it is safe on a live log.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from . import inspect as ins
from .errors import KdelayError
from .log import codec
from .log.segment import LOG_SUFFIX, parse_segment_name, segment_file
from .progress import ProgressBar, fmt_size

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


# ---------------------------------------------------------------------------- formatting


def fmt_time(ms: int | None) -> str:
    """ISO-8601 UTC with milliseconds; '?' for values no calendar holds (corrupt data)."""
    if ms is None:
        return "-"
    try:
        dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, ValueError, OSError):
        return "?"
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def iso_or_none(ms: int | None) -> str | None:
    s = fmt_time(ms)
    return None if s in ("-", "?") else s


def fmt_duration(ms: int) -> str:
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms < 1000:
        return f"{sign}{ms} ms"
    s = ms // 1000
    if s < 60:
        return f"{sign}{ms / 1000:.1f} s"
    if s < 3600:
        return f"{sign}{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{sign}{s // 3600} h {s % 3600 // 60} min"
    return f"{sign}{s // 86400} d {s % 86400 // 3600} h"


def show_bytes(b: bytes | None, limit: int) -> str:
    """Bytes shown safely on a terminal: quoted text when printable UTF-8, else hex;
    truncated to `limit` characters/bytes with the full length noted."""
    if b is None:
        return "null"
    try:
        text = b.decode("utf-8")
        printable = text.isprintable()
    except UnicodeDecodeError:
        printable = False
    if printable:
        body = text[:limit].replace("\\", "\\\\").replace('"', '\\"')
        more = f"… ({len(b)} B)" if len(text) > limit else ""
        return f'"{body}"{more}'
    more = f"… ({len(b)} B)" if len(b) > limit else ""
    return "0x" + b[:limit].hex() + more


def bytes_json(b: bytes | None) -> tuple[str | None, str | None]:
    """(text if valid UTF-8, hex) — both None for a null key or value."""
    if b is None:
        return None, None
    try:
        text = b.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return text, b.hex()


class Out:
    """stdout writer that lets a closed pipe (`| head`) end the program quietly."""

    def __init__(self) -> None:
        self.stream = sys.stdout

    def line(self, text: str = "") -> None:
        self.stream.write(text + "\n")

    def json(self, obj: dict) -> None:
        self.stream.write(json.dumps(obj, separators=(", ", ": ")) + "\n")


def err(msg: str) -> None:
    sys.stderr.write(f"kdelay: {msg}\n")


# ---------------------------------------------------------------------------- paths


def _existing(path: str) -> str:
    if not os.path.exists(path):
        raise ins.InspectError(f"{path}: no such file or directory")
    return path


def _log_file(path: str) -> str:
    _existing(path)
    if os.path.isdir(path):
        raise ins.InspectError(f"{path}: is a directory; dump-log takes one .log file "
                               f"(try: kdelay verify {path})")
    if ins.kind_for_path(path) is not None:
        raise ins.InspectError(f"{path}: is an index file; use: kdelay dump-index {path}")
    return path


def parse_offsets(text: str) -> tuple[int | None, int | None]:
    """'A..B', 'A..', '..B' or 'A' (inclusive)."""
    try:
        if ".." in text:
            a, b = text.split("..", 1)
            lo = int(a) if a.strip() else None
            hi = int(b) if b.strip() else None
        else:
            lo = hi = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"bad offset range {text!r}: use A..B, A.., ..B or A") from None
    if (lo is not None and lo < 0) or (hi is not None and hi < 0) or (
            lo is not None and hi is not None and hi < lo):
        raise argparse.ArgumentTypeError(f"bad offset range {text!r}")
    return lo, hi


def non_negative_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text}")
    return v


def positive_int(text: str) -> int:
    v = non_negative_int(text)
    if v == 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return v


# ---------------------------------------------------------------------------- dump-log


def _batch_json(b: ins.Batch) -> dict:
    h = b.header
    return {
        "position": b.position, "base_offset": h.base_offset, "last_offset": h.last_offset,
        "record_count": h.record_count, "size": h.size, "batch_length": h.batch_length,
        "deliver_after": h.deliver_after, "deliver_after_iso": iso_or_none(h.deliver_after),
        "base_timestamp": h.base_timestamp, "max_timestamp": h.max_timestamp,
        "crc": h.crc, "crc_valid": b.crc_valid, "magic": h.magic, "attributes": h.attributes,
        "partition_leader_epoch": h.leader_epoch, "producer_id": h.producer_id,
        "producer_epoch": h.producer_epoch, "base_sequence": h.base_sequence,
    }


_LOG_COLS = (f"{'POSITION':>12}  {'BASE_OFFSET':>12}  {'LAST_OFFSET':>12}  {'RECORDS':>7}  "
             f"{'SIZE':>9}  {'CRC':<3}  {'DELIVER_AFTER (UTC, ms)':<42}  MAX_TIMESTAMP (UTC)")


def _batch_row(b: ins.Batch) -> str:
    h = b.header
    da = f"{fmt_time(h.deliver_after)} ({h.deliver_after})"
    return (f"{b.position:>12}  {h.base_offset:>12}  {h.last_offset:>12}  {h.record_count:>7}  "
            f"{fmt_size(h.size):>9}  {'ok' if b.crc_valid else 'BAD':<3}  {da:<42}  "
            f"{fmt_time(h.max_timestamp)}")


def _start_position(path: str, lo: int | None, size: int) -> int:
    """Where to start reading for offset `lo`: from the segment's offset index when it is
    current for this log (as Kafka seeks), else from the beginning."""
    if not lo:
        return 0
    stem = path[: -len(LOG_SUFFIX)] if path.endswith(LOG_SUFFIX) else None
    if stem is None:
        return 0
    idx = ins.read_index_file(stem + ins.OFFSET.suffix, ins.OFFSET)
    if idx.problems or idx.meta is None or idx.columns is None or idx.meta.log_bytes != size:
        return 0
    offsets, positions = idx.columns
    i = int(offsets.searchsorted(lo, side="right")) - 1
    return 0 if i < 0 else int(positions[i])


def cmd_dump_log(args: argparse.Namespace, out: Out) -> int:
    path = _log_file(args.file)
    lo, hi = args.offsets if args.offsets else (None, None)
    fd, size = ins.open_log_file(path)
    os.close(fd)
    start = _start_position(path, lo, size)
    bar = ProgressBar("dump-log", size - start)
    problems = 0
    batches = records = 0
    expected: int | None = None
    if not args.json:
        out.line(f"# {path}: {fmt_size(size)} ({size} bytes)"
                 + (f", from byte {start} via the offset index" if start else ""))
        out.line(_LOG_COLS)
    try:
        for item in ins.scan_batches(path, start=start, end=size, keep_data=args.print_data,
                                     progress=bar):
            if isinstance(item, ins.FramingBreak):
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
            if expected is not None and b.base_offset != expected and start == 0:
                problems += 1
                err(f"{path} at byte {b.position}: batch starts at offset {b.base_offset}, "
                    f"expected {expected}")
            expected = b.last_offset + 1
            if hi is not None and b.base_offset > hi and b.crc_valid:
                break  # offsets only grow in a healthy log: nothing further is wanted
            if (lo is not None and b.last_offset < lo) or (hi is not None and b.base_offset > hi):
                continue
            batches += 1
            records += b.header.record_count
            if args.json:
                obj = _batch_json(b)
                if args.print_data:
                    obj["records"] = _records_json(b, lo, hi)
                out.json(obj)
            else:
                out.line(_batch_row(b))
                if args.print_data:
                    for line in _records_text(b, lo, hi, args.max_bytes):
                        out.line(line)
    finally:
        bar.close()
    if not args.json:
        out.line(f"# {batches} batches, {records} records"
                 + (f"; {problems} problems (details on stderr)" if problems else ""))
    return EXIT_PROBLEMS if problems else EXIT_OK


def _decoded(b: ins.Batch):
    """(offset, timestamp, key, value, headers) rows of a batch, or an error string."""
    assert b.data is not None
    try:
        cols = codec.decode_records(b.data, b.header)
    except KdelayError as e:
        return str(e)
    base = b.base_offset
    return [(base + i, ts, k, v, hs) for i, (ts, k, v, hs) in
            enumerate(zip(cols.timestamps, cols.keys, cols.values, cols.headers, strict=True))]


def _records_json(b: ins.Batch, lo: int | None, hi: int | None) -> list[dict] | str:
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


def _records_text(b: ins.Batch, lo: int | None, hi: int | None, limit: int) -> Iterator[str]:
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


# ---------------------------------------------------------------------------- dump-index


def _index_currency(path: str, idx: ins.IndexFile) -> tuple[bool, str]:
    """Is the index current for its .log? (yes/no, and why)."""
    name = os.path.basename(path)
    parsed = parse_segment_name(name)
    reasons = []
    if idx.problems:
        reasons.append("; ".join(idx.problems))
    meta = idx.meta
    if parsed is None:
        reasons.append("file name is not a 20-digit segment base offset")
    elif meta is not None and meta.base_offset != parsed[0]:
        reasons.append(f"header base offset {meta.base_offset} != file name's {parsed[0]}")
    log_path = path[: -len(idx.kind.suffix)] + LOG_SUFFIX
    try:
        log_size = os.path.getsize(log_path)
    except OSError:
        reasons.append(f"no {os.path.basename(log_path)} next to it")
        log_size = None
    if meta is not None and log_size is not None and meta.log_bytes != log_size:
        reasons.append(f"stale: covers {meta.log_bytes} log bytes, "
                       f"{os.path.basename(log_path)} has {log_size}")
    if reasons:
        return False, "; ".join(reasons)
    return True, (f"matches {os.path.basename(log_path)} ({fmt_size(log_size or 0)}), base offset "
                  f"and checksums ok")


def cmd_dump_index(args: argparse.Namespace, out: Out) -> int:
    path = _existing(args.file)
    if os.path.isdir(path):
        raise ins.InspectError(f"{path}: is a directory; dump-index takes one index file")
    kind = ins.kind_for_path(path)
    if kind is None:
        hint = (f"; use: kdelay dump-log {path}" if path.endswith(LOG_SUFFIX) else "")
        raise ins.InspectError(f"{path}: not an index file (expected a .dlyindex, .index or "
                               f".timeindex suffix){hint}")
    idx = ins.read_index_file(path, kind)
    if idx.wrong_kind is not None:
        raise ins.InspectError(f"{path}: {idx.problems[0]}")
    if idx.meta is None:  # no trustworthy header: nothing to show
        raise ins.IndexUnreadable(f"{path}: {'; '.join(idx.problems)}")
    current, why = _index_currency(path, idx)
    meta = idx.meta
    summary = {"path": path, "kind": kind.name, "magic": kind.magic.decode(),
               "base_offset": meta.base_offset, "log_bytes": meta.log_bytes,
               "next_offset": meta.next_offset, "entries": meta.entries,
               "header_crc_ok": idx.header_crc_ok, "data_crc_ok": idx.data_crc_ok,
               "current": current, "current_detail": why}
    if args.json and args.summary:
        out.json(summary)
    elif not args.json:
        for k, label in (("kind", "kind"), ("base_offset", "base offset"),
                         ("log_bytes", "log bytes"), ("next_offset", "next offset"),
                         ("entries", "entries")):
            v = summary[k]
            if k == "kind":
                v = f"{v} ({summary['magic']})"
            elif k == "log_bytes":
                v = f"{v} ({fmt_size(v)})"
            out.line(f"# {label + ':':<13} {v}")
        out.line(f"# {'checksums:':<13} header {'ok' if idx.header_crc_ok else 'BAD'}, "
                 f"data {'ok' if idx.data_crc_ok else 'BAD'}")
        out.line(f"# {'current:':<13} {'yes' if current else 'NO'} - {why}")
    if not args.summary and idx.columns is not None:
        _dump_entries(kind, idx, out, args.json)
    if not idx.data_crc_ok:
        err(f"{path}: data checksum mismatch (entries shown may be wrong)")
        return EXIT_PROBLEMS
    return EXIT_OK


def _dump_entries(kind: ins.IndexKind, idx: ins.IndexFile, out: Out, as_json: bool) -> None:
    assert idx.columns is not None
    cols = [c.tolist() for c in idx.columns]
    if kind is ins.DLY:
        if not as_json:
            out.line(f"{'#':>8}  {'DELIVER_AFTER (UTC, ms)':<42}  {'OFFSET':>12}  "
                     f"{'LAST_OFFSET':>12}  {'POSITION':>12}  {'SIZE':>9}")
        for i, (da, off, pos, lod, size) in enumerate(zip(*cols, strict=True)):
            if as_json:
                out.json({"index": i, "deliver_after": da, "deliver_after_iso": iso_or_none(da),
                          "offset": off, "last_offset": off + lod, "position": pos,
                          "size": size})
            else:
                d = f"{fmt_time(da)} ({da})"
                out.line(f"{i:>8}  {d:<42}  {off:>12}  {off + lod:>12}  {pos:>12}  "
                         f"{fmt_size(size):>9}")
    elif kind is ins.OFFSET:
        if not as_json:
            out.line(f"{'#':>8}  {'OFFSET':>12}  {'POSITION':>12}")
        for i, (off, pos) in enumerate(zip(*cols, strict=True)):
            if as_json:
                out.json({"index": i, "offset": off, "position": pos})
            else:
                out.line(f"{i:>8}  {off:>12}  {pos:>12}")
    else:
        if not as_json:
            out.line(f"{'#':>8}  {'MAX_TIMESTAMP (UTC, ms)':<42}  {'OFFSET':>12}")
        for i, (ts, off) in enumerate(zip(*cols, strict=True)):
            if as_json:
                out.json({"index": i, "timestamp": ts, "timestamp_iso": iso_or_none(ts),
                          "offset": off})
            else:
                t = f"{fmt_time(ts)} ({ts})"
                out.line(f"{i:>8}  {t:<42}  {off:>12}")


# ---------------------------------------------------------------------------- verify


def _verify_targets(path: str) -> list[tuple[str, int | None]]:
    _existing(path)
    if os.path.isdir(path):
        return [(d, None) for d in ins.partition_dirs(path)]
    parsed = parse_segment_name(os.path.basename(path))
    if parsed is None or (parsed[1] != LOG_SUFFIX and parsed[1] not in ins.KINDS):
        raise ins.InspectError(f"{path}: not a kdelay segment file (want a partition "
                               f"directory, or a <20-digit offset>.log/.index/.timeindex/"
                               f".dlyindex file)")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(segment_file(directory, parsed[0], LOG_SUFFIX)):
        raise ins.InspectError(f"{path}: its segment has no .log file")
    return [(os.path.dirname(path) or ".", parsed[0])]


def _total_log_bytes(directory: str) -> int:
    return sum(s.log_size for s in ins.list_segments(directory))


def cmd_verify(args: argparse.Namespace, out: Out) -> int:
    targets = _verify_targets(args.path)
    total = sum(s.log_size for d, only in targets for s in ins.list_segments(d)
                if only is None or s.base_offset == only)
    bar = ProgressBar("verify", total)
    reports = []
    try:
        for directory, only in targets:
            rep = ins.verify_partition(directory, only_base=only, progress=bar)
            reports.append(rep)
            bar.close()
            if not args.json:
                for f in rep.findings:
                    if f.problem or not args.quiet:
                        out.line(f.line())
    finally:
        bar.close()
    problems = sum(len(r.problems) for r in reports)
    if args.json:
        out.json({
            "ok": problems == 0, "problems": problems,
            "partitions": [{
                "path": r.directory, "ok": r.ok, "segments": r.segments, "batches": r.batches,
                "records": r.records, "bytes": r.bytes, "indexes_checked": r.indexes_checked,
                "findings": [f.as_dict() for f in r.findings]} for r in reports]})
    else:
        segs = sum(r.segments for r in reports)
        nbytes = sum(r.bytes for r in reports)
        what = (f"{len(reports)} partition{'s' if len(reports) != 1 else ''}, {segs} segments, "
                f"{sum(r.batches for r in reports)} batches, "
                f"{sum(r.records for r in reports)} records, {fmt_size(nbytes)}, "
                f"{sum(r.indexes_checked for r in reports)} indexes")
        out.line(f"{'OK' if not problems else 'DAMAGED'}: {what}"
                 + (f"; {problems} problem{'s' if problems != 1 else ''}" if problems else ""))
    return EXIT_PROBLEMS if problems else EXIT_OK


# ---------------------------------------------------------------------------- rebuild-index


def _lock(directory: str) -> int:
    from .errors import LogLockedError
    from .log.loader import take_lock

    try:
        return take_lock(directory)
    except LogLockedError:
        raise LockedError(f"{directory}: locked by a running writer (an open Log); "
                          f"close it before rebuilding indexes") from None


def cmd_rebuild_index(args: argparse.Namespace, out: Out) -> int:
    from .log.segment import LogSegment

    _existing(args.dir)
    if not os.path.isdir(args.dir):
        raise ins.InspectError(f"{args.dir}: not a directory; rebuild-index takes a log "
                               f"directory")
    dirs = ins.partition_dirs(args.dir)
    failures = 0
    for directory in dirs:
        lock_fd = _lock(directory)
        try:
            segments = ins.list_segments(directory)
            bar = ProgressBar("rebuild-index", sum(s.log_size for s in segments))
            for s in segments:
                seg, error = LogSegment.recover(directory, s.base_offset,
                                                index_interval_bytes=args.index_interval_bytes,
                                                check_crc=True, truncate=False)
                try:
                    bar(s.log_size)
                    if error is not None:
                        # an index over the intact prefix would claim the whole file and
                        # hide the damage from the next open: leave this segment alone
                        failures += 1
                        bar.close()
                        err(f"NOT rebuilt: {error}; the next Log.open recovers it "
                            f"(see kdelay verify / dump-log)")
                        continue
                    seg.persist_indexes()
                    out.line(f"rebuilt {s.log_path}: {len(seg.dly_index)} batches, "
                             f"offsets {s.base_offset}..{seg.next_offset - 1}")
                finally:
                    seg.close()
            bar.close()
        finally:
            os.close(lock_fd)
    return EXIT_PROBLEMS if failures else EXIT_OK


class LockedError(KdelayError):
    pass


# ---------------------------------------------------------------------------- stats


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def cmd_stats(args: argparse.Namespace, out: Out) -> int:
    _existing(args.dir)
    if not os.path.isdir(args.dir):
        raise ins.InspectError(f"{args.dir}: not a directory; stats takes a log directory")
    now = args.now if args.now is not None else _now_ms()
    dirs = ins.partition_dirs(args.dir)
    total = sum(_total_log_bytes(d) for d in dirs)
    bar = ProgressBar("stats", total)
    try:
        parts = [ins.partition_stats(d, now, progress=bar) for d in dirs]
    finally:
        bar.close()
    if len(parts) == 1:
        result = parts[0]
    else:
        result = _totals(parts, now)
        result["path"] = args.dir
        result["partitions"] = parts
    if args.json:
        out.json(result)
    else:
        for p in parts:
            _stats_text(p, out)
        if len(parts) > 1:
            out.line(f"TOTAL over {len(parts)} partitions")
            _stats_body(result, out)
    return EXIT_OK


def _totals(parts: list[dict], now: int) -> dict:
    def opt(key: str, fn: Callable) -> int | None:
        vals = [p[key] for p in parts if p[key] is not None]
        return fn(vals) if vals else None

    keys = ("segments", "records", "batches", "bytes", "index_bytes", "due_records",
            "pending_records", "segments_from_index", "segments_scanned")
    t = {k: sum(p[k] for p in parts) for k in keys}
    t["now"] = now
    t["earliest_pending_deliver_after"] = opt("earliest_pending_deliver_after", min)
    t["latest_deliver_after"] = opt("latest_deliver_after", max)
    t["forecast"] = {k: sum(p["forecast"][k] for p in parts) for k in parts[0]["forecast"]}
    t["damaged_segments"] = [s for p in parts for s in p["damaged_segments"]]
    return t


def _stats_text(p: dict, out: Out) -> None:
    out.line(f"{p['path']}")
    out.line(f"  {'offsets':<22} {p['log_start_offset']}..{p['log_end_offset'] - 1} "
             f"(log end {p['log_end_offset']})")
    _stats_body(p, out)
    shut = "clean" if p["clean_shutdown"] else "not clean (open now, or crashed)"
    out.line(f"  {'last shutdown':<22} {shut}; recovery point {p['recovery_point']}")
    for g in p["groups"]:
        pos = ("none" if g["offset"] is None else
               f"offset {g['offset']}, deliverAfter {fmt_time(g['deliver_after'])}")
        out.line(f"  {'group ' + g['group']:<22} at {pos}; {g['due_not_consumed']:,} due "
                 f"records not yet consumed")
    out.line()


def _stats_body(p: dict, out: Out) -> None:
    now = p["now"]
    src = f"{p['segments_from_index']} from indexes, {p['segments_scanned']} scanned"
    out.line(f"  {'segments':<22} {p['segments']} ({src})")
    out.line(f"  {'records':<22} {p['records']:,} in {p['batches']:,} batches")
    out.line(f"  {'bytes':<22} {fmt_size(p['bytes'])} of log, {fmt_size(p['index_bytes'])} "
             f"of indexes")
    out.line(f"  {'due':<22} {p['due_records']:,}   (as of {fmt_time(now)})")
    out.line(f"  {'pending':<22} {p['pending_records']:,}")
    e = p["earliest_pending_deliver_after"]
    if e is not None:
        out.line(f"  {'earliest pending':<22} {fmt_time(e)} ({e}), in {fmt_duration(e - now)}")
    last = p["latest_deliver_after"]
    if last is not None:
        when = (f"in {fmt_duration(last - now)}" if last > now
                else f"{fmt_duration(now - last)} ago")
        out.line(f"  {'latest deliverAfter':<22} {fmt_time(last)} ({last}), {when}")
    f = p["forecast"]
    out.line(f"  {'coming due':<22} next minute {f['within_1m']:,} | next hour "
             f"{f['within_1h']:,} | next day {f['within_1d']:,} | later {f['beyond_1d']:,}")
    for s in p["damaged_segments"]:
        out.line(f"  {'DAMAGED':<22} {s} (counts stop at the damage; run kdelay verify)")


# ---------------------------------------------------------------------------- demo


def run_demo(argv: list[str]) -> int:
    try:
        from . import demo
    except ModuleNotFoundError as e:
        if e.name in ("kdelay.demo", f"{__package__}.demo"):
            err("demo: not available in this installation (kdelay.demo is missing)")
            return EXIT_USAGE
        err(f"demo: needs the package {e.name!r}, which is not installed")
        return EXIT_USAGE
    rc = demo.main(argv)
    return rc if isinstance(rc, int) else EXIT_OK


# ---------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kdelay",
        description="Inspect, check and repair kdelay logs. Everything except rebuild-index "
                    "only reads and takes no lock: safe on a live log.",
        epilog="exit status: 0 ok, 1 problems found (or log locked), 2 usage or input error")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    d = sub.add_parser("dump-log", help="print the batches (and records) of a .log file")
    d.add_argument("file", help="a segment's .log file")
    d.add_argument("--print-data", action="store_true", help="also print every record")
    d.add_argument("--offsets", type=parse_offsets, metavar="A..B",
                   help="only batches holding offsets A..B (inclusive; A.. and ..B work)")
    d.add_argument("--max-bytes", type=positive_int, default=64, metavar="N",
                   help="show at most N characters/bytes of each key and value (default 64)")
    d.add_argument("--json", action="store_true", help="one JSON object per batch per line")
    d.set_defaults(handler=cmd_dump_log)

    x = sub.add_parser("dump-index", help="print an index file (.dlyindex, .index, .timeindex)")
    x.add_argument("file")
    x.add_argument("--summary", action="store_true",
                   help="only the header and whether the index is current for its .log")
    x.add_argument("--json", action="store_true",
                   help="one JSON object per entry per line (with --summary: the header)")
    x.set_defaults(handler=cmd_dump_index)

    v = sub.add_parser("verify", help="check CRCs, offset continuity and every index")
    v.add_argument("path", help="a partition directory, a topic directory, or one segment file")
    v.add_argument("--json", action="store_true", help="one JSON report")
    v.add_argument("-q", "--quiet", action="store_true", help="print problems only")
    v.set_defaults(handler=cmd_verify)

    r = sub.add_parser("rebuild-index",
                       help="rebuild every segment's indexes from its .log (takes the lock)")
    r.add_argument("dir")
    r.add_argument("--index-interval-bytes", type=positive_int, default=4096, metavar="N",
                   help="offset/time index sparsity, as LogConfig (default 4096)")
    r.set_defaults(handler=cmd_rebuild_index)

    s = sub.add_parser("stats", help="records, due/pending counts and a delivery forecast")
    s.add_argument("dir")
    s.add_argument("--now", type=non_negative_int, metavar="MS",
                   help="the time to count from, ms since the epoch (default: wall clock)")
    s.add_argument("--json", action="store_true", help="one JSON object")
    s.set_defaults(handler=cmd_stats)

    sub.add_parser("demo", help="run the demo (options: kdelay demo --help)", add_help=False)
    # Spark commands (kdelay.spark; need the spark extra) parse their own options
    sub.add_parser("spark-verify", help="offline checks run in Spark (kdelay spark-verify --help)",
                   add_help=False)
    sub.add_parser("forecast", help="records coming due per time window, via Spark "
                                    "(kdelay forecast --help)", add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "demo":
        # the demo parses its own options; pass them through untouched
        return run_demo(argv[1:])
    if argv and argv[0] in ("spark-verify", "forecast"):
        from . import spark as kspark  # imported lazily: pyspark is an optional extra

        run = kspark.cli_spark_verify if argv[0] == "spark-verify" else kspark.cli_forecast
        return run(argv[1:])
    args = build_parser().parse_args(argv)
    out = Out()
    try:
        rc = args.handler(args, out)
        sys.stdout.flush()
        return rc
    except ins.InspectError as e:
        err(str(e))
        return EXIT_USAGE
    except (LockedError, ins.IndexUnreadable) as e:
        err(str(e))
        return EXIT_PROBLEMS
    except KdelayError as e:
        err(str(e))
        return EXIT_PROBLEMS
    except BrokenPipeError:
        # the reader went away (`| head`): stop quietly, and keep Python's exit flush quiet
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_PROBLEMS
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        return 130
    except OSError as e:
        err(f"{e.filename + ': ' if e.filename else ''}{e.strerror or e}")
        return EXIT_PROBLEMS
    except Exception as e:
        if os.environ.get("KDELAY_DEBUG"):
            raise
        err(f"internal error: {type(e).__name__}: {e} (set KDELAY_DEBUG=1 for a traceback)")
        return EXIT_PROBLEMS


if __name__ == "__main__":
    sys.exit(main())
