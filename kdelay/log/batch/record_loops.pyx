# cython: language_level=3
"""The codec's per-record loops, compiled to C (Cython, built when kdelay is installed).

A v2 records section is a chain: each record starts where the previous record's length
varint says, and every field inside is a varint too. Walking that chain is inherently one
record after another; in Python it costs about a microsecond per record, which made every
batch shape but the plain homogeneous one (coded from cached templates) 5-10x dearer.
Compiled, the walk costs a few nanoseconds per record, so every shape costs about the same.

The decoder's walk makes no Python objects per record: it returns a ``struct`` format that
cuts every key and value out of the batch in one C call (``"<gap>x<len>s"`` per field), plus
the few columns Python needs (timestamps, where the nulls and headers are). Python then does
a constant number of C-level calls per batch.

Every function here is pure (buffers in, buffers out; the caller allocates the outputs).
C checks no index by itself, so each function first checks its arguments against one
another (a mismatch is refused: a status, -1, or ValueError, as each says), and then every
length read from the bytes against the bytes it may span before moving a position; the
per-record work runs on raw pointers only after those checks. Malformed records are a
negative status (see STATUS_MESSAGES), never a read or write out of bounds.
"""

cimport cython
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

from kdelay.log.batch.record_parse cimport (
    BAD_ARGUMENTS,
    BAD_FIELDS,
    BAD_KEY_LENGTH,
    BAD_LENGTH,
    BAD_OFFSET_DELTA,
    BAD_TIMESTAMP_DELTA,
    BAD_VALUE_LENGTH,
    NOT_FILLED,
    TIMESTAMP_RANGE,
    Fields,
    has_headers,
    parse_record,
    read_varint,
)
from kdelay.log.batch.record_write cimport record_size, write_record

cpdef enum:  # flags of a successful scan (status >= 0)
    TIMESTAMPS_VARY = 1
    NULL_KEYS = 2
    NULL_VALUES = 4
    HEADERS = 8
    SAME_HEADERS = 16  # every record carries the same header block (fmt2 then cuts only one)

STATUS_MESSAGES = {
    BAD_LENGTH: "bad record length",
    BAD_TIMESTAMP_DELTA: "bad timestamp delta",
    BAD_OFFSET_DELTA: "offset deltas are not 0..n-1",
    BAD_KEY_LENGTH: "key length out of range",
    BAD_VALUE_LENGTH: "value length out of range",
    BAD_FIELDS: "record length disagrees with its fields",
    NOT_FILLED: "records do not fill the batch",
    TIMESTAMP_RANGE: "timestamp out of range",
    BAD_ARGUMENTS: "batch bounds or output layout out of range",
}

cpdef enum:
    FIELD_FMT = 22  # widest "<gap>x<len>s" in a buffer under 10**10 bytes: 10 digits twice
    RECORD_OVERHEAD = 31  # most bytes a record adds besides payloads and headers (5 varints)

cdef int64_t MAX_SCANNED = 9_999_999_999  # keeps every decimal in a format within 10 digits


cdef inline int64_t _decimal(uint8_t* fmt, int64_t q, int64_t v) noexcept nogil:
    """Write v >= 0 in decimal at fmt[q:]; the next free position."""
    cdef int64_t digits = 1
    cdef int64_t t = v // 10
    while t > 0:
        t //= 10
        digits += 1
    cdef int64_t p = q + digits - 1
    while True:
        fmt[p] = 48 + v % 10
        v //= 10
        if v == 0:
            break
        p -= 1
    return q + digits


cdef inline int64_t _field(uint8_t* fmt, int64_t q, int64_t* cursor, int64_t start,
                           int64_t length) noexcept nogil:
    """Append "<gap>x<length>s" for the field at `start` (at most FIELD_FMT bytes, the
    field lying in a scanned buffer); the next fmt position. Moves *cursor past the field."""
    cdef int64_t gap = start - cursor[0]
    if gap > 0:
        q = _decimal(fmt, q, gap)
        fmt[q] = 120  # x
        q += 1
    q = _decimal(fmt, q, length)
    fmt[q] = 115  # s
    cursor[0] = start + length
    return q + 1


cdef inline void _put_int64(uint8_t* out, int64_t k, int64_t v) noexcept nogil:
    """out's k-th native int64 = v (memcpy: `out` need not be aligned)."""
    memcpy(out + 8 * k, &v, 8)


