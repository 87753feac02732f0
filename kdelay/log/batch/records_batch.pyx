# cython: language_level=3
"""A list of Records straight to the bytes of one batch, compiled: the append path's
builder for the common case, so that an append of one record costs a few microseconds
rather than the column-wise checks and gathering (columns.record_columns,
record_encode.py) plus the encode.

`RecordsBatch.of` makes the checks of columns.record_columns and
requested_deliver_after in one pass over the Records, for batches of the plain types
(bytes or None keys and values, int or None timestamps and deliverAfters, headers of any
shape); anything else (a wrong type, a numpy integer, a value out of range, a delay asked
of a log without delayed delivery) it leaves to that Python path, which says what is
wrong, so every error keeps one wording. `encode` then lays the batch out as
codec.encode_batch does, byte for byte (a test holds the two equal): the header from
codec's template and HEADER_LAYOUT, each record by record_write.pxd, the CRC-32C in C."""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.tuple cimport PyTuple_GET_ITEM
from libc.stdint cimport INT32_MAX, int64_t, uint8_t
from libc.string cimport memcpy

from kdelay.log.batch.batch_header cimport Layout, crc32c_into, put_big_endian, read_layout
from kdelay.log.batch.record_write cimport record_size, write_record

from kdelay.records import Record
from kdelay.log.batch.columns import check_headers

from kdelay.log.batch.record_encode import header_block

cdef enum:  # a Record's fields, in its order
    VALUE, KEY, HEADERS, TIMESTAMP, DELIVER_AFTER

cdef enum:
    NONE = -1  # a timestamp or deliverAfter not given (given ones are >= 0)
    NOT_PLAIN = -3  # one the Python path must judge


cdef inline bint _payload(object x) noexcept:
    """Bytes or None, exactly (validation's rule for keys and values, for these types)."""
    return x is None or type(x) is bytes


cdef inline int64_t _time(object x) except -2:
    """A time as validation takes it, for a plain int: NONE for None, the value if an int
    in [0, 2**63), NOT_PLAIN for anything else."""
    if x is None:
        return NONE
    if type(x) is not int:
        return NOT_PLAIN
    cdef int overflow
    cdef int64_t v = PyLong_AsLongLongAndOverflow(x, &overflow)
    return NOT_PLAIN if overflow or v < 0 else v


cdef class RecordsBatch:
    """A batch of Records checked and measured, ready to encode at an append time."""

    @staticmethod
    def of(records, deliver_after, bint delays_allowed) -> RecordsBatch | None:
        """`records` (with the batch's `deliver_after`) checked, or None when the Python
        path must judge them (see the module's doc)."""
        return records_batch_of(records, deliver_after, delays_allowed)

    @property
    def requested(self) -> int | None:
        """The deliverAfter the batch asks for: the given one, else the largest of its
        records', else None (validation.requested_deliver_after's rule)."""
        return self._requested_int

    def earliest(self, int64_t now) -> int:
        """The earliest record timestamp, records without one taking `now` (for the
        delay limit: builder.build_batch)."""
        if not self.stamped:
            return now
        cdef Py_ssize_t i
        for i in range(self.n):
            if self.stamps[i] == NONE:
                return min(now, self._earliest)
        return self._earliest

    def encode(self, int64_t now, int64_t base_offset, int64_t deliver_after,
               const int64_t[:] layout, bytes template) -> bytes | None:
        """The batch's bytes, as codec.encode_batch lays them out: records without a
        timestamp take `now`; `template` is codec.HEADER_TEMPLATE. None if the batch would
        be too long for its length field (left to the Python path)."""
        cdef Layout L
        read_layout(layout, &L)
        return self.encode_laid_out(now, base_offset, deliver_after, &L, template)

    @cython.wraparound(False)
    cdef bytes encode_laid_out(self, int64_t now, int64_t base_offset, int64_t deliver_after,
                               const Layout* layout, bytes template):
        """`encode` with the layout read already (builder.pyx reads it once)."""
        cdef Layout L = layout[0]
        if PyBytes_GET_SIZE(template) != L.header_size:
            raise ValueError("the header template is not a header long")
        cdef Py_ssize_t i
        cdef object r, key, value, block
        cdef int64_t base_ts = self._time_or(0, now), ts, max_ts = base_ts
        cdef int64_t total = L.header_size, kl, vl, hl
        for i in range(self.n):  # first pass: the size
            r = self.records[i]
            key, value = <object>PyTuple_GET_ITEM(r, KEY), <object>PyTuple_GET_ITEM(r, VALUE)
            block = None if self.blocks is None else self.blocks[i]
            total += record_size(self._time_or(i, now) - base_ts, i, _length(key),
                                 _length(value), _block_length(block))
        if total - L.overhead > INT32_MAX:
            return None
        cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
        cdef uint8_t* o = <uint8_t*>PyBytes_AS_STRING(out)
        memcpy(o, PyBytes_AS_STRING(template), L.header_size)
        cdef int64_t p = L.header_size
        for i in range(self.n):  # second pass: the records
            r = self.records[i]
            key, value = <object>PyTuple_GET_ITEM(r, KEY), <object>PyTuple_GET_ITEM(r, VALUE)
            kl, vl = _length(key), _length(value)
            block = None if self.blocks is None else self.blocks[i]
            ts = self._time_or(i, now)
            max_ts = max(max_ts, ts)
            p = write_record(o, p, i, ts - base_ts, _bytes(key), kl, _bytes(value), vl,
                             _bytes(block), _block_length(block))
        if p != total:
            raise AssertionError("a batch's records took other than their measured size")
        put_big_endian(o + L.at_base, 8, base_offset)
        put_big_endian(o + L.at_length, 4, total - L.overhead)
        put_big_endian(o + L.at_lod, 4, self.n - 1)
        put_big_endian(o + L.at_base_ts, 8, base_ts)
        put_big_endian(o + L.at_max_ts, 8, max_ts)
        put_big_endian(o + L.at_da, 8, deliver_after)
        put_big_endian(o + L.at_count, 4, self.n)
        crc32c_into(o, total, &L)
        self.max_timestamp = max_ts
        return out

    cdef int64_t _time_or(self, Py_ssize_t i, int64_t now) noexcept:
        """Record i's timestamp, or `now` if it has none."""
        if not self.stamped or self.stamps[i] == NONE:
            return now
        return self.stamps[i]

    def __dealloc__(self):
        if self.stamps != &self.few_stamps[0]:
            PyMem_Free(self.stamps)


