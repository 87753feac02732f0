"""Argument checks shared by the facade and the clients: ints, offsets, keys and whole
batches. Every check raises a KdelayError (InvalidRecordError for a batch) before anything
is written. bool is refused wherever an int is wanted."""

from __future__ import annotations

from collections.abc import Sequence

from .errors import (
    DelayedDeliveryDisabledError,
    DeliveryDelayExceededError,
    InvalidRecordError,
    KdelayError,
)
from .records import DeliveryKey, Record

_NONE_TYPE = type(None)


def is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_non_negative_int(x: object) -> bool:
    return is_int(x) and x >= 0


def is_positive_int(x: object) -> bool:
    return is_int(x) and x > 0


def as_delivery_key(x: object) -> DeliveryKey | None:
    """A DeliveryKey, or a (deliver_after, offset) pair of ints made into one; None if `x`
    is neither."""
    if isinstance(x, DeliveryKey):
        return x
    if isinstance(x, tuple) and len(x) == 2 and all(map(is_int, x)):
        return DeliveryKey(*x)
    return None


def check_page_limits(max_records: object, max_bytes: object = 1,
                      max_wait_ms: object = 0) -> None:
    if not is_positive_int(max_records) or not is_positive_int(max_bytes):
        raise KdelayError("max_records and max_bytes must be positive ints")
    if not isinstance(max_wait_ms, int) or max_wait_ms < 0:
        raise KdelayError("max_wait_ms must be a non-negative int")


def _all_of_types(items, exact: set, allowed) -> bool:
    """True if every item is an instance of `allowed`; the common case (exact types) is
    decided by one C-level pass over the items."""
    return set(map(type, items)) <= exact or all(isinstance(x, allowed) for x in items)


def record_columns(records: Sequence[Record]) -> list[tuple]:
    """Validate a batch and transpose it into columns (value, key, headers, timestamp,
    deliver_after) with C-level loops: one type check per column, not per field. O(records)."""
    if not isinstance(records, (list, tuple)):
        raise InvalidRecordError(f"records must be a list or tuple of Record, "
                                 f"got {type(records).__name__}")
    if not records:
        raise InvalidRecordError("an empty batch cannot be appended")
    if not _all_of_types(records, {Record}, Record):
        raise InvalidRecordError("every item of records must be a kdelay.Record")
    cols = list(zip(*records, strict=False))  # all Records: five fields each
    values, keys, headers, timestamps, das = cols
    if not _all_of_types(values, {bytes}, bytes):
        raise InvalidRecordError("every record value must be bytes")
    if not _all_of_types(keys, {bytes, _NONE_TYPE}, (bytes, _NONE_TYPE)):
        raise InvalidRecordError("every record key must be bytes or None")
    if any(headers):
        for hs in headers:
            if not isinstance(hs, (list, tuple)):
                raise InvalidRecordError("record headers must be a list of (str, bytes|None)")
            for h in hs:
                if not (isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], str)
                        and (h[1] is None or isinstance(h[1], bytes))):
                    raise InvalidRecordError(f"bad header {h!r}: want (str, bytes | None)")
    for name, col in (("timestamp", timestamps), ("deliver_after", das)):
        if col.count(None) != len(col):
            for v in col:
                if v is not None and not is_non_negative_int(v):
                    raise InvalidRecordError(f"record {name} must be a non-negative int, "
                                             f"got {v!r}")
    return cols


def requested_deliver_after(record_das: tuple, deliver_after: object, *,
                            delayed_delivery_enable: bool, path: str) -> int | None:
    """The deliverAfter a batch asks for: `deliver_after`, else the largest of its
    records', else None (deliver at append time)."""
    if deliver_after is not None and not is_non_negative_int(deliver_after):
        raise InvalidRecordError(f"deliver_after must be a non-negative int, "
                                 f"got {deliver_after!r}")
    has_record_da = record_das.count(None) != len(record_das)
    if not delayed_delivery_enable and (deliver_after is not None or has_record_da):
        raise DelayedDeliveryDisabledError(
            f"log {path} has delayed_delivery_enable=False; deliver_after refused")
    if deliver_after is None and has_record_da:
        return max(d for d in record_das if d is not None)
    return deliver_after  # type: ignore[return-value]


def check_delay_limit(limit: int, requested: int | None, explicit: int | None,
                      record_das: tuple, stamps: list[int] | None, now: int) -> None:
    """Refuse a delay (deliverAfter minus the record's timestamp) over `limit` ms (0: no
    limit). With an explicit batch deliverAfter the earliest timestamp counts; else each
    record's own deliverAfter against its own timestamp (`stamps` None: all are `now`)."""
    if not limit or requested is None:
        return
    if stamps is None:
        stamps = [now] * len(record_das)
    if explicit is not None:
        delay = explicit - min(stamps)
    else:
        delay = max(d - t for d, t in zip(record_das, stamps, strict=True) if d is not None)
    if delay > limit:
        raise DeliveryDelayExceededError(
            f"requested delivery delay of {delay} ms exceeds max_delivery_delay_ms="
            f"{limit} ms")
