"""fetch/page_fill.pyx, the compiled page fill, against the Python path it replaces on the
fetch: each entry's batch read and checked by entry_check.check_batch and decoded by
codec.decode_records. On intact and damaged segments (bytes flipped, the records section
malformed under a valid CRC, the file cut short, an index entry that says something else):
the same records, and a refusal exactly where the Python path raises CorruptLogError."""

from __future__ import annotations

import os
import random
import struct

import crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay import CorruptLogError, Log, LogConfig, Record
from kdelay.fetch import page_fill
from kdelay.index.deliver_after_index import DeliverAfterIndex
from kdelay.log.batch import codec
from kdelay.log.batch.entry_check import CHECKED_FIELDS, check_batch
from kdelay.log.batch.record_decode import shared_headers
from kdelay.log.segments import mapped_file
from kdelay.log.segments.layout import segment_bases, segment_file
from kdelay.records import NO_HEADERS, FetchedRecord

T0 = 1_700_000_000_000
NOW = T0 + 10
NONE = np.empty(0, np.int64)
ENTRY_FIELDS = ("deliver_after", "base_offset", "position", "last_offset_delta", "size")


def _batch(rng: random.Random, base: int, da: int) -> bytes:
    """A batch of 1-4 records of a random shape: null keys and values, timestamps that
    vary, headers on some records, the same on all, or none."""
    n = rng.randint(1, 4)

    def payload():
        return None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 12))

    shape = rng.choice(["none", "same", "some"])
    headers = None
    if shape == "same":
        headers = [[("k", b"1"), ("x", None)]] * n
    elif shape == "some":
        headers = [[(f"h{rng.randint(0, 2)}", rng.randbytes(2))] if rng.random() < 0.5
                   else [] for _ in range(n)]
    return codec.encode_batch(base_offset=base, base_timestamp=T0, deliver_after=da,
                              keys=[payload() for _ in range(n)],
                              values=[payload() for _ in range(n)],
                              timestamp_deltas=[rng.randint(-3, 3) for _ in range(n)],
                              headers=headers)


def _segment(seed: int, batches: int) -> tuple[bytearray, list[tuple[int, ...]]]:
    """A segment's bytes and its index entries in key order."""
    rng = random.Random(seed)
    buf = bytearray()
    entries = []
    base = 1000
    for _ in range(batches):
        da = T0 + rng.randint(0, 4)
        b = _batch(rng, base, da)
        h = codec.parse_header(b)
        entries.append((da, base, len(buf), h.last_offset_delta, len(b)))
        buf += b
        base += h.record_count
    entries.sort(key=lambda e: (e[0], e[1]))
    return buf, entries


def _python_page(buf: bytes, entries, gone: set[int], after: tuple[int, int] | None,
                 max_records: int) -> tuple[list[FetchedRecord], int | None]:
    """What the Python path gives: the wanted records of each entry's batch in key order
    from the first that may hold a record past `after`, and the index of the first entry
    whose batch it refuses (None: none)."""
    out: list[FetchedRecord] = []
    for i, e in enumerate(entries):
        if i < _start(entries, after):
            continue
        da, base, pos, lod, size = e
        if len(out) >= max_records or da > NOW:
            break
        wanted = [o for o in range(base, base + lod + 1)
                  if o not in gone and (after is None or (da, o) > after)]
        if not wanted:
            continue  # consumed unread
        try:
            h = check_batch(bytes(buf[pos:pos + size]), 0, e, path="x.log")
            cols = codec.decode_records(bytes(buf[pos:pos + size]), h, path="x.log",
                                        file_pos=pos)
        except CorruptLogError:
            return out, i
        for o in wanted[:max_records - len(out)]:
            k = o - base
            out.append(FetchedRecord(o, da, cols.timestamps[k], cols.keys[k], cols.values[k],
                                     cols.headers[k]))
    return out, None


