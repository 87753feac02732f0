"""The record batch codec: Kafka's v2 RecordBatch with magic 3 and a deliverAfter field.

Layout (API.md, "On disk"): a 69-byte big-endian header, deliverAfter at byte 43, then the
records exactly as Kafka v2 writes them. The CRC-32C covers byte 21 (attributes) to the end.

Two paths, byte-for-byte identical in what they produce and accept:

* The template path, for "homogeneous" batches: n records whose keys all have one length
  (or are all null), whose values all have one length (or are all null), with no headers and
  every timestamp delta 0. That is what a producer sending fixed-size messages writes, and
  in such a batch every byte except the key and value payloads depends only on
  (n, key length, value length). A cached template holds those bytes, so encoding is a copy
  plus a few strided numpy assignments and decoding is one memcmp (after blanking the
  payloads) plus slicing. The compare is exact, so a batch the template does not describe
  byte for byte simply takes the general path; it can never be misread.
* The general path: every varint column of the batch is coded with numpy (varint.py); the
  one sequential step is a tight Python loop over the record-length varints.
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple

import crc32c
import numpy as np

from ..errors import CorruptLogError, InvalidRecordError
from ..records import NO_HEADERS
from . import varint

HEADER = struct.Struct(">qiibIhiqqqqhii")
HEADER_SIZE = HEADER.size  # 69
assert HEADER_SIZE == 69
MAGIC = 3
CRC_OFFSET = 17
CRC_START = 21  # the CRC covers attributes .. end of batch
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted by batchLength
DELIVER_AFTER_OFFSET = 43
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
# Smallest possible record: length, attributes, tsDelta, offsetDelta, keyLength (-1),
# valueLength (-1), headerCount, one byte each. Bounds record_count by the batch size, so a
# corrupt count can never make a reader allocate or loop beyond what the bytes could hold.
MIN_RECORD_SIZE = 7
NO_PRODUCER_ID = -1
# attributes: bits 0-2 compression (0 = none), bit 3 timestamp type, 4 transactional, 5 control
UNSUPPORTED_ATTRIBUTES = 0x07 | 0x10 | 0x20
_PAD = 32  # zero bytes after the records so vectorised varint reads never run off the end

_HEAD = struct.Struct(">qiibI")  # bytes 0..21: the part the CRC does not cover
_TAIL = struct.Struct(">hiqqqqhii")  # bytes 21..69
_ZERO_HEADER = bytes(HEADER_SIZE)


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    deliver_after: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch takes in the .log."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


class RecordColumns(NamedTuple):
    """A batch's records, decoded column-wise."""

    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[list[tuple[str, bytes | None]]]


def parse_header(buf, pos: int = 0, *, path: str | None = None, file_pos: int | None = None,
                 available: int | None = None) -> BatchHeader:
    """Parse and sanity-check the header at `buf[pos:]`. `available` is how many bytes the
    batch may span (defaults to the rest of `buf`). Raises CorruptLogError."""
    where = file_pos if file_pos is not None else pos
    if available is None:
        available = len(buf) - pos
    if available < HEADER_SIZE:
        raise CorruptLogError(f"truncated batch header ({available} of {HEADER_SIZE} bytes)",
                              path, where)
    h = BatchHeader._make(HEADER.unpack_from(buf, pos))
    if h.magic != MAGIC:
        raise CorruptLogError(f"bad magic byte {h.magic} (expected {MAGIC})", path, where)
    if h.batch_length < MIN_BATCH_LENGTH:
        raise CorruptLogError(f"batchLength {h.batch_length} is too small", path, where)
    if h.size > available:
        raise CorruptLogError(
            f"truncated batch: batchLength says {h.size} bytes, {available} remain", path, where)
    if h.record_count <= 0 or h.last_offset_delta != h.record_count - 1:
        raise CorruptLogError(
            f"record count {h.record_count} disagrees with lastOffsetDelta {h.last_offset_delta}",
            path, where)
    if h.record_count * MIN_RECORD_SIZE > h.size - HEADER_SIZE:
        raise CorruptLogError(
            f"record count {h.record_count} cannot fit in {h.size} bytes", path, where)
    if h.base_offset < 0:
        raise CorruptLogError(f"negative base offset {h.base_offset}", path, where)
    return h


