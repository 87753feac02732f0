"""Type stub of segment_tail.pyx (compiled): a segment's end, where appends are written."""

from typing import Any, Generic, TypeVar, overload

import numpy as np

from ...index.deliver_after_index import DeliverAfterIndex
from ...index.offset_index import OffsetIndex
from ...index.time_index import TimeIndex

class SegmentTail:
    fd: int
    size: int
    next_offset: int
    max_timestamp: int
    max_timestamp_offset: int
    offset_index: OffsetIndex | None
    time_index: TimeIndex | None
    dly_index: DeliverAfterIndex | None
    retired: bool
    @property
    def log_path(self) -> str: ...
    @property
    def first_timestamp(self) -> int | None: ...
    def __init__(self, log_path: str, fd: int, size: int, next_offset: int,
                 offset_index: OffsetIndex | None, time_index: TimeIndex | None,
                 dly_index: DeliverAfterIndex | None) -> None: ...
    def append(self, batch: bytes, header_base: int, last_offset_delta: int,
               deliver_after: int, max_timestamp: int, index_interval_bytes: int,
               sync: bool = False) -> int: ...
    def append_many(self, data: bytes, entries: np.ndarray[Any, Any],
                    index_interval_bytes: int, sync: bool = False,
                    body: bytes | memoryview | None = None) -> int: ...
    def index_written(self, base_offset: int, position: int, size: int, max_timestamp: int,
                      index_interval_bytes: int) -> int: ...
    def rolls_before(self, incoming: int, max_timestamp: int, segment_bytes: int,
                     segment_ms: int) -> bool: ...

_T = TypeVar("_T")

class TailField(Generic[_T]):
    @property
    def name(self) -> str: ...
    @property
    def suffix(self) -> str | None: ...
    def __init__(self, name: str, suffix: str | None = None) -> None: ...
    @overload
    def __get__(self, obj: None, objtype: type | None) -> TailField[_T]: ...
    @overload
    def __get__(self, obj: object, objtype: type | None) -> _T: ...
    def __set__(self, obj: object, value: _T) -> None: ...
