# cython: language_level=3
"""A socket's SO_RCVLOWAT set on its descriptor (frame_stream.py: a large frame read
with one wake-up).

uvloop's transport hands out a stand-in socket whose every method call builds a Python
socket object around the descriptor first (a getsockname and several allocations, ~5 us):
more than the system call itself, twice per large request. This is the system call alone.

Cost: one setsockopt system call."""

from libc.errno cimport errno


cdef extern from "sys/socket.h" nogil:
    int setsockopt(int fd, int level, int name, const void *value, unsigned int size)
    int SOL_SOCKET
    int SO_RCVLOWAT


def set_receive_low_mark(int fd, int nbytes) -> None:
    """SO_RCVLOWAT of socket `fd` to `nbytes` (OSError as the system call fails)."""
    cdef int value = nbytes
    if setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &value, sizeof(value)) != 0:
        raise OSError(errno, "setsockopt(SO_RCVLOWAT) failed")
