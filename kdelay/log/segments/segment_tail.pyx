# cython: language_level=3
"""The growing end of a segment, compiled: what every append does to it (the write of its
batch, and the offset, time and deliverAfter index upkeep), and whether a batch must go to
a new segment instead. LogSegment (segment.py) is built on it; the append path
(writer.pyx) calls it in C, with no Python call per batch.

The write is fsio.write's: its first `pwrite` made here, in C, while `fsio.write` is
fsio's own function; a short or failed one is finished (or raised) by fsio.write, and
while anything has replaced fsio.write (a fault injector, kdelay.testing's stalls) every
write goes through it, so the injector sees every file operation as before."""

import contextlib

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int64_t
from posix.types cimport off_t
from posix.uio cimport iovec, pwritev
from posix.unistd cimport pwrite

from kdelay import fsio

from kdelay.index.recent_columns cimport RecentColumns

# fsio's own write (kdelay's import loads this module before anything can replace it)
cdef object _FSIO_WRITE = fsio.write


cdef int _write(int fd, bytes data, int64_t position) except -1:
    """fsio.write(fd, data, position), its usual single `pwrite` without a Python call."""
    cdef const char* at = PyBytes_AS_STRING(data)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(data)
    cdef Py_ssize_t done
    if fsio.write is _FSIO_WRITE:
        with nogil:
            done = pwrite(fd, at, size, <off_t>position)
        if done == size:
            return 0
        if done > 0:  # a short write: fsio.write writes the rest
            fsio.write(fd, memoryview(data)[done:], position + done)
            return 0
    fsio.write(fd, data, position)  # (after a failed pwrite: again, raising its OSError)
    return 0


cdef int _write_two(int fd, bytes head, const unsigned char[::1] body,
                    int64_t position) except -1:
    """_write of `head` then `body` as one write (one pwritev: the two are not joined first).
    While fsio.write is replaced (see the module), and after a short or failed pwritev,
    they are joined and written by fsio.write, one file operation as with one buffer."""
    cdef iovec parts[2]
    cdef Py_ssize_t head_size = PyBytes_GET_SIZE(head), body_size = body.shape[0]
    cdef Py_ssize_t done = 0
    if fsio.write is _FSIO_WRITE:
        parts[0].iov_base = <void*>PyBytes_AS_STRING(head)
        parts[0].iov_len = <size_t>head_size
        parts[1].iov_base = <void*>&body[0] if body_size else NULL
        parts[1].iov_len = <size_t>body_size
        with nogil:
            done = pwritev(fd, parts, 2, <off_t>position)
        if done == head_size + body_size:
            return 0
        if done < 0:
            done = 0  # (fsio.write tries again, raising its OSError)
    fsio.write(fd, (head + bytes(body))[done:], position + done)
    return 0


cdef class SegmentTail:
    """A segment's end: its descriptor, size, next offset, latest timestamps and indexes."""

    cpdef int64_t append(self, bytes batch, int64_t header_base, int64_t last_offset_delta,
                         int64_t deliver_after, int64_t max_timestamp,
                         int64_t index_interval_bytes, bint sync=False) except -1:
        """Write one encoded batch at the end (and fsync it with `sync`); returns its
        position. A failed write or fsync leaves the segment as it was: the batch is cut
        off again and never indexed, so a refused append leaves nothing a read sees."""
        cdef int64_t pos = self.size, size = PyBytes_GET_SIZE(batch)
        try:
            _write(self.fd, batch, pos)
            if sync:
                fsio.fsync(self.fd)
        except OSError:
            # a short write (disk full) left part of the batch on disk, or the whole batch
            # is there but not durable: cut it off, so that the file holds only acknowledged
            # batches and the next append lands at `pos`
            with contextlib.suppress(OSError):  # best effort: recovery cuts a torn tail too
                fsio.truncate(self.fd, pos)
            raise
        self.size = pos + size
        self._index(header_base, pos, size, max_timestamp, index_interval_bytes)
        (<RecentColumns?>self.dly_index.recent_columns).add(
            deliver_after, header_base, pos, last_offset_delta, size)  # (DeliverAfterIndex.add)
        self.next_offset = header_base + last_offset_delta + 1
        return pos

    cpdef int64_t append_many(self, bytes data, const int64_t[:, ::1] entries,
                              int64_t index_interval_bytes, bint sync=False,
                              object body=None) except -1:
        """Write several encoded batches, back to back in `data`, with one write (and one
        fsync with `sync`); `entries` has a row per batch (client_batch.ENTRY_COLUMNS:
        deliverAfter, base offset, position within `data`, last offset delta, size, max
        timestamp), in offset order. `body` (a bytes-like, or None): bytes that follow
        `data` in the same write, the batches' bytes being `data` then `body` (a stored
        batch's records written from where they lie: ClientBatch.build's split). Returns
        the position of the first. A failed write leaves the segment as it was, as
        `append`. Cost: one write, then the index upkeep of `append` per batch."""
        cdef int64_t pos = self.size, k, n = entries.shape[0]
        if n == 0 or entries.shape[1] < 6:
            raise ValueError("append_many needs one entry of 6 columns per batch")
        try:
            if body is None:
                _write(self.fd, data, pos)
            else:
                _write_two(self.fd, data, body, pos)
            if sync:
                fsio.fsync(self.fd)
        except OSError:
            with contextlib.suppress(OSError):  # as append: cut off what did not make it
                fsio.truncate(self.fd, pos)
            raise
        self.size = pos + PyBytes_GET_SIZE(data) + (0 if body is None else len(body))
        add = self.dly_index.recent_columns.add
        for k in range(n):
            self._index(entries[k, 1], pos + entries[k, 2], entries[k, 4], entries[k, 5],
                        index_interval_bytes)
            add(entries[k, 0], entries[k, 1], pos + entries[k, 2], entries[k, 3],
                entries[k, 4])
        self.next_offset = entries[n - 1, 1] + entries[n - 1, 3] + 1
        return pos

    def _index_batch(self, entry: tuple, int64_t max_timestamp, int64_t interval) -> None:
        """Offset and time index upkeep for one batch, given as its index entry (the dly
        index is handled by callers)."""
        _, base, pos, _, size = entry
        self._index(base, pos, size, max_timestamp, interval)

    cdef int _index(self, int64_t base, int64_t pos, int64_t size, int64_t max_timestamp,
                    int64_t interval) except -1:
        if self._first_timestamp is None:
            self._first_timestamp = max_timestamp
        if self._bytes_since_index_entry >= interval:
            self.offset_index.add(base, pos)
            if max_timestamp > self.max_timestamp:
                self.time_index.add(max_timestamp, base)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += size
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.max_timestamp_offset = base
        return 0

    cpdef bint rolls_before(self, int64_t incoming, int64_t max_timestamp,
                            int64_t segment_bytes, int64_t segment_ms) except -1:
        """True if a batch of `incoming` bytes whose largest record timestamp is
        `max_timestamp` must go to a new segment: this one would pass `segment_bytes`, or
        the batch's records are `segment_ms` later than the first batch's. Record time is
        compared with record time, as Kafka does: a replay or backfill of old records rolls
        by how much time its records span, not once per batch because they are old (records
        the log stamps carry the log clock, so live appends roll by the clock as before).
        An empty segment never rolls."""
        if self.size == 0:
            return False
        if self.size + incoming > segment_bytes:
            return True
        first = self._first_timestamp
        if first is None:
            first = (<object>self).first_timestamp  # (LogSegment's: read from the .log)
        return first is not None and max_timestamp - <int64_t>first >= segment_ms
