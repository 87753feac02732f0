"""`kdelay stats`: records, due and pending counts, a delivery forecast and each consumer
group's backlog, from the persisted DeliverAfterIndexes when current (no .log read), else
from a walk of the batch headers. Only reads."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..clock import wall_clock
from ..errors import CorruptLogError, KdelayError
from ..fetch.lag import due_after
from ..groups.positions import GroupStore
from ..groups.queue.queue_groups import group_counts
from ..index.entry import E_BASE_OFFSET, E_DELIVER_AFTER, E_LAST_OFFSET_DELTA
from ..index.index_file import currency_mismatches
from ..log.batch.walker import Progress
from ..log.cancellation.per_batch import cancelled_per_batch
from ..log.segments.layout import CLEAN_SHUTDOWN_FILE, SegmentFiles
from ..log.segments.recovery_point import read_recovery_point
from ..log.tiered import inventory, tier
from ..log.tiered.placement import placement_counts
from ..settle import settle
from . import cancels
from .formatting import Out, fmt_duration, fmt_time
from .progress import ProgressBar, fmt_size
from .scanning import (
    DLY,
    KINDS,
    InspectError,
    existing,
    in_flight,
    list_segments,
    partition_dirs,
    read_index_file,
    scan_segment,
    total_log_bytes,
)

EXIT_OK, EXIT_PROBLEMS = 0, 1


FORECAST = (("within_1m", 60_000), ("within_1h", 3_600_000), ("within_1d", 86_400_000))


@dataclass
class SegmentSummary:
    """Per-batch (deliver_after, base_offset, last_offset_delta) of one segment, from its
    persisted DeliverAfterIndex when current, else from a walk of the .log's headers."""

    segment: SegmentFiles
    deliver_after: np.ndarray
    base: np.ndarray
    lod: np.ndarray
    from_index: bool
    next_offset: int
    damaged: bool = False


def summarize_segment(seg: SegmentFiles, progress: Progress | None = None) -> SegmentSummary:
    idx = read_index_file(seg.path(DLY.suffix), DLY)
    if (not idx.problems and idx.meta is not None and idx.columns is not None
            and not currency_mismatches(idx.meta, base_offset=seg.base_offset,
                                        log_bytes=seg.log_size)):
        cols = idx.columns
        da, base = cols[E_DELIVER_AFTER], cols[E_BASE_OFFSET]
        lod = cols[E_LAST_OFFSET_DELTA]
        if progress:
            progress(seg.log_size)
        return SegmentSummary(seg, da.astype(np.int64), base.astype(np.int64),
                              lod.astype(np.int64), True, idx.meta.next_offset)
    scan = scan_segment(seg, check_crc=False, progress=progress)
    da = np.array([b.header.deliver_after for b in scan.batches], dtype=np.int64)
    base = np.array([b.base_offset for b in scan.batches], dtype=np.int64)
    lod = np.array([b.header.last_offset_delta for b in scan.batches], dtype=np.int64)
    damaged = any(not in_flight(seg, b) for b in scan.breaks)
    return SegmentSummary(seg, da, base, lod, False, scan.next_offset(), damaged)


def partition_stats(directory: str, now: int, progress: Progress | None = None) -> dict:
    """The stats of one partition. On a live log a damaged segment only counts if it is
    still damaged when looked at again (see kdelay/settle.py)."""
    result, damaged = settle(directory,
                             lambda first: _stats_once(directory, now,
                                                       progress if first else None),
                             lambda r: set(r["damaged_segments"]))
    result["damaged_segments"] = [p for p in result["damaged_segments"] if p in damaged]
    return result


def _summaries(directory: str, progress: Progress | None) -> list[SegmentSummary]:
    """Each segment's summary; a segment deleted (by retention) since the listing is left
    out, as it would have been a moment later."""
    out = []
    for seg in list_segments(directory):
        try:
            out.append(summarize_segment(seg, progress))
        except InspectError:
            if os.path.exists(seg.log_path):
                raise
    return out