def _start(entries, after: tuple[int, int] | None) -> int:
    """Where a run starts for a cursor (DeliverAfterIndex.start_in_columns): at the first
    entry holding a record with key > `after`."""
    return next((i for i, (da, base, _, lod, _) in enumerate(entries)
                 if after is None or (da, base + lod) > after), len(entries))


def _mapped(tmp_path, buf: bytes) -> mapped_file.MappedFile:
    path = tmp_path / "seg.log"
    path.write_bytes(bytes(buf))
    fd = os.open(path, os.O_RDONLY)
    mapped = mapped_file.MappedFile(fd, len(buf) + 4096)
    os.close(fd)
    return mapped


def _window(mapped, limit: int, entries, *, more: bool = False, gone=(NONE, NONE),
            end: int | None = None, ready: int | None = None) -> tuple:
    """The arguments of a page_fill.Window (built by _fill, which the checks then meet)."""
    cols = [np.array([e[k] for e in entries], np.int64) for k in range(5)]
    cols[3], cols[4] = cols[3].astype(np.int32), cols[4].astype(np.int32)
    end = len(entries) if end is None else end
    return (mapped, limit, cols, end, more, end if ready is None else ready, *gone)


def _fill(out: list, window: tuple, head: int = 0, *, after=None, now: int = NOW,
          max_records: int = 500, max_bytes: int = 1 << 40) -> tuple[int, int, int, int]:
    """A KWayMerge of one window filling a page: (outcome, taken bytes, detail, the head
    after)."""
    merge = page_fill.KWayMerge(codec.HEADER_LAYOUT, FetchedRecord, NO_HEADERS,
                                shared_headers)
    merge.set(0, page_fill.Window(*window), head)
    a_da, a_off = (-1, -1) if after is None else after
    request = page_fill.PageRequest(a_da, a_off, now, max_records, max_bytes)
    outcome = merge.fill(out, request)
    return outcome, request.taken_bytes, request.detail, merge.head(0)


def _compiled_page(tmp_path, buf: bytes, entries, gone: set[int],
                   after: tuple[int, int] | None, max_records: int
                   ) -> tuple[list[FetchedRecord], int, int]:
    mapped = _mapped(tmp_path, buf)
    ordered = np.array(sorted(gone), np.int64)
    parts = (ordered[1::2].copy(), ordered[::2].copy())  # the mapped part and the recent
    out: list[FetchedRecord] = []
    outcome, _, _, head = _fill(out, _window(mapped, len(buf), entries, gone=parts),
                                _start(entries, after), after=after, max_records=max_records)
    mapped.close()
    return out, outcome, head


def _damage(buf: bytearray, entries: list, rng: random.Random, how: str) -> int | None:
    """Damage the segment `how`; the file size it keeps (None: all of it)."""
    if how == "flip":
        buf[rng.randrange(len(buf))] ^= rng.randint(1, 255)
    elif how == "records":  # a records section malformed under a valid CRC
        da, base, pos, lod, size = entries[rng.randrange(len(entries))]
        at = pos + codec.HEADER_SIZE + rng.randrange(size - codec.HEADER_SIZE)
        buf[at] ^= rng.randint(1, 255)
        crc = crc32c.crc32c(bytes(buf[pos + codec.CRC_START:pos + size]))
        struct.pack_into(">I", buf, pos + codec.CRC_OFFSET, crc)
    elif how == "cut":
        return rng.randrange(len(buf))
    elif how == "entry":
        i = rng.randrange(len(entries))
        e = list(entries[i])
        e[ENTRY_FIELDS.index(rng.choice(CHECKED_FIELDS))] += rng.choice([-1, 1, 1 << 20])
        entries[i] = tuple(e)
    return None


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 10 ** 6), batches=st.integers(1, 12),
       how=st.sampled_from(["intact", "flip", "records", "cut", "entry"]),
       cancelled=st.integers(0, 100), cursor=st.integers(0, 100),
       max_records=st.integers(1, 60))
