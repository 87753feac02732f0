"""`kdelay dump-index`: the header and entries of one index file, and whether it is
current for its .log."""

from __future__ import annotations

import argparse
import os

from ..errors import IndexUnreadable, InspectError
from ..index.index_file import currency_mismatches
from ..log.segments.layout import LOG_SUFFIX, parse_segment_name
from . import cancels
from .formatting import Out, err, fmt_time, iso_or_none
from .progress import fmt_size
from .scanning import DLY, OFFSET, IndexFile, IndexKind, existing, kind_for_path, read_index_file

EXIT_OK, EXIT_PROBLEMS = 0, 1


def _index_currency(path: str, idx: IndexFile) -> tuple[bool, str]:
    """Is the index current for its .log? (yes/no, and why)."""
    parsed = parse_segment_name(os.path.basename(path))
    reasons = []
    if idx.problems:
        reasons.append("; ".join(idx.problems))
    if parsed is None:
        reasons.append("file name is not a 20-digit segment base offset")
    log_path = path[: -len(idx.kind.suffix)] + LOG_SUFFIX
    log_name = os.path.basename(log_path)
    try:
        log_size = os.path.getsize(log_path)
    except OSError:
        log_size = None
    mismatches = [] if idx.meta is None else currency_mismatches(
        idx.meta, base_offset=None if parsed is None else parsed[0], log_bytes=log_size)
    for m in mismatches:
        if m.field == "base_offset":
            reasons.append(f"header base offset {m.found} != file name's {m.expected}")
    if log_size is None:
        reasons.append(f"no {log_name} next to it")
    for m in mismatches:
        if m.field == "log_bytes":
            reasons.append(f"stale: covers {m.found} log bytes, {log_name} has {m.expected}")
    if reasons:
        return False, "; ".join(reasons)
    return True, (f"matches {log_name} ({fmt_size(log_size or 0)}), base offset "
                  f"and checksums ok")


def cmd_dump_index(args: argparse.Namespace, out: Out) -> int:
    path = existing(args.file)
    if os.path.isdir(path):
        raise InspectError(f"{path}: is a directory; dump-index takes one index file")
    if cancels.is_cancel_file(path):
        return cancels.dump_cancel_file(path, out, args.json)
    kind = kind_for_path(path)
    if kind is None:
        hint = (f"; use: kdelay dump-log {path}" if path.endswith(LOG_SUFFIX) else "")
        raise InspectError(f"{path}: not an index file (expected a .dlyindex, .index, "
                               f".timeindex, .cancels or .cancelindex suffix){hint}")
    idx = read_index_file(path, kind)
    if idx.wrong_kind is not None:
        raise InspectError(f"{path}: {idx.problems[0]}")
    if idx.meta is None:  # no trustworthy header: nothing to show
        raise IndexUnreadable(f"{path}: {'; '.join(idx.problems)}")
    current, why = _index_currency(path, idx)
    meta = idx.meta
    summary = {"path": path, "kind": kind.name, "magic": (idx.magic or kind.magic).decode(),
               "base_offset": meta.base_offset, "log_bytes": meta.log_bytes,
               "next_offset": meta.next_offset, "entries": meta.entries,
               "header_crc_ok": idx.header_crc_ok, "data_crc_ok": idx.data_crc_ok,
               "damaged_entries": [list(span) for span in idx.damaged_entries],
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
                v = f"{v} ({fmt_size(meta.log_bytes)})"
            out.line(f"# {label + ':':<13} {v}")
        out.line(f"# {'checksums:':<13} header {'ok' if idx.header_crc_ok else 'BAD'}, "
                 f"data {'ok' if idx.data_crc_ok else 'BAD'}")
        out.line(f"# {'current:':<13} {'yes' if current else 'NO'} - {why}")
    if not args.summary and idx.columns is not None:
        _dump_entries(kind, idx, out, args.json)
    if not idx.data_crc_ok:
        where = ", ".join(f"{a}..{b - 1}" for a, b in idx.damaged_entries)
        err(f"{path}: {'; '.join(idx.problems)}"
            + (f" in entries {where}" if where else "") + " (entries shown may be wrong)")
        return EXIT_PROBLEMS
    return EXIT_OK


def _dump_entries(kind: IndexKind, idx: IndexFile, out: Out, as_json: bool) -> None:
    assert idx.columns is not None
    cols = [c.tolist() for c in idx.columns]
    if kind is DLY:
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
    elif kind is OFFSET:
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

