"""Log: one partition's directory of segments — the public facade over the storage engine.

Appends go to the active segment in arrival order. A fetch merges every segment's
DeliverAfterIndex from the cursor on (kdelay.fetch.merge) and returns what is due.

Concurrency: one lock serialises appends, rolls, retention and each fetch's read of the
segment set; long-polling fetches wait on a condition outside it. The log clock never runs
backwards (it is the max of every clock reading it has seen), so an append always gets a
deliverAfter >= anything a fetch has already treated as "now": a late append can never land
behind a consumer's cursor.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import os
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
from sortedcontainers import SortedDict, SortedList

from . import fsio
from .config import LogConfig
from .errors import (
    DelayedDeliveryDisabledError,
    DeliveryDelayExceededError,
    InvalidRecordError,
    KdelayError,
    LogClosedError,
    LogWriteError,
)
from .fetch import groups
from .fetch.merge import (
    ColumnRun,
    PendingRun,
    ResumePoints,
    SealedRuns,
    batch_records,
    read_page,
)
from .log import codec
from .log.horizon import Horizon
from .log.loader import (
    CLEAN_SHUTDOWN_FILE,
    LoadReport,
    load_segments,
    take_lock,
    write_recovery_point,
)
from .log.segment import INDEX_SUFFIXES, LogSegment
from .records import AppendResult, DeliveryKey, FetchedRecord, FetchResult, Record

Clock = Callable[[], int]
_NONE_TYPE = type(None)
_NEVER = 1 << 63


def wall_clock() -> int:
    return time.time_ns() // 1_000_000


def _write_errors(method):
    """Surface an OSError from a writing method (ENOSPC, EIO) as LogWriteError, a
    KdelayError that keeps errno and filename, so callers catch one hierarchy."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except OSError as e:
            if isinstance(e, KdelayError):
                raise
            raise LogWriteError(e.errno, f"{method.__name__} on {self.path} failed: "
                                f"{e.strerror or e}", e.filename) from e
    return wrapper


class OffsetOutOfRangeError(KdelayError):
    """An offset that is not in the log (deleted by retention, or never written)."""


