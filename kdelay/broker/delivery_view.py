"""The due-order view of one delayed partition: delivery offsets.

Kafka consumers need offsets that only grow, so a delayed partition is served as the
sequence of its records in due order: the n-th record to come due, in (deliverAfter,
offset) order, has delivery offset n - 1. The view numbers records as they come due and
keeps the numbering in its file (view_file.py), so that a number, once given, never
changes: not across restarts or kill -9 (the file is written before any of its offsets is
served), nor when retention, compaction or tiered storage move or remove records (the file
names records by their keys, which those keep; a removed record leaves a gap).

Why numbering at due time is stable: the log clock never runs backwards and an append is
never due before it, so every record due at time t has a key below every record that comes
due later; and a due record can no longer be cancelled. So the records due at any time
form a prefix of due order that only grows, and numbering it again from any sound prefix
of the file gives the same numbers (the torn tail a crash leaves is numbered again,
identically). Cancelled records are skipped: they never come due.

Cost: `extend` per newly due batch (fetch/due_batches.py, no record decoded) plus one file
append per call; `read` one binary search, then per batch served one CRC pass where it
lies in the segment's mapping and a new header (record_parts.py: the records not copied); memory 32 bytes per entry (a run of consecutive
offsets of one stored batch: one per batch unless records in it were cancelled).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from .. import fsio
from ..errors import LogClosedError, OffsetOutOfRangeError
from ..records import DeliveryKey
from .batch_rewrite import as_v2_only
from .record_parts import RecordParts
from .view_file import (
    ENTRY_DTYPE,
    ENTRY_SIZE,
    HEADER_SIZE,
    PENDING_SUFFIX,
    VIEW_FILE,
    Reading,
    ViewDamagedError,
    ViewFile,
    read_view,
)

if TYPE_CHECKING:
    from ..partition import Log

_EXTEND_BATCHES = 4096      # due batches numbered per engine call
_MAX = (1 << 63) - 1
_REWRITE_DEAD = 1 << 16     # entries dead at the head before the file is rewritten without them
_UNKNOWN = object()         # (DeliveryView._quiet: not looked up yet)
F = TypeVar("F", bound=Callable)


def _locked(method: F) -> F:
    """Run under the view's lock: the event loop serves from the view while a maintenance
    thread may extend it before retention (ServedPartitions.before_retention)."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return run  # type: ignore[return-value]


