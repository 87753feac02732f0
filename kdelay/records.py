"""Public value types: what goes into a log and what comes out of it."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import numpy as np

Header = tuple[str, bytes | None]


class SharedHeaders(list):
    """The headers of a fetched record: one list shared by every record that carries the
    same headers (an empty one for records with none; the retry header of every record of a
    batch). A fresh list per record would cost an allocation and GC work per record on the
    fetch path, so it refuses changes: copy it first, `list(record.headers)`."""

    __slots__ = ()

    def _read_only(self, *args, **kwargs):
        raise TypeError("a fetched record's headers list is shared and read-only; "
                        "copy it with list(record.headers)")

    append = extend = insert = remove = pop = clear = sort = reverse = _read_only
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _read_only


NO_HEADERS: list[Header] = SharedHeaders()


class Record(NamedTuple):
    """One record to append. `timestamp` defaults to the append time; `deliver_after`
    (ms) is the record's own wish, folded into the batch's deliverAfter."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[Header, ...] | list[Header] = ()
    timestamp: int | None = None
    deliver_after: int | None = None


class PackedBinary(NamedTuple):
    """A column of byte strings packed as Arrow packs a binary column, for
    `Log.append_columns`: `lengths` (one integer per row, -1 for null) and `data`, the
    non-null values back to back (bytes, or any buffer of bytes). A producer that holds its
    rows this way (the Spark writer) appends them without a Python object per row."""

    lengths: np.ndarray  # a 1-D numpy integer array
    data: bytes | bytearray | memoryview | np.ndarray  # a uint8 array once checked


class DeliveryKey(NamedTuple):
    """A position in delivery order: records are served in `(deliver_after, offset)` order."""

    deliver_after: int
    offset: int


class RecordMetadata(NamedTuple):
    """Where a record a Producer sent landed: its partition (0 for a Log), offset, its
    batch's deliverAfter, and its timestamp as log.read shows it."""

    partition: int
    offset: int
    deliver_after: int
    timestamp: int


class AppendResult(NamedTuple):
    base_offset: int
    last_offset: int
    deliver_after: int
    append_time: int


class FetchedRecord(NamedTuple):
    """A record read back. `partition` is set when it came through a Topic."""

    offset: int
    deliver_after: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]
    partition: int | None = None

    @property
    def delivery_key(self) -> DeliveryKey:
        return DeliveryKey(self.deliver_after, self.offset)


class RemoteSyncResult(NamedTuple):
    """What `Log.sync_remote()` did, in segments: copied to the object store (and verified),
    whose local files were deleted (local retention), and whose remote copies were deleted
    (retention of the whole log)."""

    copied: int = 0
    local_deleted: int = 0
    remote_deleted: int = 0


class CompactionResult(NamedTuple):
    """What `Log.compact()` did: segments rewritten (a merge of n segments counts n), the
    bytes of all the log's .log files before and after, the .log bytes the rewrite read
    (the rewritten segments) and wrote (their replacements), the longest time the log's
    lock was held for a swap (appends wait that long at most), and the .log bytes of the
    active segment, which compaction never rewrites (nor retention deletes): records there
    are reclaimed only once it is rolled."""

    segments_rewritten: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    longest_swap_ms: float = 0.0
    active_segment_bytes: int = 0


class OffsetAndTimestamp(NamedTuple):
    """What `Log.offset_for_time` finds: a record's offset and its timestamp (as Kafka's
    offsetsForTimes answers)."""

    offset: int
    timestamp: int


class FetchResult(NamedTuple):
    records: list[FetchedRecord]
    next: DeliveryKey | None
