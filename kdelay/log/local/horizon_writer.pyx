# cython: language_level=3
"""The append horizon's writer side (append_horizon.py holds the file's format, the
protocol and the readers), compiled: every append publishes itself through it, and in C
that is two 8-byte stores and a fence at each end rather than a few Python calls.

The stores are plain aligned 8-byte stores into the shared map (never torn on the
machines we run on), little-endian as the format says; the fence after `begin`'s stores
is a full memory barrier (a sequentially consistent fence: `mfence` on x86-64, `dmb ish`
on arm64), so a reader that sees the clock's effects sees both stores first."""

import mmap
import os

from libc.stdint cimport int64_t

from kdelay.log.local.log_clock cimport LogClock

from kdelay.log.segments.append_horizon import FLOOR_WORD, MAGIC, PID_WORD, SEQ_WORD, SIZE
from kdelay.log.segments.layout import HORIZON_FILE

cdef extern from *:
    """
    static inline void kd_store_le64(int64_t* at, int64_t value) {
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        value = (int64_t)__builtin_bswap64((uint64_t)value);
    #endif
        __atomic_store_n(at, value, __ATOMIC_RELAXED);
    }
    static inline void kd_full_fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
    """
    void kd_store_le64(int64_t* at, int64_t value) noexcept nogil
    void kd_full_fence() noexcept nogil

cdef Py_ssize_t _PID = PID_WORD, _SEQ = SEQ_WORD, _FLOOR = FLOOR_WORD


cdef class Horizon:
    """The writer's side. Created by `Log.open` after it has taken the lock."""

    def __init__(self, str directory, int64_t floor):
        path = os.path.join(directory, HORIZON_FILE)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, SIZE)
            self._map = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        self._page = self._map
        self._words = <int64_t*>&self._page[0]
        self._map[0:8] = MAGIC
        self._store(_SEQ, 0)
        self._store(_FLOOR, floor)
        self._store(_PID, os.getpid())
        self._seq = 0
        self._floor = floor
        self._write_floor = self._write_used = floor
        self._write_clock = None

    cdef int _store(self, Py_ssize_t word, int64_t value) except -1:
        if self._words == NULL:
            raise ValueError("the append horizon is closed")
        kd_store_le64(self._words + word, value)
        return 0

    def writing(self, int64_t floor, clock) -> Horizon:
        """`with horizon.writing(floor, clock) as now:` a write at the log clock `now`,
        published as under way (`begin(floor)`) from before the clock is read until the
        block ends (`end` with the clock used, or with `floor` if reading it raised).
        The horizon is its own context manager, armed here: writes come one at a time
        (under the log's lock), and a fresh object per write would cost more than the
        stores it publishes."""
        self._write_floor = floor
        self._write_clock = clock
        return self

    def __enter__(self) -> int:
        return self.start(self._write_floor, self._write_clock)

    def __exit__(self, *exc) -> None:
        self.end(self._write_used)

    cpdef int64_t start(self, int64_t floor, object clock) except? -1:
        """`begin(floor)`, then read the clock: the clock the write uses (`end` it with
        that). A clock that raises ends the write at `floor`. (What `with writing(...)`
        does on entry; the append path calls it and `end` directly.)"""
        self.begin(floor)
        try:  # (a LogClock, as the append path's, read in C: no call through __call__)
            self._write_used = (<LogClock>clock).now() if type(clock) is LogClock else clock()
        except BaseException:
            self.end(floor)
            raise
        return self._write_used

    cpdef begin(self, int64_t floor):
        self._store(_FLOOR, floor)
        self._floor = floor
        self._seq += 1
        self._store(_SEQ, self._seq)
        kd_full_fence()  # both stores are visible before the clock is read

    cpdef end(self, int64_t used):
        self._store(_FLOOR, used)
        self._floor = used
        self._seq += 1
        self._store(_SEQ, self._seq)

    def close(self) -> None:
        """The writer is gone: readers treat the file as "no writer" (pid 0)."""
        if self._words == NULL:
            return
        if self._seq % 2:
            self.end(self._floor)
        self._store(_PID, 0)
        self._words = NULL
        self._page = None  # release the buffer export before unmapping
        self._map.close()
