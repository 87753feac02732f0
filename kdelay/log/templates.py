"""Templates of homogeneous record batches: the fast path of the codec (codec.py).

A batch is homogeneous when its n records have keys of one length (or all null), values
of one length (or all null), the same headers, and timestamp deltas of one byte each
(|delta| < 64 ms: a producer's stamps within a short linger). That is what a producer of
fixed-size messages writes, and in such a batch every byte but the key and value payloads
and the delta bytes depends only on (n, key length, value length, header block). A cached
template holds those bytes, so encoding is a join of the template's pieces with the
payloads slotted in (deltas written in place), and decoding is one struct unpack of the
whole records section plus one tuple compare of every other byte run against the
template. The compare is exact, so a batch the template does not describe byte for byte
takes the general path (sections.py, record_decode.py); it can never be misread.
"""

from __future__ import annotations

import functools
import operator
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from ..records import NO_HEADERS
from . import record_decode, sections, varint
from .sections import HEADER_SIZE, RecordColumns

_ZERO_HEADER = bytes(HEADER_SIZE)  # the batch header, filled in by the codec




class _Group(NamedTuple):
    """A run of records of equal size inside a homogeneous batch (the size only changes where
    the offset-delta varint grows a byte: at record 64, 8192, ...)."""

    start: int  # batch position of the run's first record
    first: int  # index of its first record
    stop: int  # index one past its last record
    rec_size: int
    key_off: int  # key payload offset within each record
    val_off: int  # value payload offset within each record
    ts_off: int  # timestamp-delta byte offset within each record


def _layout(n: int, klen: int, vlen: int, hsize: int = 1) -> tuple[list[_Group], int]:
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
        body = 1 + 1 + osz + ksz + kb + vsz + vb + hsize
        lsz = varint.size_one(body)
        key_off = lsz + 2 + osz + ksz
        groups.append(_Group(pos, i, stop, lsz + body, key_off, key_off + kb + vsz, lsz + 1))
        pos += (stop - i) * (lsz + body)
        i = stop
        osz += 1
        limit <<= 7
    return groups, pos


@functools.lru_cache(maxsize=256)
def _layout_size(n: int, klen: int, vlen: int, hsize: int) -> int:
    """A homogeneous batch's size (cached: a stream of batches the template cannot take asks
    for the same few shapes over and over)."""
    return _layout(n, klen, vlen, hsize)[1]


class _Template:
    """A homogeneous batch's bytes. `hblock` is every record's header block (count included;
    b"\\x00": no headers). Decoding also accepts any 1-byte timestamp deltas (|delta| < 64
    ms: a producer's per-record stamps within a short linger), which do not move any other
    byte."""

    __slots__ = ("n", "klen", "vlen", "size", "groups", "image", "headers", "_parts",
                 "_ts_positions", "_unpacker")

    def __init__(self, n: int, klen: int, vlen: int, hblock: bytes = b"\x00"):
        self.n = n
        self.klen = klen
        self.vlen = vlen
        self.groups, self.size = _layout(n, klen, vlen, len(hblock))
        key = None if klen < 0 else bytes(klen)
        val = None if vlen < 0 else bytes(vlen)
        self.headers = None if hblock == b"\x00" else record_decode.decode_header_block(hblock)
        if self.headers is not None and sections.header_block(self.headers) != hblock:
            raise ValueError("header block not in canonical form")  # the general path reads it
        records = sections.encode_records([key] * n, [val] * n, None,
                                          None if self.headers is None else [self.headers] * n)
        # image: the whole batch with a zeroed header and zeroed payloads
        self.image = _ZERO_HEADER + records
        if len(self.image) != self.size:  # the arithmetic layout and the encoder must agree
            raise AssertionError("template layout disagrees with the encoder")
        self._parts: list[bytes] | None = None  # built by the first encode, with
        self._ts_positions: np.ndarray | None = None  # where each timestamp delta byte is
        self._unpacker: _Unpacker | None = None  # built by the first decode

    @property
    def parts(self) -> list[bytes]:
        """The batch as join-able pieces: header, then per record [prefix, key, middle,
        value, suffix], with keys and values left empty to be slotted in (_fill_template)."""
        if self._parts is None:
            kb, vb = max(self.klen, 0), max(self.vlen, 0)
            img = self.image
            parts = [_ZERO_HEADER]
            for g in self.groups:
                for rs in range(g.start, g.start + (g.stop - g.first) * g.rec_size, g.rec_size):
                    k, v = rs + g.key_off, rs + g.val_off
                    parts += [img[rs:k], b"", img[k + kb:v], b"", img[v + vb:rs + g.rec_size]]
            self._parts = parts
            self._ts_positions = np.concatenate([
                np.arange(g.stop - g.first, dtype=np.intp) * g.rec_size + g.start + g.ts_off
                for g in self.groups])
        return self._parts

    @property
    def unpacker(self) -> _Unpacker:
        if self._unpacker is None:
            self._unpacker = _Unpacker(self)
        return self._unpacker


