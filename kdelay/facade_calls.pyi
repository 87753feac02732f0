"""Type stub of facade_calls.pyx (compiled): Log.append and Log.fetch as one C call each."""

from collections.abc import Sequence
from typing import Any

from .fetch.append_notices import AppendNotices
from .fetch.quiet_gate import QuietGate
from .log.local.log_clock import LogClock
from .log.local.writer import Writer
from .records import AppendResult, DeliveryKey, FetchResult, Record

class CallParts:
    lock: Any
    closed: bool
    def __init__(self, lock: Any, writer: Writer, notices: AppendNotices, gate: QuietGate,
                 clock: LogClock, delays_allowed: bool) -> None: ...
    def use_lock(self, lock: Any) -> None: ...

class PartsField:
    name: str
    def __init__(self, name: str) -> None: ...
    def __get__(self, obj: object, objtype: type | None = None) -> Any: ...
    def __set__(self, obj: object, value: Any) -> None: ...

def append(log: object, records: Record | Sequence[Record], *, deliver_after: int | None = None,
           delay_ms: int | None = None) -> AppendResult: ...
def write_batch(log: object, columns: Any, requested: int | None) -> AppendResult: ...
def fetch(log: object, after: DeliveryKey | int | None = None, *, max_records: int = 500,
          max_bytes: int = 1 << 20, max_wait_ms: int = 0) -> FetchResult: ...
