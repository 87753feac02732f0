"""Dead-letter copies: what a record sent to a dead-letter Log or Topic looks like there.

The copy keeps the record's key, value, headers and timestamp, and says where it came from
and why in headers (docs/api.md): `kdelay.dlq.partition`, `kdelay.dlq.offset`,
`kdelay.dlq.delivery_count` (ASCII decimal), `kdelay.dlq.reason` (`rejected` or
`max_delivery_count`) and, from a Topic, `kdelay.dlq.topic`. A record dead-lettered again
(read back from a dead-letter topic and failed once more) carries only its latest origin:
the old `kdelay.dlq.*` headers are replaced, not piled up.
"""

from __future__ import annotations

from ..groups.queue.group import MAX_DELIVERY_COUNT, REJECTED, QueueRecord
from ..partition import Log
from ..records import FetchedRecord, Header, Record
from .topic import Topic

__all__ = ["DLQ_HEADER_PREFIX", "MAX_DELIVERY_COUNT", "REJECTED", "dead_letter_copy",
           "send_to_dead_letter"]

DLQ_HEADER_PREFIX = "kdelay.dlq."


def dead_letter_copy(record: FetchedRecord | QueueRecord, *, delivery_count: int, reason: str,
                     topic: str | None) -> Record:
    """The copy of `record` (a FetchedRecord or QueueRecord: its `partition` None means a
    Log's, shown as 0) to append to a dead letter."""
    origin: list[Header] = [
        (DLQ_HEADER_PREFIX + "partition", b"%d" % (record.partition or 0)),
        (DLQ_HEADER_PREFIX + "offset", b"%d" % record.offset),
        (DLQ_HEADER_PREFIX + "delivery_count", b"%d" % delivery_count),
        (DLQ_HEADER_PREFIX + "reason", reason.encode("ascii")),
    ]
    if topic is not None:
        origin.append((DLQ_HEADER_PREFIX + "topic", topic.encode("ascii")))  # Kafka's names
    kept = [h for h in record.headers if not h[0].startswith(DLQ_HEADER_PREFIX)]
    return Record(record.value, record.key, kept + origin, record.timestamp)


def send_to_dead_letter(dead_letter: Log | Topic, copies: list[Record]) -> None:
    """Append the copies (to a Topic: each by its key, as `send` routes it) and flush the
    partitions written, so that they are on disk before the caller notes them as done."""
    if isinstance(dead_letter, Topic):
        touched = {dead_letter.send(c)[0] for c in copies}
        for p in touched:
            dead_letter.partition(p).flush()
    else:
        dead_letter.append(copies)
        dead_letter.flush()