def crc_ok(buf, pos: int, header: BatchHeader) -> bool:
    view = memoryview(buf)[pos + CRC_START: pos + header.size]
    return crc32c.crc32c(view) == header.crc


def check_crc(buf, pos: int, header: BatchHeader, *, path: str | None = None,
              file_pos: int | None = None) -> None:
    if not crc_ok(buf, pos, header):
        raise CorruptLogError("CRC-32C mismatch", path, file_pos if file_pos is not None else pos)


# ---------------------------------------------------------------------------- templates


class _Group(NamedTuple):
    """A run of records of equal size inside a homogeneous batch (the size only changes where
    the offset-delta varint grows a byte: at record 64, 8192, ...)."""

    start: int  # batch position of the run's first record
    first: int  # index of its first record
    stop: int  # index one past its last record
    rec_size: int
    key_off: int  # key payload offset within each record
    val_off: int  # value payload offset within each record


def _layout(n: int, klen: int, vlen: int) -> tuple[list[_Group], int]:
    """The groups of a homogeneous batch and the batch's total size, by arithmetic alone
    (cheap enough to run on a decode cache miss to rule a batch in or out)."""
    kb = max(klen, 0)
    vb = max(vlen, 0)
    ksz = varint.size_one(klen)
    vsz = varint.size_one(vlen)
    groups = []
    pos = HEADER_SIZE
    i = 0
    osz = 1  # size of the offset-delta varint for records [i, limit)
    limit = 64  # zigzag(i) = 2i < 128
    while i < n:
        stop = min(n, limit)
        # attributes, tsDelta 0, offsetDelta, keyLength, key, valueLength, value, headerCount 0
        body = 1 + 1 + osz + ksz + kb + vsz + vb + 1
        lsz = varint.size_one(body)
        key_off = lsz + 2 + osz + ksz
        groups.append(_Group(pos, i, stop, lsz + body, key_off, key_off + kb + vsz))
        pos += (stop - i) * (lsz + body)
        i = stop
        osz += 1
        limit <<= 7
    return groups, pos


class _Template:
    __slots__ = ("n", "klen", "vlen", "size", "groups", "image", "key_slices", "val_slices",
                 "fixed_idx", "fixed_bytes", "parts")

    def __init__(self, n: int, klen: int, vlen: int):
        self.n = n
        self.klen = klen
        self.vlen = vlen
        self.groups, self.size = _layout(n, klen, vlen)
        key = None if klen < 0 else bytes(klen)
        val = None if vlen < 0 else bytes(vlen)
        records = _encode_records([key] * n, [val] * n, None, None)
        # image: the whole batch with a zeroed header and zeroed payloads
        self.image = _ZERO_HEADER + records
        if len(self.image) != self.size:  # the arithmetic layout and the encoder must agree
            raise AssertionError("template layout disagrees with the encoder")
        self.key_slices = _payload_slices(self.groups, klen, "key_off")
        self.val_slices = _payload_slices(self.groups, vlen, "val_off")
        # every non-payload byte of the records section, as positions and expected values:
        # a decode checks them all with one gather and one memcmp
        fixed = np.ones(self.size, dtype=bool)
        fixed[:HEADER_SIZE] = False
        for sl in (self.key_slices or []) + (self.val_slices or []):
            fixed[sl] = False
        self.fixed_idx = np.flatnonzero(fixed).astype(np.int32)
        self.fixed_bytes = np.frombuffer(self.image, dtype=np.uint8)[self.fixed_idx].tobytes()
        # the batch as join-able pieces: header, then per record [prefix, key, middle, value,
        # suffix], with keys and values left empty to be slotted in (see _fill_template)
        kb, vb = max(klen, 0), max(vlen, 0)
        parts = [_ZERO_HEADER]
        for g in self.groups:
            for i in range(g.stop - g.first):
                rs = g.start + i * g.rec_size
                parts += [self.image[rs: rs + g.key_off], b"",
                          self.image[rs + g.key_off + kb: rs + g.val_off], b"",
                          self.image[rs + g.val_off + vb: rs + g.rec_size]]
        self.parts = parts


