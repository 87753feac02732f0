"""The compiled kernels (record_loops.pyx, header_walk.pyx) at their own boundary: C checks
no index, so each kernel checks its arguments against one another and every length it reads
against its buffers. Arguments that disagree are refused (a status, -1 or ValueError, as each
kernel says), and no input, however wrong, makes one read or write outside its buffers."""

from __future__ import annotations

import subprocess
import sys

import crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay.log.batch import codec, header_walk, record_loops, walker

T0 = 1_700_000_000_000
BAD_ARGUMENTS = -9
STATUSES = set(record_loops.STATUS_MESSAGES)


def _batch(n: int = 3) -> bytes:
    return codec.encode_batch(base_offset=0, base_timestamp=T0, deliver_after=T0,
                              keys=[b"k"] * n, values=[b"value"] * n,
                              timestamp_deltas=list(range(n)), headers=[[("h", b"1")]] * n)


def _scan(buf, start, n, end, out=None, fmt1_at=None, fmt2_at=None) -> int:
    size, f1, f2 = record_loops.scan_layout(max(n, 0))
    out = np.zeros(size, np.uint8) if out is None else out
    return record_loops.scan_records(buf, start, n, end, T0, out, f1 if fmt1_at is None
                                     else fmt1_at, f2 if fmt2_at is None else fmt2_at)[0]


def test_scan_records_refuses_bounds_outside_its_buffers():
    blob = _batch()
    end = len(blob)
    size, f1, f2 = record_loops.scan_layout(3)
    assert _scan(blob, 69, 3, end) >= 0
    assert _scan(blob, 69, 3, end + 1) == BAD_ARGUMENTS  # past the batch's bytes
    assert _scan(blob, -1, 3, end) == BAD_ARGUMENTS
    assert _scan(blob, end, 3, 69) == BAD_ARGUMENTS  # start past end
    assert _scan(blob, 69, end, end) == BAD_ARGUMENTS  # more records than bytes
    assert _scan(blob, 69, -1, end) == BAD_ARGUMENTS
    assert _scan(blob, 69, 3, end, out=np.zeros(size - 1, np.uint8)) == BAD_ARGUMENTS
    assert _scan(blob, 69, 3, end, fmt1_at=f1 - 1) == BAD_ARGUMENTS  # over the int64s
    assert _scan(blob, 69, 3, end, fmt2_at=f1 + 10) == BAD_ARGUMENTS  # over the key formats
    assert record_loops.STATUS_MESSAGES[BAD_ARGUMENTS]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(-5, 220), st.integers(-2, 40),
       st.integers(-5, 220), st.integers(0, 3000))
def test_scan_records_on_any_arguments_returns_a_status(blob, start, n, end, out_size):
    """Garbage bytes, any bounds, any output size: a flag set or a known status, never a
    read or write outside the buffers (which would crash or corrupt the process)."""
    status = record_loops.scan_records(blob, start, n, end, T0, np.zeros(out_size, np.uint8),
                                       *record_loops.scan_layout(max(n, 0))[1:])[0]
    assert status >= 0 or status in STATUSES


def _chunk(buf, starts, sizes, counts, total=None, ok_size=None):
    total = sum(counts) if total is None else total
    cols = [np.full(total, 7, np.int64) for _ in range(5)]
    ok = np.ones(len(starts) if ok_size is None else ok_size, bool)
    record_loops.scan_chunk(buf, codec.HEADER_SIZE, np.array(starts, np.int64),
                            np.array(sizes, np.int64),
                            np.array(counts, np.int64), np.full(len(counts), T0, np.int64),
                            *cols, ok)
    return ok, cols


def test_scan_chunk_refuses_columns_shorter_than_its_batches():
    blob = np.frombuffer(_batch(), np.uint8)
    good, cols = _chunk(blob, [0], [len(blob)], [3])
    assert good.tolist() == [True] and cols[0].tolist() == [T0, T0 + 1, T0 + 2]
    with pytest.raises(ValueError):
        _chunk(blob, [0], [len(blob)], [3], total=2)  # record columns too short
    with pytest.raises(ValueError):
        _chunk(blob, [0, 0], [len(blob)], [3])  # fewer sizes than batches
    with pytest.raises(ValueError):
        _chunk(blob, [0], [len(blob)], [3], ok_size=0)
    with pytest.raises(ValueError):
        _chunk(blob, [0, 0], [len(blob)] * 2, [3, -1], total=3)  # a negative count


def test_scan_chunk_reads_records_from_the_header_size_it_is_given():
    blob = np.frombuffer(_batch(), np.uint8)
    cols = [np.zeros(3, np.int64) for _ in range(5)]
    ok = np.zeros(1, bool)
    shifted = np.concatenate([np.zeros(5, np.uint8), blob])  # 5 bytes more before records
    record_loops.scan_chunk(shifted, codec.HEADER_SIZE + 5, np.array([0]),
                            np.array([len(shifted)]), np.array([3]), np.array([T0]), *cols, ok)
    assert ok.tolist() == [True] and cols[0].tolist() == [T0, T0 + 1, T0 + 2]
    with pytest.raises(ValueError):
        record_loops.scan_chunk(blob, -1, np.array([0]), np.array([len(blob)]), np.array([3]),
                                np.array([T0]), *cols, ok)


