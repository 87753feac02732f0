"""Class 2: reads across a gap in the offsets.

Recovery may cut a damaged sealed segment short (the rest of the log stays), and compaction
will leave gaps as a matter of course. `read(offset)` must return every surviving record in
offset order, continuing at the next surviving offset: from before the gap, from inside it,
and at every page size. The oracle for "surviving" is independent of read: every record
outside the damaged segment and before the damaged batch must be there, nothing that was
not written may appear, and read must agree with a due-order fetch of everything.
"""

from __future__ import annotations

import os
import struct

import pytest

from kdelay import Log, LogConfig, Record

T0 = 1_700_000_000_000
FAR = T0 + 10 ** 9
SEGMENTS = 4
BATCHES = 4  # per segment
PAGE_SIZES = (1, 2, 3, 5, 500)


def build(path: str) -> tuple[dict[int, bytes], list[list[tuple[int, int, int]]]]:
    """A cleanly closed log of SEGMENTS segments of BATCHES batches (1-3 records each).
    Returns offset -> value and, per segment, its batches as (base, last, position)."""
    sent: dict[int, bytes] = {}
    layout: list[list[tuple[int, int, int]]] = []
    with Log.open(path, config=LogConfig(index_interval_bytes=1), clock=lambda: T0) as log:
        for s in range(SEGMENTS):
            batches, pos = [], 0
            for b in range(BATCHES):
                n = 1 + (s + b) % 3
                recs = [Record(b"s%d-b%d-r%d" % (s, b, k)) for k in range(n)]
                res = log.append(recs, deliver_after=T0 + 1000 * ((s * 7 + b * 3) % 5))
                for k, r in enumerate(recs):
                    sent[res.base_offset + k] = r.value
                size = os.path.getsize(os.path.join(path, f"{log.segments[-1]:020d}.log"))
                batches.append((res.base_offset, res.last_offset, pos))
                pos = size
            layout.append(batches)
            if s < SEGMENTS - 1:
                log.roll()
    return sent, layout


def damage(path: str, base: int, position: int, how: str) -> None:
    """Break the batch at `position` of segment `base` so that no scan can frame it, and
    drop the segment's delivery index so the open has to rescan it."""
    name = os.path.join(path, f"{base:020d}")
    with open(name + ".log", "r+b") as f:
        if how == "offset":        # a base offset that does not continue the segment
            f.seek(position)
            f.write(struct.pack(">q", 10 ** 12))
        elif how == "length":      # a batch length running past the end of the file
            f.seek(position + 8)
            f.write(struct.pack(">i", 1 << 30))
        elif how == "magic":
            f.seek(position + 16)
            f.write(b"\x7f")
        elif how == "cut":         # the file ends inside the batch
            f.truncate(position + 30)
    os.unlink(name + ".dlyindex")


CASES = [(seg, batch, how) for seg in (0, 1, 2) for batch in range(BATCHES)
         for how in ("offset", "length", "magic", "cut")]


def read_from(log: Log, offset: int, page: int, limit: int = 10_000) -> list[int]:
    """Offsets read by paging from `offset` as a reader does: next = last + 1."""
    out: list[int] = []
    while len(out) < limit:
        got = log.read(offset, max_records=page)
        assert len(got) <= page
        if not got:
            return out
        out += [r.offset for r in got]
        offset = got[-1].offset + 1
    return out


@pytest.mark.parametrize(("seg", "batch", "how"), CASES)
def test_read_continues_across_the_gap(tmp_path, seg: int, batch: int, how: str) -> None:
    path = str(tmp_path / "p")
    sent, layout = build(path)
    base = layout[seg][0][0]
    cut_at = layout[seg][batch][0]
    seg_end = layout[seg][-1][1] + 1
    damage(path, base, layout[seg][batch][2], how)
    with Log.open(path, clock=lambda: FAR) as log:
        # what the log holds, by offset (read) and by due order (fetch)
        fetched, cursor = [], None
        while True:
            page = log.fetch(cursor, max_records=4)
            if not page.records:
                break
            fetched += page.records
            cursor = page.next
        survivors = sorted(r.offset for r in fetched)
        must = [o for o in sent if not cut_at <= o < seg_end]
        assert set(must) <= set(survivors), "recovery lost records outside the damage"
        for r in fetched:
            assert sent[r.offset] == r.value
        start = log.log_start_offset
        # every start offset (before, inside and after the gap), every page size
        for page_size in PAGE_SIZES:
            for o in range(start, log.log_end_offset + 1):
                want = [x for x in survivors if x >= o]
                got = read_from(log, o, page_size)
                assert got == want, (f"read({o}, max_records={page_size}) after damage "
                                     f"({how}) at offset {cut_at}: got {got}, want {want}")
        # one read returns a full page across the gap
        first = log.read(start, max_records=len(survivors))
        assert [r.offset for r in first] == survivors
        assert all(sent[r.offset] == r.value for r in first)
