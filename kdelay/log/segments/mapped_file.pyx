# cython: language_level=3
"""A segment's .log mapped read-only into memory, for the compiled page fill
(kdelay/fetch/page_fill.pyx), which reads batches through it with no system call or copy
per batch.

The mapping may reach past the file's end: the active segment grows into it with no new
mapping (appends are written with pwrite, and a shared mapping shows them at once).
Touching a page past the end of the file is a fault (SIGBUS), so a reader reads only the
bytes the segment knows its file holds (LogSegment.size: the log's lock excludes any
other writer, and the file never shrinks below what its indexes point at)."""

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.errno cimport errno
from posix.mman cimport MAP_FAILED, MAP_SHARED, PROT_READ, mmap, munmap


cdef class MappedFile:
    """`capacity` bytes of the file open as `fd`, from its start (the descriptor may be
    closed afterwards: the mapping stays until `close`)."""

    def __cinit__(self, int fd, Py_ssize_t capacity):
        self.data = NULL
        if capacity <= 0:
            raise ValueError("a mapping needs a positive capacity")
        cdef void* at = mmap(NULL, <size_t>capacity, PROT_READ, MAP_SHARED, fd, 0)
        if at == MAP_FAILED:
            raise OSError(errno, "mmap of a segment failed")
        self.data = <const uint8_t*>at
        self.capacity = capacity

    def close(self) -> None:
        """Unmap (idempotent). Nothing may read through this mapping afterwards."""
        if self.data != NULL:
            munmap(<void*>self.data, <size_t>self.capacity)
            self.data = NULL

    def read(self, Py_ssize_t position, Py_ssize_t size) -> bytes:
        """A copy of `size` bytes from `position` (no system call). The caller keeps within
        the bytes the file holds (touching a page past its end is SIGBUS); ValueError
        outside the mapping or once closed."""
        if self.data == NULL or position < 0 or size < 0 or position + size > self.capacity:
            raise ValueError("a read outside the mapping")
        return PyBytes_FromStringAndSize(<const char*>(self.data + position), size)

    @property
    def closed(self) -> bool:
        return self.data == NULL

    def __dealloc__(self):
        if self.data != NULL:
            munmap(<void*>self.data, <size_t>self.capacity)
