"""Type stub of builder.pyx (compiled): a checked batch encoded at its append time."""

from typing import NamedTuple

from ...config import LogConfig
from .columns import BatchColumns
from .records_batch import RecordsBatch

class BuiltBatch(NamedTuple):
    data: bytes
    records: int
    deliver_after: int
    max_timestamp: int

def build_batch(columns: BatchColumns | RecordsBatch, base_offset: int, now: int,
                requested: int | None, config: LogConfig) -> BuiltBatch: ...
