# cython: language_level=3
"""A growable column of ints stored compactly, compiled: `value - base` in 4 bytes (int32,
or uint32 for a column that never goes below its base) until a value does not fit, then
in int64. The recent entries' columns (recent_columns.pyx) are these; reading a value
back is inline C (`value`, int_column.pxd), with no boxing."""

from libc.stdint cimport INT32_MAX, INT32_MIN, UINT32_MAX, int32_t, int64_t, uint8_t, uint32_t

import numpy as np

cdef enum:
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
        cdef uint8_t[::1] view = a.view(np.uint8)
        self._data = &view[0] if view.shape[0] else NULL
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
        if (self.kind == INT32 and not INT32_MIN <= x <= INT32_MAX) or (
                self.kind == UINT32 and not 0 <= x <= UINT32_MAX):  # (C constants: no int
            # object per append, as a literal past 2**31 made for the comparison)
            self._use(self.a.astype(np.int64))
        self._put(self.n, x)
        self.n += 1

    cdef void _put(self, Py_ssize_t i, int64_t x) noexcept:
        cdef uint8_t* p = self._data
        if self.kind == INT64:
            (<int64_t*>p)[i] = x
        elif self.kind == UINT32:
            (<uint32_t*>p)[i] = <uint32_t>x
        else:
            (<int32_t*>p)[i] = <int32_t>x

    def raw(self) -> np.ndarray:
        """The stored values (value - base)."""
        return self.a[:self.n]

    def get(self, idx) -> np.ndarray:
        """The values at `idx` (int64)."""
        return self.a[idx].astype(np.int64) + self._base

    def nbytes(self) -> int:
        return self.a.nbytes