class Log:
    """One partition. Open with `Log.open(path, config=..., clock=...)`."""

    def __init__(self, path: str, config: LogConfig, clock: Clock, lock_fd: int,
                 segments: list[LogSegment], report: LoadReport):
        self.path = path
        self.config = config
        self._clock = clock
        self._lock_fd = lock_fd
        self.load_report = report
        self._lock = threading.RLock()
        self._appended = threading.Condition(self._lock)
        self._closed = False
        self._marker_present = False  # see _mark_dirty
        # (cursor, until) from the last empty page: nothing after `cursor` is due before
        # `until`; appends lower `until`. Lets an empty poll skip the merge entirely.
        self._quiet: tuple[DeliveryKey | None, int] | None = None
        self._now_floor = 0
        self._segments: SortedDict = SortedDict((s.base_offset, s) for s in segments)
        # sealed segments keyed by the largest (deliverAfter, offset) they hold, so a fetch
        # skips every segment with nothing after its cursor without touching it
        self._sealed_by_max_key = SortedList()
        for seg in segments[:-1]:
            self._add_sealed(seg)
        self._active: LogSegment = segments[-1]
        self._unflushed_records = 0
        self._oldest_unflushed: float | None = None
        self._groups = groups.GroupStore(path)
        self._resume = ResumePoints()
        self._flusher: threading.Thread | None = None
        if config.flush_ms is not None:
            self._flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                             name=f"kdelay-flush-{path}")
            self._flusher.start()

    # ------------------------------------------------------------------ open / close

    @classmethod
    def open(cls, path: str | os.PathLike, config: LogConfig | None = None,
             clock: Clock | None = None) -> Log:
        """Open (creating if missing) and recover the log directory at `path`."""
        config = config if config is not None else LogConfig()
        if not isinstance(config, LogConfig):
            raise KdelayError(f"config must be a LogConfig, got {type(config).__name__}")
        path = os.fspath(path)
        os.makedirs(path, exist_ok=True)
        lock_fd = take_lock(path)
        try:
            segments, report = load_segments(path, config.index_interval_bytes)
            if not segments:
                segments = [LogSegment.create(path, 0)]
                fsio.fsync_dir(path)
            marker = os.path.join(path, CLEAN_SHUTDOWN_FILE)
            floor = 0
            marker_present = os.path.exists(marker)
            if marker_present:
                # the log clock must not run backwards across a clean restart either
                floor = _read_clock_floor(marker)
                # The marker stays until the first change to the segments (_mark_dirty):
                # until then the directory is exactly as the clean close left it, so a
                # crash is still a clean shutdown, and opening costs no write or fsync.
            elif not report.clean:
                # recovered segments are whole and fsync'd from here on
                segments[-1].flush()
                write_recovery_point(path, segments[-1].base_offset)
            log = cls(path, config, clock or wall_clock, lock_fd, segments, report)
            log._marker_present = marker_present
            # ... nor across a crash: commits record the clock they saw
            log._now_floor = max(floor, log._groups.max_clock())
            log._horizon = Horizon(path, log._now_floor)  # what lock-free readers may assume
        except BaseException:
            os.close(lock_fd)
            raise
        return log

    def _mark_dirty(self) -> None:
        """Before the first change to segments after a clean open: remove the clean-shutdown
        marker (durably), so that a crash from here on is recovered as one."""
        if self._marker_present:
            fsio.unlink(os.path.join(self.path, CLEAN_SHUTDOWN_FILE))
            fsio.fsync_dir(self.path)
            self._marker_present = False

    @_write_errors
    def close(self) -> None:
        """Flush, persist the active segment's indexes, mark the shutdown clean."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if not self._marker_present:  # else nothing changed since the clean open
                    self._active.persist_indexes()
                    write_recovery_point(self.path, self._active.next_offset)
                fsio.atomic_write(os.path.join(self.path, CLEAN_SHUTDOWN_FILE),
                                  str(self._now_floor).encode("ascii"))
            finally:
                for seg in self._segments.values():
                    seg.close()
                self._horizon.close()
                os.close(self._lock_fd)
                self._appended.notify_all()

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.path} is closed")

    # ------------------------------------------------------------------ clock

    def now(self) -> int:
        """The log clock: never below any time it has already handed out."""
        t = self._clock()
        with self._lock:
            if t > self._now_floor:
                self._now_floor = t
            return self._now_floor

    # ------------------------------------------------------------------ append

    @_write_errors
    def append(self, records: Sequence[Record], *, deliver_after: int | None = None
               ) -> AppendResult:
        """Write one batch. Its deliverAfter is `deliver_after`, else the max of the records',
        and never below the append time. All of it is written, or nothing."""
        cols = _record_columns(records)
        values, keys, headers, timestamps, record_das = cols
        if deliver_after is not None and not _is_non_negative_int(deliver_after):
            raise InvalidRecordError(f"deliver_after must be a non-negative int, "
                                     f"got {deliver_after!r}")
        has_record_da = record_das.count(None) != len(record_das)
        if not self.config.delayed_delivery_enable and (deliver_after is not None
                                                        or has_record_da):
            raise DelayedDeliveryDisabledError(
                f"log {self.path} has delayed_delivery_enable=False; deliver_after refused")
        requested = deliver_after
        if requested is None and has_record_da:
            requested = max(d for d in record_das if d is not None)
        with self._lock:
            self._check_open()
            self._horizon.begin(self._now_floor)  # before the clock is read: see horizon.py
            try:
                return self._append_locked(values, keys, headers, timestamps, record_das,
                                           requested, deliver_after)
            finally:
                self._horizon.end(self._now_floor)

    def _append_locked(self, values, keys, headers, timestamps, record_das, requested,
                       deliver_after) -> AppendResult:
        now = self.now()
        if timestamps.count(None) == len(timestamps):
            ts_list = None
            base_ts = max_ts = now
        else:
            ts_list = [now if t is None else t for t in timestamps]
            base_ts, max_ts = ts_list[0], max(ts_list)
        self._check_delay_limit(requested, deliver_after, record_das, ts_list, now)
        batch_da = now if requested is None or requested < now else requested
        base = self._active.next_offset
        batch = codec.encode_batch(
            base_offset=base, base_timestamp=base_ts, deliver_after=batch_da,
            keys=keys, values=values,
            timestamp_deltas=(None if ts_list is None else
                              np.array(ts_list, dtype=np.int64) - base_ts),
            headers=headers)  # the codec treats all-empty headers as none
        if len(batch) > self.config.max_batch_bytes:
            raise InvalidRecordError(
                f"batch of {len(batch)} bytes exceeds max_batch_bytes "
                f"({self.config.max_batch_bytes})")
        self._mark_dirty()
        self._maybe_roll(len(batch), now)
        n = len(values)
        self._active.append(batch, base, n - 1, batch_da, max_ts,
                            self.config.index_interval_bytes)
        self._after_append(n)
        if self._quiet is not None and batch_da < self._quiet[1]:
            self._quiet = (self._quiet[0], batch_da)
        self._appended.notify_all()
        return AppendResult(base, base + n - 1, batch_da, now)

    def _check_delay_limit(self, requested, explicit, record_das, ts_list, now) -> None:
        limit = self.config.max_delivery_delay_ms
        if not limit or requested is None:
            return
        stamps = ts_list if ts_list is not None else [now] * len(record_das)
        if explicit is not None:
            delay = explicit - min(stamps)
        else:
            delay = max(d - t for d, t in zip(record_das, stamps, strict=True) if d is not None)
        if delay > limit:
            raise DeliveryDelayExceededError(
                f"requested delivery delay of {delay} ms exceeds max_delivery_delay_ms="
                f"{limit} ms")

    def _after_append(self, n: int) -> None:
        self._unflushed_records += n
        if self._oldest_unflushed is None:
            self._oldest_unflushed = time.monotonic()
        fm = self.config.flush_messages
        if fm is not None and self._unflushed_records >= fm or self.config.flush_ms is not None and \
                (time.monotonic() - self._oldest_unflushed) * 1000 >= self.config.flush_ms:
            self._flush_locked()

    # ------------------------------------------------------------------ roll / flush

    def _maybe_roll(self, incoming: int, now: int) -> None:
        seg = self._active
        if seg.size == 0:
            return
        too_big = seg.size + incoming > self.config.segment_bytes
        too_old = (seg.first_timestamp is not None
                   and now - seg.first_timestamp >= self.config.segment_ms)
        if too_big or too_old:
            self._roll_locked()

    @_write_errors
    def roll(self) -> None:
        """Seal the active segment (if it holds anything) and start a new one."""
        with self._lock:
            self._check_open()
            if self._active.size:
                self._mark_dirty()
                self._roll_locked()

    def _roll_locked(self) -> None:
        old = self._active
        old.persist_indexes()  # fsyncs the .log first
        new = LogSegment.create(self.path, old.next_offset)
        fsio.fsync_dir(self.path)
        self._segments[new.base_offset] = new
        self._active = new
        self._add_sealed(old)
        write_recovery_point(self.path, new.base_offset)
        self._unflushed_records = 0
        self._oldest_unflushed = None

    def _add_sealed(self, seg: LogSegment) -> None:
        key = seg.dly_index.max_key()
        if key is not None:
            seg.min_deliver_after = seg.dly_index.min_deliver_after()
            self._sealed_by_max_key.add((key[0], key[1], seg.base_offset))

    @_write_errors
    def flush(self) -> None:
        """fsync everything appended so far."""
        with self._lock:
            self._check_open()
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._active.flush()
        self._unflushed_records = 0
        self._oldest_unflushed = None

    def _flush_loop(self) -> None:
        period = self.config.flush_ms / 1000
        while True:
            time.sleep(period / 2)
            with self._lock:
                if self._closed:
                    return
                if self._oldest_unflushed is not None and \
                        time.monotonic() - self._oldest_unflushed >= period:
                    self._flush_locked()

    # ------------------------------------------------------------------ fetch

    def fetch(self, after: DeliveryKey | int | None = None, *, max_records: int = 500,
              max_bytes: int = 1 << 20, max_wait_ms: int = 0) -> FetchResult:
        """Due records strictly after `after`, in (deliverAfter, offset) order."""
        if not _is_positive_int(max_records) or not _is_positive_int(max_bytes):
            raise KdelayError("max_records and max_bytes must be positive ints")
        if not isinstance(max_wait_ms, int) or max_wait_ms < 0:
            raise KdelayError("max_wait_ms must be a non-negative int")
        deadline = time.monotonic() + max_wait_ms / 1000
        with self._lock:
            cursor = self._resolve_cursor(after)
            while True:
                self._check_open()
                now = self.now()
                quiet = self._quiet
                if quiet is not None and quiet[0] == cursor and now < quiet[1]:
                    records: list[FetchedRecord] = []  # known: nothing after cursor is due
                    until = quiet[1]
                else:
                    sealed = self._sealed_runs(cursor, now)
                    runs = sealed.runs + self._active_runs(cursor)
                    page = read_page(runs, cursor, now, max_records, max_bytes)
                    self._resume.remember(page.next, sealed)
                    records = page.records
                    if records:
                        until = None
                    else:
                        # every record after the cursor is due at `until` or later: the
                        # smallest run head, or parked segment, not yet due
                        until = _NEVER if page.next_pending is None else page.next_pending
                        if sealed.parked:
                            until = min(until, sealed.parked[0][0])
                        self._quiet = (cursor, until)
                remaining = deadline - time.monotonic()
                if records or remaining <= 0:
                    return FetchResult(records, page.next if records else cursor)
                # Sleep until the first record after the cursor comes due, or an append
                # (which lowers `until` if it is due sooner) wakes us.
                self._appended.wait(min(remaining, max(0.001, (until - now) / 1000)))

    def _resolve_cursor(self, after: DeliveryKey | int | None) -> DeliveryKey | None:
        if after is None:
            return None
        if isinstance(after, DeliveryKey):
            return after
        if isinstance(after, tuple) and len(after) == 2 and all(map(_is_int, after)):
            return DeliveryKey(*after)
        if _is_int(after):
            return DeliveryKey(self._deliver_after_of(after), after)
        raise KdelayError(f"after must be None, an int offset or a DeliveryKey, got {after!r}")

    def _deliver_after_of(self, offset: int) -> int:
        seg = self._segment_for(offset)
        found = seg.find_batch(offset) if seg is not None else None
        if found is None:
            raise OffsetOutOfRangeError(
                f"offset {offset} is not in the log [{self.log_start_offset}, "
                f"{self.log_end_offset})")
        return found[1].deliver_after

    def _segment_for(self, offset: int) -> LogSegment | None:
        i = self._segments.bisect_right(offset) - 1
        return None if i < 0 else self._segments.peekitem(i)[1]

    def _sealed_runs(self, cursor: DeliveryKey | None, now: int) -> SealedRuns:
        """The sealed segments' merge state for `cursor`: resumed from the page that ended
        there when possible, else built. Segments with nothing after the cursor are never
        touched; segments with nothing due yet are parked until `now` reaches them."""
        key = None if cursor is None else (cursor.deliver_after, cursor.offset)
        state = self._resume.take(cursor)
        active_base = self._active.base_offset
        if state is None or state.log_start != self.log_start_offset:
            state = SealedRuns(active_base, self.log_start_offset)
            candidates = (self._sealed_by_max_key if key is None else
                          self._sealed_by_max_key.irange(minimum=(key[0], key[1], 1 << 63),
                                                         inclusive=(False, True)))
            for _, _, base in candidates:
                self._plan_segment(state, self._segments[base], key, now)
        elif state.sealed_upto != active_base:  # rolled since: consider the new segments
            for base in self._segments.irange(state.sealed_upto, active_base,
                                              inclusive=(True, False)):
                seg = self._segments[base]
                max_key = seg.dly_index.max_key()
                if max_key is not None and (key is None or max_key > key):
                    self._plan_segment(state, seg, key, now)
            state.sealed_upto = active_base
        parked = state.parked
        while parked and parked[0][0] <= now:
            _, _, seg = heapq.heappop(parked)
            state.runs.append(_column_run(seg, key))
        return state

    @staticmethod
    def _plan_segment(state: SealedRuns, seg: LogSegment, key, now: int) -> None:
        if seg.min_deliver_after <= now:
            state.runs.append(_column_run(seg, key))
        else:
            heapq.heappush(state.parked, (seg.min_deliver_after, seg.base_offset, seg))

    def _active_runs(self, cursor: DeliveryKey | None) -> list:
        """Runs of the active segment, built afresh: its in-memory part changes with every
        append (and its persisted part, present after a clean reopen, is one search)."""
        key = None if cursor is None else (cursor.deliver_after, cursor.offset)
        idx = self._active.dly_index
        runs: list = []
        if len(idx.disk_columns[0]):
            runs.append(_column_run(self._active, key))
        if idx.has_pending:
            runs.append(PendingRun(self._active, idx.iter_pending(key)))
        return runs

    # ------------------------------------------------------------------ offset-order read

    def read(self, offset: int, *, max_records: int = 500) -> list[FetchedRecord]:
        """Records in plain offset order from `offset` (due or not)."""
        if not _is_int(offset) or offset < 0:
            raise KdelayError(f"offset must be a non-negative int, got {offset!r}")
        if not _is_positive_int(max_records):
            raise KdelayError("max_records must be a positive int")
        out: list[FetchedRecord] = []
        with self._lock:
            self._check_open()
            offset = max(offset, self.log_start_offset)
            seg = self._segment_for(offset)
            while seg is not None and len(out) < max_records:
                found = seg.find_batch(offset)
                start = found[0] if found else seg.size
                expected = found[1].base_offset if found else seg.next_offset
                for pos, h in seg.batch_headers(start):
                    # offsets must run on without a gap: a header's own base offset is
                    # no check of itself
                    h, data = seg.read_verified(pos, h.size, expected)
                    expected = h.last_offset + 1
                    skip = max(0, offset - h.base_offset)
                    out.extend(batch_records(h, data, skip, max_records - len(out), seg, pos))
                    if len(out) >= max_records:
                        break
                offset = seg.next_offset
                i = self._segments.bisect_right(seg.base_offset)
                seg = self._segments.peekitem(i)[1] if i < len(self._segments) else None
        return out

    # ------------------------------------------------------------------ groups

    @_write_errors
    def commit(self, group: str, key: DeliveryKey | None) -> None:
        """Durably store `group`'s position (the key of the last record it consumed)."""
        if key is not None and not isinstance(key, DeliveryKey):
            if isinstance(key, tuple) and len(key) == 2 and all(map(_is_int, key)):
                key = DeliveryKey(*key)
            else:
                raise KdelayError(f"commit needs a DeliveryKey, got {key!r}")
        self._check_open()
        self._groups.commit(group, key, self.now())

    def committed(self, group: str) -> DeliveryKey | None:
        return self._groups.committed(group)

    # ------------------------------------------------------------------ retention

    @_write_errors
    def enforce_retention(self) -> int:
        """Delete the oldest sealed segments whose every record has been due for longer than
        `retention_ms`, and, while the log is over `retention_bytes`, those whose every record
        is due. Returns how many segments were deleted."""
        cfg = self.config
        deleted = 0
        with self._lock:
            self._check_open()
            now = self.now()
            total = sum(s.size for s in self._segments.values())
            while len(self._segments) > 1:
                seg = self._segments.peekitem(0)[1]
                key = seg.dly_index.max_key()
                last_due = key[0] if key is not None else -1
                expired = cfg.retention_ms >= 0 and now - last_due > cfg.retention_ms
                oversize = (cfg.retention_bytes >= 0 and total > cfg.retention_bytes
                            and last_due <= now)
                if not (expired or oversize):
                    break
                self._mark_dirty()
                if key is not None:
                    self._sealed_by_max_key.discard((key[0], key[1], seg.base_offset))
                del self._segments[seg.base_offset]
                total -= seg.size
                seg.delete()
                deleted += 1
            if deleted:
                fsio.fsync_dir(self.path)
        return deleted

    # ------------------------------------------------------------------ introspection

    @property
    def log_start_offset(self) -> int:
        return self._segments.peekitem(0)[1].base_offset

    @property
    def log_end_offset(self) -> int:
        return self._active.next_offset

    @property
    def segments(self) -> list[int]:
        with self._lock:
            return list(self._segments.keys())

    @property
    def closed(self) -> bool:
        return self._closed

    def metrics(self) -> dict:
        """Counts and sizes for monitoring. `groups` maps each consumer group with a stored
        position to its committed key and its lag: records due now and after that key."""
        with self._lock:
            now = self.now()
            pending = pending_batches = 0
            index_mem = index_disk = 0
            records = 0
            segs = list(self._segments.values())
            group_keys = {g: self._groups.committed(g) for g in self._groups.groups()}
            lag = dict.fromkeys(group_keys, 0)
            for seg in segs:
                p, pb = seg.dly_index.count_pending(now)
                pending += p
                pending_batches += pb
                records += seg.next_offset - seg.base_offset
                for idx in (seg.dly_index, seg.offset_index, seg.time_index):
                    index_mem += idx.memory_bytes()
                for suffix in INDEX_SUFFIXES:
                    # what the files really take (header included); the active segment's
                    # indexes live in memory until it rolls or the log closes cleanly
                    with contextlib.suppress(FileNotFoundError):
                        index_disk += os.stat(seg.path(suffix)).st_size
                if group_keys:
                    _add_segment_lag(seg, now, group_keys, lag)
            return {
                "log_start_offset": self.log_start_offset,
                "log_end_offset": self.log_end_offset,
                "segments": len(segs),
                "records": records,
                "bytes": sum(s.size for s in segs),
                "pending_records": pending,
                "pending_batches": pending_batches,
                "due_records": records - pending,
                "earliest_pending_deliver_after": self.earliest_pending(now),
                "index_bytes_in_memory": index_mem,
                "index_bytes_on_disk": index_disk,
                "groups": {g: {"committed": k, "lag": lag[g]} for g, k in group_keys.items()},
                "now": now,
            }

    def earliest_pending(self, now: int) -> int | None:
        """The smallest deliverAfter > `now` in the log (None: nothing pending). Sealed
        segments whose largest key is due are skipped without being touched."""
        with self._lock:
            segs = [self._segments[base] for _, _, base in
                    self._sealed_by_max_key.irange(minimum=(now, 1 << 63, 0))]
            segs.append(self._active)
            best = None
            for seg in segs:
                first = seg.dly_index.first_after(now)
                if first is not None and (best is None or first < best):
                    best = first
            return best