def _stats_once(directory: str, now: int, progress: Progress | None) -> dict:
    sums = _summaries(directory, progress)
    segments = [s.segment for s in sums]
    da = np.concatenate([s.deliver_after for s in sums]) if sums else np.empty(0, np.int64)
    base = np.concatenate([s.base for s in sums]) if sums else np.empty(0, np.int64)
    counts = (np.concatenate([s.lod for s in sums]) + 1) if sums else np.empty(0, np.int64)
    pending_mask = da > now
    records = int(counts.sum())
    pending = int(counts[pending_mask].sum())
    gone = _cancelled_offsets(directory, sums)
    # what will be delivered: a cancelled record never comes due (as kdelay.spark.forecast)
    cancelled_here = cancelled_per_batch(gone, base, counts).cancelled  # per batch
    live = counts - cancelled_here
    forecast = {name: int(live[pending_mask & (da <= now + ms)].sum())
                for name, ms in FORECAST}
    forecast["beyond_1d"] = int(live[da > now + FORECAST[-1][1]].sum())
    groups = []
    positions = _read_groups(directory)
    # lag as the facade's metrics count it, over all segments' batches in key order,
    # cancelled records left out (a group never gets them)
    order = np.lexsort((base, da))
    lags = due_after(da[order], base[order], counts[order] - 1, now,
                     [key for _, key in positions], gone)
    for (name, key), lag in zip(positions, lags, strict=True):
        groups.append({"group": name,
                       "deliver_after": None if key is None else key[0],
                       "offset": None if key is None else key[1],
                       "due_not_consumed": lag})
    queues = _queue_groups(directory, now, da[order], base[order], counts[order] - 1, gone)
    clean = os.path.exists(os.path.join(directory, CLEAN_SHUTDOWN_FILE))
    cancelled, cancelled_pending = int(len(gone)), int(cancelled_here[pending_mask].sum())
    remote = remote_summary(directory)
    starts = [s.base_offset for s in segments[:1]]
    if remote["log_start_offset"] is not None:  # remote-only segments come first
        starts.append(remote["log_start_offset"])
    return {
        "path": directory,
        "now": now,
        "segments": len(segments),
        "log_start_offset": min(starts, default=0),
        "log_end_offset": sums[-1].next_offset if sums else 0,
        "records": records,
        "batches": int(len(da)),
        "bytes": sum(s.log_size for s in segments),
        "index_bytes": _index_bytes(segments),
        "due_records": records - pending,
        "pending_records": pending,
        "cancelled_records": cancelled,
        "cancelled_pending": cancelled_pending,
        "earliest_pending_deliver_after": int(da[pending_mask].min()) if pending else None,
        "latest_deliver_after": int(da.max()) if len(da) else None,
        "forecast": forecast,
        "segments_from_index": sum(s.from_index for s in sums),
        "segments_scanned": sum(not s.from_index for s in sums),
        "damaged_segments": [s.segment.log_path for s in sums if s.damaged],
        "clean_shutdown": clean,
        "recovery_point": read_recovery_point(directory),
        "groups": groups,
        "queues": queues,
        "remote": remote,
    }


def remote_summary(directory: str) -> dict:
    """Tiered storage as the directory's `N.remote` markers record it (no store request):
    where the segments are, counted as `log.metrics()["remote"]` counts them (placement.py),
    and those held only remotely. The other counts of stats cover local segments only; `remote_only_records` is what the remote-only segments' offsets span
    (an upper bound for a compacted one). `damaged_markers` lists unreadable markers (their
    segments are left out; kdelay verify says more)."""
    settings = None
    with contextlib.suppress(CorruptLogError):
        settings = tier.read_settings(directory)
    damaged: list[CorruptLogError] = []
    listed = inventory.list_all_segments(directory, damaged=damaged)
    only = [s.remote for s in listed if s.remote_only and s.remote is not None]
    return {
        "storage": None if settings is None else settings[0],
        **placement_counts([(s.log_size, s.remote) for s in listed]),
        "segments_remote_only": len(only),
        "remote_only_records": sum(c.next_offset - c.base_offset for c in only),
        "log_start_offset": only[0].base_offset if only else None,
        "damaged_markers": [e.path for e in damaged],
    }


def _queue_groups(directory: str, now: int, da: np.ndarray, base: np.ndarray,
                  lod: np.ndarray, cancelled: np.ndarray) -> list[dict]:
    """Each queue group's counts from its state files, as Log.metrics reports a group not
    open in its process (queue_groups.group_counts; cancelled records are never
    available); a group whose files are damaged shows the error."""
    out = []
    counts = group_counts(directory, now,
                          lambda key: due_after(da, base, lod, now, [key], cancelled)[0])
    for name, c in counts.items():
        if "cursor" in c:  # as JSON shows it (a group in error has none)
            key = c.pop("cursor")
            c["cursor"] = None if key is None else {"deliver_after": key.deliver_after,
                                                    "offset": key.offset}
        out.append({"group": name, **c})
    return out


def _read_groups(directory: str) -> list[tuple[str, tuple[int, int] | None]]:
    """Every readable group position (unreadable ones are verify's business)."""
    store = GroupStore(directory)
    out = []
    for group in store.groups():
        try:
            key = store.committed(group)
        except KdelayError:
            continue
        out.append((group, None if key is None else (key.deliver_after, key.offset)))
    return out


def _index_bytes(segments: list[SegmentFiles]) -> int:
    total = 0
    for s in segments:
        for suffix in KINDS:
            with contextlib.suppress(OSError):
                total += os.path.getsize(s.path(suffix))
    return total


