# cython: language_level=3
from kdelay.fetch.quiet_gate cimport QuietGate


cdef class AppendNotices:
    cdef object _signal  # long_poll.ActivitySignal (`signal`; replaced in a forked child)
    cdef list _sleepers  # its `sleepers` (a list it changes only in place)
    cdef readonly list listeners
    cdef QuietGate _gate

    cpdef object under_lock(self, object result)
    cpdef object after(self, object result)
