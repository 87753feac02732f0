"""Consistency checks the reliability tests share: a log against what was sent to it, and
every index against a fresh scan of its .log."""

from __future__ import annotations

import os
from collections.abc import Mapping, Set

from ..index.entry import Entry
from ..log.batch.walker import scan_log
from ..partition import Log
from ..records import FetchedRecord

# offset -> (value, deliver_after)
Sent = Mapping[int, tuple[bytes | None, int]]


def read_everything(log: Log) -> dict[int, tuple[bytes | None, int]]:
    """Every record in offset order via `read`, as offset -> (value, deliver_after)."""
    out: dict[int, tuple[bytes | None, int]] = {}
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        page = log.read(offset, max_records=1000)
        if not page:
            break
        for r in page:
            out[r.offset] = (r.value, r.deliver_after)
        offset = page[-1].offset + 1
    return out


def fetch_everything(log: Log, page_size: int = 7) -> list[FetchedRecord]:
    """Every due record via `fetch` pages, following `next`."""
    fetched: list[FetchedRecord] = []
    cursor = None
    while True:
        page = log.fetch(cursor, max_records=page_size)
        if not page.records:
            return fetched
        fetched.extend(page.records)
        cursor = page.next


def check_log(log: Log, sent: Sent, must_have: Set[int] = frozenset(), *,
              where: str = "", all_due: bool = True,
              removable: Set[int] = frozenset()) -> dict[int, tuple[bytes | None, int]]:
    """The log holds a contiguous offset range (but for offsets in `removable`, which
    compaction may have taken out), every record in it is one that was sent, byte for byte,
    every offset in `must_have` at or above the log start is there, a due-order fetch
    returns exactly the same records in (deliverAfter, offset) order (when `all_due`), and
    the indexes agree with the .log files. Returns what the log holds."""
    got = read_everything(log)
    offsets = sorted(got)
    full = range(log.log_start_offset, log.log_end_offset)
    assert offsets == [o for o in full if o in got or o not in removable], \
        f"{where}: offsets not contiguous from {log.log_start_offset} to " \
        f"{log.log_end_offset}: {offsets[:5]}...{offsets[-5:]}"
    for o, v in got.items():
        assert sent.get(o) == v, f"{where}: record {o} is {v!r}, sent {sent.get(o)!r}"
    lost = {o for o in must_have if o >= log.log_start_offset} - set(got)
    assert not lost, f"{where}: acknowledged records lost: {sorted(lost)[:20]}"
    if all_due:
        fetched = fetch_everything(log)
        assert [(r.deliver_after, r.offset) for r in fetched] == \
            sorted((v[1], o) for o, v in got.items()), f"{where}: fetch order/content wrong"
        for r in fetched:
            assert got[r.offset] == (r.value, r.deliver_after), f"{where}: fetch {r.offset}"
    check_indexes(log, where)
    return got


def check_indexes(log: Log, where: str = "") -> None:
    """Recompute each segment's DeliverAfterIndex from its .log and compare it with what the
    log serves; offset-index entries must point at batch starts."""
    for base in log.segments:
        seg = log._segments[base]
        scan = scan_log(seg.fd, seg.log_path, base, gaps=seg.compacted)
        assert scan.error is None, f"{where}: {scan.error}"
        file_size = os.fstat(seg.fd).st_size
        assert file_size == seg.size, \
            f"{where}: segment {base}: {file_size} bytes on disk, {seg.size} in the log"
        assert scan.valid_bytes == seg.size, \
            f"{where}: segment {base}: {seg.size} bytes in memory, {scan.valid_bytes} valid"
        # a compacted segment may have lost its last batches: its end is its marker's
        assert scan.next_offset == seg.next_offset or (
            seg.compacted and scan.next_offset < seg.next_offset), \
            f"{where}: segment {base} end offset"
        served = sorted(map(Entry._make, zip(*(c.tolist() for c in seg.dly_index.columns()),
                                             strict=True)))
        assert served == sorted(scan.entries), f"{where}: dlyindex of {base} disagrees"
        starts = {(e.base_offset, e.position) for e in scan.entries}
        off, pos = (c.tolist() for c in seg.offset_index.columns())
        assert set(zip(off, pos, strict=True)) <= starts, f"{where}: offset index of {base}"


def batches_in(log: Log) -> list[tuple[int, int, int]]:
    """(base offset, record count, deliverAfter) of every batch in the log's .log files, in
    offset order: a fresh scan of the files (what a producer's batching put on disk)."""
    out = []
    for base in log.segments:
        seg = log._segments[base]
        scan = scan_log(seg.fd, seg.log_path, base, gaps=seg.compacted)
        out += [(e.base_offset, e.last_offset_delta + 1, e.deliver_after) for e in scan.entries]
    return sorted(out)


def files_under(root: str) -> dict[str, bytes]:
    """Every file below `root` (path relative to it -> its bytes): compare two to tell
    whether anything was written in between."""
    out: dict[str, bytes] = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out
