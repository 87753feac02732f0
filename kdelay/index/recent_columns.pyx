# cython: language_level=3
"""The storage of recent_entries.RecentEntries, compiled: its growable int columns and the
order of their entries (with its upkeep: adding an entry, folding the tail of arrivals into
the order), and the walks a fetch makes over them (a window of entries in key order, the
unmerged arrivals due by now, a rank by deliverAfter), each one C loop instead of a dozen
numpy calls, so that an append costs one C call and a fetch from the active segment a few
microseconds, not tens.

A column holds `value - base` in 4 bytes (int32, or uint32 for a column that never goes
below its base) until a value does not fit, then in int64. Entries are numbered by arrival;
a batch's last-offset-delta and size follow from the next arrival's base offset and
position unless the entries carry them explicitly (see recent_entries.py).

C checks no index by itself: every arrival number is checked against the columns' length
before it is read, and every output's capacity before it is written."""

cimport cython
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.stdlib cimport qsort
from libc.string cimport memcpy

import numpy as np

cdef enum:
    INT32, UINT32, INT64  # how a column stores its values
    GROWTH_MIN = 64


cdef class IntColumn:
    """A growable 1-D column of ints stored as `value - base` (base: the first value for a
    relative column, else 0) in a 4-byte dtype, widened to int64 once a value does not
    fit. Capacity grows by a sixteenth (at most 1/16 slack)."""


    def __init__(self, dtype, relative: bool = False) -> None:
        self.relative = relative
        self.started = not relative
        self._base = 0
        self.n = 0
        self._use(np.empty(GROWTH_MIN, dtype=dtype))

    cdef int _use(self, object a) except -1:
        self.a = a
        self.capacity = len(a)
        self.kind = INT64 if a.dtype == np.int64 else UINT32 if a.dtype == np.uint32 else INT32
        self._bytes = a.view(np.uint8)
        return 0

    @property
    def base(self) -> int | None:
        """What every stored value is relative to (None: a relative column still empty)."""
        return self._base if self.started else None

    cpdef append(self, int64_t v):
        if not self.started:
            self._base, self.started = v, True
        cdef int64_t x = v - self._base
        cdef object grown
        if self.n == self.capacity:  # (not np.resize: its result is a view of a buffer twice
            grown = np.empty(self.n + max(GROWTH_MIN, self.n >> 4), dtype=self.a.dtype)
            grown[:self.n] = self.a  # as big)
            self._use(grown)
        if (self.kind == INT32 and not -2147483648 <= x <= 2147483647) or (
                self.kind == UINT32 and not 0 <= x <= 4294967295):
            self._use(self.a.astype(np.int64))
        self._put(self.n, x)
        self.n += 1

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef void _put(self, Py_ssize_t i, int64_t x) noexcept:
        cdef uint8_t* p = &self._bytes[0]
        if self.kind == INT64:
            (<int64_t*>p)[i] = x
        elif self.kind == UINT32:
            (<uint32_t*>p)[i] = <uint32_t>x
        else:
            (<int32_t*>p)[i] = <int32_t>x

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef int64_t value(self, Py_ssize_t i) noexcept:
        """The value of entry i (< n), base added back."""
        cdef const uint8_t* p = &self._bytes[0]
        if self.kind == INT64:
            return (<const int64_t*>p)[i] + self._base
        if self.kind == UINT32:
            return (<const uint32_t*>p)[i] + self._base
        return (<const int32_t*>p)[i] + self._base

    def raw(self) -> np.ndarray:
        """The stored values (value - base)."""
        return self.a[:self.n]

    def get(self, idx) -> np.ndarray:
        """The values at `idx` (int64)."""
        return self.a[idx].astype(np.int64) + self._base

    def nbytes(self) -> int:
        return self.a.nbytes


cdef int _by_key(const void* a, const void* b) noexcept nogil:
    cdef const Key* x = <const Key*>a
    cdef const Key* y = <const Key*>b
    if x.da != y.da:
        return -1 if x.da < y.da else 1
    return -1 if x.seq < y.seq else (1 if x.seq > y.seq else 0)


