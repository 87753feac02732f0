# cython: language_level=3
"""The windows a fetch takes of the active segment's recent entries (recent_columns.pyx),
compiled: entries of the merged order from a rank (`window`), the unmerged arrivals due
after a cursor (`arrivals_window`), and both at once, merged, for a page read from the
recent entries alone (`due_entries_into`, active_fill.pyx's; the tail's due ones found by a
walk down its heap). Each is one C loop. Every entry is written as five int64s in
index/entry.py's Entry order (entry_fields.pxd's E_* numbers): a window's rows, or a
buffer's runs of ENTRY_FIELDS.

C checks no index by itself: every arrival number is checked against the columns' length
before it is read, and every output's capacity before it is written."""

cimport cython
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int64_t, uint32_t
from libc.stdlib cimport qsort
from libc.string cimport memcpy

from kdelay.index.entry_fields cimport (
    E_BASE_OFFSET,
    E_DELIVER_AFTER,
    E_LAST_OFFSET_DELTA,
    E_POSITION,
    E_SIZE,
    ENTRY_FIELDS,
)
from kdelay.index.recent_columns cimport (
    Key,
    RecentColumns,
    compare_keys,
    key_less,
    start_rank,
)


cdef inline void _store(int64_t[:, ::1] out, Py_ssize_t k, const int64_t* e) noexcept:
    """Entry `e` into column k of `out` (row f: field f)."""
    out[E_DELIVER_AFTER, k] = e[E_DELIVER_AFTER]
    out[E_BASE_OFFSET, k] = e[E_BASE_OFFSET]
    out[E_POSITION, k] = e[E_POSITION]
    out[E_LAST_OFFSET_DELTA, k] = e[E_LAST_OFFSET_DELTA]
    out[E_SIZE, k] = e[E_SIZE]


cdef int _output_fits(int64_t[:, ::1] out, Py_ssize_t k) except -1:
    if out.shape[0] < ENTRY_FIELDS or out.shape[1] < k:
        raise ValueError("output too small")
    return 0


@cython.boundscheck(False)
@cython.wraparound(False)
def window(RecentColumns entries, const uint32_t[:] seqs, int64_t now,
           int64_t[:, ::1] out) -> int:
    """The entries of arrivals `seqs` (in key order) up to the first not due at `now`,
    included, into the rows of `out`: deliver_after, base_offset, position,
    last_offset_delta, size. Returns how many."""
    cdef Py_ssize_t n = entries.complete(), k
    _output_fits(out, seqs.shape[0])
    cdef int64_t e[ENTRY_FIELDS]
    for k in range(seqs.shape[0]):
        if seqs[k] >= n:
            raise ValueError("an arrival number past the entries")
        entries.entry(seqs[k], e)
        _store(out, k, e)
        if e[E_DELIVER_AFTER] > now:
            return k + 1
    return seqs.shape[0]


@cython.boundscheck(False)
@cython.wraparound(False)
def arrivals_window(RecentColumns entries, Py_ssize_t first, int64_t after_da,
                    int64_t after_off, int64_t now, int64_t[:, ::1] out) -> int:
    """The arrivals from `first` on (those not yet merged into the key order) that may hold
    a record with key > (after_da, after_off) (after_off -1: any) and are due at `now`, in
    key order, then the first of them not due: as `window` writes them. Returns how many."""
    cdef Py_ssize_t n = entries.complete(), s, k = 0, j
    if not 0 <= first <= n:
        raise ValueError("first arrival out of range")
    _output_fits(out, n - first)
    cdef Key* keys = <Key*>PyMem_Malloc(max(n - first, 1) * sizeof(Key))
    if keys == NULL:
        raise MemoryError()
    cdef int64_t e[ENTRY_FIELDS]
    cdef int64_t da
    cdef Key later
    later.da, later.seq = -1, -1
    try:
        for s in range(first, n):
            da = entries.da.value(s)
            if after_off >= 0 and da <= after_da:
                if da < after_da:
                    continue
                entries.entry(s, e)
                if e[E_BASE_OFFSET] + e[E_LAST_OFFSET_DELTA] <= after_off:
                    continue  # nothing in it past the cursor
            if da <= now:
                keys[k].da, keys[k].seq = da, s
                k += 1
            elif later.seq < 0 or da < later.da:  # (arrivals come in offset order)
                later.da, later.seq = da, s
        qsort(keys, k, sizeof(Key), compare_keys)
        for j in range(k):
            entries.entry(keys[j].seq, e)
            _store(out, j, e)
        if later.seq >= 0:
            entries.entry(later.seq, e)
            _store(out, k, e)
            k += 1
        return k
    finally:
        PyMem_Free(keys)


