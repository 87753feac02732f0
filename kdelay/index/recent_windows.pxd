# cython: language_level=3
"""The compiled surface of recent_windows.pyx: the small fetch's page fill
(fetch/active_fill.pyx) takes the due entries after a cursor in one C call."""

from libc.stdint cimport int64_t

from kdelay.index.recent_columns cimport RecentColumns


cdef Py_ssize_t due_entries_into(RecentColumns entries, int64_t after_da, int64_t after_off,
                                 int64_t now, int64_t* buf, Py_ssize_t cap,
                                 bint* full) except -1