def test_same_records_and_refusals_as_the_python_path(tmp_path_factory, seed, batches, how,
                                                      cancelled, cursor, max_records):
    tmp = tmp_path_factory.mktemp("fill")
    buf, entries = _segment(seed, batches)
    rng = random.Random(seed + 1)
    kept = _damage(buf, entries, rng, how)
    offsets = [o for e in entries for o in range(e[1], e[1] + e[3] + 1)]
    gone = {o for o in offsets if rng.randrange(100) < cancelled}
    after = None
    if cursor:
        e = entries[rng.randrange(len(entries))]
        after = (e[0], e[1] + rng.randint(-1, e[3] + 1))
    file = buf if kept is None else buf[:kept]
    want, refused_at = _python_page(file, entries, gone, after, max_records)
    got, outcome, head = _compiled_page(tmp, file, entries, gone, after, max_records)
    if refused_at is None:
        assert outcome == page_fill.DONE
        assert got == want
    else:
        assert (outcome, head) == (page_fill.DAMAGED, refused_at)
        assert got == want  # what came before the damaged batch


def test_a_page_stops_at_the_byte_cap_after_one_batch(tmp_path):
    buf, entries = _segment(7, 6)
    mapped = _mapped(tmp_path, buf)
    window = _window(mapped, len(buf), entries)
    for cap, batches in ((1, 1), (entries[0][4] + entries[1][4], 2)):
        out: list = []
        outcome, taken, _, head = _fill(out, window, max_bytes=cap)
        assert (outcome, head) == (page_fill.DONE, batches)
        assert taken == sum(e[4] for e in entries[:batches])
        assert len(out) == sum(e[3] + 1 for e in entries[:batches])
    mapped.close()


def test_a_window_with_more_behind_it_asks_for_a_refill_and_the_first_not_due_is_said(
        tmp_path):
    buf, entries = _segment(3, 5)
    mapped = _mapped(tmp_path, buf)
    outcome, _, detail, head = _fill([], _window(mapped, len(buf), entries, more=True))
    assert (outcome, detail, head) == (page_fill.REFILL, 0, len(entries))
    first = entries[0][0]
    outcome, _, detail, head = _fill([], _window(mapped, len(buf), entries), now=first - 1)
    assert (outcome, detail, head) == (page_fill.DONE, first, 0)
    mapped.close()


def test_a_batch_past_ready_is_fetched_first_unless_the_page_need_not_read_it(tmp_path):
    buf, entries = _segment(5, 6)
    mapped = _mapped(tmp_path, buf)
    out: list = []
    outcome, _, detail, head = _fill(out, _window(mapped, len(buf), entries, ready=2))
    assert (outcome, detail, head) == (page_fill.FETCH, 0, 2)
    assert len(out) == sum(e[3] + 1 for e in entries[:2])  # the batches before it are taken
    # a page full before it, a byte cap before it, or its records all cancelled: no fetch
    for fill in ({"max_records": len(out)}, {"max_bytes": entries[0][4] + entries[1][4]}):
        assert _fill([], _window(mapped, len(buf), entries, ready=2), **fill)[0] == \
            page_fill.DONE
    da, base, _, lod, _ = entries[2]
    gone = np.arange(base, base + lod + 1, dtype=np.int64)
    outcome, _, _, head = _fill([], _window(mapped, len(buf), entries, ready=2,
                                            gone=(gone, NONE)))
    assert (outcome, head) == (page_fill.FETCH, 3)
    mapped.close()