cdef inline bint _key_below(const int64_t* x, const int64_t* y) noexcept:
    """Whether entry x's (deliverAfter, base offset) is below entry y's."""
    return x[E_DELIVER_AFTER] < y[E_DELIVER_AFTER] or (
        x[E_DELIVER_AFTER] == y[E_DELIVER_AFTER] and x[E_BASE_OFFSET] < y[E_BASE_OFFSET])


@cython.boundscheck(False)
@cython.wraparound(False)
cdef Key* _tail_due(RecentColumns entries, int64_t after_da, int64_t after_off, int64_t now,
                    Py_ssize_t* count, int64_t* later_e, bint* have_later) except? NULL:
    """The tail's due entries after the cursor (unsorted; *count of them, in a block the
    caller frees), found by a walk down its heap that stops at every entry not due (so
    O(due entries)); the first not due after the cursor into later_e (*have_later)."""
    cdef Py_ssize_t hn = entries.heap_n, top = 0, i, nt = 0
    cdef Key* heap = entries.heap
    cdef Key* keys = <Key*>PyMem_Malloc(max(hn, 1) * sizeof(Key))
    cdef Py_ssize_t* stack = <Py_ssize_t*>PyMem_Malloc(max(hn, 1) * sizeof(Py_ssize_t))
    cdef int64_t e[ENTRY_FIELDS]
    cdef Key later
    later.da, later.seq = -1, -1
    if keys == NULL or stack == NULL:
        PyMem_Free(keys)
        PyMem_Free(stack)
        raise MemoryError()
    try:
        if hn:
            stack[0], top = 0, 1
        while top:  # (each index is pushed once: the stack never holds more than hn)
            top -= 1
            i = stack[top]
            if heap[i].seq >= entries.complete():
                raise ValueError("an arrival number past the entries")
            if heap[i].da > now:  # neither it nor anything below it is due
                if heap[i].da > after_da or after_off < 0:
                    if later.seq < 0 or key_less(heap[i], later):
                        later = heap[i]
                else:  # a cursor not yet due (a caller's own key): find the first after it
                    _later_after(entries, i, after_da, after_off, &later)
                continue
            if after_off < 0 or heap[i].da > after_da or (
                    heap[i].da == after_da and _past(entries, heap[i].seq, after_off)):
                keys[nt] = heap[i]
                nt += 1
            if 2 * i + 1 < hn:
                stack[top] = 2 * i + 1
                top += 1
            if 2 * i + 2 < hn:
                stack[top] = 2 * i + 2
                top += 1
        if later.seq >= 0:
            entries.entry(later.seq, later_e)
            have_later[0] = True
        count[0] = nt
        return keys
    except BaseException:
        PyMem_Free(keys)
        raise
    finally:
        PyMem_Free(stack)


cdef inline bint _past(RecentColumns entries, Py_ssize_t seq, int64_t after_off) noexcept:
    """Whether the batch of arrival `seq` holds a record with offset > after_off."""
    cdef int64_t e[ENTRY_FIELDS]
    entries.entry(seq, e)
    return e[E_BASE_OFFSET] + e[E_LAST_OFFSET_DELTA] > after_off


cdef void _later_after(RecentColumns entries, Py_ssize_t i, int64_t after_da,
                       int64_t after_off, Key* later) noexcept:
    """The smallest entry of the heap below index i (included) that holds a record after
    the cursor, into *later if below it: a walk of the whole subtree (only for a cursor not
    due yet, which no fetch following its pages' `next` passes)."""
    cdef Key* heap = entries.heap
    cdef Py_ssize_t hn = entries.heap_n, j
    for j in range(i, hn):  # the subtree's indices all lie at or after i
        if not _in_subtree(j, i):
            continue
        if heap[j].da > after_da or (heap[j].da == after_da and
                                     _past(entries, heap[j].seq, after_off)):
            if later.seq < 0 or key_less(heap[j], later[0]):
                later[0] = heap[j]


cdef inline bint _in_subtree(Py_ssize_t j, Py_ssize_t i) noexcept:
    while j > i:
        j = (j - 1) >> 1
    return j == i


