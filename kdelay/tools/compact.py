"""`kdelay compact DIR`: compact a log from the shell (Log.compact under the directory's
lock: refused while another process has the log open)."""

from __future__ import annotations

import argparse
import os

from ..config import LogConfig
from ..errors import InspectError, LogLockedError
from ..log.local.directory_lock import lock_holder
from ..partition import Log
from ..records import CompactionResult
from .formatting import Out
from .progress import fmt_size
from .scanning import existing, partition_dirs

EXIT_OK = 0


def cmd_compact(args: argparse.Namespace, out: Out) -> int:
    existing(args.dir)
    if not os.path.isdir(args.dir):
        raise InspectError(f"{args.dir}: not a directory; compact takes a log directory")
    dirs = partition_dirs(args.dir)
    defaults = LogConfig()
    config = LogConfig(
        retention_ms=defaults.retention_ms if args.retention_ms is None else args.retention_ms,
        compaction_min_ratio=(defaults.compaction_min_ratio if args.min_ratio is None
                              else args.min_ratio))
    reports = []
    for directory in dirs:
        try:
            log = Log.open(directory, config=config)
        except LogLockedError as e:
            raise LogLockedError(f"{directory}: locked by {lock_holder(e.pid)}; compaction "
                                 f"needs the lock: close that Log, or call Log.compact() in "
                                 f"that process", e.pid) from None
        with log:
            res = log.compact()
        reports.append((directory, res))
        if args.json:
            out.json({"path": directory, **res._asdict()})
        else:
            saved = res.bytes_before - res.bytes_after
            why = why_nothing_reclaimed(res, config.compaction_min_ratio)
            out.line(f"{directory}: {res.segments_rewritten} segment(s) rewritten; .log bytes "
                     f"{fmt_size(res.bytes_before)} -> {fmt_size(res.bytes_after)} "
                     f"({fmt_size(saved)} reclaimed)" + (f": {why}" if why else ""))
    return EXIT_OK


def why_nothing_reclaimed(res: CompactionResult, min_ratio: float) -> str | None:
    """Why a compaction reclaimed nothing, as the command reports it (None: it did, or the
    log is empty)."""
    if res.bytes_after < res.bytes_before:
        return None
    if min_ratio <= 0:
        return "compaction is off (--min-ratio 0)"
    reasons = []
    if res.bytes_before > res.active_segment_bytes and not res.segments_rewritten:
        reasons.append(f"no sealed segment has {min_ratio:.0%} of its bytes removable")
    if res.active_segment_bytes:
        reasons.append(f"the active segment ({fmt_size(res.active_segment_bytes)}) is never "
                       f"rewritten or deleted: roll it (log.roll()), or lower segment_bytes "
                       f"or segment_ms so that it seals sooner")
    return "; ".join(reasons) or None


def _ratio(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1] (0: never compact): {text}")
    return v


def add_parser(sub, non_negative_int) -> None:
    c = sub.add_parser("compact", help="rewrite sealed segments without their removable "
                                       "records (takes the lock)")
    c.add_argument("dir", help="a partition directory, or a topic directory")
    c.add_argument("--retention-ms", type=non_negative_int, metavar="MS",
                   help="records due longer ago than this are removable (default: "
                        "LogConfig's, 7 days)")
    c.add_argument("--min-ratio", type=_ratio, metavar="R",
                   help="rewrite a segment once this share of its bytes is removable "
                        "(default: LogConfig's, 0.5; 0: never)")
    c.add_argument("--json", action="store_true", help="one JSON object per partition")
    c.set_defaults(handler=cmd_compact)
