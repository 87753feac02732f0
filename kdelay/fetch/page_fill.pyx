# cython: language_level=3
"""The page fill, compiled: a k-way merge of runs' index entries in (deliverAfter, offset)
order, and every batch it takes read, checked and decoded into FetchedRecords
(batch_read.pxd) straight from the mapped segments, in one C loop per page. due_merge.py
says what a page is; this is its inner loop, so that Python's work is per page and per
run it refills (plus the record objects themselves), not per batch.

A Window is the part of one run the merge may take from, as columns of index entries in
key order (due_merge.py builds them). A KWayMerge holds one Window per slot and a binary
heap of the slots by the key at their head (TigerBeetle's k_way_merge.zig keeps a heap the
same way): a batch costs O(log k) for k windows in the heap, and a window with nothing
left (and nothing behind it) leaves the heap, so it costs nothing after. The merge, heads
and heap included, survives from one page to the next: due_order.py keeps it with the
cursor the page ended at, so the next page goes on where this one stopped.

C checks no index by itself: a Window checks its columns against one another and its
source when it is built, and the fill checks every batch's position and size against the
bytes its segment holds before reading it."""

cimport cython
from cpython.list cimport PyList_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdint cimport INT64_MAX, int32_t, int64_t, uint8_t

from kdelay.index.entry_fields cimport (
    E_BASE_OFFSET,
    E_DELIVER_AFTER,
    E_LAST_OFFSET_DELTA,
    E_POSITION,
    E_SIZE,
    ENTRY_FIELDS,
)
from kdelay.log.batch.batch_header cimport Layout, read_layout
from kdelay.log.batch.batch_read cimport (
    Cancelled,
    Wanted,
    cancelled_in,
    lower_bound,
    read_batch,
)
from kdelay.log.segments.mapped_file cimport MappedFile

from kdelay.index.entry import Entry

cpdef enum:  # KWayMerge.fill's outcome; PageRequest.detail says more
    DONE = 0     # the page is full, or nothing more is due: detail is the smallest
                 # deliverAfter > now at a window's head (-1: none seen)
    REFILL = 1   # window `detail` ran out with more entries behind it (or its segment's
                 # mapping changed): set a fresh window for it, call again
    DAMAGED = 2  # the batch at window `detail`'s head failed a check: nothing of it taken
    FETCH = 3    # the batch at window `detail`'s head is to be read and its bytes are not
                 # at hand yet (a remote segment's): fetch them, refill, call again
    PLAN = 4     # a segment not in the merge may hold the next key (the request's bound
                 # is due and below every head): add it, call again

NO_BOUND = INT64_MAX  # PageRequest.bound_da when every segment is in the merge
cdef int64_t _NO_BOUND = INT64_MAX


cdef const int64_t* _int64s(const int64_t[::1] column, int64_t n) except? NULL:
    if column.shape[0] < n:
        raise ValueError("a window's column is shorter than its end")
    return &column[0] if column.shape[0] else NULL


cdef const int32_t* _int32s(const int32_t[::1] column, int64_t n) except? NULL:
    if column.shape[0] < n:
        raise ValueError("a window's column is shorter than its end")
    return &column[0] if column.shape[0] else NULL


cdef struct Slot:
    const int64_t* da
    const int64_t* base
    const int64_t* pos
    const void* lod  # int32 (a persisted index's) or int64 (gathered), as `wide` says
    const void* size
    bint wide
    int64_t end  # entries [head, end) may be taken
    bint more  # entries past `end` may be due: stop there and have the caller refill
    int64_t ready  # the bytes of the batches of entries before it are at hand
    const uint8_t* data  # the segment's bytes, as mapped when the window was set
    int64_t limit  # how many the file holds
    Cancelled gone  # the segment's cancelled offsets, whole
    int64_t head  # the next entry to take
    Py_ssize_t at  # where the slot is in the heap (-1: not in it)


