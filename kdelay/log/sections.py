"""The records section of a v2 batch, any shape: encoding and decoding per batch, not per record.

A record is ``[length][attributes][tsDelta][offsetDelta][keyLength][key][valueLength][value]
[headerCount][headers]`` with zigzag varints (Kafka v2). The codec's template path
(codec.py) covers the homogeneous batch; everything else comes here: per-record timestamps
(increasing or not), headers on some or all records, null keys and values, mixed sizes.

Encoding: one ``b"".join`` per batch over five or six pieces per record,
``[L][OK][key][V][value]([H])``:

* ``L`` = the previous record's header count 0 (headerless batches), the record length,
  the attributes byte and the timestamp delta. Its bytes depend on two integers only (the
  length and the zigzagged delta), computed for the whole batch as one numpy column and packed
  into one int code per record; a bounded code -> bytes cache turns the column into pieces
  with one C-level ``map`` (a producer's batches repeat the same few lengths and deltas).
* ``OK`` = the offset delta and the key length: a cached list per key length when every key
  has the same length (the usual case), else the same code cache as ``L``.
* ``V`` = the value length: one shared piece when every value has the same length.
* ``H`` = header count and headers: encoded once per distinct header set (the retry header
  repeated on every record is encoded once per batch).

So there is no per-record Python: numpy per column, then C-level maps, list slicing and one
join. Decoding is record_decode.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from . import varint

HEADER_SIZE = 69


class RecordColumns(NamedTuple):
    """A batch's records, decoded column-wise."""

    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[list[tuple[str, bytes | None]]]


# Below this many records the per-call cost of numpy (about 1 us per operation, some 20 of
# them per batch) exceeds a plain Python loop over the records.
SMALL_BATCH = 24
_PAD = 32  # zero bytes after the data so vectorised varint reads never run off the end
MIN_RECORD_SIZE = 7


def _uvarint(u: int) -> bytes:
    """Unsigned varint bytes of `u` (already zigzagged)."""
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


# Varint bytes of every zigzagged value below 2**14 (1 and 2 bytes: nearly every length and
# offset delta), built once (~1 MB) so a column of them becomes pieces with one C-level map.
_VB_LIMIT = 1 << 14
_VB = [_uvarint(u) for u in range(_VB_LIMIT)]
_VB_get = _VB.__getitem__
_ZERO = b"\x00"
_ZERO_LIST = [_ZERO]


class _PieceCache(dict):
    """int code -> bytes piece, built on a miss by `build`. Cleared (not evicted one by one:
    cheaper, and a steady workload refills it within a batch or two) when it passes `limit`
    entries, so odd shapes cannot grow memory without bound. A lost race between threads
    only builds a piece twice: the result is the same."""

    __slots__ = ("build", "limit")

    def __init__(self, build, limit: int) -> None:
        super().__init__()
        self.build = build
        self.limit = limit

    def __missing__(self, code: int) -> bytes:
        piece = self.build(code)
        self[code] = piece
        return piece

    def pieces(self, codes: list[int]) -> list[bytes]:
        if len(self) > self.limit:
            self.clear()
        return list(map(self.__getitem__, codes))


# L pieces. code = lead << 62 | body << 32 | tsdelta_zigzag, with body < 2**30 and the
# zigzagged delta < 2**32 (|delta| < ~24.8 days); other batches build their pieces directly.
_BODY_BITS = 30
_TS_BITS = 32
_LEAD = 1 << 62
_TS_MASK = (1 << _TS_BITS) - 1
_BODY_MASK = (1 << _BODY_BITS) - 1


def _build_l(code: int) -> bytes:
    lead = _ZERO if code & _LEAD else b""
    body = (code >> _TS_BITS) & _BODY_MASK
    return lead + _uvarint(body << 1) + _ZERO + _uvarint(code & _TS_MASK)


_L = _PieceCache(_build_l, 1 << 16)


# OK pieces when key lengths differ: code = i << 32 | keylength_zigzag (i < 2**31).
def _build_ok(code: int) -> bytes:
    return _uvarint((code >> 32) << 1) + _uvarint(code & 0xFFFFFFFF)


_OKC = _PieceCache(_build_ok, 1 << 16)
# OK pieces when every key has one length: one list per key length, grown on demand.
_OK_LISTS: dict[int, list[bytes]] = {}
_OK_LIST_MAX = 1 << 16
_OSZ = varint.sizes(varint.zigzag(np.arange(_OK_LIST_MAX, dtype=np.int64)))  # offsetDelta sizes


