"""RemoteSync: one Log's upkeep of its tiered storage, a pass at a time, in the background.

A pass (`sync`, what `Log.sync_remote()` runs) does, in order:

1. finish deleting the remote copies retention gave up (`N.remote-deleting` markers);
2. copy every sealed segment not copied yet, oldest first (copier.py): the Log's lock is
   held only to pick the segment with a snapshot of its cancellations, and to publish
   the copy (`seg.remote`); appends, fetches and rolls go on meanwhile. While a copy is in
   flight neither retention nor compaction touches its segment (`busy`);
3. the export of cancellations (cancel_export.py): each copied segment whose
   cancellations changed since the store last heard gets its `.cancellations` object
   rewritten, so that losing the local disk after the pass brings back no cancelled
   record and no rescheduled original;
4. local retention (tier_retention.py): copied segments whose local files are due go,
   each once its manifest is confirmed in the store, and are served from it from then on;
5. once after open and after anything failed: the orphan sweep (one list request), and
   the abort of multipart uploads an interrupted copy left open (S3: one more request).

The background thread runs a pass when woken (a roll, retention) or every `_IDLE_S`
seconds; while passes fail it retries with exponential backoff (not woken meanwhile), and
the RemoteTier keeps the last error for `metrics()["remote"]`. Passes never overlap.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ... import fsio
from ...config import LogConfig
from ...errors import RemoteStorageError
from ...records import RemoteSyncResult
from ..cancellation.cancel_store import CancelStore
from ..segments.layout import remote_deletions
from ..segments.segment import LogSegment
from ..segments.segment_set import SegmentSet
from .cancel_export import CancelExport
from .copier import copy_segment, sweep_orphans
from .manifest import manifest_name
from .remote_segment import RemoteSegment
from .tier import RemoteTier
from .tier_retention import delete_local_files, delete_remote_copy, local_retention_due

__all__ = ["RemoteSync"]

_log = logging.getLogger("kdelay")
_IDLE_S = 10.0  # a pass at least this often (local retention by time comes due unasked)
_BACKOFF_S = (0.1, 30.0)  # first and longest wait before retrying a failed pass
_END = 1 << 63  # past every offset


class RemoteSync:
    def __init__(self, tier: RemoteTier, segments: SegmentSet, lock: threading.RLock,
                 cancels: CancelStore, config: LogConfig, *, now: Callable[[], int],
                 before_change: Callable[[], None], after_change: Callable[[], None]):
        self.tier = tier
        self.directory = tier.directory
        self.config = config
        self._segments = segments
        self._lock = lock
        self._cancels = cancels
        self._now = now
        self._before_change = before_change
        self._after_change = after_change
        self._one_at_a_time = threading.Lock()
        self._export = CancelExport(tier.store, segments, lock, cancels)
        self._in_flight: LogSegment | None = None  # being copied (guarded by the log's lock)
        # copies go oldest first and compaction leaves copied segments alone: every segment
        # below this offset is copied (or gone), so picking starts here
        self._scan_from = 0
        self._sweep_due = True  # an earlier process may have left orphans
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the pass

    def busy(self, seg: object) -> bool:
        """Is `seg` being copied (retention and compaction leave it alone)? Under the lock."""
        return seg is self._in_flight

    def sync(self) -> RemoteSyncResult:
        """One pass (see the module docstring). Raises RemoteStorageError; the tier keeps
        the last error until a pass succeeds."""
        with self._one_at_a_time:
            try:
                result = self._pass()
            except Exception as e:
                self._sweep_due = True
                self.tier.failed(e)
                raise
            self.tier.succeeded()
            return result

    def _pass(self) -> RemoteSyncResult:
        store = self.tier.store
        remote_deleted = 0
        for base in remote_deletions(self.directory):
            if not delete_remote_copy(store, self.directory, base):
                self._sweep_due = True  # its objects are orphans: this pass removes them
            remote_deleted += 1
        copied = 0
        while (picked := self._pick()) is not None:
            seg, cancelled = picked
            try:
                copy = copy_segment(self.tier, seg, cancelled)
            except BaseException:
                with self._lock:
                    self._in_flight = None
                raise
            # published and released in one hold of the lock: retention and compaction
            # must never see the segment neither in flight nor copied, or they would
            # delete (rewrite) it beside its `N.remote` and its copy, which would bring
            # it back at the next open
            with self._lock:
                seg.remote = copy
                self._in_flight = None
                self._scan_from = seg.next_offset
            copied += 1
        self._export.export()  # cancellations made since the copies (cancel_export.py)
        local_deleted = self._apply_local_retention()
        if self._sweep_due:
            with self._lock:
                known = {s.base_offset: s.remote.copy_id for s in self._segments
                         if s.remote is not None}
            swept = sweep_orphans(store, store.list(), known)
            swept += store.abort_uploads()  # parts of a .log an interrupted copy sent
            if swept:
                _log.info("kdelay tiered storage %s: removed %d orphan objects and uploads",
                          self.directory, swept)
            self._sweep_due = False
        return RemoteSyncResult(copied, local_deleted, remote_deleted)

    def _apply_local_retention(self) -> int:
        """Delete the local files of the copied segments local retention says go, each
        once its manifest is confirmed in the store (so nothing local goes while the store
        cannot be reached); from then on a RemoteSegment serves it. Under the lock per
        segment: its .log (first: a crash after it leaves a remote-only segment and
        leftovers) and its place in the set; its other files after. Nothing goes for a
        store that vanishes with the process (`memory://`): the local files are the only
        lasting record."""
        if self.tier.store.volatile:
            return 0
        with self._lock:
            due = local_retention_due(self._segments, self.config, self._now())
        store = self.tier.store
        for seg in due:
            if store.size(manifest_name(seg.base_offset)) is None:
                raise RemoteStorageError(f"{store.describe(manifest_name(seg.base_offset))} "
                                         f"is missing: segment {seg.base_offset} stays local")
        done = []
        for seg in due:
            with self._lock:
                if self._segments.segment_for(seg.base_offset) is not seg:
                    continue  # retention deleted it meanwhile
                self._before_change()
                fsio.unlink(seg.log_path)
                self._segments.hold_remotely(seg, RemoteSegment(self.directory, seg.remote,
                                                                self.tier))
                self._after_change()
            done.append(seg)
        for seg in done:  # no reader reaches them any more (see compactor.run)
            seg.close()
            delete_local_files(seg)
        if done:
            fsio.fsync_dir(self.directory)
        return len(done)

    def _pick(self) -> tuple[LogSegment, list[int]] | None:
        """The oldest sealed segment not copied yet, with its settled cancellations (a
        cancellation a crash could still undo is not exported); marked in flight. None
        once stopping."""
        with self._lock:
            for seg in self._segments.between(self._scan_from, _END):
                if seg is self._segments.active or self._stop.is_set():
                    return None
                if seg.remote is None:
                    self._in_flight = seg
                    # the copy's `.cancelled` holds only what is durable here (see
                    # cancel_export.py: the store never knows more than the directory)
                    self._cancels.sync()
                    return seg, self._cancels.settled_between(seg.base_offset,
                                                              seg.next_offset)
        return None

    # ------------------------------------------------------------------ the thread

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"kdelay-remote-{self.directory}",
                                        daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Run a pass soon (a segment was sealed, or retention gave up a remote copy)."""
        self._wake.set()

    def stop(self) -> None:
        """No pass from here on: stop the thread and wait for the pass under way, the
        thread's or a caller's (it ends after the copy in flight, whose every request ends
        within the store's timeout)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        with self._one_at_a_time:
            pass

    def _run(self) -> None:
        backoff = 0.0
        while not self._stop.is_set():
            if backoff:
                self._stop.wait(backoff)  # not woken by rolls: the store is failing
            else:
                self._wake.wait(_IDLE_S)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.sync()
                backoff = 0.0
            except Exception as e:  # the store, or the local disk: retried all the same
                backoff = min(max(2 * backoff, _BACKOFF_S[0]), _BACKOFF_S[1])
                _log.warning("kdelay tiered storage %s: sync failed, retrying in %.1f s: %s",
                             self.directory, backoff, e)
