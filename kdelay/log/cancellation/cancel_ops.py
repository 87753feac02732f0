"""Cancel and reschedule on a live log (the Log facade holds the lock and calls these):
which of the offsets asked for may be cancelled now, the copy a reschedule appends and the
journalled move around it, compaction's view of what is cancelled, and the check crash
recovery uses to tell whether a copy made it to the log.

Work is per batch: offsets are sorted and each segment's batch headers are walked once
from the first one asked for (O(batches spanned + offsets)).
"""

from __future__ import annotations

import struct
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterable
from typing import NamedTuple

from ...config import LogConfig
from ...errors import (
    CorruptLogError,
    DeliveryDelayExceededError,
    InvalidRecordError,
    KdelayError,
    OffsetOutOfRangeError,
)
from ...index.entry import Entry
from ..batch import codec
from ..segments.segment_set import SegmentSet
from .cancel_store import CancelStore


def cancel(segments: SegmentSet, store: CancelStore, offsets: Iterable[int], now: int
           ) -> int:
    """Journal the cancellation of every offset that may be cancelled now (see
    pending_targets); returns how many. Not fsync'd: the caller applies its flush policy."""
    targets = pending_targets(segments, store, offsets, now)
    if targets:
        store.cancel(targets)
    return sum(map(len, targets.values()))


def pending_targets(segments: SegmentSet, store: CancelStore, offsets: Iterable[int],
                    now: int) -> dict[int, list[int]]:
    """The offsets (each once) that are in the log, not yet due at `now` and not already
    cancelled, grouped by segment base offset."""
    out: dict[int, list[int]] = {}
    wanted = sorted(set(offsets))
    i, n = 0, len(wanted)
    end = segments.active.next_offset
    start = segments.oldest.base_offset
    while i < n and wanted[i] < start:
        i += 1
    while i < n and wanted[i] < end:
        seg = segments.segment_for(wanted[i])  # (never None: at or past the oldest)
        found = seg.find_batch(wanted[i]) if seg is not None else None
        if seg is None or found is None:  # a gap (not in any segment): skip it
            i += 1
            continue
        sc = store.get(seg.base_offset)
        for _pos, h in seg.batch_headers(found[0]):
            last = h.last_offset
            j = bisect_right(wanted, last, i)
            if j > i and h.deliver_after > now:  # (a due batch's records are refused)
                mine = wanted[i:j]
                if sc is not None and sc.count_in_range(mine[0], mine[-1]):
                    gone = set(sc.in_range(mine[0], mine[-1]))
                    mine = [o for o in mine if o not in gone]
                if mine:
                    out.setdefault(seg.base_offset, []).extend(mine)
            i = j
            if i >= n or wanted[i] >= seg.next_offset:
                break
    return out


class Copy(NamedTuple):
    source_base: int  # segment of the original
    batch: bytes
    base_offset: int
    deliver_after: int
    max_timestamp: int
    crc: int


def reschedule_copy(segments: SegmentSet, store: CancelStore, offset: int,
                    deliver_after: int, now: int, *, max_delay_ms: int) -> Copy:
    """Check that `offset` may be moved and encode its copy (one record: same key, value,
    headers and timestamp) due at `deliver_after` (never before `now`), to be appended at
    the log end. Raises KdelayError (nothing is written here)."""
    seg = segments.segment_for(offset)
    found = seg.find_batch(offset) if seg is not None else None
    if seg is None or found is None or offset < segments.oldest.base_offset:
        raise OffsetOutOfRangeError(
            f"offset {offset} is not in the log [{segments.oldest.base_offset}, "
            f"{segments.active.next_offset})")
    pos, h = found
    if h.deliver_after <= now:
        raise KdelayError(f"record {offset} is already due (deliverAfter {h.deliver_after} "
                          f"<= now {now}): it may have been delivered")
    if store.is_cancelled(seg.base_offset, offset):
        raise KdelayError(f"record {offset} is cancelled")
    h, data = seg.read_verified(Entry(h.deliver_after, h.base_offset, pos,
                                      h.last_offset_delta, h.size))
    ts, keys, values, headers = codec.decode_records(data, h, path=seg.log_path,
                                                     file_pos=pos)
    k = offset - h.base_offset
    timestamp = int(ts[k])
    if max_delay_ms and deliver_after - timestamp > max_delay_ms:
        raise DeliveryDelayExceededError(
            f"requested delivery delay of {deliver_after - timestamp} ms exceeds "
            f"max_delivery_delay_ms={max_delay_ms} ms")
    da = max(deliver_after, now)
    base = segments.active.next_offset
    batch = codec.encode_batch(base_offset=base, base_timestamp=timestamp, deliver_after=da,
                               keys=[keys[k]], values=[values[k]], timestamp_deltas=None,
                               headers=[headers[k]])
    crc = struct.unpack_from(">I", batch, codec.CRC_OFFSET)[0]
    return Copy(seg.base_offset, bytes(batch), base, da, timestamp, crc)