def _ok_list(kzz: int, n: int) -> list[bytes]:
    lst = _OK_LISTS.get(kzz)
    if lst is None or len(lst) < n:
        if len(_OK_LISTS) > 256:
            _OK_LISTS.clear()
        kb = _uvarint(kzz)
        lst = [_uvarint(i << 1) + kb for i in range(max(n, 128))]
        _OK_LISTS[kzz] = lst
    return lst[:n]


# Header blocks (count + headers), by header set.
_HB: dict[tuple, bytes] = {}
_HB_LIMIT = 4096


def header_block(headers) -> bytes:
    """headerCount and the headers of one record (cached by content)."""
    if not headers:
        return _ZERO
    try:
        key = tuple(headers)
        block = _HB.get(key)
    except TypeError:  # an unhashable header (a list pair): encode without the cache
        return _encode_header_block(headers)
    if block is None:
        block = _encode_header_block(headers)
        if len(_HB) > _HB_LIMIT:
            _HB.clear()
        _HB[key] = block
    return block


def _encode_header_block(headers) -> bytes:
    parts = [_uvarint(len(headers) << 1)]
    for hkey, hval in headers:
        kb = hkey.encode("utf-8")
        parts.append(_uvarint(len(kb) << 1))
        parts.append(kb)
        if hval is None:
            parts.append(b"\x01")  # varint -1
        else:
            parts.append(_uvarint(len(hval) << 1))
            parts.append(bytes(hval))
    return b"".join(parts)


def _header_blocks(headers: Sequence, n: int) -> list[bytes]:
    h0 = headers[0]
    if headers.count(h0) == n:  # one header set on every record (e.g. the retry header)
        return [header_block(h0)] * n
    return list(map(header_block, headers))


def _lengths(items: Sequence, n: int) -> tuple[int | None, np.ndarray | None, bool]:
    """(common length or None, per-item lengths or None, any None item); -1 stands for None."""
    try:
        ls = set(map(len, items))
    except TypeError:  # None among the items
        if items.count(None) == n:
            return -1, None, True
        arr = np.fromiter((-1 if x is None else len(x) for x in items), dtype=np.int64, count=n)
        return None, arr, True
    if len(ls) == 1:
        return ls.pop(), None, False
    return None, np.fromiter(map(len, items), dtype=np.int64, count=n), False


def _body(n: int, const: int, cols: list[np.ndarray]) -> np.ndarray:
    body = np.full(n, const, dtype=np.int64)
    for c in cols:
        body += c
    return body


_BASE_CODES: dict[tuple[int, int, bool], np.ndarray] = {}


def _base_codes(n: int, const: int, lead: bool) -> np.ndarray:
    """The L codes of a batch whose record bodies are `const` bytes plus the offset delta's
    varint, with timestamp delta 0 (a delta below 64 only adds itself to the code)."""
    key = (n, const, lead)
    codes = _BASE_CODES.get(key)
    if codes is None:
        body = const + _OSZ[:n]
        codes = body << _TS_BITS
        if lead:
            codes[1:] |= _LEAD
        if len(_BASE_CODES) > 256:
            _BASE_CODES.clear()
        _BASE_CODES[key] = codes
    return codes


def _varint_pieces(u: np.ndarray) -> list[bytes]:
    """Varint bytes of each zigzagged value of `u`."""
    if int(u.max()) < _VB_LIMIT:
        return list(map(_VB_get, u.tolist()))
    return [_uvarint(v) for v in u.tolist()]


def encode_records(keys: Sequence, values: Sequence, ts: Sequence[int] | None,
                   headers: Sequence | None) -> bytes:
    """The records section (everything after the 69-byte header) of any batch. `ts` holds
    the timestamp deltas (ints or an int64 array) or None for all 0; `headers` is None or
    one header sequence per record. Keys and values are bytes or None."""
    if len(values) < SMALL_BATCH:
        return encode_small(keys, values, ts, headers)
    if ts is not None:
        ts = np.asarray(ts, dtype=np.int64)
    return encode_columns(keys, values, ts, headers)


