# cython: language_level=3
"""The page fill, compiled: the k-way merge of runs' index entries in (deliverAfter,
offset) order, and every batch it takes read, checked and decoded into FetchedRecords
(batch_read.pxd) straight from the mapped segments, in one C loop per page. due_merge.py
says what a page is; this is its inner loop, so that Python's work is per page (plus the
record objects themselves), not per batch.

A window is the part of one run the merge may take from, as columns of index entries in
key order (due_merge.py builds them). C checks no index by itself: `fill_page` checks every
window's columns against one another and its sources before the loop, and every batch's
position and size against the bytes its segment holds before reading it."""

cimport cython
from cpython.list cimport PyList_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t, uint8_t

from kdelay.log.batch.batch_header cimport Layout, read_layout
from kdelay.log.batch.batch_read cimport Cancelled, Wanted, read_batch
from kdelay.log.segments.mapped_file cimport MappedFile

cpdef enum:  # fill_page's outcome (the first item it returns)
    DONE = 0     # the page is full, or nothing more is due: the detail is the smallest
                 # deliverAfter > now at a window's head (-1: none seen)
    REFILL = 1   # window `detail` ran out with more entries behind it: refill, call again
    DAMAGED = 2  # the batch at window `detail`'s head failed a check: nothing of it taken
    FETCH = 3    # the batch at window `detail`'s head is to be read and its bytes are not
                 # at hand yet (a remote segment's): fetch them, refill, call again

cdef enum:
    WINDOW_FIELDS = 12  # (mapped, limit, deliver_after, base_offset, position,
                        #  last_offset_delta, size, end, more, ready, cancelled,
                        #  cancelled_recent)


cdef struct Window:
    const int64_t* da
    const int64_t* base
    const int64_t* pos
    const void* lod  # int32 (a persisted index's) or int64 (gathered), as `wide` says
    const void* size
    bint wide
    int64_t end  # entries [head, end) may be taken
    bint more  # entries past `end` may be due: stop there and have the caller refill
    int64_t ready  # the bytes of the batches of entries before it are at hand
    const uint8_t* data  # the segment's bytes
    int64_t limit  # how many the file holds
    Cancelled gone  # the segment's cancelled offsets, whole


cdef const int64_t* _int64s(const int64_t[::1] column, int64_t n) except? NULL:
    if column.shape[0] < n:
        raise ValueError("a window's column is shorter than its end")
    return &column[0] if column.shape[0] else NULL


cdef const int32_t* _int32s(const int32_t[::1] column, int64_t n) except? NULL:
    if column.shape[0] < n:
        raise ValueError("a window's column is shorter than its end")
    return &column[0] if column.shape[0] else NULL


cdef inline int64_t _at(const void* column, bint wide, int64_t i) noexcept nogil:
    return (<const int64_t*>column)[i] if wide else (<const int32_t*>column)[i]


cdef inline int64_t _lower_bound(const int64_t* a, int64_t n, int64_t x) noexcept nogil:
    """The first index of sorted a[:n] whose value is >= x."""
    cdef int64_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline Cancelled _cancelled_in(const Cancelled* all, int64_t first, int64_t last,
                                    int64_t* count) noexcept nogil:
    """The cancelled offsets from `first` on, and in *count how many lie in [first, last]."""
    cdef Cancelled c
    cdef int64_t i = _lower_bound(all.a, all.na, first)
    cdef int64_t j = _lower_bound(all.b, all.nb, first)
    c.a, c.na = all.a + i, all.na - i
    c.b, c.nb = all.b + j, all.nb - j
    count[0] = (_lower_bound(c.a, c.na, last + 1) + _lower_bound(c.b, c.nb, last + 1))
    return c