@cython.boundscheck(False)  # buf and out are read and written only through pointers,
@cython.wraparound(False)   # after the argument check at the top
def scan_records(const uint8_t[::1] buf, int64_t start, int64_t n, int64_t end,
                 int64_t base_ts, uint8_t[::1] out, int64_t fmt1_at, int64_t fmt2_at
                 ) -> tuple[int, int, int, int, int, int]:
    """Walk the `n` records of `buf[start:end]`.

    `out` and the offsets in it are scan_layout(n), provided by the caller (outputs the
    caller allocates cost no Python to return). Returns (status, fmt1_len, fmt2_len,
    null_keys, null_values, with_headers) and fills `out`:

    * status: flags (>= 0) or an error (< 0, see STATUS_MESSAGES; BAD_ARGUMENTS when
      buf[start:end] or `out` do not hold what the arguments say);
    * out[fmt1_at:][:fmt1_len]: a struct format that, unpacked at `start`, yields key, value
      per record (a null field yields b"");
    * out[fmt2_at:][:fmt2_len]: a struct format that yields the header block of every
      record that has headers (only the first one under SAME_HEADERS);
    * as native int64s, out[:fmt1_at]: [0:n] the timestamps (valid under TIMESTAMPS_VARY),
      [n:2n] the null keys, [2n:3n] the null values, [3n:4n] the records with headers (the
      counts are the three scalars).
    """
    # every record takes at least one byte, so n <= end - start bounds the layout's sums;
    # each field then writes at most FIELD_FMT bytes into its region
    if not (0 <= start <= end <= buf.shape[0] and end <= MAX_SCANNED and 0 <= n <= end - start
            and fmt1_at >= 32 * n and fmt2_at >= fmt1_at + 2 * FIELD_FMT * n
            and out.shape[0] >= fmt2_at + FIELD_FMT * n):
        return BAD_ARGUMENTS, 0, 0, 0, 0, 0
    cdef const uint8_t* b = &buf[0]
    cdef uint8_t* o = &out[0]
    cdef Fields f
    cdef int status
    cdef int64_t i, size
    cdef int64_t flags = 0, null_keys = 0, null_values = 0, with_headers = 0
    cdef int64_t q1 = fmt1_at, c1 = start, q2 = fmt2_at, q2_first = fmt2_at, c2 = start
    cdef int64_t first_block = -1, first_size = 0
    cdef int64_t pos = start
    for i in range(n):
        status = parse_record(b, pos, end, i, base_ts, &f)
        if status < 0:
            return status, 0, 0, 0, 0, 0
        if f.ts != base_ts:
            flags |= TIMESTAMPS_VARY
        _put_int64(o, i, f.ts)
        if f.klen < 0:
            flags |= NULL_KEYS
            _put_int64(o, n + null_keys, i)
            null_keys += 1
        q1 = _field(o, q1, &c1, f.kpos, max(f.klen, 0))
        if f.vlen < 0:
            flags |= NULL_VALUES
            _put_int64(o, 2 * n + null_values, i)
            null_values += 1
        q1 = _field(o, q1, &c1, f.vpos, max(f.vlen, 0))
        if has_headers(b, &f):
            size = f.end - f.hpos
            if first_block < 0:
                first_block = f.hpos
                first_size = size
            elif first_size >= 0 and (size != first_size
                                      or memcmp(b + f.hpos, b + first_block, size) != 0):
                first_size = -1  # blocks differ
            q2 = _field(o, q2, &c2, f.hpos, size)
            if with_headers == 0:
                q2_first = q2
            _put_int64(o, 3 * n + with_headers, i)
            with_headers += 1
        pos = f.end
    if pos != end:
        return NOT_FILLED, 0, 0, 0, 0, 0
    if with_headers:
        flags |= HEADERS
        if with_headers == n and first_size >= 0:
            flags |= SAME_HEADERS
            q2 = q2_first
    return flags, q1 - fmt1_at, q2 - fmt2_at, null_keys, null_values, with_headers


def scan_layout(n: int) -> tuple[int, int, int]:
    """scan_records' `out` for n records: (its size, where the key/value format starts,
    where the header-block format starts). First 4n int64s, then room for two fields per
    record, then for one."""
    fmt1_at = 32 * n
    fmt2_at = fmt1_at + 2 * FIELD_FMT * n + 8
    return fmt2_at + FIELD_FMT * n, fmt1_at, fmt2_at


