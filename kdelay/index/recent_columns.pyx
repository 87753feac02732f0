# cython: language_level=3
"""The storage of recent_entries.RecentEntries, compiled: its columns (int_column.pyx) and
the order of their entries, with its upkeep (adding an entry, folding the tail of arrivals
into the order) and the ranks a fetch starts from, each one C loop instead of a dozen numpy
calls, so that an append costs one C call. The windows a fetch takes over them are
recent_windows.pyx.

Entries are numbered by arrival; a batch's last-offset-delta and size follow from the next
arrival's base offset and position unless the entries carry them explicitly (see
recent_entries.py). An entry read out is five int64s in index/entry.py's Entry order (the
E_* numbers of entry_fields.pxd).

C checks no index by itself: every arrival number is checked against the columns' length
before it is read, and every output's capacity before it is written."""

cimport cython
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from kdelay.index.entry_fields cimport (
    E_BASE_OFFSET,
    E_DELIVER_AFTER,
    E_LAST_OFFSET_DELTA,
    E_POSITION,
    E_SIZE,
    ENTRY_FIELDS,
)

import numpy as np


cdef int compare_keys(const void* a, const void* b) noexcept nogil:
    cdef const Key* x = <const Key*>a
    cdef const Key* y = <const Key*>b
    if x.da != y.da:
        return -1 if x.da < y.da else 1
    return -1 if x.seq < y.seq else (1 if x.seq > y.seq else 0)


cdef class RecentColumns:
    """The recent entries' columns, in arrival (= offset) order: deliverAfter relative to
    the first entry's (int32), base offset relative to the first entry's (uint32), position
    (uint32); last-offset-delta and size explicit (uint32) only once an entry does not
    follow its predecessor (lod and size None until then). `next_base` and `end_pos` are
    where the last entry ends. `order`: the arrival numbers of the first entries in key
    order (the merged part; later arrivals are the tail), folded in every `tail_limit`
    arrivals. Never changed in place, only replaced: a reader's reference stays a valid
    snapshot."""


    def __cinit__(self, *args) -> None:
        self.heap, self.heap_n, self.heap_cap = NULL, 0, 0

    def __dealloc__(self) -> None:
        PyMem_Free(self.heap)

    def __init__(self, Py_ssize_t tail_limit) -> None:
        self.da = IntColumn(np.int32, relative=True)
        self.rel = IntColumn(np.uint32)
        self.pos = IntColumn(np.uint32)
        self.lod = self.size = None
        self.base0 = self.next_base = self.end_pos = 0
        self.order = np.empty(0, dtype=np.uint32)
        self.merged = 0
        self.tail_limit = tail_limit

    def __len__(self) -> int:
        return self.complete()

    cdef Py_ssize_t complete(self) noexcept:
        """Entries whose every column is written (all of them, unless an append failed
        part-way, as from a MemoryError)."""
        cdef Py_ssize_t n = min(self.da.n, self.rel.n, self.pos.n)
        if self.lod is not None:
            n = min(n, self.lod.n, self.size.n)
        return n

    cpdef add(self, int64_t da, int64_t base, int64_t pos, int64_t lod, int64_t size):
        """Append an entry (ValueError if its base offset is below where the last ended);
        fold the tail into the order once it is `tail_limit` arrivals long."""
        if self.da.n == 0:
            self.base0 = base
        elif base < self.next_base:
            raise ValueError(f"entries must arrive in offset order ({base} after "
                             f"{self.next_base - 1})")
        elif self.lod is None and (base != self.next_base or pos != self.end_pos):
            self._explicit()
        self.da.append(da)
        self.rel.append(base - self.base0)
        self.pos.append(pos)
        if self.lod is not None:
            self.lod.append(lod)
            self.size.append(size)
        self.next_base = base + lod + 1
        self.end_pos = pos + size
        self._heap_push(da, self.complete() - 1)
        if self.complete() - self.merged >= self.tail_limit:
            self.merge()

    cdef int _heap_push(self, int64_t da, Py_ssize_t seq) except -1:
        """Add arrival `seq` to the tail's heap (sift up)."""
        cdef Py_ssize_t i = self.heap_n, parent
        cdef Key* grown
        if i == self.heap_cap:
            grown = <Key*>PyMem_Realloc(self.heap, max(64, 2 * self.heap_cap) * sizeof(Key))
            if grown == NULL:
                raise MemoryError()
            self.heap, self.heap_cap = grown, max(64, 2 * self.heap_cap)
        cdef Key key
        key.da, key.seq = da, seq
        while i > 0:
            parent = (i - 1) >> 1
            if not key_less(key, self.heap[parent]):
                break
            self.heap[i] = self.heap[parent]
            i = parent
        self.heap[i] = key
        self.heap_n += 1
        return 0

    cpdef merge(self):
        """Fold the unsorted tail of arrivals into the sorted order: the tail sorted (a
        stable sort: ties in arrival order, `sorted_arrivals`), then merge_tail."""
        cdef Py_ssize_t m = self.merged, n = self.complete()
        if m == n:
            return
        tail = sorted_arrivals(self.da, m, n)
        if m:
            merged = np.empty(n, dtype=np.uint32)
            merge_tail(self.da, self.order, tail, merged)
            tail = merged
        self.order, self.merged = tail, n
        self.heap_n = 0

    cdef int _explicit(self) except -1:
        """Start explicit lod/size columns, filled for the entries so far."""
        cdef IntColumn lod = IntColumn(np.uint32), size = IntColumn(np.uint32)
        cdef int64_t e[ENTRY_FIELDS]
        cdef Py_ssize_t s
        for s in range(self.complete()):
            self.entry(s, e)
            lod.append(e[E_LAST_OFFSET_DELTA])
            size.append(e[E_SIZE])
        self.lod, self.size = lod, size
        return 0

    cdef void entry(self, Py_ssize_t s, int64_t* out) noexcept:
        """Arrival s's entry into out[0:ENTRY_FIELDS] (by the E_* field numbers)
        (s < self.complete(), checked by the caller)."""
        cdef int64_t base = self.rel.value(s) + self.base0
        cdef int64_t pos = self.pos.value(s)
        out[E_DELIVER_AFTER], out[E_BASE_OFFSET], out[E_POSITION] = self.da.value(s), base, pos
        if self.lod is not None:
            out[E_LAST_OFFSET_DELTA], out[E_SIZE] = self.lod.value(s), self.size.value(s)
        elif s + 1 < self.complete():
            out[E_LAST_OFFSET_DELTA] = self.rel.value(s + 1) + self.base0 - base - 1
            out[E_SIZE] = self.pos.value(s + 1) - pos
        else:
            out[E_LAST_OFFSET_DELTA] = self.next_base - base - 1
            out[E_SIZE] = self.end_pos - pos

    def nbytes(self) -> int:
        total = self.da.nbytes() + self.rel.nbytes() + self.pos.nbytes()
        if self.lod is not None:
            total += self.lod.nbytes() + self.size.nbytes()
        return total


