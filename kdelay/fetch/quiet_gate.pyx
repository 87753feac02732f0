# cython: language_level=3
"""The idle poll, compiled: after a fetch learned that nothing after its cursor comes due
before some time (an empty page, or a small page that reached the first entry not due),
the poll that passes that cursor back again is answered here, with no lock, planning or
Python frame: one identity check of the cursor, the page limits' types, one reading of
the log clock and a comparison. An append lowers that time to its batch's deliverAfter
(`appended`, one C call), so a batch due sooner ends the quiet spell at once.

Read without the log's lock: the gate's fields change only under the GIL, between whole
calls of an append or a fetch, so a poll sees the spell as it was before an append or
after it (either is an order the calls could have run in), never half of one.
"""

from cpython.object cimport PyObject, PyTypeObject, newfunc
from libc.stdint cimport int64_t

from kdelay.log.local.log_clock cimport LogClock

from kdelay.records import FetchResult

# a FetchResult made as tuple.__new__ makes it, without the NamedTuple's Python-level
# __new__
cdef newfunc _new_tuple = (<PyTypeObject *>tuple).tp_new
cdef type _FETCH_RESULT = FetchResult


cdef class QuietGate:
    """A quiet spell: nothing after `cursor` comes due before `until` (while `armed`;
    the fields are declared in quiet_gate.pxd)."""

    def __init__(self):
        self.cursor = None
        self.until = 0
        self.armed = False

    cpdef begin(self, object cursor, object until):
        """Nothing after `cursor` comes due before `until`."""
        self.cursor = cursor
        self.until = until
        self.armed = True

    cpdef clear(self):
        self.cursor = None
        self.armed = False

    cpdef appended(self, object deliver_after):
        """A batch due at `deliver_after` was appended: the spell ends then, if sooner."""
        if self.armed and deliver_after < self.until:
            self.until = deliver_after

    cpdef bint holds(self, object cursor, int64_t now):
        """Is nothing after `cursor` (compared by value) due at `now`?"""
        return self.armed and now < self.until and self.cursor == cursor

    cpdef object answer(self, object after, object max_records, object max_bytes,
                        object max_wait_ms, LogClock clock):
        """The FetchResult of `Log.fetch(after, ...)` when it is the idle poll: `after` is
        the spell's cursor itself (as a consumer passes back its `next`), the limits are
        plain ints in range, no wait is asked for, and the log clock has not reached the
        spell's end. Else None (the fetch runs as usual, checks and errors included).
        Cost: one clock reading."""
        if not self.armed or after is not self.cursor:
            return None
        if type(max_records) is not int or type(max_bytes) is not int or \
                type(max_wait_ms) is not int:
            return None
        if max_wait_ms != 0 or max_records <= 0 or max_bytes <= 0:
            return None
        if clock.now() >= self.until:
            return None
        cdef tuple args = (([], after),)
        return _new_tuple(_FETCH_RESULT, <PyObject *>args, NULL)