def test_scan_chunk_flags_a_batch_outside_its_buffer():
    blob = np.frombuffer(_batch(), np.uint8)
    for start, size in ((-1, len(blob)), (1, len(blob)), (len(blob) + 1, 0), (0, 10)):
        ok, cols = _chunk(blob, [start], [size], [3])
        assert ok.tolist() == [False]
        assert [c.tolist() for c in cols] == [[T0] * 3] + [[0] * 3] * 4


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300),
       st.lists(st.tuples(st.integers(-10, 310), st.integers(-10, 310), st.integers(0, 20)),
                max_size=6))
def test_scan_chunk_on_any_batches_stays_in_its_buffer(blob, batches):
    buf = np.frombuffer(blob, np.uint8)
    starts, sizes, counts = (list(c) for c in zip(*batches, strict=True)) if batches else (
        [], [], [])
    ok, (ts, kpos, klen, vpos, vlen) = _chunk(buf, starts, sizes, counts)
    r = 0
    for b, n in enumerate(counts):
        for i in range(r, r + n):
            if ok[b]:
                assert kpos[i] >= 0 and kpos[i] + max(klen[i], 0) <= len(blob)
                assert vpos[i] >= 0 and vpos[i] + max(vlen[i], 0) <= len(blob)
            else:
                assert (kpos[i], klen[i], vpos[i], vlen[i]) == (0, 0, 0, 0)
        r += n


def _gather(buf, positions, lengths, offsets_size=None, data_size=None):
    n = len(lengths)
    offsets = np.zeros(n + 1 if offsets_size is None else offsets_size, np.int32)
    data = np.zeros(sum(max(x, 0) for x in lengths) if data_size is None else data_size,
                    np.uint8)
    got = record_loops.gather_payloads(np.frombuffer(buf, np.uint8),
                                       np.array(positions, np.int64),
                                       np.array(lengths, np.int64), offsets, data)
    return got, offsets.tolist(), bytes(data)


def test_gather_payloads_copies_or_refuses():
    assert _gather(b"abcdef", [1, 0, 4], [2, -1, 2]) == (4, [0, 2, 2, 4], b"bcef")
    assert _gather(b"abcdef", [5], [2])[0] == -1  # past the buffer
    assert _gather(b"abcdef", [-1], [2])[0] == -1
    assert _gather(b"abcdef", [0], [2], data_size=1)[0] == -1  # no room
    assert _gather(b"abcdef", [0], [2], offsets_size=1)[0] == -1
    assert _gather(b"abcdef", [], [2])[0] == -1  # fewer positions than lengths


NO_INTS = np.empty(0, np.int64)
NO_BYTES = np.empty(0, np.uint8)


def test_encode_records_takes_none_for_absent_columns():
    lengths = np.array([1, 2], np.int64)
    payloads = np.frombuffer(b"kvv", np.uint8)
    a, b = np.zeros(200, np.uint8), np.zeros(200, np.uint8)
    got = record_loops.encode_records(69, lengths, payloads, None, None, None, a)
    assert got == record_loops.encode_records(69, lengths, payloads, NO_INTS, NO_INTS,
                                              NO_BYTES, b)
    assert got[0] > 69 and bytes(a) == bytes(b)
    assert record_loops.encode_records(69, np.empty(0, np.int64), NO_BYTES, None, None, None,
                                       np.zeros(68, np.uint8))[0] == -1  # no room for head
    assert record_loops.encode_records(-1, lengths, payloads, None, None, None, a)[0] == -1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-3, 40), min_size=0, max_size=12), st.integers(0, 300),
       st.sampled_from(["none", "shared", "own"]), st.lists(st.integers(-1, 6), max_size=6),
       st.integers(0, 12), st.integers(0, 700))
def test_encode_records_writes_only_what_adds_up(lengths, payload_size, kind, header_lengths,
                                                 header_size, out_size):
    """Any columns: the batch is written when the lengths add up and `out` has room, else -1;
    never past `out`."""
    n = len(lengths) // 2
    lengths = lengths[:2 * n]
    hl = {"none": NO_INTS, "shared": np.array(header_lengths[:1], np.int64),
          "own": np.array(header_lengths[:n], np.int64)}[kind]
    out = np.zeros(out_size + 16, np.uint8)
    size, _ = record_loops.encode_records(69, np.array(lengths, np.int64),
                                          np.zeros(payload_size, np.uint8), None, hl,
                                          np.zeros(header_size, np.uint8), out[:out_size])
    assert not out[out_size:].any()
    nh = len(hl)
    blocks = [1] * n if nh == 0 else [int(hl[0])] * n if nh == 1 else hl.tolist()
    adds_up = (min(lengths, default=0) >= -1 and nh in (0, 1, n) and min(blocks, default=1) >= 1
               and sum(max(x, 0) for x in lengths) == payload_size
               and (nh == 0 or (nh == 1 and int(hl[0]) == header_size)
                    or (nh > 1 and sum(blocks) == header_size)))
    fits = 69 + payload_size + sum(blocks) + record_loops.RECORD_OVERHEAD * n <= out_size
    if not adds_up:
        assert size == -1
    elif fits:
        assert 69 <= size <= out_size


