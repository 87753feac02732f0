# cython: language_level=3
"""The compiled surface of quiet_gate.pyx that the append's notices (append_notices.pyx)
call in C."""

from libc.stdint cimport int64_t

from kdelay.log.local.log_clock cimport LogClock


cdef class QuietGate:
    cdef public object cursor
    cdef public object until  # an int (active_page.NEVER, 2**63, when nothing is pending)
    cdef public bint armed

    cpdef begin(self, object cursor, object until)
    cpdef clear(self)
    cpdef appended(self, object deliver_after)
    cpdef bint holds(self, object cursor, int64_t now)
    cpdef object answer(self, object after, object max_records, object max_bytes,
                        object max_wait_ms, LogClock clock)