@cython.boundscheck(False)  # windows are read through pointers after the checks at the top
@cython.wraparound(False)
def fill_page(list out, list windows, int64_t[:] heads, const int64_t[:] layout,
              int64_t after_da, int64_t after_off,
              int64_t now, int64_t max_records, int64_t max_bytes, int64_t taken_bytes,
              object record_type, object no_headers, object shared_headers
              ) -> tuple[int, int, int]:
    """Merge `windows` into the page `out` (records appended), from each window's entry
    `heads[k]` on, moving each head past the entries the page consumed whole.

    Window k is a tuple (mapped, limit, deliver_after, base_offset, position,
    last_offset_delta, size, end, more, ready, cancelled, cancelled_recent): its segment's
    MappedFile and how many bytes the file holds; its index entries as contiguous columns
    (int64, the last two both int32 or both int64) in key order, of which [heads[k], end)
    may be taken; `more` when entries past `end` may be due; `ready`: the batches of the
    entries before it can be read through the mapping, the others are fetched first (a
    remote segment's); the sorted int64 offsets cancelled in its segment, in two arrays.
    `layout` is codec.HEADER_LAYOUT.

    The page takes records with key > (after_da, after_off) (after_off -1: from the start)
    and deliverAfter <= now, at most max_records of them, and batches while their bytes
    keep `taken_bytes` within max_bytes (always at least one batch), leaving cancelled
    records out (a batch whose remaining records are all cancelled is consumed unread).

    Returns (outcome, taken_bytes, detail): see DONE, REFILL, DAMAGED and FETCH."""
    cdef Layout L
    read_layout(layout, &L)
    cdef Py_ssize_t nw = PyList_GET_SIZE(windows), k, best
    if heads.shape[0] < nw:
        raise ValueError("fewer heads than windows")
    cdef Window* w = <Window*>PyMem_Malloc(max(nw, 1) * sizeof(Window))
    if w == NULL:
        raise MemoryError()
    cdef MappedFile source
    cdef int64_t limit, n, skip, first, last, n_gone = 0, left, got, head, lod, size
    cdef int64_t da = 0, base = 0
    cdef Wanted want
    cdef Cancelled c
    try:
        for k in range(nw):
            t = windows[k]
            if len(t) != WINDOW_FIELDS:
                raise ValueError("a window has the wrong number of fields")
            source, limit, n = t[0], t[1], t[7]
            if n < 0 or not 0 <= heads[k] <= n or source.data == NULL or \
                    not 0 <= limit <= source.capacity:
                raise ValueError("a window's end, head or limit is out of range")
            w[k].data, w[k].limit = source.data, limit
            w[k].da, w[k].base, w[k].pos = _int64s(t[2], n), _int64s(t[3], n), _int64s(t[4], n)
            w[k].wide = t[5].itemsize == 8
            if w[k].wide:
                w[k].lod, w[k].size = _int64s(t[5], n), _int64s(t[6], n)
            else:
                w[k].lod, w[k].size = _int32s(t[5], n), _int32s(t[6], n)
            w[k].end, w[k].more, w[k].ready = n, t[8], t[9]
            w[k].gone.na, w[k].gone.nb = len(t[10]), len(t[11])
            w[k].gone.a, w[k].gone.b = _int64s(t[10], 0), _int64s(t[11], 0)
        while PyList_GET_SIZE(out) < max_records:
            best = -1
            for k in range(nw):
                head = heads[k]
                if head == w[k].end:
                    if w[k].more:
                        return REFILL, taken_bytes, k
                    continue
                if best < 0 or w[k].da[head] < da or (
                        w[k].da[head] == da and w[k].base[head] < base):
                    best, da, base = k, w[k].da[head], w[k].base[head]
            if best < 0:
                return DONE, taken_bytes, -1
            if da > now:
                return DONE, taken_bytes, da
            head = heads[best]
            lod = _at(w[best].lod, w[best].wide, head)
            size = _at(w[best].size, w[best].wide, head)
            n = lod + 1  # records in the batch
            skip = 0
            if after_off >= 0 and da == after_da and base <= after_off:
                skip = min(after_off - base + 1, n)
            first, last = base + skip, base + lod
            c = _cancelled_in(&w[best].gone, first, last, &n_gone)
            left = n - skip - n_gone  # records of the batch the page may still take
            if left > 0:
                if PyList_GET_SIZE(out) and taken_bytes + size > max_bytes:
                    return DONE, taken_bytes, -1
                if head >= w[best].ready:
                    return FETCH, taken_bytes, best
                want.first, want.count = skip, max_records - PyList_GET_SIZE(out)
                got = -1
                if 0 <= w[best].pos[head] < w[best].limit:
                    got = read_batch(out, w[best].data + w[best].pos[head],
                                     w[best].limit - w[best].pos[head], &L, da, base, lod,
                                     size, want, c, record_type, no_headers, shared_headers)
                if got < 0:
                    return DAMAGED, taken_bytes, best
                taken_bytes += size
                if left > want.count:
                    return DONE, taken_bytes, -1  # full inside this batch: the head stays
            heads[best] = head + 1
        return DONE, taken_bytes, -1
    finally:
        PyMem_Free(w)
