"""Type stub of record_future.pyx (compiled): the futures of sent records."""

import threading
from concurrent.futures import Future

from ..records import RecordMetadata
from .accumulator import Batch

__all__ = ["RecordFuture", "abandon", "fail", "new_future", "resolve"]

class RecordFuture(Future[RecordMetadata]):
    def cancel(self) -> bool: ...

def new_future(batch: Batch) -> RecordFuture: ...
def resolve(futures: list[RecordFuture], condition: threading.Condition, partition: int,
            base: int, due: int, stamps: list[int]) -> None: ...
def fail(futures: list[RecordFuture], condition: threading.Condition,
         exception: BaseException) -> None: ...
def abandon(futures: list[RecordFuture], exception: BaseException) -> None: ...