def _getter(indexes: list[int]) -> Callable[[tuple], tuple]:
    """itemgetter that always returns a tuple (itemgetter(i) alone returns the item)."""
    if len(indexes) == 1:
        i = indexes[0]
        return lambda t: (t[i],)
    return operator.itemgetter(*indexes)


class _Unpacker:
    """A template's records section as one struct: a run of fixed bytes, then per record
    [timestamp delta, fixed, key, fixed, value, fixed] (the last fixed run reaching into the
    next record). A decode is one unpack_from, one tuple compare of every fixed run against
    the template's bytes, and three itemgetters: C calls, no per-record Python but the
    timestamp deltas (measured: 10 records 5-10 us, 100 records 40-55 us)."""

    __slots__ = ("struct", "fixed", "fixed_bytes", "deltas", "keys", "values")

    def __init__(self, t: _Template):
        kb, vb = max(t.klen, 0), max(t.vlen, 0)
        # every record of a group has the same field sizes: one format piece per group
        fmt, suffix = ["<"], 0  # suffix: the previous record's bytes after its value
        for g in t.groups:
            a, c = g.ts_off, g.key_off - g.ts_off - 1
            d, e = g.val_off - g.key_off - kb, g.rec_size - g.val_off - vb
            body = f"B{c}s{kb}s{d}s{vb}s"
            fmt.append(f"{suffix + a}s{body}" + f"{e + a}s{body}" * (g.stop - g.first - 1))
            suffix = e
        fmt.append(f"{suffix}s")
        self.struct = struct.Struct("".join(fmt))
        count = 6 * t.n + 1  # field i: fixed when even, delta at 1, key at 3, value at 5
        self.fixed = _getter(list(range(0, count, 2)))
        self.deltas = _getter(list(range(1, count, 6)))
        self.keys = _getter(list(range(3, count, 6)))
        self.values = _getter(list(range(5, count, 6)))
        self.fixed_bytes = self.fixed(self.struct.unpack_from(t.image, HEADER_SIZE))


# A small LRU of templates, bounded both in entries and in total records (each template keeps
# two slice objects per record), so odd shapes cannot grow memory without limit.
_TEMPLATE_MAX_ENTRIES = 64
_TEMPLATE_MAX_RECORDS = 1 << 17
_templates: OrderedDict[tuple[int, int, int], _Template] = OrderedDict()
_templates_records = 0
_templates_lock = threading.Lock()


def _template(n: int, klen: int, vlen: int, hblock: bytes = b"\x00") -> _Template | None:
    key = (n, klen, vlen) if hblock == b"\x00" else (n, klen, vlen, hblock)
    with _templates_lock:
        t = _templates.get(key)
        if t is not None:
            _templates.move_to_end(key)
            return t
    if n > _TEMPLATE_MAX_RECORDS // 4:
        return None  # huge batches amortise the general path's per-batch cost anyway
    t = _Template(n, klen, vlen, hblock)
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
        _last_fit.clear()


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


def encode(keys: Sequence, values: Sequence, ts: list | np.ndarray | None,
           headers: Sequence | None) -> bytearray | None:
    """The batch (zeroed header, then its records) from a template, or None when the
    template cannot take it: records that differ in more than key and value bytes and
    1-byte timestamp deltas (`ts`: deltas, None for all 0), i.e. mixed key or value
    lengths, different headers, or wider deltas."""
    n = len(values)
    hblock = b"\x00" if headers is None else _same_header_block(headers)
    if hblock is None:
        return None
    klen = _uniform_length(keys)
    vlen = _uniform_length(values) if klen is not None else None
    deltas = None if ts is None else _one_byte_deltas(ts)
    if vlen is None or (ts is not None and deltas is None):
        return None
    try:
        t = _template(n, klen, vlen, hblock)
    except ValueError:  # a header block the template cannot hold: the general path
        return None
    return None if t is None else _fill_template(t, keys, values, deltas)


def _same_header_block(headers: Sequence) -> bytes | None:
    """The header block every record shares, or None if they differ."""
    first = headers[0]
    try:
        if headers.count(first) != len(headers):
            return None
    except TypeError:
        return None
    return sections.header_block(first)


