"""The codec's per-record loops, compiled with numba.

A v2 records section is a chain: each record starts where the previous record's length
varint says, and every field inside is a varint too. Walking that chain is inherently one
record after another; in Python it costs about a microsecond per record, which made every
batch shape but the plain homogeneous one (coded from cached templates) 5-10x dearer.
Compiled, the walk costs a few nanoseconds per record, so every shape costs about the same.

What a compiled loop cannot do is make Python objects. So the decoder's walk returns a
``struct`` format that cuts every key and value out of the batch in one C call
(``"<gap>x<len>s"`` per field), plus the few columns Python needs (timestamps, where the nulls
and headers are). Python then does a constant number of C-level calls per batch.

Every function here is pure (arrays in, arrays out; the caller allocates the outputs),
checks every length against the bytes it may span before moving a position, and reports
malformed input as a negative status (see STATUS_MESSAGES), never by reading or writing
out of bounds (numba does not check indexes: these functions must).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# flags of a successful scan (status >= 0)
TIMESTAMPS_VARY = 1
NULL_KEYS = 2
NULL_VALUES = 4
HEADERS = 8
SAME_HEADERS = 16  # every record carries the same header block (fmt2 then cuts only one)

STATUS_MESSAGES = {
    -1: "bad record length",
    -2: "bad timestamp delta",
    -3: "offset deltas are not 0..n-1",
    -4: "key length out of range",
    -5: "value length out of range",
    -6: "record length disagrees with its fields",
    -7: "records do not fill the batch",
    -8: "timestamp out of range",
}

FIELD_FMT = 22  # widest "<gap>x<len>s": two decimal int64s and two letters
_MIN_BODY = 6  # attributes, tsDelta, offsetDelta, keyLength, valueLength, headerCount
_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min


@njit(cache=True, nogil=True, inline="always")
def _varint(buf, p, end):
    """(zigzag-decoded value, next position) of the varint at p, or (0, -1) when it runs
    past `end` or over 10 bytes. Bits past 64 are dropped, as Kafka reads a varlong."""
    u = np.uint64(0)
    for k in range(10):
        if p >= end:
            return 0, -1
        b = buf[p]
        p += 1
        u |= np.uint64(b & 0x7F) << np.uint64(7 * k)
        if b < 0x80:
            return np.int64(u >> np.uint64(1)) ^ -np.int64(u & np.uint64(1)), p
    return 0, -1


@njit(cache=True, nogil=True, inline="always")
def _decimal(fmt, q, v):
    """Write v >= 0 in decimal at fmt[q:]; the next free position."""
    digits = 1
    t = v // 10
    while t > 0:
        t //= 10
        digits += 1
    p = q + digits - 1
    while True:
        fmt[p] = 48 + v % 10
        v //= 10
        if v == 0:
            break
        p -= 1
    return q + digits


@njit(cache=True, nogil=True, inline="always")
def _field(fmt, q, cursor, start, length):
    """Append "<gap>x<length>s" for the field at `start`; (next fmt position, new cursor)."""
    gap = start - cursor
    if gap > 0:
        q = _decimal(fmt, q, gap)
        fmt[q] = 120  # x
        q += 1
    q = _decimal(fmt, q, length)
    fmt[q] = 115  # s
    return q + 1, start + length


@njit(cache=True, nogil=True, inline="always")
def _record(buf, pos, end, i, base_ts):
    """Parse record i at `pos` (its length varint) of a records section ending at `end`.
    Returns (status, record end, timestamp, key pos, key length, value pos, value length,
    header block pos): status 0, or an error (< 0, see STATUS_MESSAGES). The header block
    (count and headers) runs from its pos to the record end and is at least one byte."""
    length, p = _varint(buf, pos, end)
    if p < 0 or length < _MIN_BODY or length > end - p:
        return -1, 0, 0, 0, 0, 0, 0, 0
    rec_end = p + length
    p += 1  # attributes: unused in v2, ignored as Kafka does
    delta, p = _varint(buf, p, rec_end)
    if p < 0:
        return -2, 0, 0, 0, 0, 0, 0, 0
    if (delta > 0 and base_ts > _INT64_MAX - delta) or (
            delta < 0 and base_ts < _INT64_MIN - delta):
        return -8, 0, 0, 0, 0, 0, 0, 0
    offset_delta, p = _varint(buf, p, rec_end)
    if p < 0 or offset_delta != i:
        return -3, 0, 0, 0, 0, 0, 0, 0
    klen, kpos = _varint(buf, p, rec_end)
    if kpos < 0 or klen < -1 or klen > rec_end - kpos:
        return -4, 0, 0, 0, 0, 0, 0, 0
    vlen, vpos = _varint(buf, kpos + max(klen, 0), rec_end)
    if vpos < 0 or vlen < -1 or vlen > rec_end - vpos:
        return -5, 0, 0, 0, 0, 0, 0, 0
    hpos = vpos + max(vlen, 0)
    if hpos >= rec_end:  # no room for the header count
        return -6, 0, 0, 0, 0, 0, 0, 0
    return 0, rec_end, base_ts + delta, kpos, klen, vpos, vlen, hpos


@njit(cache=True, nogil=True)
def scan_records(buf: bytes, start: int, n: int, end: int, base_ts: int, out: np.ndarray,
                 fmt1_at: int, fmt2_at: int) -> tuple[int, int, int, int, int, int]:
    """Walk the `n` records of `buf[start:end]`.

    `out` and the offsets in it are scan_layout(n), provided by the caller (an array a
    compiled function returns costs Python over a microsecond to box). Returns (status,
    fmt1_len, fmt2_len, null_keys, null_values, with_headers) and fills `out`:

    * status: flags (>= 0) or an error (< 0, see STATUS_MESSAGES);
    * out[fmt1_at:][:fmt1_len]: a struct format that, unpacked at `start`, yields key, value
      per record (a null field yields b"");
    * out[fmt2_at:][:fmt2_len]: a struct format that yields the header block of every
      record that has headers (only the first one under SAME_HEADERS);
    * as native int64s, out[:fmt1_at]: [0:n] the timestamps (valid under TIMESTAMPS_VARY),
      [n:2n] the null keys, [2n:3n] the null values, [3n:4n] the records with headers (the
      counts are the three scalars).
    """
    ints = out[:fmt1_at].view(np.int64)
    flags = 0
    null_keys = 0
    null_values = 0
    with_headers = 0
    q1 = fmt1_at
    c1 = start
    q2 = fmt2_at
    q2_first = q2
    c2 = start
    first_block = -1
    first_size = 0
    pos = start
    for i in range(n):
        status, rec_end, ts, kpos, klen, vpos, vlen, hpos = _record(buf, pos, end, i, base_ts)
        if status < 0:
            return status, 0, 0, 0, 0, 0
        if ts != base_ts:
            flags |= TIMESTAMPS_VARY
        ints[i] = ts
        if klen < 0:
            flags |= NULL_KEYS
            ints[n + null_keys] = i
            null_keys += 1
        q1, c1 = _field(out, q1, c1, kpos, max(klen, 0))
        if vlen < 0:
            flags |= NULL_VALUES
            ints[2 * n + null_values] = i
            null_values += 1
        q1, c1 = _field(out, q1, c1, vpos, max(vlen, 0))
        if hpos + 1 != rec_end or buf[hpos] != 0:
            size = rec_end - hpos
            if first_block < 0:
                first_block = hpos
                first_size = size
            elif first_size >= 0:
                if size != first_size:
                    first_size = -1  # blocks differ
                else:
                    for k in range(size):
                        if buf[hpos + k] != buf[first_block + k]:
                            first_size = -1
                            break
            q2, c2 = _field(out, q2, c2, hpos, size)
            if with_headers == 0:
                q2_first = q2
            ints[3 * n + with_headers] = i
            with_headers += 1
        pos = rec_end
    if pos != end:
        return -7, 0, 0, 0, 0, 0
    if with_headers:
        flags |= HEADERS
        if with_headers == n and first_size >= 0:
            flags |= SAME_HEADERS
            q2 = q2_first
    return flags, q1 - fmt1_at, q2 - fmt2_at, null_keys, null_values, with_headers


@njit(cache=True, nogil=True)
def scan_chunk(buf: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
               base_ts: np.ndarray, timestamps: np.ndarray, kpos: np.ndarray,
               klen: np.ndarray, vpos: np.ndarray, vlen: np.ndarray, ok: np.ndarray) -> None:
    """Walk every record of many batches (the Spark reader's chunk of a .log): batch b lies
    at buf[starts[b]:][:sizes[b]] and holds counts[b] records; record r of the chunk (in
    batch order) gets its timestamp, key and value position and length (-1: null). `ok[b]`
    says whether batch b parsed exactly (its header blocks checked to hold their count's
    worth of headers, each at least two bytes); a batch that did not has its records' fields
    zeroed, for the caller to take another way."""
    r = 0
    for b in range(len(starts)):
        n = counts[b]
        pos = starts[b] + 69  # the batch header
        end = starts[b] + sizes[b]
        good = end <= len(buf)
        if not good:
            n = 0  # (its records are zeroed below)
        for i in range(n):
            status, rec_end, ts, kp, kl, vp, vl, hpos = _record(buf, pos, end, i, base_ts[b])
            if status < 0:
                good = False
                break
            hcount, h = _varint(buf, hpos, rec_end)
            if h < 0 or hcount < 0 or (hcount == 0 and h != rec_end) or (
                    hcount > 0 and rec_end - h < 2 * hcount):
                good = False
                break
            timestamps[r + i] = ts
            kpos[r + i] = kp
            klen[r + i] = kl
            vpos[r + i] = vp
            vlen[r + i] = vl
            pos = rec_end
        if not good or pos != end:
            good = False
            for i in range(counts[b]):
                kpos[r + i] = 0
                klen[r + i] = 0
                vpos[r + i] = 0
                vlen[r + i] = 0
                timestamps[r + i] = base_ts[b]
        ok[b] = good
        r += counts[b]


def scan_layout(n: int) -> tuple[int, int, int]:
    """scan_records' `out` for n records: (its size, where the key/value format starts,
    where the header-block format starts). First 4n int64s, then room for two fields per
    record, then for one."""
    fmt1_at = 32 * n
    fmt2_at = fmt1_at + 2 * FIELD_FMT * n + 8
    return fmt2_at + FIELD_FMT * n, fmt1_at, fmt2_at


# ---------------------------------------------------------------------------- encoding


@njit(cache=True, nogil=True, inline="always")
def _zigzag(v):
    return np.uint64((v << 1) ^ (v >> 63))


@njit(cache=True, nogil=True, inline="always")
def _size(u):
    """Bytes the (zigzagged) varint u takes."""
    s = 1
    while u >= 0x80:
        u >>= np.uint64(7)
        s += 1
    return s


@njit(cache=True, nogil=True, inline="always")
def _put(out, p, v):
    """Write v as a zigzag varint at out[p:]; the next position."""
    u = _zigzag(v)
    while u >= 0x80:
        out[p] = np.uint8((u & np.uint64(0x7F)) | np.uint64(0x80))
        u >>= np.uint64(7)
        p += 1
    out[p] = np.uint8(u)
    return p + 1


@njit(cache=True, nogil=True, inline="always")
def _copy(dst, d, src, s, length):
    """dst[d:d + length] = src[s:s + length], as a loop over two views indexed by the loop
    variable alone: LLVM vectorises that (no negative-index checks), where a slice
    assignment or offset indexes run about eight times slower."""
    to = dst[d:d + length]
    fro = src[s:s + length]
    for k in range(length):
        to[k] = fro[k]


RECORD_OVERHEAD = 31  # most bytes a record adds besides payloads and headers (5 varints)


def encode_bound(head: int, n: int, payload_bytes: int, header_bytes: int) -> int:
    """Bytes a batch of n records can take at most (`header_bytes`: all header blocks)."""
    return head + payload_bytes + header_bytes + RECORD_OVERHEAD * n


@njit(cache=True, nogil=True)
def encode_records(head: int, lengths: np.ndarray, payloads: np.ndarray, deltas: np.ndarray,
                   header_lengths: np.ndarray, headers: np.ndarray, out: np.ndarray
                   ) -> tuple[int, int]:
    """Write a batch into `out` (at least encode_bound bytes): `head` zero bytes (the
    batch header, filled in by the caller), then the records section, every record
    ``[length][attributes 0][tsDelta][offsetDelta][keyLength][key][valueLength][value]
    [headerCount][headers]``. Returns (the batch's size, or -1 if `out` is too small or the
    lengths do not add up to `payloads` and `headers`; the largest timestamp delta, 0 when
    `deltas` is empty).

    `lengths` holds the n key lengths then the n value lengths (-1: null); `payloads` the
    keys then the values, back to back. `deltas` is empty when every timestamp delta is 0.
    `header_lengths` is empty when no record has headers, one entry when every record
    carries the same block `headers`, else one per record (the blocks back to back; a
    record with none has the block b"\\x00")."""
    n = len(lengths) // 2
    nh = len(header_lengths)
    if len(deltas) not in (0, n) or nh not in (0, 1, n):
        return -1, 0
    bodies = np.empty(n, np.int64)
    total = head
    payload_bytes = 0
    header_bytes = 0
    for i in range(n):
        kl = lengths[i]
        vl = lengths[n + i]
        if kl < -1 or vl < -1:
            return -1, 0
        payload_bytes += max(kl, 0) + max(vl, 0)
        hl = 1 if nh == 0 else header_lengths[0] if nh == 1 else header_lengths[i]
        if hl < 1:
            return -1, 0
        header_bytes += hl
        d = deltas[i] if len(deltas) else 0
        body = (1 + _size(_zigzag(d)) + _size(_zigzag(i)) + _size(_zigzag(kl)) + max(kl, 0)
                + _size(_zigzag(vl)) + max(vl, 0) + hl)
        bodies[i] = body
        total += _size(_zigzag(body)) + body
    if total > len(out) or payload_bytes != len(payloads) or (
            nh == 1 and header_lengths[0] != len(headers)) or (
            nh > 1 and header_bytes != len(headers)):
        return -1, 0
    max_delta = deltas[0] if len(deltas) else 0
    for d in deltas:
        max_delta = max(max_delta, d)
    out[:head] = 0
    p = head
    ko = 0  # where the next key starts in payloads
    vo = 0  # the next value, after all the keys
    for i in range(n):
        kl = lengths[i]
        if kl > 0:
            vo += kl
    ho = 0
    for i in range(n):
        p = _put(out, p, bodies[i])
        out[p] = 0  # attributes
        p = _put(out, p + 1, deltas[i] if len(deltas) else 0)
        p = _put(out, p, i)
        kl = lengths[i]
        p = _put(out, p, kl)
        if kl > 0:
            _copy(out, p, payloads, ko, kl)
            p += kl
            ko += kl
        vl = lengths[n + i]
        p = _put(out, p, vl)
        if vl > 0:
            _copy(out, p, payloads, vo, vl)
            p += vl
            vo += vl
        if nh == 0:
            out[p] = 0
            p += 1
        else:
            hl = header_lengths[0] if nh == 1 else header_lengths[i]
            start = 0 if nh == 1 else ho
            _copy(out, p, headers, start, hl)
            p += hl
            ho += hl
    return p, max_delta


@njit(cache=True, nogil=True)
def gather_payloads(buf: np.ndarray, positions: np.ndarray, lengths: np.ndarray,
                    offsets: np.ndarray, data: np.ndarray) -> int:
    """Copy the payloads buf[positions[i]:][:lengths[i]] back to back into `data`, writing
    Arrow-style int32 `offsets` (n + 1 of them; a length of -1, a null, adds nothing).
    Returns the bytes written, or -1 if a payload lies outside `buf` or `data` is too
    small (the caller sizes it from the lengths)."""
    o = 0
    for i in range(len(lengths)):
        offsets[i] = o
        length = lengths[i]
        if length > 0:
            p = positions[i]
            if p < 0 or p + length > len(buf) or o + length > len(data):
                return -1
            _copy(data, o, buf, p, length)
            o += length
    offsets[len(lengths)] = o
    return o