cdef enum:
    _DIGIT_BITS = 11  # a radix pass sorts by 11 bits of the key
    _DIGITS = 1 << _DIGIT_BITS


@cython.boundscheck(False)
@cython.wraparound(False)
cpdef sorted_arrivals(IntColumn da, Py_ssize_t first, Py_ssize_t end):
    """The arrivals first..end-1 (< da.n) sorted by deliverAfter, ties in arrival order
    (as numpy's stable argsort), as a uint32 array: a least-significant-digit radix sort
    of their deliverAfters less the smallest, 11 bits a pass, as many passes as the spread
    needs (two for spreads under 2**22 ms, about 70 minutes). O(arrivals) per pass, where
    argsort's merge sort made O(log arrivals) passes of comparisons that branch on the data
    (the merge of 4,096 arrivals: about a quarter of the time)."""
    if not 0 <= first <= end <= da.n:
        raise ValueError("arrivals past the column")
    cdef Py_ssize_t t = end - first, i, p
    out = np.empty(t, dtype=np.uint32)
    if t == 0:
        return out
    cdef uint32_t[::1] result = out
    cdef uint64_t* keys = <uint64_t*>PyMem_Malloc(2 * t * sizeof(uint64_t))
    cdef uint32_t* seqs = <uint32_t*>PyMem_Malloc(2 * t * sizeof(uint32_t))
    cdef Py_ssize_t* count = <Py_ssize_t*>PyMem_Malloc(_DIGITS * sizeof(Py_ssize_t))
    cdef uint64_t *k_in
    cdef uint64_t *k_out
    cdef uint32_t *s_in
    cdef uint32_t *s_out
    cdef int64_t v, low
    cdef uint64_t spread
    cdef int shift = 0
    try:
        if keys == NULL or seqs == NULL or count == NULL:
            raise MemoryError()
        k_in, k_out, s_in, s_out = keys, keys + t, seqs, seqs + t
        low = da.value(first)
        for i in range(first + 1, end):
            low = min(low, da.value(i))
        spread = 0
        for i in range(t):
            k_in[i] = <uint64_t>da.value(first + i) - <uint64_t>low  # (>= 0, < 2**64)
            s_in[i] = <uint32_t>(first + i)
            spread = max(spread, k_in[i])
        while shift < 64 and (spread >> shift) != 0:  # stable passes, low digits first
            memset(count, 0, _DIGITS * sizeof(Py_ssize_t))
            for i in range(t):
                count[(k_in[i] >> shift) & (_DIGITS - 1)] += 1
            p = 0
            for i in range(_DIGITS):
                p, count[i] = p + count[i], p
            for i in range(t):
                p = count[(k_in[i] >> shift) & (_DIGITS - 1)]
                count[(k_in[i] >> shift) & (_DIGITS - 1)] = p + 1
                k_out[p], s_out[p] = k_in[i], s_in[i]
            k_in, k_out = k_out, k_in
            s_in, s_out = s_out, s_in
            shift += _DIGIT_BITS
        memcpy(&result[0], s_in, t * sizeof(uint32_t))
    finally:
        PyMem_Free(keys)
        PyMem_Free(seqs)
        PyMem_Free(count)
    return out