class DeliveryView:
    """One delayed partition's delivery offsets over its open Log (the broker holds it)."""

    def __init__(self, log: Log, file: ViewFile, first_delivery: int, rows: np.ndarray,
                 sync: bool):
        self.log = log
        self._file = file
        self._first = first_delivery
        self._rows = np.empty(max(1024, 2 * len(rows)), ENTRY_DTYPE)
        self._rows[:len(rows)] = rows
        self._n = len(rows)
        self._head = 0   # entries before it hold only records retention removed
        self._sync = sync
        self._lock = threading.RLock()
        self._durable_end = -1  # the log was fsynced below it by `sync` (-1: not yet)
        self._failed = False  # a write of the file (or the log's fsync) raised: see close
        # (log end, clock, earliest pending deliverAfter after it) of the last extend that
        # numbered all that was due: what `_came_due` needs (-1: none yet)
        self._quiet: tuple = (-1, 0, _UNKNOWN)

    @classmethod
    def open(cls, log: Log) -> DeliveryView:
        """The view of `log` from its file (created empty if missing: records are then
        numbered from 0 as they are found due). Raises ViewDamagedError for damage that
        is not a torn tail. A pending file (view_file.py: never synced) is used when it
        reads soundly, else discarded: numbering again from 0 gives what it held."""
        path = os.path.join(log.path, VIEW_FILE)
        sync = log.config.flush_messages is not None or log.config.flush_ms is not None
        durable = os.path.exists(path)
        if not durable and not os.path.exists(path + PENDING_SUFFIX):
            return cls(log, ViewFile.create(path), 0, np.empty(0, ENTRY_DTYPE), sync)
        reading = read_view(path if durable else path + PENDING_SUFFIX)
        if reading.damage is not None and _renumbered_alike(log, reading):
            reading = Reading(reading.first_delivery, reading.rows,
                              HEADER_SIZE + len(reading.rows) * ENTRY_SIZE, None)
        reading = _within(reading, log.log_end_offset)
        if reading.damage is not None or (not durable and reading.first_delivery):
            if durable:
                raise ViewDamagedError(reading.damage)
            # a pending file a crash garbled before its first fsync: nothing in it was
            # durable; numbering again gives what it held (view_file.py)
            fsio.unlink(path + PENDING_SUFFIX)
            return cls(log, ViewFile.create(path), 0, np.empty(0, ENTRY_DTYPE), sync)
        return cls(log, ViewFile.open(path, reading, durable), reading.first_delivery,
                   reading.rows, sync)

    # ------------------------------------------------------------------ offsets

    @property
    @_locked
    def high_watermark(self) -> int:
        """The next delivery offset to be given out."""
        if not self._n:
            return self._first
        base, _, _, count, _ = self._rows.item(self._n - 1)  # (a row's fields as ints)
        return base + count

    @property
    @_locked
    def log_start(self) -> int:
        """The first delivery offset whose record retention has not removed."""
        self._advance_head()
        return int(self._rows[self._head]["base"]) if self._head < self._n else \
            self.high_watermark

    def _advance_head(self) -> None:
        """Skip the entries at the head whose records lie below the log start (retention
        deletes segments from the oldest, by offset); rewrite the file without them once
        there are many. O(entries skipped)."""
        start = self.log.log_start_offset
        row, head = self._rows.item, self._head
        while head < self._n and row(head)[2] + row(head)[3] <= start:  # first + count
            head += 1
        self._head = head
        keep = min(head, self._n - 1)  # the last entry stays: it is the numbering's cursor
        if keep >= _REWRITE_DEAD:
            live = self._rows[keep:self._n].copy()
            self._writing(self._file.rewrite, int(live[0]["base"]), live)
            self._first = int(live[0]["base"])
            self._rows[:len(live)] = live
            self._n, self._head = len(live), head - keep

    def last_key(self) -> DeliveryKey | None:
        """The key of the last numbered record (None: none yet)."""
        if not self._n:
            return None
        _, da, first, count, _ = self._rows.item(self._n - 1)
        return DeliveryKey(da, first + count - 1)

    def key_before(self, n: int) -> DeliveryKey | None:
        """A key with every record numbered below `n` at or before it and every one from
        `n` on after it (the cursor a read at `n` starts from)."""
        i = self._entry_of(n - 1)
        if i is not None:
            base, da, first, _, _ = self._rows.item(i)
            return DeliveryKey(da, first + n - 1 - base)
        i = self._entry_of(n)
        if i is None:
            return self.last_key()
        _, da, first, _, _ = self._rows.item(i)
        return DeliveryKey(da, first - 1)

    def offset_after(self, key: DeliveryKey) -> int:
        """The delivery offset of the first numbered record after `key` (the high watermark
        when none is). O(log entries)."""
        rows, n = self._rows, self._n
        da = rows["deliver_after"][:n]
        lo = int(np.searchsorted(da, key.deliver_after, side="left"))
        hi = int(np.searchsorted(da, key.deliver_after, side="right"))
        i = lo + int(np.searchsorted(rows["first"][lo:hi], key.offset, side="right")) - 1
        if i < 0:
            return self._first
        r = rows[i]
        if int(r["deliver_after"]) < key.deliver_after or \
                key.offset >= int(r["first"]) + int(r["count"]):
            return int(r["base"]) + int(r["count"])
        return int(r["base"]) + key.offset - int(r["first"]) + 1

    def _entry_of(self, n: int) -> int | None:
        """The index of the entry holding delivery offset `n` (None: not in the file)."""
        if n < self._first or n >= self.high_watermark:
            return None
        return int(np.searchsorted(self._rows["base"][:self._n], n, side="right")) - 1

    @_locked
    def offset_for_time(self, t: int) -> tuple[int, int]:
        """(delivery offset, deliverAfter) of the first record (from the log start) whose
        deliverAfter is `t` or later; (-1, -1) if none is numbered yet. O(log entries)."""
        start = self.log_start
        head = self._head
        i = head + int(np.searchsorted(self._rows["deliver_after"][head:self._n], t))
        if i >= self._n:
            return -1, -1
        return max(int(self._rows[i]["base"]), start), int(self._rows[i]["deliver_after"])

    # ------------------------------------------------------------------ numbering

    @_locked
    def extend(self) -> int:
        """Number every record due now and not numbered yet (written to the file before
        this returns); returns how many. Cost: O(1) when nothing can have come due since
        the last call (no append, the log clock before the earliest pending deliverAfter
        then), else the engine's due-order read of what is new."""
        end = self.log.log_end_offset  # (before the read: a later append moves it)
        if end == self._quiet[0] and not self._came_due():
            return 0
        numbered, first_now = 0, None
        while True:
            after = self.last_key()
            batches, _, now = self.log.reads.due(after, max_batches=_EXTEND_BATCHES,
                                                 max_bytes=_MAX, with_bytes=False)
            first_now = now if first_now is None else first_now
            rows = _new_entries(batches, after, self.high_watermark)
            if rows:
                self._append_rows(np.frombuffer(self._writing(self._append_file, rows),
                                                ENTRY_DTYPE))
                numbered += sum(r[3] for r in rows)
            if len(batches) < _EXTEND_BATCHES:
                self._quiet = (end, first_now, _UNKNOWN)
                return numbered

    def _came_due(self) -> bool:
        """Whether a record of offset below the log end of the last `extend` may have come
        due since it read at `now` (its first read's clock): every record due then was
        numbered, so only one whose deliverAfter is past that `now` and not past the log
        clock's present can have. The earliest such deliverAfter is looked up once."""
        end, now, earliest = self._quiet
        if earliest is _UNKNOWN:
            earliest = self.log.clients.earliest_pending(now)
            self._quiet = (end, now, earliest)
        return earliest is not None and self.log.now() >= earliest

    def _append_file(self, rows: list) -> bytes:
        if self._sync:
            self._log_durable()  # (see `sync`)
        return self._file.append(rows, self._sync)

    def _writing(self, write: Callable, *args):
        """`write(*args)`, remembering that it failed (close then leaves the file alone)."""
        try:
            return write(*args)
        except BaseException:
            self._failed = True
            raise

    def _append_rows(self, rows: np.ndarray) -> None:
        need = self._n + len(rows)
        if need > len(self._rows):
            grown = np.empty(2 * need, ENTRY_DTYPE)
            grown[:self._n] = self._rows[:self._n]
            self._rows = grown
        self._rows[self._n:need] = rows
        self._n = need

    @_locked
    def sync(self) -> None:
        """fsync the file, the log first: a durable entry must never name a record that a
        power failure could still take from the log (its offset would go to another). A
        pending file (never synced) takes its own name."""
        self._writing(self._log_durable)
        self._writing(self._file.sync)

    def _log_durable(self) -> None:
        """fsync the log unless nothing was appended since the view last did (or opened),
        or it is closed (its close flushed it: a topic reopened closes its logs before its
        views)."""
        try:
            end = self.log.log_end_offset
            if end != self._durable_end:
                self.log.flush()
                self._durable_end = end
        except LogClosedError:
            pass

    @_locked
    def close(self) -> None:
        """Close the file; one never synced is synced first (the log, then the file under
        its own name: view_file.py), unless a file operation of this view failed (a crash
        or a full disk: then it is left as it is, for the next open to read)."""
        try:
            if not self._file.durable and not self._failed:
                self.sync()
        finally:
            self._file.close()

    # ------------------------------------------------------------------ serving

    @_locked
    def read(self, n: int, max_bytes: int) -> RecordParts:
        """Kafka v2 batches, back to back, holding the records numbered `n` on, in
        delivery-offset order, the first one holding `n` or the first record after it that
        is still in the log; their sizes within `max_bytes`, but at least one batch.
        OffsetOutOfRangeError outside [log start, high watermark]. The records are not
        copied (record_parts.py)."""
        hw = self.high_watermark
        if not self.log_start <= n <= hw:
            raise OffsetOutOfRangeError(f"delivery offset {n} is outside "
                                        f"[{self.log_start}, {hw}]")
        parts = RecordParts()
        if n == hw:
            return parts
        batches, _, _ = self.log.reads.due(self.key_before(n), max_batches=_MAX,
                                           max_bytes=max_bytes, with_bytes=True)
        rows = self._rows[:self._n]
        n_rows = self._n
        row = rows.item  # (base, deliver_after, first, count, crc) as Python ints
        j = self._entry_of(n)
        assert j is not None  # log start <= n < high watermark: the file holds n
        for b in batches:
            key = (b.deliver_after, b.base_offset)
            # entries of records removed since they were numbered: gaps
            while j < n_rows and (row(j)[1], row(j)[2] + row(j)[3] - 1) < key:
                j += 1
            while j > 0 and row(j - 1)[1] == b.deliver_after and \
                    row(j - 1)[2] + row(j - 1)[3] > b.base_offset:
                j -= 1  # an entry of this batch before the fetch offset: serve it whole
            k = j
            while k < n_rows and row(k)[1] == b.deliver_after and row(k)[2] <= b.last_offset:
                k += 1
            if k == j:
                if j >= n_rows:
                    break  # due since the view was extended: past the high watermark
                continue  # nothing of the batch is numbered (all cancelled)
            base, _, first, count, _ = row(j)
            if k == j + 1 and first == b.base_offset and \
                    count == b.last_offset - b.base_offset + 1:
                parts.add_stored(b.data, base)  # one entry numbers it all
            else:
                _reencode(parts, b, rows[j:k])
            _, _, first, count, _ = row(k - 1)
            j = k - 1 if first + count - 1 > b.last_offset else k
        return parts


