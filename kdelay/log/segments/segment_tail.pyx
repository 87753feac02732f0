# cython: language_level=3
"""The growing end of a segment, compiled: what every append does to it (the write of its
batch, and the offset, time and deliverAfter index upkeep), and whether a batch must go to
a new segment instead. A LogSegment (segment.py) owns one as its `tail`; the append path
(writer.pyx) calls it in C, with no Python call per batch.

The write is fsio.write's: its first `pwrite` made here, in C, while `fsio.write` is
fsio's own function; a short or failed one is finished (or raised) by fsio.write, and
while anything has replaced fsio.write (a fault injector, kdelay.testing's stalls) every
write goes through it, so the injector sees every file operation as before."""

import contextlib

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem
from cpython.object cimport PyObject
from libc.stdint cimport int64_t
from posix.types cimport off_t
from posix.uio cimport iovec, pwritev
from posix.unistd cimport pwrite

from kdelay import fsio
from kdelay.log.batch import codec

from kdelay.index.entry_fields cimport (
    E_BASE_OFFSET,
    E_DELIVER_AFTER,
    E_LAST_OFFSET_DELTA,
    E_POSITION,
    E_SIZE,
    ENTRY_FIELDS,
)
from kdelay.index.recent_columns cimport RecentColumns

# append_many's rows: an index entry's fields (client_batch.ENTRY_COLUMNS, in Entry's
# order), then the batch's largest timestamp
cdef enum:
    _MAX_TIMESTAMP = ENTRY_FIELDS

# fsio's own write (kdelay's import loads this module before anything can replace it),
# and fsio's namespace, whose "write" is compared with it by one dict lookup per write (a
# module attribute read costs twice that)
cdef object _FSIO_WRITE = fsio.write
cdef dict _FSIO_NAMES = vars(fsio)


cdef inline bint _own_write() noexcept:
    """Is fsio.write fsio's own (nothing has replaced it)?"""
    return PyDict_GetItem(_FSIO_NAMES, "write") == <PyObject*>_FSIO_WRITE


cdef int _write(int fd, bytes data, int64_t position) except -1:
    """fsio.write(fd, data, position), its usual single `pwrite` without a Python call."""
    cdef const char* at = PyBytes_AS_STRING(data)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(data)
    cdef Py_ssize_t done
    if _own_write():
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
    if _own_write():
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
    """The end of one segment's .log: its descriptor, size, next offset, largest timestamp
    and the three indexes an append keeps. A LogSegment owns one (segment.py: `tail`) and
    reads its end from it; the active segment's grows by `append` and `append_many` (the
    writer calls them in C), and a segment built from a .log written elsewhere (recovery's
    scan, compaction's rewrite) is indexed batch by batch with `index_written`. It calls
    nothing of the segment that owns it."""

    def __init__(self, str log_path, int fd, int64_t size, int64_t next_offset,
                 offset_index, time_index, dly_index):
        self.log_path = log_path
        self.fd = fd
        self.size = size
        self.next_offset = next_offset
        self.max_timestamp = -1
        self.max_timestamp_offset = -1
        self.offset_index = offset_index
        self.time_index = time_index
        self.dly_index = dly_index
        self._first_timestamp = None
        self._bytes_since_index_entry = 0

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
        self._recent_columns().add(  # (DeliverAfterIndex.add)
            deliver_after, header_base, pos, last_offset_delta, size)
        self.next_offset = header_base + last_offset_delta + 1
        return pos

    cdef RecentColumns _recent_columns(self):
        """The deliverAfter index's recent columns, which `append` adds to: kept from one
        append to the next while the index is the same and has not replaced them
        (`RecentColumns.retired`), else read from it again."""
        cdef RecentColumns recent = self._recent
        if recent is None or recent.retired or self._recent_of is not self.dly_index:
            recent = <RecentColumns?>self.dly_index.recent_columns
            self._recent, self._recent_of = recent, self.dly_index
        return recent

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
        if n == 0 or entries.shape[1] <= _MAX_TIMESTAMP:
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
        for k in range(n):  # (an entry's fields by their E_* numbers, then its timestamp)
            self._index(entries[k, E_BASE_OFFSET], pos + entries[k, E_POSITION],
                        entries[k, E_SIZE], entries[k, _MAX_TIMESTAMP], index_interval_bytes)
            add(entries[k, E_DELIVER_AFTER], entries[k, E_BASE_OFFSET],
                pos + entries[k, E_POSITION], entries[k, E_LAST_OFFSET_DELTA],
                entries[k, E_SIZE])
        self.next_offset = entries[n - 1, E_BASE_OFFSET] + \
            entries[n - 1, E_LAST_OFFSET_DELTA] + 1
        return pos

    cpdef int index_written(self, int64_t base_offset, int64_t position, int64_t size,
                            int64_t max_timestamp, int64_t index_interval_bytes) except -1:
        """The offset and time index upkeep an append makes, for a batch already in the
        .log at `position` (written by recovery's scan or compaction's rewrite, which
        build the deliverAfter index from their entries at once); batches in offset
        order. Moves neither `size` nor `next_offset`. Cost: O(1)."""
        return self._index(base_offset, position, size, max_timestamp, index_interval_bytes)

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
        if first is None:  # (a C call: no attribute lookup per append)
            first = self._read_first_timestamp()
        return first is not None and max_timestamp - <int64_t>first >= segment_ms

    @property
    def first_timestamp(self):
        """The largest timestamp of the first batch (None: no batch), for segment_ms: kept
        by the first append, else read from the .log's first header once (a segment
        opened, not written, reads none of its .log until asked)."""
        if self._first_timestamp is None:
            return self._read_first_timestamp()
        return self._first_timestamp

    cdef object _read_first_timestamp(self):
        if self._first_timestamp is None and self.size:
            head = fsio.pread(self.fd, codec.HEADER_SIZE, 0)
            self._first_timestamp = codec.parse_header(
                head, path=self.log_path, file_pos=0, available=self.size).max_timestamp
        return self._first_timestamp


# the fields a TailField reads, by number (a switch in C, not a lookup by name)
_FIELDS = ("size", "next_offset", "max_timestamp", "max_timestamp_offset", "offset_index",
           "time_index", "dly_index")


cdef class TailField:
    """A segment's attribute that is its tail's field `name` (LogSegment.size is its
    `tail.size`), read in C: no Python frame per read, as a Python property would cost
    (the read paths ask a segment its size and end on every fetch). An index field with
    `suffix` is loaded on first use when None (a clean open deferred it), by the segment's
    `_deferred` loader (log/local/deferred_indexes.py)."""

    cdef readonly str name
    cdef readonly object suffix
    cdef int _field

    def __init__(self, str name, suffix=None):
        self.name = name
        self.suffix = suffix
        self._field = _FIELDS.index(name)

    def __get__(self, obj, objtype):
        if obj is None:
            return self
        cdef SegmentTail tail = <SegmentTail?>obj.tail
        cdef int field = self._field
        if field == 0:
            return tail.size
        if field == 1:
            return tail.next_offset
        if field == 2:
            return tail.max_timestamp
        if field == 3:
            return tail.max_timestamp_offset
        index = tail.offset_index if field == 4 else tail.time_index if field == 5 \
            else tail.dly_index
        if index is None and self.suffix is not None:
            return obj._deferred.load(obj, self.suffix)
        return index

    def __set__(self, obj, value):
        setattr(obj.tail, self.name, value)
