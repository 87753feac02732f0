# cython: language_level=3
"""The log clock: the readings of the clock a log was opened with, checked, and never below
any time it has already handed out (its `floor`, the max of every reading so far), so an
append always gets a deliverAfter >= anything a fetch has treated as "now".

Compiled: every append and fetch reads it, and a Producer's send reads it without the
log's lock. Raising the floor needs no lock of its own: the test and the store are one C
step under the GIL, which no other Python thread can interleave."""

from cpython.long cimport PyLong_AsLongLongAndOverflow
from libc.stdint cimport int64_t

from kdelay.validation import clock_value


cdef class LogClock:
    def __init__(self, read, int64_t floor=0):
        """`read`: a callable returning ms since the epoch (clock.wall_clock, or the one
        injected into Log.open)."""
        self._read = read
        self.floor = floor

    cpdef int64_t now(self) except? -1:
        """The log clock now. A reading that is not an int (or numpy integer) in
        [0, 2**63) raises KdelayError (validation.clock_value)."""
        t = self._read()
        cdef int overflow = 1
        cdef int64_t v = -1
        if type(t) is int:
            v = PyLong_AsLongLongAndOverflow(t, &overflow)
        if overflow or v < 0:
            v = clock_value(t)  # says what is wrong, or takes a numpy integer
        if v > self.floor:
            self.floor = v
        return self.floor

    def __call__(self) -> int:
        return self.now()