cdef inline bint _key_less(Key x, Key y) noexcept nogil:
    return x.da < y.da or (x.da == y.da and x.seq < y.seq)


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
            if not _key_less(key, self.heap[parent]):
                break
            self.heap[i] = self.heap[parent]
            i = parent
        self.heap[i] = key
        self.heap_n += 1
        return 0

    cpdef merge(self):
        """Fold the unsorted tail of arrivals into the sorted order: the tail sorted (a
        stable sort: ties in arrival order), then merge_tail."""
        cdef Py_ssize_t m = self.merged, n = self.complete()
        if m == n:
            return
        da = self.da.raw()[:n]  # stored relative to one base: order-preserving
        tail = np.arange(m, n, dtype=np.uint32)
        tail = tail[np.argsort(da[m:], kind="stable")]
        if m:
            merged = np.empty(n, dtype=np.uint32)
            merge_tail(self.da, self.order, tail, merged)
            tail = merged
        self.order, self.merged = tail, n
        self.heap_n = 0

    cdef int _explicit(self) except -1:
        """Start explicit lod/size columns, filled for the entries so far."""
        cdef IntColumn lod = IntColumn(np.uint32), size = IntColumn(np.uint32)
        cdef int64_t e[5]
        cdef Py_ssize_t s
        for s in range(self.complete()):
            self.entry(s, e)
            lod.append(e[3])
            size.append(e[4])
        self.lod, self.size = lod, size
        return 0

    cdef void entry(self, Py_ssize_t s, int64_t* out) noexcept:
        """Arrival s's (deliver_after, base_offset, position, lod, size) into out[0:5]
        (s < self.complete(), checked by the caller)."""
        cdef int64_t base = self.rel.value(s) + self.base0
        cdef int64_t pos = self.pos.value(s)
        out[0], out[1], out[2] = self.da.value(s), base, pos
        if self.lod is not None:
            out[3], out[4] = self.lod.value(s), self.size.value(s)
        elif s + 1 < self.complete():
            out[3] = self.rel.value(s + 1) + self.base0 - base - 1
            out[4] = self.pos.value(s + 1) - pos
        else:
            out[3], out[4] = self.next_base - base - 1, self.end_pos - pos

    def nbytes(self) -> int:
        total = self.da.nbytes() + self.rel.nbytes() + self.pos.nbytes()
        if self.lod is not None:
            total += self.lod.nbytes() + self.size.nbytes()
        return total


cdef inline void _store(int64_t[:, ::1] out, Py_ssize_t k, const int64_t* e) noexcept:
    out[0, k], out[1, k], out[2, k], out[3, k], out[4, k] = e[0], e[1], e[2], e[3], e[4]


cdef int _output_fits(int64_t[:, ::1] out, Py_ssize_t k) except -1:
    if out.shape[0] < 5 or out.shape[1] < k:
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
    cdef int64_t e[5]
    for k in range(seqs.shape[0]):
        if seqs[k] >= n:
            raise ValueError("an arrival number past the entries")
        entries.entry(seqs[k], e)
        _store(out, k, e)
        if e[0] > now:
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
    cdef int64_t e[5]
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
                if e[1] + e[3] <= after_off:
                    continue  # nothing in it past the cursor
            if da <= now:
                keys[k].da, keys[k].seq = da, s
                k += 1
            elif later.seq < 0 or da < later.da:  # (arrivals come in offset order)
                later.da, later.seq = da, s
        qsort(keys, k, sizeof(Key), _by_key)
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
    return _start_after(entries, order, after_da, after_off)


@cython.boundscheck(False)
@cython.wraparound(False)
cdef Py_ssize_t _start_after(RecentColumns entries, const uint32_t[:] order, int64_t after_da,
                             int64_t after_off) except -1:
    cdef Py_ssize_t lo = rank(entries.da, order, after_da, False)
    cdef Py_ssize_t hi = rank(entries.da, order, after_da, True), mid
    cdef Py_ssize_t n = entries.complete()
    cdef int64_t e[5]
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
        if e[1] + e[3] > after_off:
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


