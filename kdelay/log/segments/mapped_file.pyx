# cython: language_level=3
"""A segment's .log mapped read-only into memory, for the compiled page fill
(kdelay/fetch/page_fill.pyx), which reads batches through it with no system call or copy
per batch.

The mapping may reach past the file's end: the active segment grows into it with no new
mapping (appends are written with pwrite, and a shared mapping shows them at once).
Touching a page past the end of the file is a fault (SIGBUS), so a reader reads only the
bytes the segment knows its file holds (LogSegment.size: the log's lock excludes any
other writer, and the file never shrinks below what its indexes point at).

`view` hands out bytes of the mapping without a copy (the broker writes a fetch's batches
to the socket straight from it). A view keeps the mapping alive: `close` while views are
out only marks it closed (no new read or view), and the memory is unmapped when the last
view is released, so retention or a remap never pulls pages from under a response the
socket has not sent yet. (Deleting or renaming the file leaves the mapped pages as they
were; nothing truncates a segment below what its indexes point at.)"""

from cpython.buffer cimport PyBUF_WRITABLE
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.errno cimport errno
from posix.mman cimport MAP_FAILED, MAP_SHARED, PROT_READ, mmap, munmap


cdef class MappedFile:
    """`capacity` bytes of the file open as `fd`, from its start (the descriptor may be
    closed afterwards: the mapping stays until `close`)."""

    def __cinit__(self, int fd, Py_ssize_t capacity):
        self.data = NULL
        self._unmap_later = NULL
        self._exports = 0
        if capacity <= 0:
            raise ValueError("a mapping needs a positive capacity")
        cdef void* at = mmap(NULL, <size_t>capacity, PROT_READ, MAP_SHARED, fd, 0)
        if at == MAP_FAILED:
            raise OSError(errno, "mmap of a segment failed")
        self.data = <const uint8_t*>at
        self.capacity = capacity

    def close(self) -> None:
        """Unmap (idempotent): now, or when the last view still out is released. Nothing
        reads through this object afterwards (ValueError)."""
        if self.data != NULL:
            if self._exports:
                self._unmap_later = self.data
            else:
                munmap(<void*>self.data, <size_t>self.capacity)
            self.data = NULL

    def view(self, Py_ssize_t position, Py_ssize_t size) -> memoryview:
        """`size` bytes from `position`, read-only and not copied; the mapping stays until
        the view (and every slice of it) is released. The caller keeps within the bytes
        the file holds, as for `read`; ValueError outside the mapping or once closed."""
        if self.data == NULL or position < 0 or size < 0 or position + size > self.capacity:
            raise ValueError("a view outside the mapping")
        return memoryview(self)[position:position + size]

    def __getbuffer__(self, Py_buffer* buffer, int flags):
        if self.data == NULL:
            raise ValueError("the mapping is closed")
        if flags & PyBUF_WRITABLE:
            raise BufferError("the mapping is read-only")
        buffer.buf = <void*>self.data
        buffer.obj = self
        buffer.len = self.capacity
        buffer.readonly = 1
        buffer.itemsize = 1
        buffer.format = b"B"
        buffer.ndim = 1
        buffer.shape = &self.capacity
        buffer.strides = &buffer.itemsize
        buffer.suboffsets = NULL
        buffer.internal = NULL
        self._exports += 1

    def __releasebuffer__(self, Py_buffer* buffer):
        self._exports -= 1
        if self._exports == 0 and self._unmap_later != NULL:
            munmap(<void*>self._unmap_later, <size_t>self.capacity)
            self._unmap_later = NULL

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

    def __dealloc__(self):  # (no view is out: each holds a reference)
        if self.data != NULL:
            munmap(<void*>self.data, <size_t>self.capacity)
        elif self._unmap_later != NULL:
            munmap(<void*>self._unmap_later, <size_t>self.capacity)
