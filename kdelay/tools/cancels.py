"""Cancellations as the tools see them (format: kdelay/log/cancellation/journal.py): dump a
`.cancels` journal or `.cancelindex` cache (`kdelay dump-index`), check a segment's files
(`kdelay verify`), and count or list cancelled offsets (`kdelay stats`, `kdelay dump-log`).
Only reads."""

from __future__ import annotations

import os

import numpy as np

from ..index.index_file import IndexFileError, load_index, read_meta
from ..log.cancellation import journal as cz
from ..log.segments.layout import parse_segment_name
from .formatting import Out, err

EXIT_OK, EXIT_PROBLEMS = 0, 1


def is_cancel_file(path: str) -> bool:
    return path.endswith(cz.CANCEL_SUFFIXES)


def cancelled_offsets(directory: str, base_offset: int, next_offset: int | None = None
                      ) -> np.ndarray:
    """The segment's cancelled offsets, sorted (empty if none)."""
    return cz.read_cancelled(directory, base_offset, next_offset)


def dump_cancel_file(path: str, out: Out, as_json: bool) -> int:
    """Print a journal's entries or a cache's offsets; problems go to stderr (exit 1)."""
    parsed = parse_segment_name(os.path.basename(path))
    base = parsed[0] if parsed is not None else 0
    if path.endswith(cz.JOURNAL_SUFFIX):
        scan = cz.read_journal(path, base)
        if not as_json:
            out.line(f"# kind:         cancellation journal ({cz.JOURNAL_MAGIC.decode()})")
            out.line(f"# base offset:  {base}")
            out.line(f"# generation:   {scan.generation}")
            out.line(f"# entries:      {len(scan.entries)} ({scan.size} bytes)")
            out.line(f"{'POSITION':>12}  {'KIND':<8}  {'OFFSET':>12}  {'COPY_OFFSET':>12}  "
                     f"COPY_CRC")
        for e in scan.entries:
            kind = cz.KIND_NAMES[e.kind]
            if as_json:
                out.json({"position": e.position, "kind": kind, "offset": e.offset,
                          "copy_offset": e.copy_offset if e.kind == cz.MOVE else None,
                          "copy_crc": e.copy_crc if e.kind == cz.MOVE else None})
            else:
                copy = (f"{e.copy_offset:>12}  {e.copy_crc:#010x}" if e.kind == cz.MOVE
                        else f"{'-':>12}  -")
                out.line(f"{e.position:>12}  {kind:<8}  {e.offset:>12}  {copy}")
        for pos, what in scan.problems:
            err(f"{path} at byte {pos}: {what}")
        return EXIT_PROBLEMS if scan.problems else EXIT_OK
    try:
        meta, _ = read_meta(path, cz.INDEX_MAGIC)
        _, (col,) = load_index(path, cz.INDEX_MAGIC, cz.CACHE_DTYPES,
                               base_offset=meta.base_offset, log_bytes=meta.log_bytes)
    except IndexFileError as e:
        err(f"{path}: {e}")
        return EXIT_PROBLEMS
    journal = path[: -len(cz.CANCEL_INDEX_SUFFIX)] + cz.JOURNAL_SUFFIX
    scan = cz.read_journal(journal, meta.base_offset)
    current = cz.cache_is_current(meta, meta.base_offset, scan.size, scan.generation)
    if not as_json:
        out.line(f"# kind:         cancellation cache ({cz.INDEX_MAGIC.decode()})")
        out.line(f"# base offset:  {meta.base_offset}")
        out.line(f"# covers:       {meta.log_bytes} journal bytes, generation "
                 f"{meta.next_offset}")
        out.line(f"# entries:      {meta.entries}")
        out.line(f"# current:      {'yes' if current else 'NO (rebuilt on next open)'}")
        out.line(f"{'#':>8}  {'CANCELLED_OFFSET':>16}")
    for i, o in enumerate(col.tolist()):
        if as_json:
            out.json({"index": i, "offset": o})
        else:
            out.line(f"{i:>8}  {o:>16}")
    return EXIT_OK


def check_segment(rep, directory: str, base_offset: int, next_offset: int) -> int:
    """Add the segment's cancellation problems to a VerifyReport; returns how many records
    of the segment are cancelled."""
    problems, n = cz.check_cancels(directory, base_offset, next_offset)
    for path, pos, what in problems:
        rep.add(True, path, pos, what)
    return n