def cmd_stats(args: argparse.Namespace, out: Out) -> int:
    if args.broker:
        from .remote_ops import cmd_broker_stats
        return cmd_broker_stats(args, out)
    if args.dir is None:
        raise InspectError("stats needs a directory (or --broker URL)")
    existing(args.dir)
    if not os.path.isdir(args.dir):
        raise InspectError(f"{args.dir}: not a directory; stats takes a log directory")
    now = args.now if args.now is not None else wall_clock()
    dirs = partition_dirs(args.dir)
    total = sum(total_log_bytes(d) for d in dirs)
    bar = ProgressBar("stats", total)
    try:
        parts = [partition_stats(d, now, progress=bar) for d in dirs]
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
    # the exit code agrees with what was printed: damage reported is a failure
    return EXIT_PROBLEMS if any(p["damaged_segments"] or p["remote"]["damaged_markers"]
                                for p in parts) else EXIT_OK


def _cancelled_offsets(directory: str, sums: list[SegmentSummary]) -> np.ndarray:
    """Every segment's cancelled offsets, sorted."""
    gone = [cancels.cancelled_offsets(directory, s.segment.base_offset, s.next_offset)
            for s in sums]
    return np.sort(np.concatenate(gone)) if gone else np.empty(0, np.int64)


def _totals(parts: list[dict], now: int) -> dict:
    def opt(key: str, fn: Callable) -> int | None:
        vals = [p[key] for p in parts if p[key] is not None]
        return fn(vals) if vals else None

    keys = ("segments", "records", "batches", "bytes", "index_bytes", "due_records",
            "pending_records", "cancelled_records", "cancelled_pending",
            "segments_from_index", "segments_scanned")
    t = {k: sum(p[k] for p in parts) for k in keys}
    t["now"] = now
    t["earliest_pending_deliver_after"] = opt("earliest_pending_deliver_after", min)
    t["latest_deliver_after"] = opt("latest_deliver_after", max)
    t["forecast"] = {k: sum(p["forecast"][k] for p in parts) for k in parts[0]["forecast"]}
    t["damaged_segments"] = [s for p in parts for s in p["damaged_segments"]]
    t["remote"] = {k: sum(p["remote"][k] for p in parts) for k in _REMOTE_COUNTS}
    return t


# the counts of remote_summary that add up across partitions: placement's, and its own two
_REMOTE_COUNTS = (*placement_counts([]), "segments_remote_only", "remote_only_records")


def _stats_text(p: dict, out: Out) -> None:
    out.line(f"{p['path']}")
    out.line(f"  {'offsets':<22} {p['log_start_offset']}..{p['log_end_offset'] - 1} "
             f"(log end {p['log_end_offset']})")
    _stats_body(p, out)
    _remote_text(p["remote"], out)
    shut = "clean" if p["clean_shutdown"] else "not clean (open now, or crashed)"
    out.line(f"  {'last shutdown':<22} {shut}; recovery point {p['recovery_point']}")
    for g in p["groups"]:
        pos = ("none" if g["offset"] is None else
               f"offset {g['offset']}, deliverAfter {fmt_time(g['deliver_after'])}")
        out.line(f"  {'group ' + g['group']:<22} at {pos}; {g['due_not_consumed']:,} due "
                 f"records not yet consumed")
    for q in p.get("queues", []):
        if "error" in q:
            out.line(f"  {'queue ' + q['group']:<22} UNREADABLE: {q['error']} (run kdelay verify)")
            continue
        out.line(f"  {'queue ' + q['group']:<22} acquired {q['acquired']:,} | available "
                 f"{q['available']:,} | delayed {q['delayed']:,} | acked {q['acked']:,} | "
                 f"rejected {q['rejected']:,}")
    out.line()


def _remote_text(r: dict, out: Out) -> None:
    if r["storage"] is None and not r["segments_remote"]:
        return  # no tiered storage
    out.line(f"  {'tiered storage':<22} {r['storage'] or 'UNKNOWN (no remote-storage.json)'}")
    out.line(f"  {'local':<22} {r['segments_local']} segments, {fmt_size(r['bytes_local'])}")
    out.line(f"  {'remote copies':<22} {r['segments_remote']} segments, "
             f"{fmt_size(r['bytes_remote'])}; {r['segments_remote_only']} held only remotely "
             f"({r['remote_only_records']:,} offsets, not counted above)")
    for path in r["damaged_markers"]:
        out.line(f"  {'DAMAGED':<22} {path} (run kdelay verify)")


def _stats_body(p: dict, out: Out) -> None:
    now = p["now"]
    src = f"{p['segments_from_index']} from indexes, {p['segments_scanned']} scanned"
    out.line(f"  {'segments':<22} {p['segments']} ({src})")
    out.line(f"  {'records':<22} {p['records']:,} in {p['batches']:,} batches")
    out.line(f"  {'bytes':<22} {fmt_size(p['bytes'])} of log, {fmt_size(p['index_bytes'])} "
             f"of indexes")
    out.line(f"  {'due':<22} {p['due_records']:,}   (as of {fmt_time(now)})")
    out.line(f"  {'pending':<22} {p['pending_records']:,}")
    if p["cancelled_records"]:
        out.line(f"  {'cancelled':<22} {p['cancelled_records']:,} "
                 f"({p['cancelled_pending']:,} of them not yet due; never delivered)")
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