def reschedule(segments: SegmentSet, store: CancelStore, offset: int, deliver_after: int,
               now: int, config: LogConfig, make_room: Callable[[int, int], None]) -> Copy:
    """Move one pending record: append its copy (reschedule_copy) at the log end between a
    journalled begin and end of the move, so that a crash leaves either the original or
    the copy live (journal.py). `make_room(size, timestamp)` is called first (the Log
    marks itself changed and rolls if due). Not fsync'd: the caller applies its policy."""
    copy = reschedule_copy(segments, store, offset, deliver_after, now,
                           max_delay_ms=config.max_delivery_delay_ms)
    if len(copy.batch) > config.max_batch_bytes:
        raise InvalidRecordError(f"the copy ({len(copy.batch)} bytes) exceeds "
                                 f"max_batch_bytes ({config.max_batch_bytes})")
    make_room(len(copy.batch), now)
    store.begin_move(copy.source_base, offset, copy.base_offset, copy.crc)
    try:
        segments.active_tail.append(copy.batch, copy.base_offset, 0, copy.deliver_after,
                                    copy.max_timestamp, config.index_interval_bytes)
    except BaseException:
        store.abort_move(copy.source_base, offset)
        raise
    store.end_move(copy.source_base, offset)
    return copy


def settle_moves(segments: SegmentSet, cancels: CancelStore) -> None:
    """Before a record may be removed for good (compaction, retention): fsync the active
    segment if reschedules wait for it, and confirm them (so does an export of
    cancellations to an object store, which makes them outlive the local disk). A rescheduled original is
    removed by its cancellation or by age once due; either way removing it makes the move
    durable, so its copy (always in the active segment: a roll fsyncs and confirms) must
    be durable first. Call under the log's lock; one fsync, only when a move waits."""
    if cancels.moves_unconfirmed:
        segments.active.flush()
        cancels.log_synced()


def settled_hook(lock: threading.RLock, store: CancelStore) -> Callable[[int, int], list[int]]:
    """Compaction's `cancelled` hook: the cancelled offsets in [first, end) it may remove
    (not the original of a reschedule whose copy is not yet durable: see cancel_store).
    Holds no reference to the Log, so a dropped Log is still freed at once."""

    def settled(first: int, end: int) -> list[int]:
        with lock:
            return store.settled_between(first, end)

    return settled


def copy_checker(segments: SegmentSet):
    """copy_check for CancelStore.open: is the batch at `copy_offset` the copy whose CRC a
    MOVE recorded? None when it cannot tell (the copy's segment is gone or damaged)."""

    def check(copy_offset: int, copy_crc: int) -> bool | None:
        if copy_offset >= segments.active.next_offset:
            return False
        if copy_offset < segments.oldest.base_offset:
            return None
        seg = segments.segment_for(copy_offset)
        if seg is None:  # (not after the oldest check above)
            return None
        try:
            found = seg.find_batch(copy_offset)
        except CorruptLogError:
            return None
        if found is None:
            return False
        h = found[1]
        return h.base_offset == copy_offset and h.crc == copy_crc

    return check