def _reencode(parts: RecordParts, batch, entries: np.ndarray) -> None:
    """Add the batch to `parts` re-encoded with only the records its entries number (the
    rest were cancelled); a batch one entry numbers whole is served as stored instead."""
    delivery = {}
    for base, first, count in zip(entries["base"].tolist(), entries["first"].tolist(),
                                  entries["count"].tolist(), strict=True):
        for t in range(count):
            delivery[first + t] = base + t
    rebuilt = as_v2_only(bytes(batch.data), delivery)
    if rebuilt is not None:
        parts.add_batch(rebuilt)


def _within(reading: Reading, log_end: int) -> Reading:
    """`reading` without its entries from the first one that names a record at or past the
    log end on: the log lost them (a power failure took unsynced appends, and the view's
    page cache reached the disk without the log's). Cut off as a torn tail is: the records
    still in the log are numbered again from there."""
    rows = reading.rows
    if reading.damage is not None or not len(rows):
        return reading
    past = np.flatnonzero(rows["first"].astype(np.int64) + rows["count"] > log_end)
    if not len(past):
        return reading
    cut = int(past[0])
    return Reading(reading.first_delivery, rows[:cut].copy(),
                   HEADER_SIZE + cut * ENTRY_SIZE, None)


def _renumbered_alike(log: Log, reading: Reading) -> bool:
    """Whether numbering the log again from the sound entries before the damage gives every
    sound entry after it (`reading.later`) exactly as the file has it: then the damage is a
    torn tail whose blocks reached the disk garbled (a crash before the file's fsync), and
    cutting it off loses nothing. Real damage among entries whose records retention has
    since removed renumbers differently, and stays refused. Reads nothing past the last
    sound entry's numbers."""
    later = reading.later
    if later is None or not len(later):
        return False
    want = {tuple(r) for r in later[["base", "deliver_after", "first", "count"]].tolist()}
    end = int((later["base"].astype(np.int64) + later["count"]).max())
    rows = reading.rows
    after = None if not len(rows) else DeliveryKey(
        int(rows[-1]["deliver_after"]), int(rows[-1]["first"]) + int(rows[-1]["count"]) - 1)
    next_delivery = reading.first_delivery if not len(rows) else \
        int(rows[-1]["base"]) + int(rows[-1]["count"])
    while next_delivery < end:
        batches, _, _ = log.reads.due(after, max_batches=_EXTEND_BATCHES, max_bytes=_MAX,
                                      with_bytes=False)
        new = _new_entries(batches, after, next_delivery)
        if not new:
            break
        want.difference_update(new)
        base, da, first, count = new[-1]
        after, next_delivery = DeliveryKey(da, first + count - 1), base + count
    return not want


def _new_entries(batches: list, after: DeliveryKey | None, next_delivery: int
                 ) -> list[tuple[int, int, int, int]]:
    """Entries (base, deliverAfter, first, count) numbering the records of `batches` with
    a key after `after`, leaving out cancelled ones, from `next_delivery` on."""
    rows = []
    for b in batches:
        first = b.base_offset
        if after is not None and b.deliver_after == after.deliver_after:
            first = max(first, after.offset + 1)
        for lo, hi in _runs(first, b.last_offset, b.cancelled):
            rows.append((next_delivery, b.deliver_after, lo, hi - lo + 1))
            next_delivery += hi - lo + 1
    return rows


def _runs(first: int, last: int, cancelled: tuple[int, ...]) -> list[tuple[int, int]]:
    """[first, last] less the cancelled offsets, as runs of consecutive offsets."""
    if not cancelled:
        return [(first, last)] if first <= last else []
    out = []
    lo = first
    for c in cancelled:
        if c < lo or c > last:
            continue
        if c > lo:
            out.append((lo, c - 1))
        lo = c + 1
    if lo <= last:
        out.append((lo, last))
    return out
