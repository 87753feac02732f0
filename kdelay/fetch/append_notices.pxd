# cython: language_level=3
from kdelay.fetch.quiet_gate cimport QuietGate


cdef class AppendNotices:
    cdef public object signal  # long_poll.ActivitySignal (replaced in a forked child)
    cdef readonly list listeners
    cdef QuietGate _gate

    cpdef object under_lock(self, object result)
    cpdef object after(self, object result)