def _payload_slices(groups: list[_Group], length: int, field: str) -> list[slice] | None:
    if length <= 0:
        return None
    out = []
    for g in groups:
        off = g.start + getattr(g, field)
        out.extend(slice(p, p + length)
                   for p in range(off, off + (g.stop - g.first) * g.rec_size, g.rec_size))
    return out


# A small LRU of templates, bounded both in entries and in total records (each template keeps
# two slice objects per record), so odd shapes cannot grow memory without limit.
_TEMPLATE_MAX_ENTRIES = 64
_TEMPLATE_MAX_RECORDS = 1 << 17
_templates: OrderedDict[tuple[int, int, int], _Template] = OrderedDict()
_templates_records = 0
_templates_lock = threading.Lock()


def _template(n: int, klen: int, vlen: int) -> _Template | None:
    key = (n, klen, vlen)
    with _templates_lock:
        t = _templates.get(key)
        if t is not None:
            _templates.move_to_end(key)
            return t
    if n > _TEMPLATE_MAX_RECORDS // 4:
        return None  # huge batches amortise the general path's per-batch cost anyway
    t = _Template(n, klen, vlen)
    global _templates_records
    with _templates_lock:
        if key not in _templates:
            _templates[key] = t
            _templates_records += n
            while (len(_templates) > _TEMPLATE_MAX_ENTRIES
                   or _templates_records > _TEMPLATE_MAX_RECORDS):
                _, old = _templates.popitem(last=False)
                _templates_records -= old.n
    return t


def clear_template_cache() -> None:
    """Forget every cached template (for tests and memory-conscious callers)."""
    global _templates_records
    with _templates_lock:
        _templates.clear()
        _templates_records = 0


def _uniform_length(items: list) -> int | None:
    """The common length of `items`, -1 if all are None, None if they differ."""
    first = items[0]
    if first is None:
        return -1 if items.count(None) == len(items) else None
    try:
        lengths = set(map(len, items))
    except TypeError:  # a None among bytes
        return None
    return len(first) if len(lengths) == 1 else None


# ---------------------------------------------------------------------------- encoding


def encode_batch(
    *,
    base_offset: int,
    base_timestamp: int,
    deliver_after: int,
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    timestamp_deltas: np.ndarray | None = None,
    headers: Sequence | None = None,
    leader_epoch: int = 0,
) -> bytes:
    """Encode one batch. Keys and values are bytes (or None for null). `timestamp_deltas`
    (int64, relative to base_timestamp) may be None for "all equal". `headers` is None when
    no record has any, else one sequence of (str, bytes|None) per record."""
    n = len(values)
    if n == 0 or len(keys) != n or (headers is not None and len(headers) != n):
        raise InvalidRecordError("a batch needs one key and one value per record, and at "
                                 "least one record")
    if timestamp_deltas is not None:
        timestamp_deltas = np.asarray(timestamp_deltas, dtype=np.int64)
        if timestamp_deltas.shape != (n,):
            raise InvalidRecordError("timestamp_deltas needs one entry per record")
        if not timestamp_deltas.any():
            timestamp_deltas = None
    if headers is not None and not any(headers):
        headers = None
    max_ts = base_timestamp if timestamp_deltas is None else (
        base_timestamp + int(timestamp_deltas.max()))

    out = None
    if timestamp_deltas is None and headers is None:
        klen = _uniform_length(keys)
        vlen = _uniform_length(values) if klen is not None else None
        if vlen is not None:
            t = _template(n, klen, vlen)
            if t is not None:
                out = _fill_template(t, keys, values)
    if out is None:
        out = bytearray(_ZERO_HEADER)
        out += _encode_records(keys, values, timestamp_deltas, headers)

    batch_length = len(out) - LOG_OVERHEAD
    _TAIL.pack_into(out, CRC_START, 0, n - 1, base_timestamp, max_ts, deliver_after,
                    NO_PRODUCER_ID, -1, -1, n)
    crc = crc32c.crc32c(memoryview(out)[CRC_START:])
    _HEAD.pack_into(out, 0, base_offset, batch_length, leader_epoch, MAGIC, crc)
    return bytes(out)


