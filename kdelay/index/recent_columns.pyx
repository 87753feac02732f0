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
from cpython.mem cimport PyMem_Free, PyMem_Malloc
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

    cdef readonly object a  # the numpy array of stored values; [:n] are in use
    cdef readonly Py_ssize_t n
    cdef readonly bint started  # a relative column has taken its first value (its base)
    cdef bint relative
    cdef int64_t _base
    cdef int kind
    cdef uint8_t[::1] _bytes  # `a`'s bytes, for the C loops

    def __init__(self, dtype, relative: bool = False) -> None:
        self.relative = relative
        self.started = not relative
        self._base = 0
        self.n = 0
        self._use(np.empty(GROWTH_MIN, dtype=dtype))

    cdef int _use(self, object a) except -1:
        self.a = a
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
        if self.n == len(self.a):  # (not np.resize: its result is a view of a buffer twice
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
    cdef inline void _put(self, Py_ssize_t i, int64_t x) noexcept:
        cdef uint8_t* p = &self._bytes[0]
        if self.kind == INT64:
            (<int64_t*>p)[i] = x
        elif self.kind == UINT32:
            (<uint32_t*>p)[i] = <uint32_t>x
        else:
            (<int32_t*>p)[i] = <int32_t>x

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef inline int64_t value(self, Py_ssize_t i) noexcept:
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


cdef class RecentColumns:
    """The recent entries' columns, in arrival (= offset) order: deliverAfter relative to
    the first entry's (int32), base offset relative to the first entry's (uint32), position
    (uint32); last-offset-delta and size explicit (uint32) only once an entry does not
    follow its predecessor (lod and size None until then). `next_base` and `end_pos` are
    where the last entry ends. `order`: the arrival numbers of the first entries in key
    order (the merged part; later arrivals are the tail), folded in every `tail_limit`
    arrivals. Never changed in place, only replaced: a reader's reference stays a valid
    snapshot."""

    cdef readonly IntColumn da, rel, pos, lod, size
    cdef readonly int64_t base0, next_base, end_pos
    cdef readonly object order
    cdef Py_ssize_t merged, tail_limit  # len(order); arrivals kept unmerged at most

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

    cdef inline Py_ssize_t complete(self) noexcept:
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
        if self.complete() - self.merged >= self.tail_limit:
            self.merge()

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

    cdef inline void entry(self, Py_ssize_t s, int64_t* out) noexcept:
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


cdef struct Key:
    int64_t da, seq


cdef int _by_key(const void* a, const void* b) noexcept nogil:
    cdef const Key* x = <const Key*>a
    cdef const Key* y = <const Key*>b
    if x.da != y.da:
        return -1 if x.da < y.da else 1
    return -1 if x.seq < y.seq else (1 if x.seq > y.seq else 0)


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
