"""kdelay: a Kafka-style delayed-topic storage engine.

An append-only, segmented log of Kafka v2 record batches that carry a batch-level
deliverAfter; fetches return due records in (deliverAfter, offset) order.
"""

from .clients.consumer import Consumer
from .clients.producer import Producer, RecordMetadata
from .clients.queue.consumer import QueueConsumer, QueueRecord
from .clients.topic import Topic
from .config import LogConfig
from .errors import (
    CorruptLogError,
    CorruptQueueStateError,
    DelayedDeliveryDisabledError,
    DeliveryDelayExceededError,
    ForkedProcessError,
    GroupFencedError,
    InvalidConfigError,
    InvalidOffsetError,
    InvalidRecordError,
    InvalidTopicError,
    KdelayError,
    LogClosedError,
    LogLockedError,
    LogWriteError,
    OffsetOutOfRangeError,
    RemoteStorageError,
)
from .partition import Log
from .records import (
    AppendResult,
    CompactionResult,
    DeliveryKey,
    FetchedRecord,
    FetchResult,
    OffsetAndTimestamp,
    PackedBinary,
    Record,
    RemoteSyncResult,
)

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # the broker (and its protocol library) loads only when asked for
    if name == "Broker":
        from .broker import Broker
        return Broker
    raise AttributeError(f"module 'kdelay' has no attribute {name!r}")

__all__ = [
    "AppendResult", "Broker", "CompactionResult", "Consumer", "CorruptLogError", "CorruptQueueStateError",
    "DelayedDeliveryDisabledError", "DeliveryDelayExceededError", "DeliveryKey", "FetchResult",
    "FetchedRecord", "ForkedProcessError", "GroupFencedError", "InvalidConfigError",
    "InvalidOffsetError", "InvalidRecordError", "InvalidTopicError", "KdelayError", "Log",
    "LogClosedError", "LogConfig", "LogLockedError", "LogWriteError", "OffsetAndTimestamp",
    "OffsetOutOfRangeError",
    "PackedBinary", "Producer", "QueueConsumer", "QueueRecord", "Record", "RecordMetadata",
    "RemoteStorageError", "RemoteSyncResult", "Topic",
]
