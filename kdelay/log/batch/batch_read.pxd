# cython: language_level=3
"""One indexed batch read into record objects in C, for the compiled page fill
(kdelay/fetch/page_fill.pyx): checked as entry_check.check_batch checks it (the header,
its index entry, the CRC-32C: batch_header.pxd) and decoded as record_decode decodes it
(every record walked by record_parse.pxd, header blocks by record_decode.shared_headers),
then each wanted record built as the caller's record type, a tuple subclass of 7 fields:
(offset, deliverAfter, timestamp, key, value, headers, None), as records.FetchedRecord.

A batch that fails any check adds nothing: the caller has the Python path say what is
wrong (one wording of every error). A test holds the two paths to the same records and
the same verdicts, intact or damaged."""

from cpython.list cimport PyList_Append, PyList_GET_SIZE
from cpython.long cimport PyLong_FromLongLong
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM
from cpython.object cimport PyTypeObject
from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcmp

from kdelay.log.batch.batch_header cimport (
    Header,
    Layout,
    crc_ok,
    matches_entry,
    parse_header,
)
from kdelay.log.batch.record_parse cimport Fields, has_headers, parse_record

cdef extern from "Python.h":
    # a type's own allocation of an instance with `items` slots (a tuple subclass's)
    object PyType_GenericAlloc(PyTypeObject* type, Py_ssize_t items)

cdef enum:
    RECORD_FIELDS = 7  # records.FetchedRecord's


cdef struct Cancelled:
    # a batch's cancelled offsets, from two sorted arrays (a segment's mapped ones and its
    # recent ones), each from the first at or past the batch's first wanted offset
    const int64_t* a
    int64_t na
    const int64_t* b
    int64_t nb


cdef inline int64_t lower_bound(const int64_t* a, int64_t n, int64_t x) noexcept nogil:
    """The first index of sorted a[:n] whose value is >= x."""
    cdef int64_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline Cancelled cancelled_in(const Cancelled* all, int64_t first, int64_t last,
                                   int64_t* count) noexcept nogil:
    """The cancelled offsets of `all` from `first` on, and in *count how many lie in
    [first, last] (the page fills' one rule for a batch's cancelled records)."""
    cdef Cancelled c
    cdef int64_t i = lower_bound(all.a, all.na, first)
    cdef int64_t j = lower_bound(all.b, all.nb, first)
    c.a, c.na = all.a + i, all.na - i
    c.b, c.nb = all.b + j, all.nb - j
    count[0] = lower_bound(c.a, c.na, last + 1) + lower_bound(c.b, c.nb, last + 1)
    return c


cdef struct Wanted:
    # what a caller takes of a batch: records from index `first` on, leaving out the
    # cancelled offsets, until `count` are kept
    int64_t first, count


cdef inline object _field(const uint8_t* batch, int64_t pos, int64_t length):
    """A key or value: bytes, or None for length -1."""
    if length < 0:
        return None
    return PyBytes_FromStringAndSize(<const char*>batch + pos, length)


cdef inline int _set(object record, Py_ssize_t i, object item) except -1:
    Py_INCREF(item)  # PyTuple_SET_ITEM steals a reference
    PyTuple_SET_ITEM(record, i, item)
    return 0


cdef inline int _append_record(list out, object record_type, object offset,
                               object deliver_after, object timestamp, object key,
                               object value, object headers) except -1:
    """A record_type of the 7 fields, made as a tuple subclass's instance is (allocated
    for its items, then filled), without a call into its Python-level constructor."""
    cdef object rec = PyType_GenericAlloc(<PyTypeObject*>record_type, RECORD_FIELDS)
    _set(rec, 0, offset)
    _set(rec, 1, deliver_after)
    _set(rec, 2, timestamp)
    _set(rec, 3, key)
    _set(rec, 4, value)
    _set(rec, 5, headers)
    _set(rec, 6, None)
    PyList_Append(out, rec)
    return 0


cdef inline int64_t read_batch(list out, const uint8_t* batch, int64_t available,
                               const Layout* L, int64_t deliver_after, int64_t base_offset,
                               int64_t last_offset_delta, int64_t size, Wanted want,
                               Cancelled gone, object record_type, object no_headers,
                               object shared_headers) except -2:
    """Append to `out` the wanted records of the batch at `batch` (`available` bytes of the
    file from there), which its index entry says has `deliver_after`, `base_offset`,
    `last_offset_delta` and `size`. Returns how many were appended, or -1 if the batch
    fails a check (then none are). The whole batch is checked and walked, whatever is
    wanted of it."""
    cdef Header h
    if not parse_header(batch, min(available, size), L, &h) or not matches_entry(
            &h, deliver_after, base_offset, last_offset_delta, size) or not crc_ok(
            batch, &h, L):
        return -1
    cdef Py_ssize_t n0 = PyList_GET_SIZE(out)
    cdef int64_t kept = 0, i, offset, pos = L.header_size
    cdef int64_t block = -1, block_size = 0  # the last header block decoded, in the batch
    cdef Fields f
    cdef object da = PyLong_FromLongLong(deliver_after)
    cdef object base_ts = PyLong_FromLongLong(h.base_timestamp)
    cdef object headers, block_headers = None
    for i in range(h.record_count):
        if parse_record(batch, pos, h.size, i, h.base_timestamp, &f) < 0:
            del out[n0:]
            return -1
        pos = f.end
        headers = no_headers
        if has_headers(batch, &f):
            if block < 0 or f.end - f.hpos != block_size or memcmp(
                    batch + f.hpos, batch + block, block_size) != 0:
                block, block_size = f.hpos, f.end - f.hpos
                try:  # decoded and checked once per distinct block, as record_decode does
                    block_headers = shared_headers(_field(batch, block, block_size))
                except (ValueError, IndexError):
                    del out[n0:]
                    return -1
            headers = block_headers
        if i < want.first or kept == want.count:
            continue
        offset = base_offset + i
        while gone.na and gone.a[0] < offset:
            gone.a += 1
            gone.na -= 1
        while gone.nb and gone.b[0] < offset:
            gone.b += 1
            gone.nb -= 1
        if (gone.na and gone.a[0] == offset) or (gone.nb and gone.b[0] == offset):
            continue
        _append_record(out, record_type, PyLong_FromLongLong(offset), da,
                       base_ts if f.ts == h.base_timestamp else PyLong_FromLongLong(f.ts),
                       _field(batch, f.kpos, f.klen), _field(batch, f.vpos, f.vlen), headers)
        kept += 1
    if pos != h.size:  # the records do not fill the batch
        del out[n0:]
        return -1
    return kept