def encode_columns(keys: Sequence, values: Sequence, ts: np.ndarray | None,
                   headers: Sequence | None) -> bytes:
    """encode_records with numpy columns (any batch size; meant for the larger ones)."""
    n = len(values)
    kconst, klens, knull = _lengths(keys, n)
    vconst, vlens, vnull = _lengths(values, n)
    # body = everything after the length varint; constant parts first, then the columns
    const = 1  # attributes
    cols: list[np.ndarray] = []
    if n > 64:
        cols.append(_OSZ[:n] if n <= _OK_LIST_MAX else
                    varint.sizes(varint.zigzag(np.arange(n, dtype=np.int64))))
    else:
        const += 1
    if kconst is not None:
        kzz_c = (kconst << 1) ^ (kconst >> 63)
        const += len(_uvarint(kzz_c)) + max(kconst, 0)
    else:
        kzz = varint.zigzag(klens)
        cols.append(varint.sizes(kzz))
        cols.append(np.maximum(klens, 0) if knull else klens)
    if vconst is not None:
        vzz_c = (vconst << 1) ^ (vconst >> 63)
        vpiece = _uvarint(vzz_c)
        const += len(vpiece) + max(vconst, 0)
    else:
        vzz = varint.zigzag(vlens)
        cols.append(varint.sizes(vzz))
        cols.append(np.maximum(vlens, 0) if vnull else vlens)
    if headers is None:
        const += 1
        hblocks = None
    else:
        hblocks = _header_blocks(headers, n)
        if hblocks.count(hblocks[0]) == n:  # one header set on every record
            const += len(hblocks[0])
        else:
            cols.append(np.fromiter(map(len, hblocks), dtype=np.int64, count=n))
    lp = None
    if ts is None:
        const += 1
    else:
        tzz = varint.zigzag(ts)
        tmax = int(tzz.max())
        if tmax < 0x80 and len(cols) == (n > 64) and n <= _OK_LIST_MAX:
            # only the offset delta's size varies (a producer's batch: equal key and value
            # sizes, stamps within 64 ms): cached codes per batch layout, plus the deltas
            c0 = const + 1 - (n <= 64)  # + the 1-byte delta, - the offset delta (re-added)
            lp = _L.pieces((_base_codes(n, c0, headers is None) + tzz.view(np.int64)).tolist())
        else:
            cols.append(varint.sizes(tzz))
    if lp is not None:
        pass
    elif int((body := _body(n, const, cols)).max()) <= _BODY_MASK and (ts is None or tmax <= _TS_MASK):
        codes = body << _TS_BITS
        if ts is not None:
            codes |= tzz.view(np.int64)
        if headers is None:
            codes[1:] |= _LEAD
        lp = _L.pieces(codes.tolist())
    else:  # a huge batch or a delta beyond ~24 days: build the pieces one by one
        tl = [0] * n if ts is None else tzz.tolist()
        lead = headers is None
        lp = [(_ZERO if lead and i else b"") + _uvarint(b << 1) + _ZERO + _uvarint(t)
              for i, (b, t) in enumerate(zip(body.tolist(), tl, strict=True))]
    # OK pieces
    if kconst is not None:
        okp = _ok_list(kzz_c, n)
    else:
        codes = np.arange(n, dtype=np.int64) << 32
        codes |= kzz.view(np.int64)
        okp = _OKC.pieces(codes.tolist())

    per = 5 if headers is None else 6
    parts = [b""] * (per * n)
    parts[0::per] = lp
    parts[1::per] = okp
    if kconst is None or kconst > 0:
        parts[2::per] = [b"" if k is None else k for k in keys] if knull else keys
    parts[3::per] = [vpiece] * n if vconst is not None else _varint_pieces(vzz)
    if vconst is None or vconst > 0:
        parts[4::per] = [b"" if v is None else v for v in values] if vnull else values
    if headers is None:
        parts.append(_ZERO)  # the last record's header count
    else:
        parts[5::per] = hblocks
    return b"".join(parts)


def encode_small(keys: Sequence, values: Sequence, ts: Sequence[int] | None,
                 headers: Sequence | None) -> bytes:
    """encode_records for a few records: one Python pass, no numpy."""
    parts: list[bytes] = []
    vb = _VB
    for i in range(len(values)):
        k = keys[i]
        v = values[i]
        if k is None:
            kh, k, kl = b"\x01", b"", 0
        else:
            kl = len(k)
            kh = vb[kl << 1] if kl < 8192 else _uvarint(kl << 1)
        if v is None:
            vh, v, vl = b"\x01", b"", 0
        else:
            vl = len(v)
            vh = vb[vl << 1] if vl < 8192 else _uvarint(vl << 1)
        if ts is None:
            th = _ZERO
        else:
            t = int(ts[i])
            tz = ((t << 1) ^ (t >> 63)) & 0xFFFFFFFFFFFFFFFF
            th = vb[tz] if tz < _VB_LIMIT else _uvarint(tz)
        o = vb[i << 1]
        hb = _ZERO if headers is None else header_block(headers[i])
        body = 1 + len(th) + len(o) + len(kh) + kl + len(vh) + vl + len(hb)
        parts += (vb[body << 1] if body < 8192 else _uvarint(body << 1), _ZERO, th, o, kh, k,
                  vh, v, hb)
    return b"".join(parts)