cdef inline bint _key_below(const int64_t* x, const int64_t* y) noexcept:
    return x[0] < y[0] or (x[0] == y[0] and x[1] < y[1])


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
    cdef int64_t e[5]
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
                    if later.seq < 0 or _key_less(heap[i], later):
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
    cdef int64_t e[5]
    entries.entry(seq, e)
    return e[1] + e[3] > after_off


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
            if later.seq < 0 or _key_less(heap[j], later[0]):
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
    if out.shape[0] < 5 or cap < 0:
        raise ValueError("output too small")
    cdef int64_t* buf = <int64_t*>PyMem_Malloc((cap + 1) * 5 * sizeof(int64_t))
    if buf == NULL:
        raise MemoryError()
    cdef bint full = False
    try:
        k = due_entries_into(entries, after_da, after_off, now, buf, cap, &full)
        for j in range(k):
            _store(out, j, buf + 5 * j)
        return k, full
    finally:
        PyMem_Free(buf)


@cython.boundscheck(False)
@cython.wraparound(False)
cdef Py_ssize_t due_entries_into(RecentColumns entries, int64_t after_da, int64_t after_off,
                                 int64_t now, int64_t* buf, Py_ssize_t cap,
                                 bint* full) except -1:
    """`due_entries` into `buf` (room for cap + 1 entries of 5 int64s each, entry j at
    buf[5 * j:5 * j + 5]); *full when due entries were left out for want of room.

    One call for what a page of the active segment's recent entries needs (a RecentRun's
    and an ArrivalsRun's windows, merged): O(log entries + rows + the tail's due entries),
    the last by a walk down the tail's heap (kept by `add`), not over the whole tail."""
    cdef Py_ssize_t n = entries.complete(), m = entries.merged
    cdef const uint32_t[:] order = entries.order
    if m > n or order.shape[0] != m or cap < 0:
        raise ValueError("the order does not match the entries")
    cdef Py_ssize_t i = 0 if after_off < 0 else _start_after(entries, order, after_da,
                                                              after_off)
    cdef Py_ssize_t nt = 0, j = 0, k = 0, s
    cdef int64_t eo[5]
    cdef int64_t et[5]
    cdef int64_t later_e[5]
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
                if et[1] + et[3] <= after_off:
                    continue
            if da <= now:
                keys[nt].da, keys[nt].seq = da, s
                nt += 1
            elif not have_later or da < later_e[0]:
                entries.entry(s, later_e)
                have_later = True
    qsort(keys, nt, sizeof(Key), _by_key)
    try:
        while True:  # merge the order's due entries from rank i with the tail's
            have_o = i < m
            if have_o:
                if order[i] >= n:
                    raise ValueError("an arrival number past the entries")
                entries.entry(order[i], eo)
                have_o = eo[0] <= now
            have_t = j < nt
            if have_t:
                entries.entry(keys[j].seq, et)
            if not have_o and not have_t:
                break
            if k == cap:
                full[0] = True
                break
            if have_o and (not have_t or _key_below(eo, et)):
                memcpy(buf + 5 * k, eo, 5 * sizeof(int64_t))
                i += 1
            else:
                memcpy(buf + 5 * k, et, 5 * sizeof(int64_t))
                j += 1
            k += 1
        if not full[0]:  # the first entry not due: the order's next, or the tail's earliest
            if i < m:  # (not due: the loop took every due one)
                if not have_later or _key_below(eo, later_e):
                    later_e[0], later_e[1], later_e[2], later_e[3], later_e[4] = \
                        eo[0], eo[1], eo[2], eo[3], eo[4]
                    have_later = True
            if have_later:
                memcpy(buf + 5 * k, later_e, 5 * sizeof(int64_t))
                k += 1
        return k
    finally:
        PyMem_Free(keys)