def test_windows_that_disagree_with_their_sources_are_refused(tmp_path):
    buf, entries = _segment(1, 2)
    mapped = _mapped(tmp_path, buf)
    good = _window(mapped, len(buf), entries)
    assert _fill([], good)[0] == page_fill.DONE
    for bad in (_window(mapped, len(buf) + 4097, entries),  # past the mapping
                _window(mapped, len(buf), entries, end=3),  # columns too short
                (*good[:2], good[2][:4], *good[3:])):  # a column missing
        with pytest.raises(ValueError):
            _fill([], bad)
    with pytest.raises(ValueError):
        _fill([], good, head=3)
    mapped.close()
    with pytest.raises(ValueError):
        _fill([], good)  # a closed mapping


def _log_model(path: str) -> tuple[list[tuple], str | None]:
    """The Python path over a closed log: every entry of every segment's .dlyindex in key
    order, read with pread and checked and decoded in Python; the (deliverAfter, offset,
    value) of each record before the first refused batch, and that refusal's message."""
    entries = []
    for base in segment_bases(path):
        name = segment_file(path, base, ".log")
        idx = DeliverAfterIndex.load(segment_file(path, base, ".dlyindex"), base_offset=base,
                                     log_bytes=os.path.getsize(name))
        entries += [(*e, name) for e in zip(*(c.tolist() for c in idx.disk_columns),
                                                strict=True)]
    out = []
    for da, base, pos, lod, size, name in sorted(entries):
        with open(name, "rb") as f:
            f.seek(pos)
            data = f.read(size)
        try:
            h = check_batch(data, 0, (da, base, pos, lod, size), path=name)
            cols = codec.decode_records(data, h, path=name, file_pos=pos)
        except CorruptLogError as e:
            return out, str(e)
        out += [(da, base + k, v) for k, v in enumerate(cols.values)]
    return out, None


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10 ** 6), how=st.sampled_from(["intact", "flip", "records"]),
       page=st.integers(1, 9))
def test_a_log_drained_gives_what_the_python_path_gives(tmp_path_factory, seed, how, page):
    """End to end: a closed log, damaged or not, drained by fetch after a reopen: the same
    records in the same order as the Python path, and where it refuses a batch, the same
    CorruptLogError (file and byte), with no page holding a record of a damaged batch."""
    path = str(tmp_path_factory.mktemp("log"))
    rng = random.Random(seed)
    with Log.open(path, config=LogConfig(segment_bytes=1500), clock=lambda: T0) as log:
        for _ in range(rng.randint(1, 25)):
            n = rng.randint(1, 4)
            log.append([Record(rng.randbytes(rng.randint(0, 30)), key=rng.choice([None, b"k"]),
                               headers=rng.choice([(), (("a", b"1"),)])) for _ in range(n)],
                       deliver_after=T0 + rng.randint(0, 50))
    names = sorted(n for n in os.listdir(path) if n.endswith(".log"))
    target = os.path.join(path, rng.choice(names))
    size = os.path.getsize(target)
    if how != "intact" and size:
        with open(target, "rb") as f:
            buf = bytearray(f.read())
        if how == "flip":
            buf[rng.randrange(size)] ^= rng.randint(1, 255)
        else:  # damage the records section of a batch, then give it a valid CRC
            h = codec.parse_header(buf, 0)
            buf[rng.randrange(codec.HEADER_SIZE, h.size)] ^= rng.randint(1, 255)
            struct.pack_into(">I", buf, codec.CRC_OFFSET,
                             crc32c.crc32c(bytes(buf[codec.CRC_START:h.size])))
        with open(target, "wb") as f:
            f.write(buf)
    want, error = _log_model(path)
    got: list[tuple] = []
    with Log.open(path, clock=lambda: T0 + 100) as log:
        cursor = None
        try:
            while True:
                res = log.fetch(cursor, max_records=page)
                if not res.records:
                    break
                got += [(r.deliver_after, r.offset, r.value) for r in res.records]
                cursor = res.next
            raised = None
        except CorruptLogError as e:
            raised = str(e)
    assert raised == error
    if error is None:
        assert got == want
    else:
        assert got == want[:len(got)] and len(want) - len(got) < page
