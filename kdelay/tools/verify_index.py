"""verify's index checks: each persisted index read without trusting it and compared,
entry by entry, with what the engine would build from the batches of its .log."""

from __future__ import annotations

import numpy as np

from ..index.index_file import HEADER_SIZE, currency_mismatches
from ..log.batch.walker import Batch
from ..log.segments.layout import SegmentFiles
from .scanning import (
    DLY,
    OFFSET,
    IndexFile,
    IndexKind,
    SegmentScan,
    VerifyReport,
    entry_file_position,
    expected_dly_columns,
    plural,
    read_index_file,
)

_REBUILT = " (rebuilt from the .log on next open)"
# Log.open checks chunks as reads reach them (index/chunk_checks.py), not on opening
_DAMAGED_CHUNK = (" (a read reaching it fails, and the next open rebuilds the index from "
                  "the .log; kdelay rebuild-index repairs it now)")
# content errors under a sound header: Log.open checks only the header and checksums
_TRUSTED = " (Log.open would trust this index: run kdelay rebuild-index)"


def _index_is_stale_ok(active: bool, clean: bool) -> bool:
    """The active segment's indexes live in memory while the log is open (or was not
    closed cleanly): a missing or stale persisted copy is expected there."""
    return active and not clean


def check_index(rep: VerifyReport, seg: SegmentFiles, scan: SegmentScan, kind: IndexKind,
                 active: bool, clean: bool) -> None:
    path = seg.path(kind.suffix)
    idx = read_index_file(path, kind)
    rep.indexes_checked += 1
    lenient = _index_is_stale_ok(active, clean)
    rebuilt = _REBUILT
    if idx.missing:
        if lenient:
            rep.add(False, path, None, "absent (the active segment's indexes are in memory "
                                       "while the log is open, or rebuilt after a crash)")
        else:
            rep.add(True, path, None, "missing" + rebuilt)
        return
    if idx.columns is None:
        rep.add(True, path, 0,
                "; ".join(idx.problems) + rebuilt)
        return
    meta = idx.meta
    assert meta is not None and idx.columns is not None
    if not idx.data_crc_ok:
        for start, stop in idx.damaged_entries:
            rep.add(True, path, entry_file_position(idx, start),
                    f"entries {start}..{stop - 1}: chunk checksum mismatch" + _DAMAGED_CHUNK)
        if not idx.damaged_entries:  # the chunk table, or a version 1 file's one checksum
            rep.add(True, path, HEADER_SIZE, "; ".join(idx.problems) + rebuilt)
        return
    mismatches = currency_mismatches(meta, base_offset=seg.base_offset, log_bytes=seg.log_size)
    if mismatches and mismatches[0].field == "base_offset":
        rep.add(True, path, 8, f"header says base offset {meta.base_offset}, the file name "
                               f"says {seg.base_offset}" + rebuilt)
        return
    covered = seg.log_size
    if mismatches:
        stale = (f"stale: covers {meta.log_bytes} bytes of the log, which has "
                 f"{seg.log_size}")
        if not lenient:
            rep.add(True, path, 16, stale + rebuilt)
            return
        rep.add(False, path, None, stale + " (expected for the active segment of an open "
                                           "or crashed log; rebuilt on open)")
        boundaries = {b.position + b.size for b in scan.batches} | {0}
        if meta.log_bytes > seg.log_size or meta.log_bytes not in boundaries:
            return  # it describes bytes that are gone; nothing to compare
        covered = meta.log_bytes
    batches = [b for b in scan.batches if b.position + b.size <= covered]
    want_next = scan.next_offset(covered)
    if meta.next_offset != want_next:
        rep.add(True, path, 24, f"header says the segment ends before offset "
                                f"{meta.next_offset}, the log says {want_next}" + _TRUSTED)
    if kind is DLY:
        _compare_dly(rep, path, idx, batches)
    else:
        _check_sparse(rep, path, idx, batches, kind)


def _compare_dly(rep: VerifyReport, path: str, idx: IndexFile, batches: list[Batch]) -> None:
    """Entry by entry: what the index holds that the log does not, what the log holds that
    the index lacks, and (when both hold the same entries) whether the order is right."""
    want = expected_dly_columns(batches)
    have = idx.columns
    assert have is not None
    have_rows = list(zip(*(c.tolist() for c in have), strict=True))
    want_rows = list(zip(*(c.tolist() for c in want), strict=True))
    if have_rows == want_rows:
        return
    fields = "(deliver_after, offset, position, last_offset_delta, size)"
    want_set, have_set = set(want_rows), set(have_rows)
    extra = [i for i, r in enumerate(have_rows) if r not in want_set]
    lacking = [r for r in want_rows if r not in have_set]
    if extra:
        i = extra[0]
        rep.add(True, path, entry_file_position(idx, i),
                f"{plural(len(extra), 'entry', 'entries')} not matching any batch of the log; "
                f"first is entry {i}: {fields} = {have_rows[i]}" + _TRUSTED)
    if lacking:
        rep.add(True, path, None,
                f"{plural(len(lacking), 'batch', 'batches')} of the log without an entry; "
                f"first: {fields} = {lacking[0]}" + _TRUSTED)
    if not extra and not lacking:
        i = next(i for i, (a, b) in enumerate(zip(have_rows, want_rows, strict=True))
                 if a != b)
        rep.add(True, path, entry_file_position(idx, i),
                f"entries out of (deliver_after, offset) order from entry {i}" + _TRUSTED)


def _check_sparse(rep: VerifyReport, path: str, idx: IndexFile, batches: list[Batch],
                  kind: IndexKind) -> None:
    """Offset and time index entries are sparse: each must name a real batch start."""
    by_base = {b.base_offset: b for b in batches}
    running_max: dict[int, int] = {}
    m = -1 << 63
    for b in batches:
        m = max(m, b.header.max_timestamp)
        running_max[b.base_offset] = m
    assert idx.columns is not None
    keys = idx.columns[0]
    if len(keys) > 1 and not bool((np.diff(keys) > 0).all()):
        i = int(np.flatnonzero(np.diff(keys) <= 0)[0]) + 1
        rep.add(True, path, entry_file_position(idx, i),
                f"entry {i}: keys are not increasing")
        return
    for i, (a, b) in enumerate(zip(idx.columns[0].tolist(), idx.columns[1].tolist(),
                                   strict=True)):
        if kind is OFFSET:
            offset, position = a, b
            batch = by_base.get(offset)
            if batch is None or batch.position != position:
                what = ("no batch starts at that offset" if batch is None else
                        f"that batch starts at byte {batch.position}")
                rep.add(True, path, entry_file_position(idx, i),
                        f"entry {i} maps offset {offset} to log byte {position}, but {what}")
                return
        else:
            ts, offset = a, b
            if offset not in by_base:
                rep.add(True, path, entry_file_position(idx, i),
                        f"entry {i} names offset {offset}, where no batch starts")
                return
            if ts != running_max[offset]:
                rep.add(True, path, entry_file_position(idx, i),
                        f"entry {i} says timestamp {ts} at offset {offset}, the log's max "
                        f"timestamp there is {running_max[offset]}")
                return