def _walk(buf, start=0, out=None, layout=codec.HEADER_LAYOUT):
    out = np.zeros((walker.HEADER_ROWS, 8), np.int64) if out is None else out
    return header_walk.walk_headers(np.frombuffer(buf, np.uint8), start, out, layout)


def test_walk_headers_refuses_a_layout_outside_the_header():
    blob = _batch() * 2
    assert _walk(blob) == (2, len(blob))
    for i in range(4, len(codec.HEADER_LAYOUT)):  # the field positions
        for at in (-1, codec.HEADER_SIZE):
            layout = codec.HEADER_LAYOUT.copy()
            layout[i] = at
            with pytest.raises(ValueError):
                _walk(blob, layout=layout)
    with pytest.raises(ValueError):
        _walk(blob, layout=codec.HEADER_LAYOUT[:-1])
    with pytest.raises(ValueError):
        _walk(blob, out=np.zeros((walker.HEADER_ROWS - 1, 8), np.int64))
    with pytest.raises(ValueError):
        _walk(blob, start=-1)
    assert _walk(blob, start=len(blob) + 5) == (0, len(blob) + 5)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 420), st.integers(0, 5), st.data())
def test_walk_headers_on_any_bytes_stays_in_its_buffer(blob, start, capacity, data):
    """Random bytes, with real batches spliced in: every batch the walk takes lies inside the
    buffer, back to back from `start`."""
    if data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(blob)))
        blob = blob[:at] + _batch(data.draw(st.integers(1, 4))) + blob[at:]
    out = np.zeros((walker.HEADER_ROWS, capacity), np.int64)
    n, stop = _walk(blob, start, out)
    assert 0 <= n <= capacity
    pos = start
    for i in range(n):
        assert out[walker.H_REL, i] == pos
        pos += out[walker.H_SIZE, i]
    assert stop == pos and (n == 0 or stop <= len(blob))


def test_the_codec_loads_no_jit_compiler():
    """The kernels are C built at install: importing kdelay and coding a batch loads no
    numba or LLVM (their load was most of a process's fixed cost)."""
    code = ("import sys; from kdelay.log.batch import codec; "
            "b = codec.encode_batch(base_offset=0, base_timestamp=0, deliver_after=0, "
            "keys=[b'k'], values=[b'v']); codec.decode_records(b, codec.parse_header(b)); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite')))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout
    assert out.strip() == "[]"


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=codec.CRC_START, max_size=5000), st.booleans(), st.booleans())
def test_check_crcs_is_the_crc32c_of_any_bytes_by_either_method(blob, tables, wrong):
    """The compiled CRC-32C (the SSE4.2 instruction in three streams when the CPU has it,
    else tables; `tables` forces them) is the crc32c package's, on any bytes and length."""
    table = np.zeros((walker.HEADER_ROWS, 1), np.int64)
    table[walker.H_SIZE, 0] = len(blob)
    table[walker.H_CRC, 0] = crc32c.crc32c(blob[codec.CRC_START:]) ^ (1 if wrong else 0)
    out = np.full(1, 7, np.uint8)
    header_walk.check_crcs(blob, table, codec.HEADER_LAYOUT, out, tables)
    assert out[0] == (not wrong)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=6), st.integers(0, 1 << 16),
       st.booleans())
def test_check_crcs_gives_each_batch_s_verdict(counts, flip, tables):
    blob = bytearray(b"".join(_batch(n) for n in counts))
    blob[flip % len(blob)] ^= 0x10
    out = np.zeros((walker.HEADER_ROWS, len(counts)), np.int64)
    n, _ = _walk(bytes(blob), out=out)
    crc_ok = np.zeros(n, np.uint8)
    header_walk.check_crcs(bytes(blob), out[:, :n], codec.HEADER_LAYOUT, crc_ok, tables)
    assert crc_ok.astype(bool).tolist() == [
        codec.crc_ok(blob, int(out[walker.H_REL, i]), codec.parse_header(blob, int(
            out[walker.H_REL, i]))) for i in range(n)]
    if n == len(counts):  # the last batch ends the buffer: a byte less and it lies past it
        with pytest.raises(ValueError):
            header_walk.check_crcs(bytes(blob[:-1]), out[:, :n], codec.HEADER_LAYOUT,
                                   crc_ok, tables)
