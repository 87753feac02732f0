"""Type stub of client_batch.pyx (compiled): a Kafka client's batch, checked, stored as runs
of records that ask for nearby deliverAfters."""

from typing import Any

import numpy as np

ENTRY_COLUMNS: tuple[str, ...]

def crc32c_combine(crc1: int, crc2: int, len2: int) -> int: ...

class ClientBatch:
    @property
    def records(self) -> bytes: ...
    @property
    def n(self) -> int: ...
    @property
    def base_timestamp(self) -> int: ...
    @property
    def requests(self) -> int: ...
    @property
    def records_crc(self) -> int: ...
    def __init__(self, records: bytes, n: int, base_timestamp: int, *, start: int = 0,
                 end: int = -1, delays_allowed: bool = True, max_delay_ms: int = 0,
                 records_crc: int = -1) -> None: ...
    def build(self, base_offset: int, now: int, spread_ms: int, *,
              log_append_time: bool = False, producer_id: int = -1, producer_epoch: int = -1,
              base_sequence: int = -1, split: bool = False) -> tuple[Any, ...]: ...
