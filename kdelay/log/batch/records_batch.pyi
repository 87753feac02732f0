"""Type stub of records_batch.pyx (compiled): a batch of Records checked and measured."""

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...records import Record

class RecordsBatch:
    @property
    def n(self) -> int: ...
    @property
    def records(self) -> Sequence[Record]: ...
    @property
    def max_timestamp(self) -> int: ...
    @staticmethod
    def of(records: object, deliver_after: object,
           delays_allowed: bool) -> RecordsBatch | None: ...
    @property
    def requested(self) -> int | None: ...
    def earliest(self, now: int) -> int: ...
    def encode(self, now: int, base_offset: int, deliver_after: int,
               layout: np.ndarray[Any, Any], template: bytes) -> bytes | None: ...