cdef class Window:
    """One run's entries the merge may take, by name: `mapped` (its segment's MappedFile)
    and `limit` (how many bytes its file holds); `columns`, its index entries in key order
    (deliver_after, base_offset, position as int64, last_offset_delta and size both int32
    or both int64), of which entries before `end` may be taken; `more`: entries past `end`
    may be due; `ready`: the batches of the entries before it can be read through the
    mapping, the others are fetched first (a remote segment's); `cancelled` and
    `cancelled_recent`: the sorted int64 offsets cancelled in its segment. Checked here
    against one another and the mapping (ValueError)."""

    cdef readonly MappedFile mapped
    cdef readonly int64_t limit, end, ready
    cdef readonly bint more
    cdef readonly list columns
    cdef readonly object cancelled, cancelled_recent
    cdef Slot slot  # the pointers into the columns this object keeps alive

    def __init__(self, MappedFile mapped not None, int64_t limit, list columns, int64_t end,
                 bint more, int64_t ready, cancelled, cancelled_recent):
        if len(columns) != ENTRY_FIELDS:
            raise ValueError("a window has five columns")
        if end < 0 or mapped.data == NULL or not 0 <= limit <= mapped.capacity:
            raise ValueError("a window's end or limit is out of range")
        self.mapped, self.limit, self.end, self.ready, self.more = mapped, limit, end, ready, more
        self.columns, self.cancelled, self.cancelled_recent = columns, cancelled, cancelled_recent
        cdef Slot* s = &self.slot
        s.data, s.limit, s.end, s.more, s.ready = mapped.data, limit, end, more, ready
        s.da = _int64s(columns[E_DELIVER_AFTER], end)
        s.base = _int64s(columns[E_BASE_OFFSET], end)
        s.pos = _int64s(columns[E_POSITION], end)
        lod, size = columns[E_LAST_OFFSET_DELTA], columns[E_SIZE]
        s.wide = lod.itemsize == 8
        if s.wide:
            s.lod, s.size = _int64s(lod, end), _int64s(size, end)
        else:
            s.lod, s.size = _int32s(lod, end), _int32s(size, end)
        s.gone.na, s.gone.nb = len(cancelled), len(cancelled_recent)
        s.gone.a, s.gone.b = _int64s(cancelled, 0), _int64s(cancelled_recent, 0)

    def entry(self, int64_t i):
        """Entry `i` of the window's columns, as an index Entry."""
        return Entry._make(int(c[i]) for c in self.columns)


cdef class PageRequest:
    """What one page may take, by name. In: records with key > (after_da, after_off)
    (after_off -1: from the start) and deliverAfter <= now, at most max_records of them,
    and batches while their bytes keep `taken_bytes` within max_bytes (always at least one
    batch); `bound_da`, `bound_off`: the smallest key a segment not in the merge may hold
    (bound_da NO_BOUND: none). Out: `taken_bytes` so far, and `detail` (see the outcomes)."""

    cdef public int64_t after_da, after_off, now, max_records, max_bytes, taken_bytes
    cdef public int64_t bound_da, bound_off, detail

    def __init__(self, int64_t after_da, int64_t after_off, int64_t now,
                 int64_t max_records, int64_t max_bytes):
        self.after_da, self.after_off, self.now = after_da, after_off, now
        self.max_records, self.max_bytes = max_records, max_bytes
        self.taken_bytes, self.bound_da, self.bound_off, self.detail = 0, _NO_BOUND, 0, -1


cdef inline int64_t _at(const void* column, bint wide, int64_t i) noexcept nogil:
    return (<const int64_t*>column)[i] if wide else (<const int32_t*>column)[i]


cdef inline bint _before(const Slot* x, const Slot* y) noexcept nogil:
    """Does slot x come out of the heap before slot y? A slot at its end (in the heap
    only with more behind it) first, so that it is refilled before anything is taken;
    then by the key at the head."""
    cdef bint xr = x.head == x.end, yr = y.head == y.end
    if xr or yr:
        return xr and not yr
    cdef int64_t xd = x.da[x.head], yd = y.da[y.head]
    return xd < yd or (xd == yd and x.base[x.head] < y.base[y.head])