def _fill_template(t: _Template, keys: list, values: list,
                   deltas: list[int] | np.ndarray | None = None) -> bytearray:
    """The template's bytes with the payloads written in: the keys and values are slotted
    into a copy of the template's piece list (two C-level slice assignments) and everything
    is joined once; 1-byte timestamp deltas (zigzag values) are then written in place."""
    parts = t.parts.copy()
    if t.klen > 0:
        parts[2::5] = keys
    if t.vlen > 0:
        parts[4::5] = values
    out = bytearray().join(parts)
    if isinstance(deltas, np.ndarray):
        np.frombuffer(out, dtype=np.uint8)[t._ts_positions] = deltas
    elif deltas is not None:
        for pos, z in zip(t._ts_positions.tolist(), deltas, strict=True):
            out[pos] = z
    return out


def _one_byte_deltas(ts: list | np.ndarray) -> list[int] | np.ndarray | None:
    """Each timestamp delta as the value of its 1-byte (zigzag) varint, or None if some
    delta needs more than one byte."""
    if isinstance(ts, np.ndarray):
        if int(ts.min()) < -64 or int(ts.max()) > 63:
            return None
        return ((ts << 1) ^ (ts >> 63)).astype(np.uint8)
    if min(ts) < -64 or max(ts) > 63:
        return None
    return [(d << 1) if d >= 0 else (-d << 1) - 1 for d in ts]


# ---------------------------------------------------------------------------- decoding


def _peek_shape(data: bytes) -> tuple[int, int, bytes] | None:
    """(key length, value length, header block) of the first record if it could open a
    homogeneous batch (attributes 0, a 1-byte timestamp delta, offset delta 0), else None."""
    try:
        length, pos = varint.decode_one(data, HEADER_SIZE)
        rec_end = pos + length
        if data[pos] or data[pos + 1] >= 0x80 or data[pos + 2]:
            return None
        klen, pos = varint.decode_one(data, pos + 3)
        if klen > 0:
            pos += klen
        vlen, pos = varint.decode_one(data, pos)
        if vlen > 0:
            pos += vlen
        if data[pos] == 0 and pos + 1 == rec_end:
            hblock = b"\x00"
        elif pos < rec_end <= len(data):
            hblock = data[pos:rec_end]
        else:
            return None
    except (IndexError, ValueError):
        return None
    if klen < -1 or vlen < -1:
        return None
    return klen, vlen, hblock


def decode(data: bytes, n: int, end: int, base_ts: int) -> RecordColumns | None:
    """Decode a homogeneous batch, or None when the batch is not exactly a template's shape
    with only the payloads (and 1-byte timestamp deltas) differing: then the general path
    decides. The template that last decoded a batch of this record count and size is tried
    first, before the first record is parsed for its shape: the compare is exact, so a wrong
    guess costs one unpack and is never misread."""
    t = _last_fit.get((n, end))
    if t is not None:
        cols = _unpack(t, data, n, base_ts)
        if cols is not None:
            return cols
    shape = _peek_shape(data)
    if shape is None:
        return None
    klen, vlen, hblock = shape
    key = (n, klen, vlen) if hblock == b"\x00" else (n, klen, vlen, hblock)
    t = _templates.get(key)
    if t is None:
        # only build a template for a batch that could match one: the size must agree
        if klen + vlen > end or _layout_size(n, klen, vlen, len(hblock)) != end:
            return None
        try:
            t = _template(n, klen, vlen, hblock)
        except (IndexError, ValueError):  # an undecodable header block
            return None
        if t is None:
            return None
    if t.size != end:
        return None
    cols = _unpack(t, data, n, base_ts)
    if cols is not None:
        if len(_last_fit) >= _TEMPLATE_MAX_ENTRIES:
            _last_fit.clear()  # bounded: odd shapes cannot grow it (or pin evicted templates)
        _last_fit[(n, end)] = t
    return cols


def _unpack(t: _Template, data: bytes, n: int, base_ts: int) -> RecordColumns | None:
    u = t.unpacker
    fields = u.struct.unpack_from(data, HEADER_SIZE)
    if u.fixed(fields) != u.fixed_bytes:
        return None  # some non-payload byte differs: not this shape (or damaged)
    deltas = u.deltas(fields)
    if not any(deltas):
        timestamps = [base_ts] * n
    elif max(deltas) < 0x80:
        timestamps = [base_ts + _UNZIGZAG_7BIT[d] for d in deltas]
    else:
        return None
    klen, vlen = t.klen, t.vlen
    keys = list(u.keys(fields)) if klen > 0 else [None if klen < 0 else b""] * n
    values = list(u.values(fields)) if vlen > 0 else [None if vlen < 0 else b""] * n
    headers = [NO_HEADERS] * n if t.headers is None else list(map(list, [t.headers] * n))
    return RecordColumns(timestamps, keys, values, headers)


_last_fit: dict[tuple[int, int], _Template] = {}  # (records, batch size) -> template
_UNZIGZAG_7BIT = [(b >> 1) ^ -(b & 1) for b in range(128)]  # a 1-byte varint's value
