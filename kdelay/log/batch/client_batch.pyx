# cython: language_level=3
"""A Kafka v2 batch as a client produced it, turned into the log's own batches in C.

Kafka clients put records of different delays into one batch. `ClientBatch(records, n,
base_timestamp, ...)` walks the records section once (already decompressed; the caller
checked the batch header and its CRC): it checks each record's framing (record_parse.pxd,
the rule every compiled reader uses, and the header block to its last byte), and finds the
`kdelay.deliver_after` (ASCII decimal ms since the epoch) and `kdelay.delay_ms` (ASCII
decimal ms after the log clock at the append) headers. A malformed record raises
CorruptBatchError; a bad kdelay header, both on one record, a delay over the limit, or
either header where delays are off raise InvalidRecordError; each names the record's index
in the batch and the reason. Nothing is stored per record but five integers.

`build(base_offset, now, ...)` (the append path calls it under the log's lock, with the log
clock) cuts the records into runs of consecutive offsets: a record joins the run of the
record before it only if every record of that run asked for a time within `spread_ms` of
its own (a time in the past, or none, counts as `now`); each run becomes one stored batch
(magic 3, codec's layout) due at the latest time its records asked for. The records keep
their bytes: the first run's records section is copied as it is (or, where it is the only
run, not copied at all: `split` hands back a view of it to be written after the header,
and the header's CRC is carried over the records' known CRC); a later run's records get
offset deltas counted from the run's first record (their length varint rewritten to match). With `log_append_time`, every record's timestamp becomes `now` (delta 0, and the
header's timestamp-type bit set, as Kafka marks LogAppendTime batches). Every run but the
last carries codec.MORE_RUNS, so that recovery keeps a client batch whole or drops it
(LogSegment.recover: the runs are one write, which a crash may tear). A stored batch
keeps the producer id and epoch, and its first record's sequence, so a log can be read back
for idempotent producers' state. Cost: O(records) C work per pass, one allocation each.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport INT64_MAX, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

import numpy as np

from kdelay.log.batch.batch_header cimport (
    Layout,
    crc32c_into,
    kd_crc32c,
    kd_crc32c_combine,
    put_big_endian,
    read_layout,
)
from kdelay.log.batch.record_parse cimport Fields, parse_record, read_varint
from kdelay.log.batch.record_write cimport put_varint, varint_size

from kdelay.errors import CorruptBatchError, InvalidRecordError
from kdelay.log.batch import codec
from kdelay.log.batch.record_loops import STATUS_MESSAGES

cdef Layout _LAYOUT
read_layout(codec.HEADER_LAYOUT, &_LAYOUT)
cdef bytes _TEMPLATE = codec.HEADER_TEMPLATE
cdef int64_t _AT_ATTRIBUTES = codec.FIELD_OFFSETS["attributes"]
cdef int64_t _AT_PRODUCER_ID = codec.FIELD_OFFSETS["producer_id"]
cdef int64_t _AT_PRODUCER_EPOCH = codec.FIELD_OFFSETS["producer_epoch"]
cdef int64_t _AT_BASE_SEQUENCE = codec.FIELD_OFFSETS["base_sequence"]
DEF LOG_APPEND_TIME = 0x08  # the attributes' timestamp-type bit
cdef int64_t _MORE_RUNS = codec.MORE_RUNS  # set on every run but a client batch's last

cdef const char* _DELIVER_AFTER = b"kdelay.deliver_after"
cdef const char* _DELAY_MS = b"kdelay.delay_ms"
cdef enum:
    DELIVER_AFTER_LEN = 20
    DELAY_MS_LEN = 15
    NO_REQUEST = 0
    ABSOLUTE = 1
    RELATIVE = 2
    MAX_DIGITS = 18  # below 10**18: any now + delay stays within an int64

# the columns of build's entries: one row per stored batch
ENTRY_COLUMNS = ("deliver_after", "base_offset", "position", "last_offset_delta", "size",
                 "max_timestamp")


def crc32c_combine(uint32_t crc1, uint32_t crc2, int64_t len2) -> int:
    """The CRC-32C of A then B, from crc1 (A's), crc2 (B's) and B's length: O(log len2),
    no pass over the bytes (crc32c_impl.h)."""
    if len2 < 0:
        raise ValueError("a negative length")
    return kd_crc32c_combine(crc1, crc2, <uint64_t>len2)


cdef str _header_name(int64_t klen):
    """The kdelay header a key of this length is (for messages: the loop itself compares
    bytes only, no Python object per record)."""
    return "kdelay.deliver_after" if klen == DELIVER_AFTER_LEN else "kdelay.delay_ms"


cdef int64_t _decimal(const uint8_t* p, int64_t n) noexcept nogil:
    """The non-negative decimal of n ASCII digits at p; -1 if it is not one (or too long)."""
    cdef int64_t v = 0, k
    if n <= 0 or n > MAX_DIGITS:
        return -1
    for k in range(n):
        if p[k] < 48 or p[k] > 57:
            return -1
        v = v * 10 + (p[k] - 48)
    return v


@cython.final
cdef class ClientBatch:
    """One client batch's records, checked, with what each asked for (see the module)."""
    cdef readonly bytes records
    cdef readonly int64_t n, base_timestamp, requests
    # the CRC-32C of the records section as given (-1: not known): a stored batch of all of
    # them, as they are, gets its CRC from it and its header's, without a pass over them
    cdef readonly int64_t records_crc
    # per record: where it starts, where its body after the offset delta starts, where it
    # ends; its timestamp delta; what it asked for (kind, value)
    cdef int64_t[:, ::1] _rows
    cdef object _rows_array

    @cython.boundscheck(False)  # rows has n rows; i < n
    @cython.wraparound(False)
    def __init__(self, bytes records, int64_t n, int64_t base_timestamp, *,
                 int64_t start=0, int64_t end=-1, bint delays_allowed=True,
                 int64_t max_delay_ms=0, int64_t records_crc=-1):
        """Check the `n` records of a v2 records section, `records[start:end]` (end -1:
        the end of `records`; a request's bytes are used where they are, not copied), and
        find their kdelay headers.
        `max_delay_ms` (0: none) limits how far after its timestamp a record may ask to be
        due (kdelay.delay_ms counts from the append, so its value itself).
        `records_crc`: the CRC-32C of `records[start:end]` where the caller has it (it
        checked the client's CRC with it: wire_batch.py), else -1."""
        if n <= 0:
            raise CorruptBatchError("a batch needs at least one record")
        self.records = records
        self.n = n
        self.base_timestamp = base_timestamp
        if not -1 <= records_crc <= 0xFFFFFFFF:
            raise ValueError(f"records_crc {records_crc} is not a CRC-32C")
        self.records_crc = records_crc
        self._rows_array = np.empty((n, 6), dtype=np.int64)
        self._rows = self._rows_array
        cdef int64_t[:, ::1] rows = self._rows
        cdef const uint8_t* buf = <const uint8_t*>PyBytes_AS_STRING(records)
        if end < 0:
            end = PyBytes_GET_SIZE(records)
        if not 0 <= start <= end <= PyBytes_GET_SIZE(records):
            raise ValueError("the records section lies outside the bytes given")
        cdef int64_t pos = start, i, status = 0
        cdef int64_t p, count, h, klen, vlen, value, kind, requests = 0
        cdef int64_t limit_excess = 0, key_at
        cdef Fields f
        cdef const char* reason = NULL
        for i in range(n):
            status = parse_record(buf, pos, end, i, 0, &f)
            if status < 0:
                raise CorruptBatchError(f"record {i}: {STATUS_MESSAGES[status]}")
            rows[i, 0] = pos
            rows[i, 2] = f.end
            rows[i, 3] = f.ts  # the delta (parsed against a base of 0)
            # the body after the offset delta: re-read the two varints before it
            p = read_varint(buf, pos, end, &value)  # length
            p = read_varint(buf, p + 1, f.end, &value)  # attributes skipped, ts delta
            p = read_varint(buf, p, f.end, &value)  # offset delta
            rows[i, 1] = p
            kind, value = NO_REQUEST, 0
            p = read_varint(buf, f.hpos, f.end, &count)
            if p < 0 or count < 0 or count > f.end - p:
                raise CorruptBatchError(f"record {i}: bad header count")
            for h in range(count):
                p = read_varint(buf, p, f.end, &klen)
                if p < 0 or klen < 0 or klen > f.end - p:
                    raise CorruptBatchError(f"record {i}: bad header key length")
                key_at = p
                p = read_varint(buf, p + klen, f.end, &vlen)
                if p < 0 or vlen < -1 or vlen > f.end - p:
                    raise CorruptBatchError(f"record {i}: bad header value length")
                if (klen == DELIVER_AFTER_LEN and
                        memcmp(buf + key_at, _DELIVER_AFTER, DELIVER_AFTER_LEN) == 0) or \
                        (klen == DELAY_MS_LEN and memcmp(buf + key_at, _DELAY_MS,
                                                         DELAY_MS_LEN) == 0):
                    if not delays_allowed:
                        name = _header_name(klen)
                        raise InvalidRecordError(
                            f"record {i}: header {name} on a topic with "
                            f"delayed.delivery.enable=false")
                    if kind != NO_REQUEST:
                        raise InvalidRecordError(
                            f"record {i}: more than one of kdelay.deliver_after and "
                            f"kdelay.delay_ms")
                    value = -1 if vlen < 0 else _decimal(buf + p, vlen)
                    if value < 0:
                        name = _header_name(klen)
                        shown = None if vlen < 0 else (<const char*>(buf + p))[:min(vlen, 40)]
                        raise InvalidRecordError(
                            f"record {i}: header {name} must be a non-negative decimal "
                            f"integer below 10**18, got {shown!r}")
                    kind = ABSOLUTE if klen == DELIVER_AFTER_LEN else RELATIVE
                    if max_delay_ms > 0:
                        limit_excess = value if kind == RELATIVE else \
                            value - (base_timestamp + f.ts)
                        if limit_excess > max_delay_ms:
                            raise InvalidRecordError(
                                f"record {i}: a delay of {limit_excess} ms exceeds "
                                f"delayed.delivery.max.delay.ms ({max_delay_ms} ms)")
                p += max(vlen, 0)
            if p != f.end:
                raise CorruptBatchError(f"record {i}: record length disagrees with its fields")
            rows[i, 4] = kind
            rows[i, 5] = value
            if kind != NO_REQUEST:
                requests += 1
            pos = f.end
        if pos != end:
            raise CorruptBatchError(f"records do not fill the batch ({end - pos} bytes left)")
        self.requests = requests

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def build(self, int64_t base_offset, int64_t now, int64_t spread_ms, *,
              bint log_append_time=False, int64_t producer_id=-1, int64_t producer_epoch=-1,
              int64_t base_sequence=-1, bint split=False):
        """(the stored batches' bytes, back to back; their entries: an int64 array with a
        row per batch of ENTRY_COLUMNS, positions relative to the bytes' start).
        With `split`, a third item: where the batch is one stored batch of the records as
        they are (one run, the client's timestamps), a read-only memoryview of those records
        where they lie (the request's bytes), the first item then only the stored batch's
        header, to be written before them (SegmentTail.append_many's `body`: no copy of the
        records); else None, and the first item is everything."""
        cdef int64_t n = self.n, i, s, k, runs = 0, lo, hi, r, total = 0
        cdef int64_t[:, ::1] rows = self._rows
        due_array = np.empty(n, dtype=np.int64)
        run_array = np.empty(n + 1, dtype=np.int64)
        cdef int64_t[::1] due = due_array, run_start = run_array
        # what each record asked for, as a time (none, or a past one: now)
        for i in range(n):
            if rows[i, 4] == ABSOLUTE:
                r = rows[i, 5]
            elif rows[i, 4] == RELATIVE:
                r = now + rows[i, 5]
            else:
                r = now
            due[i] = r if r > now else now
        # runs: record i joins the run before it while the run's span stays within spread
        lo = hi = due[0]
        run_start[0] = 0
        runs = 1
        for i in range(1, n):
            r = due[i]
            if (r if r > hi else hi) - (r if r < lo else lo) <= spread_ms:
                lo = r if r < lo else lo
                hi = r if r > hi else hi
            else:
                run_start[runs] = i
                runs += 1
                lo = hi = r
        run_start[runs] = n
        cdef const uint8_t* src = <const uint8_t*>PyBytes_AS_STRING(self.records)
        cdef bint same_bytes
        # one stored batch of the records as sent: its header, then those bytes (as they are)
        cdef bint whole = runs == 1 and not log_append_time
        cdef bint split_records = split and whole
        cdef int64_t records_size = rows[n - 1, 2] - rows[0, 0], records_crc
        # sizes first
        for k in range(runs):
            s = run_start[k]
            total += _LAYOUT.header_size
            same_bytes = s == 0 and not log_append_time
            if split_records:
                pass  # the records are not copied
            elif same_bytes:
                total += rows[run_start[k + 1] - 1, 2] - rows[s, 0]
            else:
                for i in range(s, run_start[k + 1]):
                    total += _record_size(rows, i, i - s, log_append_time)
        entries_array = np.empty((runs, 6), dtype=np.int64)
        cdef int64_t[:, ::1] entries = entries_array
        out = PyBytes_FromStringAndSize(NULL, total)
        cdef uint8_t* o = <uint8_t*>PyBytes_AS_STRING(out)
        cdef const uint8_t* template = <const uint8_t*>PyBytes_AS_STRING(_TEMPLATE)
        cdef int64_t at = 0, q, body, ts_delta, max_ts, base_ts, count, da
        for k in range(runs):
            s = run_start[k]
            count = run_start[k + 1] - s
            memcpy(o + at, template, _LAYOUT.header_size)
            q = at + _LAYOUT.header_size
            base_ts = now if log_append_time else self.base_timestamp
            max_ts = INT64_MAX
            da = 0
            for i in range(s, s + count):
                if due[i] > da:
                    da = due[i]
                ts_delta = 0 if log_append_time else rows[i, 3]
                if max_ts == INT64_MAX or base_ts + ts_delta > max_ts:
                    max_ts = base_ts + ts_delta
            if split_records:
                q += records_size  # (written after this header, from where they lie)
            elif s == 0 and not log_append_time:
                memcpy(o + q, src + rows[0, 0], rows[count - 1, 2] - rows[0, 0])
                q += rows[count - 1, 2] - rows[0, 0]
            else:
                for i in range(s, s + count):
                    ts_delta = 0 if log_append_time else rows[i, 3]
                    body = _body_size(rows, i, i - s, ts_delta)
                    q = put_varint(o, q, body)
                    o[q] = src[rows[i, 0] + _length_size(src, rows[i, 0])]  # attributes
                    q = put_varint(o, q + 1, ts_delta)
                    q = put_varint(o, q, i - s)
                    memcpy(o + q, src + rows[i, 1], rows[i, 2] - rows[i, 1])
                    q += rows[i, 2] - rows[i, 1]
            put_big_endian(o + at + _LAYOUT.at_base, 8, base_offset + s)
            put_big_endian(o + at + _LAYOUT.at_length, 4, q - at - _LAYOUT.overhead)
            put_big_endian(o + at + _AT_ATTRIBUTES, 2,
                           (LOG_APPEND_TIME if log_append_time else 0)
                           | (_MORE_RUNS if k < runs - 1 else 0))
            put_big_endian(o + at + _LAYOUT.at_lod, 4, count - 1)
            put_big_endian(o + at + _LAYOUT.at_base_ts, 8, base_ts)
            put_big_endian(o + at + _LAYOUT.at_max_ts, 8, max_ts)
            put_big_endian(o + at + _LAYOUT.at_da, 8, da)
            put_big_endian(o + at + _AT_PRODUCER_ID, 8, producer_id)
            put_big_endian(o + at + _AT_PRODUCER_EPOCH, 2, producer_epoch)
            put_big_endian(o + at + _AT_BASE_SEQUENCE, 4,
                           base_sequence + s if base_sequence >= 0 else -1)
            put_big_endian(o + at + _LAYOUT.at_count, 4, count)
            if whole and (self.records_crc >= 0 or split_records):
                # the records as the client sent them, whose CRC the client check gave:
                # the header's CRC carried over them instead of a second pass
                records_crc = self.records_crc if self.records_crc >= 0 else \
                    kd_crc32c(src + rows[0, 0], <size_t>records_size)
                put_big_endian(o + at + _LAYOUT.at_crc, 4, kd_crc32c_combine(
                    kd_crc32c(o + at + _LAYOUT.crc_start,
                              <size_t>(_LAYOUT.header_size - _LAYOUT.crc_start)),
                    <uint32_t>records_crc, <uint64_t>records_size))
            else:
                crc32c_into(o + at, q - at, &_LAYOUT)
            entries[k, 0] = da
            entries[k, 1] = base_offset + s
            entries[k, 2] = at
            entries[k, 3] = count - 1
            entries[k, 4] = q - at
            entries[k, 5] = max_ts
            at = q
        if not split:
            return out, entries_array
        if split_records:
            return out, entries_array, memoryview(self.records)[rows[0, 0]:rows[n - 1, 2]]
        return out, entries_array, None


cdef inline int64_t _length_size(const uint8_t* src, int64_t pos) noexcept nogil:
    cdef int64_t v
    return read_varint(src, pos, pos + 10, &v) - pos


cdef inline int64_t _body_size(int64_t[:, ::1] rows, int64_t i, int64_t offset_delta,
                               int64_t ts_delta) noexcept nogil:
    """A record's body re-laid with this offset delta and timestamp delta: attributes,
    the two varints, the rest as it was."""
    return 1 + varint_size(ts_delta) + varint_size(offset_delta) + rows[i, 2] - rows[i, 1]


cdef inline int64_t _record_size(int64_t[:, ::1] rows, int64_t i, int64_t offset_delta,
                                 bint log_append_time) noexcept nogil:
    cdef int64_t body = _body_size(rows, i, offset_delta, 0 if log_append_time else rows[i, 3])
    return varint_size(body) + body
