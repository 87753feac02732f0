"""Type stub of producer_core.pyx (compiled): the Producer's `send` and the records it
holds (producer.py's Producer derives from ProducerCore)."""

import threading
from concurrent.futures import Future

from ..forks import Ownership
from ..partition import Log
from ..records import Header, RecordMetadata
from .accumulator import Batch, Limits
from .topic import Topic

__all__ = ["ProducerCore"]

class ProducerCore:
    _sender: threading.Thread | None
    _owner: Ownership | None
    def __init__(self, logs: list[Log], limits: list[Limits], topic: Topic | None,
                 buffer_records: int) -> None: ...
    def send(self, value: bytes | None, key: bytes | None = None, *,
             headers: tuple[Header, ...] | list[Header] = (), timestamp: int | None = None,
             deliver_after: int | None = None, delay_ms: int | None = None,
             partition: int | None = None) -> Future[RecordMetadata]: ...
    def _flush(self) -> None: ...
    def _close(self) -> None: ...
    def _sender_died(self, held: list[Batch], cause: BaseException) -> None: ...
    def _orphan(self, held: list[Batch]) -> None: ...
    def _next_batches(self, linger_s: float) -> list[Batch]: ...
    def _finished_batches(self, batches: list[Batch]) -> None: ...
    def _log_of(self, partition: int) -> Log: ...