def _add_segment_lag(seg: LogSegment, now: int, group_keys: dict, lag: dict) -> None:
    """Add, per group, the records of `seg` that are due at `now` and after the group's
    committed key: whole batches past the key's deliverAfter, plus the part of each batch
    at that deliverAfter whose offsets are past the key's offset (vectorised per segment)."""
    da, off, _, lod, _ = seg.dly_index.columns()
    j_now = int(np.searchsorted(da, now, side="right"))
    if j_now == 0:
        return
    da = da[:j_now]
    counts = lod[:j_now].astype(np.int64) + 1
    ends = off[:j_now].astype(np.int64) + counts  # last offset + 1 of each batch
    suffix = np.concatenate([np.cumsum(counts[::-1])[::-1], [0]])  # records in [i, j_now)
    for group, key in group_keys.items():
        if key is None:
            lag[group] += int(suffix[0])
            continue
        lo = int(np.searchsorted(da, key.deliver_after, side="left"))
        hi = int(np.searchsorted(da, key.deliver_after, side="right"))
        partial = 0
        if hi > lo:
            partial = int(np.clip(ends[lo:hi] - 1 - key.offset, 0, counts[lo:hi]).sum())
        lag[group] += partial + int(suffix[hi])


def _read_clock_floor(marker: str) -> int:
    """The log clock at the last clean close (0 if the marker predates this field)."""
    raw = fsio.read_small(marker) or b""
    try:
        return max(0, int(raw.decode("ascii").strip() or 0))
    except (UnicodeDecodeError, ValueError):
        return 0


def _column_run(seg: LogSegment, key: tuple[int, int] | None) -> ColumnRun:
    idx = seg.dly_index
    return ColumnRun(seg, (seg.base_offset, idx.generation), idx.disk_columns,
                     idx.start_in_columns(key))


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_non_negative_int(x) -> bool:
    return _is_int(x) and x >= 0


def _is_positive_int(x) -> bool:
    return _is_int(x) and x > 0


def _all_of_types(items, exact: set, allowed) -> bool:
    """True if every item is an instance of `allowed`; the common case (exact types) is
    decided by one C-level pass over the items."""
    return set(map(type, items)) <= exact or all(isinstance(x, allowed) for x in items)


def _record_columns(records: Sequence[Record]) -> list[tuple]:
    """Validate a batch and transpose it into columns (value, key, headers, timestamp,
    deliver_after) with C-level loops: one type check per column, not per field."""
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
                if v is not None and not _is_non_negative_int(v):
                    raise InvalidRecordError(f"record {name} must be a non-negative int, "
                                             f"got {v!r}")
    return cols