@cython.boundscheck(False)
@cython.wraparound(False)
def due_entries(RecentColumns entries, int64_t after_da, int64_t after_off, int64_t now,
                int64_t[:, ::1] out) -> tuple[int, bool]:
    """The entries (merged order and unmerged tail alike) that may hold a record with key >
    (after_da, after_off) (after_off -1: any), in key order: those due at `now`, at most
    out.shape[1] - 1 of them, then the first one not due (if any and if the due ones all
    fit), into the rows of `out` as `window` writes them. Returns (how many rows, whether
    due entries were left out for want of room). (due_entries_into, for Python callers.)"""
    cdef Py_ssize_t cap = out.shape[1] - 1, k, j
    if out.shape[0] < ENTRY_FIELDS or cap < 0:
        raise ValueError("output too small")
    cdef int64_t* buf = <int64_t*>PyMem_Malloc((cap + 1) * ENTRY_FIELDS * sizeof(int64_t))
    if buf == NULL:
        raise MemoryError()
    cdef bint full = False
    try:
        k = due_entries_into(entries, after_da, after_off, now, buf, cap, &full)
        for j in range(k):
            _store(out, j, buf + ENTRY_FIELDS * j)
        return k, full
    finally:
        PyMem_Free(buf)


@cython.boundscheck(False)
@cython.wraparound(False)
cdef Py_ssize_t due_entries_into(RecentColumns entries, int64_t after_da, int64_t after_off,
                                 int64_t now, int64_t* buf, Py_ssize_t cap,
                                 bint* full) except -1:
    """`due_entries` into `buf` (room for cap + 1 entries of ENTRY_FIELDS int64s each,
    entry j from buf[ENTRY_FIELDS * j], its fields by the E_* numbers); *full when due
    entries were left out for want of room.

    One call for what a page of the active segment's recent entries needs (a RecentRun's
    and an ArrivalsRun's windows, merged): O(log entries + rows + the tail's due entries),
    the last by a walk down the tail's heap (kept by `add`), not over the whole tail."""
    cdef Py_ssize_t n = entries.complete(), m = entries.merged
    cdef const uint32_t[:] order = entries.order
    if m > n or order.shape[0] != m or cap < 0:
        raise ValueError("the order does not match the entries")
    cdef Py_ssize_t i = 0 if after_off < 0 else start_rank(entries, order, after_da,
                                                              after_off)
    cdef Py_ssize_t nt = 0, j = 0, k = 0, s
    cdef int64_t eo[ENTRY_FIELDS]
    cdef int64_t et[ENTRY_FIELDS]
    cdef int64_t later_e[ENTRY_FIELDS]
    cdef int64_t da
    cdef bint have_later = False, have_o, have_t
    cdef Key* keys
    if entries.heap_n == n - m:
        keys = _tail_due(entries, after_da, after_off, now, &nt, later_e, &have_later)
    else:  # (an add failed part-way: the heap is short) as arrivals_window, a walk
        keys = <Key*>PyMem_Malloc(max(n - m, 1) * sizeof(Key))
        if keys == NULL:
            raise MemoryError()
        for s in range(m, n):
            da = entries.da.value(s)
            if after_off >= 0 and da <= after_da:
                if da < after_da:
                    continue
                entries.entry(s, et)
                if et[E_BASE_OFFSET] + et[E_LAST_OFFSET_DELTA] <= after_off:
                    continue
            if da <= now:
                keys[nt].da, keys[nt].seq = da, s
                nt += 1
            elif not have_later or da < later_e[E_DELIVER_AFTER]:
                entries.entry(s, later_e)
                have_later = True
    qsort(keys, nt, sizeof(Key), compare_keys)
    try:
        while True:  # merge the order's due entries from rank i with the tail's
            have_o = i < m
            if have_o:
                if order[i] >= n:
                    raise ValueError("an arrival number past the entries")
                entries.entry(order[i], eo)
                have_o = eo[E_DELIVER_AFTER] <= now
            have_t = j < nt
            if have_t:
                entries.entry(keys[j].seq, et)
            if not have_o and not have_t:
                break
            if k == cap:
                full[0] = True
                break
            if have_o and (not have_t or _key_below(eo, et)):
                memcpy(buf + ENTRY_FIELDS * k, eo, ENTRY_FIELDS * sizeof(int64_t))
                i += 1
            else:
                memcpy(buf + ENTRY_FIELDS * k, et, ENTRY_FIELDS * sizeof(int64_t))
                j += 1
            k += 1
        if not full[0]:  # the first entry not due: the order's next, or the tail's earliest
            if i < m:  # (not due: the loop took every due one)
                if not have_later or _key_below(eo, later_e):
                    memcpy(later_e, eo, ENTRY_FIELDS * sizeof(int64_t))
                    have_later = True
            if have_later:
                memcpy(buf + ENTRY_FIELDS * k, later_e, ENTRY_FIELDS * sizeof(int64_t))
                k += 1
        return k
    finally:
        PyMem_Free(keys)