@cython.final
cdef class KWayMerge:
    """Windows in numbered slots, merged by a binary heap of the slots that have entries
    left (or more behind their end). Slots are the caller's to number (0, 1, ...: the
    arrays grow to the largest); `set` puts a window in one, `clear` empties it."""

    cdef Slot* slots
    cdef Py_ssize_t* heap
    cdef Py_ssize_t capacity, n_heap
    cdef list windows  # the Window of each slot (None: empty), which keeps its memory
    cdef Layout layout
    cdef object record_type, no_headers, shared_headers

    def __init__(self, const int64_t[:] layout, record_type, no_headers, shared_headers):
        """`layout`: codec.HEADER_LAYOUT; the records are built as `record_type`
        (records.FetchedRecord), with `no_headers` and `shared_headers` as
        record_decode has them."""
        read_layout(layout, &self.layout)
        self.record_type, self.no_headers = record_type, no_headers
        self.shared_headers = shared_headers
        self.windows = []

    def __dealloc__(self):
        PyMem_Free(self.slots)
        PyMem_Free(self.heap)

    cdef int _grow(self, Py_ssize_t n) except -1:
        if n <= self.capacity:
            return 0
        cdef Py_ssize_t cap = max(n, 2 * self.capacity, 8), k
        cdef Slot* s = <Slot*>PyMem_Realloc(self.slots, cap * sizeof(Slot))
        if s == NULL:
            raise MemoryError()
        self.slots = s
        cdef Py_ssize_t* h = <Py_ssize_t*>PyMem_Realloc(self.heap, cap * sizeof(Py_ssize_t))
        if h == NULL:
            raise MemoryError()
        self.heap = h
        for k in range(self.capacity, cap):
            self.slots[k].at = -1
            self.slots[k].end = 0
            self.slots[k].head = 0
            self.slots[k].more = False
        self.windows.extend([None] * (cap - self.capacity))
        self.capacity = cap
        return 0

    # ------------------------------------------------------------------ the heap

    cdef inline void _place(self, Py_ssize_t i, Py_ssize_t k) noexcept:
        self.heap[i] = k
        self.slots[k].at = i

    cdef void _up(self, Py_ssize_t i) noexcept:
        cdef Py_ssize_t k = self.heap[i], parent
        while i > 0:
            parent = (i - 1) >> 1
            if not _before(&self.slots[k], &self.slots[self.heap[parent]]):
                break
            self._place(i, self.heap[parent])
            i = parent
        self._place(i, k)

    cdef void _down(self, Py_ssize_t i) noexcept:
        cdef Py_ssize_t k = self.heap[i], child
        while True:
            child = 2 * i + 1
            if child >= self.n_heap:
                break
            if child + 1 < self.n_heap and _before(&self.slots[self.heap[child + 1]],
                                                   &self.slots[self.heap[child]]):
                child += 1
            if not _before(&self.slots[self.heap[child]], &self.slots[k]):
                break
            self._place(i, self.heap[child])
            i = child
        self._place(i, k)

    cdef void _remove(self, Py_ssize_t k) noexcept:
        cdef Py_ssize_t i = self.slots[k].at, last
        if i < 0:
            return
        self.slots[k].at = -1
        self.n_heap -= 1
        if i == self.n_heap:
            return
        last = self.heap[self.n_heap]
        self._place(i, last)
        self._up(i)
        self._down(self.slots[last].at)

    cdef void _update(self, Py_ssize_t k) noexcept:
        """Slot k's head or window changed: put it where it belongs (or out)."""
        cdef Slot* s = &self.slots[k]
        if s.head == s.end and not s.more:
            self._remove(k)
        elif s.at < 0:
            s.at = self.n_heap
            self.heap[self.n_heap] = k
            self.n_heap += 1
            self._up(s.at)
        else:
            self._up(s.at)
            self._down(s.at)

    # ------------------------------------------------------------------ slots

    def set(self, Py_ssize_t k, Window window not None, int64_t head) -> None:
        """Put `window` in slot k, its entries from `head` on to be taken. O(log k)."""
        if k < 0 or not 0 <= head <= window.end:
            raise ValueError("a window's slot or head is out of range")
        self._grow(k + 1)
        cdef Py_ssize_t at = self.slots[k].at
        self.slots[k] = window.slot
        self.slots[k].head, self.slots[k].at = head, at
        self.windows[k] = window
        self._update(k)

    def clear(self, Py_ssize_t k) -> None:
        """Empty slot k (nothing of it is merged any more). O(log k)."""
        if 0 <= k < self.capacity:
            self._remove(k)
            self.slots[k].end = self.slots[k].head = 0
            self.slots[k].more = False
            self.windows[k] = None

    def head(self, Py_ssize_t k) -> int:
        """The next entry slot k's window would give."""
        if not 0 <= k < self.capacity:
            raise IndexError(k)
        return self.slots[k].head

    def window(self, Py_ssize_t k) -> Window | None:
        return self.windows[k] if 0 <= k < self.capacity else None

    def live(self, Py_ssize_t k) -> bool:
        """Has slot k entries left to give (or more behind them)?"""
        return 0 <= k < self.capacity and self.slots[k].at >= 0

    def top(self) -> tuple | None:
        """The key (deliverAfter, offset) at the head of the heap's first window (None:
        the heap is empty, or that window is to be refilled first)."""
        if not self.n_heap:
            return None
        cdef Slot* s = &self.slots[self.heap[0]]
        if s.head == s.end:
            return None
        return s.da[s.head], s.base[s.head]

    def __len__(self) -> int:
        """Windows in the heap (with entries left, or more behind them)."""
        return self.n_heap

    # ------------------------------------------------------------------ the fill

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def fill(self, list out, PageRequest r not None) -> int:
        """Merge the windows into the page `out` (records appended), as `r` asks, moving
        each head past the entries the page consumed whole, leaving cancelled records out
        (a batch whose remaining records are all cancelled is consumed unread). O(log k)
        per batch taken. Returns the outcome (DONE, REFILL, DAMAGED, FETCH or PLAN); `r.detail` and `r.taken_bytes` say more."""
        cdef Slot* s
        cdef Py_ssize_t best
        cdef int64_t n, skip, first, last, n_gone = 0, left, got, head, lod, size
        cdef int64_t da, base
        cdef Wanted want
        cdef Cancelled c
        cdef const uint8_t* data
        cdef bint bound_due = r.bound_da != _NO_BOUND and r.bound_da <= r.now
        r.detail = -1
        while PyList_GET_SIZE(out) < r.max_records:
            if self.n_heap:
                best = self.heap[0]
                s = &self.slots[best]
                head = s.head
                if head == s.end:
                    r.detail = best
                    return REFILL
                da, base = s.da[head], s.base[head]
                if bound_due and (da > r.bound_da or (da == r.bound_da and
                                                      base > r.bound_off)):
                    return PLAN
            elif bound_due:
                return PLAN
            else:
                return DONE
            if da > r.now:
                r.detail = da
                return DONE
            lod = _at(s.lod, s.wide, head)
            size = _at(s.size, s.wide, head)
            n = lod + 1  # records in the batch
            skip = 0
            if r.after_off >= 0 and da == r.after_da and base <= r.after_off:
                skip = min(r.after_off - base + 1, n)
            first, last = base + skip, base + lod
            c = cancelled_in(&s.gone, first, last, &n_gone)
            left = n - skip - n_gone  # records of the batch the page may still take
            if left > 0:
                if PyList_GET_SIZE(out) and r.taken_bytes + size > r.max_bytes:
                    return DONE
                r.detail = best
                if head >= s.ready:
                    return FETCH
                data = (<Window>self.windows[best]).mapped.data
                if data != s.data:  # remapped or closed since the window was set
                    return REFILL
                want.first, want.count = skip, r.max_records - PyList_GET_SIZE(out)
                got = -1
                if 0 <= s.pos[head] < s.limit:
                    got = read_batch(out, data + s.pos[head], s.limit - s.pos[head],
                                     &self.layout, da, base, lod, size, want, c,
                                     self.record_type, self.no_headers, self.shared_headers)
                if got < 0:
                    return DAMAGED
                r.detail = -1
                r.taken_bytes += size
                if left > want.count:
                    return DONE  # full inside this batch: the head stays
            s.head = head + 1
            if s.head == s.end and not s.more:
                self._remove(best)
            else:
                self._down(0)
        return DONE