@cython.boundscheck(False)
@cython.wraparound(False)
cpdef Py_ssize_t rank(IntColumn da, const uint32_t[:] order, int64_t value,
                      bint right) except -1:
    """Where `value` goes among the deliverAfters of the arrivals `order` (sorted by them):
    before the first whose deliverAfter is > value (`right`), or >= value."""
    cdef Py_ssize_t lo = 0, hi = order.shape[0], mid
    cdef int64_t v
    while lo < hi:
        mid = (lo + hi) >> 1
        if order[mid] >= da.n:
            raise ValueError("an arrival number past the column")
        v = da.value(order[mid])
        if v < value or (right and v == value):
            lo = mid + 1
        else:
            hi = mid
    return lo


@cython.boundscheck(False)
@cython.wraparound(False)
def start_after(RecentColumns entries, const uint32_t[:] order, int64_t after_da,
                int64_t after_off) -> int:
    """Rank in `order` (arrivals sorted by (deliverAfter, arrival)) of the first entry that
    may hold a record with key > (after_da, after_off): the batch holding that key itself
    if it has records past it."""
    return start_rank(entries, order, after_da, after_off)


@cython.boundscheck(False)
@cython.wraparound(False)
cdef Py_ssize_t start_rank(RecentColumns entries, const uint32_t[:] order, int64_t after_da,
                           int64_t after_off) except -1:
    cdef Py_ssize_t lo = rank(entries.da, order, after_da, False)
    cdef Py_ssize_t hi = rank(entries.da, order, after_da, True), mid
    cdef Py_ssize_t n = entries.complete()
    cdef int64_t e[ENTRY_FIELDS]
    # within equal deliverAfter, arrival order is offset order: the first base > after_off
    cdef Py_ssize_t k = lo, top = hi
    while k < top:
        mid = (k + top) >> 1
        if order[mid] >= n:
            raise ValueError("an arrival number past the entries")
        if entries.rel.value(order[mid]) + entries.base0 <= after_off:
            k = mid + 1
        else:
            top = mid
    if k > lo:
        entries.entry(order[k - 1], e)
        if e[E_BASE_OFFSET] + e[E_LAST_OFFSET_DELTA] > after_off:
            k -= 1
    return k


@cython.boundscheck(False)
@cython.wraparound(False)
cdef Py_ssize_t _first_above(IntColumn da, const uint32_t[::1] order, Py_ssize_t lo,
                             int64_t value) except -1:
    """The first rank >= `lo` in `order` (arrivals sorted by deliverAfter) whose deliverAfter
    is > `value` (the order's length if none): probes at lo, lo+1, lo+3, lo+7, ... until one
    is above, then a binary search below it, so O(log distance) probes, not O(log order)."""
    cdef Py_ssize_t m = order.shape[0], hi, mid, step = 1
    while True:
        hi = lo + step - 1
        if hi >= m:
            hi = m
            break
        if _deliver_after(da, order, hi) > value:
            break
        lo = hi + 1
        step <<= 1
    while lo < hi:  # the answer is in [lo, hi]: hi is above (or the end)
        mid = (lo + hi) >> 1
        if _deliver_after(da, order, mid) > value:
            hi = mid
        else:
            lo = mid + 1
    return lo


cdef inline int64_t _deliver_after(IntColumn da, const uint32_t[::1] order,
                                   Py_ssize_t rank) except? -1:
    if order[rank] >= da.n:
        raise ValueError("an arrival number past the column")
    return da.value(order[rank])


@cython.boundscheck(False)
@cython.wraparound(False)
def merge_tail(IntColumn da, const uint32_t[::1] order, const uint32_t[:] tail,
               uint32_t[::1] out) -> None:
    """`order` (arrivals sorted by deliverAfter) with the arrivals `tail` (sorted likewise,
    all later than the order's) merged in, into `out`: each goes after every arrival of an
    equal deliverAfter, as a later arrival does. A galloping search per tail arrival from
    where the last one went (no read of every deliverAfter of the order) and one copy of
    the order, in runs."""
    cdef Py_ssize_t m = order.shape[0], t = tail.shape[0], k, at, done = 0, w = 0
    if out.shape[0] != m + t:
        raise ValueError("output not as long as the order and the tail")
    for k in range(t):
        if tail[k] >= da.n:
            raise ValueError("an arrival number past the column")
        at = _first_above(da, order, done, da.value(tail[k]))
        if at > done:
            memcpy(&out[w], &order[done], (at - done) * sizeof(uint32_t))
            w += at - done
            done = at
        out[w] = tail[k]
        w += 1
    if m > done:
        memcpy(&out[w], &order[done], (m - done) * sizeof(uint32_t))