cdef inline int64_t _length(object x) noexcept:
    """A key's or value's length (-1 for None)."""
    return -1 if x is None else PyBytes_GET_SIZE(x)


cdef inline const uint8_t* _bytes(object x) noexcept:
    """A key's, value's or header block's bytes (NULL for None)."""
    if x is None:
        return NULL
    return <const uint8_t*>PyBytes_AS_STRING(x)


cdef inline int64_t _block_length(object block) noexcept:
    """Bytes of a record's header block (None: a zero count, one byte)."""
    return 1 if block is None else PyBytes_GET_SIZE(block)


cdef RecordsBatch records_batch_of(records, deliver_after, bint delays_allowed):
    """RecordsBatch.of for compiled callers (the facade's append, facade_calls.pyx)."""
    if type(records) is not list and type(records) is not tuple:
        return None
    cdef Py_ssize_t n = len(records), i
    cdef int64_t requested = _time(deliver_after), t
    if n == 0 or requested == NOT_PLAIN or (requested != NONE and not delays_allowed):
        return None
    cdef RecordsBatch b = RecordsBatch.__new__(RecordsBatch)
    b.n, b.records, b.blocks, b.stamped, b._earliest = n, records, None, False, NONE
    if n <= FEW:
        b.stamps = &b.few_stamps[0]
    else:
        b.stamps = <int64_t*>PyMem_Malloc(n * sizeof(int64_t))
    if b.stamps == NULL:
        raise MemoryError()
    cdef object r, headers, last_headers = None, block = None, asked
    cdef object requested_int = deliver_after  # (an int, or None)
    cdef bint explicit = requested != NONE
    for i in range(n):
        r = records[i]
        if type(r) is not Record:
            return None
        if not _payload(<object>PyTuple_GET_ITEM(r, VALUE)) or not _payload(
                <object>PyTuple_GET_ITEM(r, KEY)):
            return None
        t = _time(<object>PyTuple_GET_ITEM(r, TIMESTAMP))
        if t == NOT_PLAIN:
            return None
        b.stamps[i] = t
        if t != NONE and (not b.stamped or t < b._earliest):
            b.stamped, b._earliest = True, t
        asked = <object>PyTuple_GET_ITEM(r, DELIVER_AFTER)
        t = _time(asked)
        if t == NOT_PLAIN or (t != NONE and not delays_allowed):
            return None
        if not explicit and t > requested:
            requested, requested_int = t, asked  # the batch's: the largest of its records'
        headers = <object>PyTuple_GET_ITEM(r, HEADERS)
        if headers:
            if headers is not last_headers:
                try:
                    check_headers(headers)
                except Exception:  # the Python path says what is wrong
                    return None
                block, last_headers = header_block(headers), headers
            if b.blocks is None:
                b.blocks = [None] * i
            b.blocks.append(block)
        elif b.blocks is not None:
            b.blocks.append(None)
    b._requested, b._requested_int = requested, requested_int
    return b