@cython.boundscheck(False)  # batch b is read only after its bounds are checked against buf,
@cython.wraparound(False)   # and the columns' lengths are checked at the top
def scan_chunk(const uint8_t[::1] buf, int64_t header_size, const int64_t[:] starts,
               const int64_t[:] sizes, const int64_t[:] counts, const int64_t[:] base_ts,
               int64_t[:] timestamps, int64_t[:] kpos, int64_t[:] klen, int64_t[:] vpos,
               int64_t[:] vlen, uint8_t[:] ok) -> None:
    """Walk every record of many batches (the Spark reader's chunk of a .log): batch b lies
    at buf[starts[b]:][:sizes[b]] and holds counts[b] records; record r of the chunk (in
    batch order) gets its timestamp, key and value position and length (-1: null); a
    batch's records start `header_size` (codec.HEADER_SIZE) bytes in. `ok[b]` (a bool
    array) says whether batch b parsed exactly (its header blocks checked to hold their
    count's worth of headers, each at least two bytes); a batch that did not has its
    records' fields zeroed, for the caller to take another way. ValueError if the columns
    are shorter than `starts` and the counts say, or `header_size` is negative."""
    cdef Py_ssize_t nb = starts.shape[0]
    cdef int64_t total = 0
    cdef Py_ssize_t b
    if header_size < 0:
        raise ValueError("a negative header size")
    if min(sizes.shape[0], counts.shape[0], base_ts.shape[0], ok.shape[0]) < nb:
        raise ValueError("fewer sizes, counts, timestamps or flags than batches")
    for b in range(nb):
        if counts[b] < 0:
            raise ValueError("a negative record count")
        total += counts[b]
    if min(timestamps.shape[0], kpos.shape[0], klen.shape[0], vpos.shape[0],
           vlen.shape[0]) < total:
        raise ValueError("record columns shorter than the records counted")
    cdef const uint8_t* data = &buf[0]
    cdef int64_t length = buf.shape[0]
    cdef int64_t r = 0, n, i, pos, end, hcount, h
    cdef bint good
    cdef Fields f
    with nogil:
        for b in range(nb):
            n = counts[b]
            pos = starts[b] + header_size
            good = 0 <= starts[b] <= length and sizes[b] <= length - starts[b]
            end = starts[b] + sizes[b] if good else 0
            for i in range(n if good else 0):
                if parse_record(data, pos, end, i, base_ts[b], &f) < 0:
                    good = False
                    break
                h = read_varint(data, f.hpos, f.end, &hcount)
                if h < 0 or hcount < 0 or (hcount == 0 and h != f.end) or (
                        hcount > 0 and hcount > (f.end - h) // 2):
                    good = False
                    break
                timestamps[r + i] = f.ts
                kpos[r + i] = f.kpos
                klen[r + i] = f.klen
                vpos[r + i] = f.vpos
                vlen[r + i] = f.vlen
                pos = f.end
            if not good or pos != end:
                good = False
                for i in range(n):
                    kpos[r + i] = 0
                    klen[r + i] = 0
                    vpos[r + i] = 0
                    vlen[r + i] = 0
                    timestamps[r + i] = base_ts[b]
            ok[b] = good
            r += n


# ---------------------------------------------------------------------------- encoding


@cython.boundscheck(False)  # i < n and nh in (0, 1, n): checked by encode_records
@cython.wraparound(False)
cdef inline int64_t _block_length(const int64_t[:] header_lengths, int64_t nh,
                                  int64_t i) noexcept nogil:
    """Bytes of record i's header block: one (a zero count) without header_lengths, the one
    shared block's, or its own."""
    return 1 if nh == 0 else header_lengths[0] if nh == 1 else header_lengths[i]


def encode_bound(head: int, n: int, payload_bytes: int, header_bytes: int) -> int:
    """Bytes a batch of n records can take at most (`header_bytes`: all header blocks)."""
    return head + payload_bytes + header_bytes + RECORD_OVERHEAD * n


@cython.boundscheck(False)  # every index below is under n, nd or nh, checked at the top
@cython.wraparound(False)   # against the columns' lengths; bytes move only through pointers
def encode_records(int64_t head, const int64_t[:] lengths not None,
                   const uint8_t[::1] payloads not None,
                   const int64_t[:] deltas, const int64_t[:] header_lengths,
                   const uint8_t[::1] headers, uint8_t[::1] out not None) -> tuple[int, int]:
    """Write a batch into `out` (at least encode_bound bytes): `head` zero bytes (the
    batch header, filled in by the caller), then the records section, every record
    ``[length][attributes 0][tsDelta][offsetDelta][keyLength][key][valueLength][value]
    [headerCount][headers]``. Returns (the batch's size, or -1 if `out` is too small or the
    lengths do not add up to `payloads` and `headers`; the largest timestamp delta, 0 when
    `deltas` is empty).

    `lengths` holds the n key lengths then the n value lengths (-1: null); `payloads` the
    keys then the values, back to back. `deltas` is empty (or None) when every timestamp
    delta is 0. `header_lengths` is empty (or None) when no record has headers, one entry
    when every record carries the same block `headers`, else one per record (the blocks
    back to back; a record with none has the block b"\\x00"). None costs the call nothing,
    where each array is a buffer to acquire."""
    cdef int64_t n = lengths.shape[0] // 2
    cdef int64_t nd = 0 if deltas is None else deltas.shape[0]
    cdef int64_t nh = 0 if header_lengths is None else header_lengths.shape[0]
    cdef int64_t payload_room = payloads.shape[0]
    cdef int64_t header_room = 0 if headers is None else headers.shape[0]
    cdef int64_t room = out.shape[0]
    if not 0 <= head <= room or (nd != 0 and nd != n) or (nh != 0 and nh != 1 and nh != n) or (
            nh == 1 and header_lengths[0] != header_room):
        return -1, 0
    # first pass: every length checked, and the running sums against the buffers they
    # index (so no sum can overflow), before anything is read or written
    cdef int64_t i, kl, vl, hl
    cdef int64_t total = head, key_bytes = 0, payload_bytes = 0, header_bytes = 0
    for i in range(n):
        kl = lengths[i]
        vl = lengths[n + i]
        hl = _block_length(header_lengths, nh, i)
        if kl < -1 or vl < -1 or kl > payload_room or vl > payload_room or hl < 1 or (
                nh and hl > header_room):
            return -1, 0
        key_bytes += max(kl, 0)
        payload_bytes += max(kl, 0) + max(vl, 0)
        header_bytes += hl
        total += record_size(deltas[i] if nd else 0, i, kl, vl, hl)
        if payload_bytes > payload_room or total > room or (
                nh > 1 and header_bytes > header_room):
            return -1, 0
    if payload_bytes != payload_room or (nh > 1 and header_bytes != header_room):
        return -1, 0
    cdef int64_t max_delta = deltas[0] if nd else 0
    for i in range(nd):
        max_delta = max(max_delta, deltas[i])
    # second pass: writes exactly `total` bytes, reads the payloads and blocks just summed
    cdef uint8_t* o = &out[0]
    cdef const uint8_t* pay = &payloads[0]
    cdef const uint8_t* blocks = NULL
    cdef const uint8_t* block
    if headers is not None:
        blocks = &headers[0]
    cdef int64_t p = head, ko = 0, vo = key_bytes, ho = 0
    memset(o, 0, head)
    for i in range(n):
        kl = lengths[i]
        vl = lengths[n + i]
        hl = _block_length(header_lengths, nh, i)
        block = NULL
        if nh == 1:
            block = blocks
        elif nh > 1:
            block = blocks + ho
        p = write_record(o, p, i, deltas[i] if nd else 0, pay + ko, kl, pay + vo, vl, block,
                         hl)
        ko += max(kl, 0)
        vo += max(vl, 0)
        ho += hl
    return p, max_delta


@cython.boundscheck(False)  # every payload is checked against buf and data before its copy,
@cython.wraparound(False)   # and the columns' lengths at the top
def gather_payloads(const uint8_t[::1] buf, const int64_t[:] positions,
                    const int64_t[:] lengths, int32_t[:] offsets, uint8_t[::1] data) -> int:
    """Copy the payloads buf[positions[i]:][:lengths[i]] back to back into `data`, writing
    Arrow-style int32 `offsets` (n + 1 of them; a length of -1, a null, adds nothing).
    Returns the bytes written, or -1 if a payload lies outside `buf`, `data` is too
    small (the caller sizes it from the lengths) or the columns are too short."""
    cdef Py_ssize_t n = lengths.shape[0]
    if positions.shape[0] < n or offsets.shape[0] < n + 1:
        return -1
    cdef const uint8_t* src = &buf[0]
    cdef uint8_t* dst = &data[0]
    cdef int64_t size = buf.shape[0], room = data.shape[0]
    cdef int64_t o = 0, p, length
    cdef Py_ssize_t i
    cdef bint refused = False
    with nogil:
        for i in range(n):
            offsets[i] = <int32_t>o
            length = lengths[i]
            if length > 0:
                p = positions[i]
                if p < 0 or p > size or length > size - p or length > room - o:
                    refused = True
                    break
                memcpy(dst + o, src + p, length)
                o += length
    if refused:
        return -1
    offsets[n] = <int32_t>o
    return o