def _fill_template(t: _Template, keys: list, values: list) -> bytearray:
    """The template's bytes with the payloads written in: the keys and values are slotted
    into a copy of the template's piece list (two C-level slice assignments) and everything
    is joined once."""
    parts = t.parts.copy()
    if t.klen > 0:
        parts[2::5] = keys
    if t.vlen > 0:
        parts[4::5] = values
    return bytearray().join(parts)


def _lengths(items: list, n: int) -> tuple[np.ndarray, bool]:
    """Lengths (-1 for None) and whether any item is None."""
    try:
        return np.fromiter(map(len, items), dtype=np.int64, count=n), False
    except TypeError:
        return np.fromiter((-1 if x is None else len(x) for x in items),
                           dtype=np.int64, count=n), True


# Varint bytes of every zigzagged value below 2**14 (1 and 2 bytes: nearly every length,
# offset delta and small timestamp delta), so the general encoder can pick each record's
# varints with one C-level map instead of numpy byte shuffling. About 1 MB, built once.
_VB_LIMIT = 1 << 14
_VB = [bytes([u]) if u < 0x80 else bytes([(u & 0x7F) | 0x80, u >> 7]) for u in range(_VB_LIMIT)]
_VB_get = _VB.__getitem__
# attributes 0, timestampDelta 0, offsetDelta i: the fixed middle of record i with equal stamps
_ATTR_TS0_OFF = [b"\x00\x00" + _VB[2 * i] for i in range(_VB_LIMIT // 2)]
_OFF = _VB[0::2]  # offsetDelta i
_ONE_ZERO = [b"\x00"]


def _varints(u: np.ndarray) -> list[bytes]:
    """Varint bytes of each zigzagged value of `u`."""
    if u.max(initial=0) < _VB_LIMIT:
        return list(map(_VB_get, u.tolist()))
    return [varint.encode_one(v) for v in varint.unzigzag(u).tolist()]


def _encode_records(keys: list, values: list, ts: np.ndarray | None,
                    headers: list | None) -> bytes:
    """The records section of a batch (everything after the 69-byte header): one b"".join
    over [length][attributes,tsDelta,offsetDelta][keyLength][key][valueLength][value]
    [headerCount,headers] per record, with the sizes computed on numpy columns."""
    n = len(values)
    klen, knull = _lengths(keys, n)
    vlen, vnull = _lengths(values, n)
    kzz = varint.zigzag(klen)
    vzz = varint.zigzag(vlen)
    body = varint.sizes(kzz) + varint.sizes(vzz)
    body += np.maximum(klen, 0) if knull else klen
    body += np.maximum(vlen, 0) if vnull else vlen
    if ts is None:
        mid = _ATTR_TS0_OFF[:n] if n <= len(_ATTR_TS0_OFF) else \
            [b"\x00\x00" + varint.encode_one(i) for i in range(n)]
        body += np.fromiter(map(len, mid), dtype=np.int64, count=n) if n > 64 else 3
    else:
        tzz = varint.zigzag(ts)
        offs = _OFF[:n] if n <= len(_OFF) else [varint.encode_one(i) for i in range(n)]
        body += varint.sizes(tzz) + 1
        body += np.fromiter(map(len, offs), dtype=np.int64, count=n) if n > 64 else 1
    if headers is None:
        tail = _ONE_ZERO * n  # header count 0
        body += 1
    else:
        tail = [_encode_headers(h) for h in headers]
        body += np.fromiter(map(len, tail), dtype=np.int64, count=n)

    per = 7 if ts is None else 9
    parts = [b""] * (per * n)
    parts[0::per] = _varints(body << 1)  # zigzag of a non-negative length
    if ts is None:
        parts[1::per] = mid
        j = 2
    else:
        parts[1::per] = _ONE_ZERO * n
        parts[2::per] = _varints(tzz)
        parts[3::per] = offs
        j = 4
    parts[j::per] = _varints(kzz)
    parts[j + 1::per] = [k or b"" for k in keys] if knull else keys
    parts[j + 2::per] = _varints(vzz)
    parts[j + 3::per] = [v or b"" for v in values] if vnull else values
    parts[j + 4::per] = tail
    return b"".join(parts)


def _encode_headers(headers) -> bytes:
    """headerCount and the headers of one record."""
    if not headers:
        return b"\x00"
    parts = [varint.encode_one(len(headers))]
    for hkey, hval in headers:
        kb = hkey.encode("utf-8")
        parts.append(varint.encode_one(len(kb)))
        parts.append(kb)
        if hval is None:
            parts.append(b"\x01")  # varint -1
        else:
            parts.append(varint.encode_one(len(hval)))
            parts.append(hval)
    return b"".join(parts)


# ---------------------------------------------------------------------------- decoding


def decode_records(batch, header: BatchHeader, *, path: str | None = None,
                   file_pos: int | None = None) -> RecordColumns:
    """Decode the records of one whole batch (`batch` holds its bytes from the header on; the
    CRC is assumed checked). Raises CorruptLogError, and nothing else, if the records section
    does not parse to exactly `record_count` records filling the batch."""
    n = header.record_count
    end = header.size
    data = batch if isinstance(batch, bytes) else bytes(memoryview(batch)[:end])
    if len(data) < end or end < HEADER_SIZE or n <= 0 or n * MIN_RECORD_SIZE > end - HEADER_SIZE:
        raise CorruptLogError(f"batch of {end} bytes cannot hold {n} records", path, file_pos)
    cols = _decode_template(data, n, end, header.base_timestamp)
    if cols is not None:
        return cols
    try:
        return _decode_general(data, n, end, header.base_timestamp)
    except (IndexError, ValueError, OverflowError) as e:  # UnicodeDecodeError is a ValueError
        raise CorruptLogError(f"malformed record in batch ({e})", path, file_pos) from None


def _peek_shape(data: bytes) -> tuple[int, int] | None:
    """(key length, value length) of the first record if it could open a homogeneous batch
    (attributes 0, timestamp delta 0, offset delta 0), else None."""
    try:
        _, pos = varint.decode_one(data, HEADER_SIZE)
        if data[pos] or data[pos + 1] or data[pos + 2]:
            return None
        klen, pos = varint.decode_one(data, pos + 3)
        if klen > 0:
            pos += klen
        vlen, _ = varint.decode_one(data, pos)
    except (IndexError, ValueError):
        return None
    if klen < -1 or vlen < -1:
        return None
    return klen, vlen


def _decode_template(data: bytes, n: int, end: int, base_ts: int) -> RecordColumns | None:
    """Decode a homogeneous batch, or None when the batch is not exactly a template's shape
    with only the payloads differing (then the general path decides)."""
    shape = _peek_shape(data)
    if shape is None:
        return None
    klen, vlen = shape
    key = (n, klen, vlen)
    t = _templates.get(key)
    if t is None:
        # only build a template for a batch that could match one: the size must agree
        if klen + vlen > end or _layout(n, klen, vlen)[1] != end:
            return None
        t = _template(n, klen, vlen)
        if t is None:
            return None
    if t.size != end:
        return None
    arr = np.frombuffer(data, dtype=np.uint8, count=end)
    if arr[t.fixed_idx].tobytes() != t.fixed_bytes:
        return None  # some non-payload byte differs: not this shape (or damaged)
    keys = _template_payloads(data, t.key_slices, klen, n)
    values = _template_payloads(data, t.val_slices, vlen, n)
    return RecordColumns([base_ts] * n, keys, values, [NO_HEADERS] * n)


def _template_payloads(data: bytes, slices: list[slice] | None, length: int, n: int) -> list:
    if length > 0:
        return list(map(data.__getitem__, slices))
    return [b""] * n if length == 0 else [None] * n


def _record_starts(data: bytes, n: int, end: int) -> tuple[list[int], list[int]]:
    """Where each record's body starts and where it ends. The one sequential step of
    decoding: each record's start depends on the previous record's length, so it is a tight
    Python loop that handles the 1- and 2-byte length varints inline."""
    bodies = [0] * n
    ends = [0] * n
    pos = HEADER_SIZE
    for i in range(n):
        b = data[pos]
        if b < 0x80:
            if b & 1:
                raise ValueError("negative record length")
            bodies[i] = pos + 1
            pos += 1 + (b >> 1)
        else:
            b1 = data[pos + 1]
            if b1 < 0x80:
                u = (b & 0x7F) | (b1 << 7)
                if u & 1:
                    raise ValueError("negative record length")
                bodies[i] = pos + 2
                pos += 2 + (u >> 1)
            else:
                length, npos = varint.decode_one(data, pos)
                if length < 0:
                    raise ValueError("negative record length")
                bodies[i] = npos
                pos = npos + length
        if pos > end:
            raise ValueError("record overruns the batch")
        ends[i] = pos
    if pos != end:
        raise ValueError(f"records fill {pos} bytes but the batch has {end}")
    return bodies, ends


def _decode_general(data: bytes, n: int, end: int, base_ts: int) -> RecordColumns:
    """Raises IndexError/ValueError on malformed input (the caller turns them into
    CorruptLogError). Every length is checked against its record's end before it is used to
    move a position, so positions stay small and increasing (no int64 wrap-around)."""
    bodies, ends = _record_starts(data, n, end)
    arr = np.zeros(end + _PAD, dtype=np.uint8)
    arr[:end] = np.frombuffer(data, dtype=np.uint8, count=end)
    rec_end = np.array(ends, dtype=np.int64)
    pos = np.array(bodies, dtype=np.int64)
    if (rec_end - pos < MIN_RECORD_SIZE - 1).any():
        raise ValueError("record too short")
    pos += 1  # the attributes byte (unused in v2, ignored as Kafka does)
    ts_delta, s = varint.decode_at(arr, pos)
    pos += s
    off_delta, s = varint.decode_at(arr, pos)
    pos += s
    if not np.array_equal(off_delta, np.arange(n)):
        raise ValueError("offset deltas are not 0..n-1")
    klen, s = varint.decode_at(arr, pos)
    kpos = pos + s
    if (klen < -1).any() or (klen > rec_end - kpos).any():
        raise ValueError("key length out of range")
    kend = kpos + np.maximum(klen, 0)
    vlen, s = varint.decode_at(arr, kend)
    vpos = kend + s
    if (vlen < -1).any() or (vlen > rec_end - vpos).any():
        raise ValueError("value length out of range")
    vend = vpos + np.maximum(vlen, 0)
    hcount, s = varint.decode_at(arr, vend)
    hpos = vend + s
    if (hcount < 0).any() or (hpos > rec_end).any():
        raise ValueError("header count out of range")
    keys = _slices(data, kpos, kend, klen)
    values = _slices(data, vpos, vend, vlen)
    if hcount.any():
        if (hpos[hcount == 0] != rec_end[hcount == 0]).any():
            raise ValueError("record length disagrees with its fields")
        headers = [_decode_headers(data, p, c, e) if c else []
                   for p, c, e in zip(hpos.tolist(), hcount.tolist(), ends, strict=True)]
    else:
        if (hpos != rec_end).any():
            raise ValueError("record length disagrees with its fields")
        headers = [NO_HEADERS] * n
    # Python ints: a corrupt delta cannot wrap around int64
    timestamps = [base_ts + d for d in ts_delta.tolist()] if ts_delta.any() else [base_ts] * n
    return RecordColumns(timestamps, keys, values, headers)


def _slices(data: bytes, starts: np.ndarray, ends: np.ndarray, lengths: np.ndarray) -> list:
    out = list(map(data.__getitem__, map(slice, starts.tolist(), ends.tolist())))
    nulls = lengths < 0
    if nulls.any():
        for i in np.flatnonzero(nulls).tolist():
            out[i] = None
    return out


def _decode_headers(data: bytes, pos: int, count: int, end: int) -> list:
    if count * 2 > end - pos:  # each header takes at least two bytes (two lengths)
        raise ValueError("header count overruns its record")
    out = []
    for _ in range(count):
        klen, pos = varint.decode_one(data, pos)
        if klen < 0 or klen > end - pos:
            raise ValueError("bad header key length")
        key = data[pos:pos + klen].decode("utf-8")
        pos += klen
        vlen, pos = varint.decode_one(data, pos)
        if vlen < -1 or vlen > end - pos:
            raise ValueError("bad header value length")
        if vlen < 0:
            value = None
        else:
            value = data[pos:pos + vlen]
            pos += vlen
        out.append((key, value))
    if pos != end:
        raise ValueError("record length disagrees with its headers")
    return out
