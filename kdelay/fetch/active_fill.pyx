# cython: language_level=3
"""The page fill of a page read from the active segment's recent entries alone
(active_page.py), compiled: the due entries after the cursor (recent_windows'
due_entries_into) and every batch the page takes read, checked and decoded into
FetchedRecords (batch_read.pxd) straight from the mapped segment, in one call, with no
window, column or memoryview made for the page. It takes each batch as the general page
fill (page_fill.pyx) takes the head of its one window, by the same rules: the cursor's
batch from past the cursor, cancelled records left out, the byte cap after at least one
batch; tests/fetch/test_active_page.py holds the two paths equal."""

cimport cython
from cpython.list cimport PyList_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int64_t

from kdelay.index.entry_fields cimport (
    E_BASE_OFFSET,
    E_DELIVER_AFTER,
    E_LAST_OFFSET_DELTA,
    E_POSITION,
    E_SIZE,
    ENTRY_FIELDS,
)
from kdelay.index.recent_columns cimport RecentColumns
from kdelay.index.recent_windows cimport due_entries_into
from kdelay.log.batch.batch_header cimport Layout, read_layout
from kdelay.log.batch.batch_read cimport (
    Cancelled,
    Wanted,
    cancelled_in,
    lower_bound,
    read_batch,
)
from kdelay.log.segments.mapped_file cimport MappedFile

from kdelay.log.batch import codec

cdef Layout _LAYOUT  # codec.HEADER_LAYOUT, read once
read_layout(codec.HEADER_LAYOUT, &_LAYOUT)

cpdef enum:  # fill_active's outcome (the first item it returns)
    FILLED = 0   # the page is done: the detail is the deliverAfter of the first entry
                 # after it, which is not due yet; or STOPPED, or NOTHING_AFTER
    GENERAL = 1  # the page needs the general path: more due entries than the call holds
                 # may be wanted, or a batch failed a check (the general path says which)

cpdef enum:  # FILLED's detail when it is not a deliverAfter
    STOPPED = -1  # the page ended at a limit (records or bytes) before an entry not due
    NOTHING_AFTER = -2  # no entry after the page (due or not)


cdef const int64_t* _int64s(const int64_t[::1] column) except? NULL:
    return &column[0] if column.shape[0] else NULL


@cython.boundscheck(False)
@cython.wraparound(False)
def fill_active(list out, RecentColumns entries, MappedFile source, int64_t limit,
                int64_t after_da, int64_t after_off, int64_t now,
                int64_t max_records, int64_t max_bytes, Py_ssize_t max_entries,
                gone_a, gone_b, object record_type, object no_headers,
                object shared_headers) -> tuple[int, int]:
    """Append to `out` the page of records with key > (after_da, after_off) (after_off -1:
    from the start) due at `now` in `entries` (the active segment's recent entries, whose
    batches `source` maps and whose file holds `limit` bytes): at most max_records, and
    batches while their bytes stay within max_bytes (always at least one batch), leaving
    out the offsets cancelled in the segment (`gone_a`, `gone_b`: sorted int64 arrays, or
    None for none).
    Looks at no more than `max_entries` due entries. Returns (outcome, detail): see FILLED
    and GENERAL. O(log entries + the page's entries + the unmerged arrivals due)."""
    if source.data == NULL or not 0 <= limit <= source.capacity or max_entries < 1:
        raise ValueError("a mapping, limit or entry count out of range")
    cdef Cancelled all_gone, c
    all_gone.a, all_gone.na, all_gone.b, all_gone.nb = NULL, 0, NULL, 0
    if gone_a is not None:
        all_gone.a, all_gone.na = _int64s(gone_a), len(gone_a)
    if gone_b is not None:
        all_gone.b, all_gone.nb = _int64s(gone_b), len(gone_b)
    cdef Py_ssize_t cap = min(max_records, max_entries), k, j
    cdef int64_t* buf = <int64_t*>PyMem_Malloc((cap + 1) * ENTRY_FIELDS * sizeof(int64_t))
    cdef const int64_t* e
    if buf == NULL:
        raise MemoryError()
    cdef bint full = False
    cdef int64_t da, base, pos, lod, size, n, skip, first, last, left, got, taken = 0
    cdef int64_t n_gone
    cdef Wanted want
    try:
        k = due_entries_into(entries, after_da, after_off, now, buf, cap, &full)
        if full and (cap < max_records or all_gone.na or all_gone.nb):
            return GENERAL, STOPPED  # (a batch holds at least one record, unless cancelled)
        for j in range(k):
            if PyList_GET_SIZE(out) >= max_records:
                return FILLED, STOPPED
            e = buf + ENTRY_FIELDS * j
            da, base, pos = e[E_DELIVER_AFTER], e[E_BASE_OFFSET], e[E_POSITION]
            lod, size = e[E_LAST_OFFSET_DELTA], e[E_SIZE]
            if da > now:
                return FILLED, da
            n = lod + 1
            skip = 0
            if after_off >= 0 and da == after_da and base <= after_off:
                skip = min(after_off - base + 1, n)
            first, last = base + skip, base + lod
            c = cancelled_in(&all_gone, first, last, &n_gone)
            left = n - skip - n_gone
            if left <= 0:
                continue  # all cancelled: consumed unread
            if PyList_GET_SIZE(out) and taken + size > max_bytes:
                return FILLED, STOPPED
            want.first, want.count = skip, max_records - PyList_GET_SIZE(out)
            got = -1
            if 0 <= pos < limit:
                got = read_batch(out, source.data + pos, limit - pos, &_LAYOUT, da, base, lod,
                                 size, want, c, record_type, no_headers, shared_headers)
            if got < 0:
                return GENERAL, STOPPED
            taken += size
            if left > want.count:
                return FILLED, STOPPED
        return FILLED, STOPPED if full else NOTHING_AFTER
    finally:
        PyMem_Free(buf)
