"""The sync's export of cancellations: each copied segment's `.cancellations` object
(cancelled_object.py) kept equal to the segment's settled cancellations, so that a cancel
or a reschedule made after the copy outlives the local disk once a sync has run.

Per pass (step 3 of sync.py), outside the log's lock but for two short holds:

1. which copied segments changed: the count of each one's cancellations (the Log's
   CancelStore, in memory) against the count the store holds. A copied segment's
   cancellations only grow (compaction never rewrites a copied segment, retention takes
   it whole) and the store is only ever given what is durable locally, so equal counts
   mean equal sets (and a directory holding fewer, its journal damaged, never takes
   any away from the store). The store's counts are learnt from one listing after an open (the
   object's size says its count; without one, the `.cancelled` object's, as the manifest
   records it), and kept in memory after each put;
2. if any changed, under the lock: reschedules waiting for their copy's fsync are settled
   (the active segment is fsync'd: cancel_ops.settle_moves) and the journals fsync'd, so
   what is exported is durable here first (a crash cannot leave the store knowing of a
   cancellation the directory lost); then a snapshot of each changed segment's settled
   cancellations;
3. one put per changed segment, replacing its object whole (a reader sees the old or the
   new one, never a mix). A crash anywhere leaves the store with a subset of what the
   directory holds durably, which a later pass completes.

Cost per pass: O(copied segments) in memory, no request unless something changed; then
one fsync of the active segment (only if a reschedule waits), the journals' fsyncs, and a
put of 36 + 8 bytes per cancelled offset for each changed segment.
"""

from __future__ import annotations

import threading

from ...remote.store import RemoteStore
from ..cancellation.cancel_ops import settle_moves
from ..cancellation.cancel_store import CancelStore
from ..segments.segment_set import SegmentSet
from .cancelled_object import (
    CANCELLATIONS_SUFFIX,
    CANCELLED_SUFFIX,
    cancellations_count,
    encode_cancellations,
)
from .manifest import RemoteCopy

__all__ = ["CancelExport", "stored_counts"]


def stored_counts(listing: dict[str, int], copies: dict[int, RemoteCopy]) -> dict[int, int]:
    """base -> how many cancelled offsets the store holds for each copy in `copies`, from a
    listing (`store.list()`): its `.cancellations` object's size, else its `.cancelled`
    object's as the manifest records it, else 0. A damaged size counts as -1 (never equal:
    the next export replaces it)."""
    out = {}
    for base, copy in copies.items():
        size = listing.get(copy.object_name(CANCELLATIONS_SUFFIX))
        if size is not None:
            n = cancellations_count(size)
            out[base] = -1 if n is None else n
        else:
            out[base] = copy.objects.get(CANCELLED_SUFFIX, (0, 0))[0] // 8
    return out


class CancelExport:
    """One Log's export of its copied segments' cancellations (see the module docstring).
    Driven by the sync, one pass at a time."""

    def __init__(self, store: RemoteStore, segments: SegmentSet, lock: threading.RLock,
                 cancels: CancelStore):
        self._store = store
        self._segments = segments
        self._lock = lock
        self._cancels = cancels
        self._stored: dict[int, int] | None = None  # None: not known, learn from a listing

    def export(self) -> int:
        """Bring the store's `.cancellations` objects up to date; returns how many were
        written. Raises RemoteStorageError (what was written stays written; the rest is
        retried by the next pass)."""
        with self._lock:
            copies = {s.base_offset: s.remote for s in self._segments if s.remote is not None}
            counts = self._cancels.per_segment()
        if self._stored is None:
            self._stored = stored_counts(self._store.list(), copies)
        stored = self._stored
        # the store's only grow: a directory that holds fewer (its journal damaged) never
        # takes cancellations away from the store
        changed = [b for b in copies if counts.get(b, 0) > stored.get(b, 0)]
        if not changed:
            return 0
        with self._lock:
            settle_moves(self._segments, self._cancels)
            self._cancels.sync()  # what the store is given is durable here first
            snapshot = [(copies[b], self._cancels.settled_between(b, copies[b].next_offset))
                        for b in changed]
        written = 0
        for copy, offsets in snapshot:
            if len(offsets) <= stored.get(copy.base_offset, 0):
                continue  # (only unconfirmed moves were new: none now, or a later pass)
            self._store.put(copy.object_name(CANCELLATIONS_SUFFIX),
                            encode_cancellations(copy.base_offset, copy.next_offset, offsets))
            stored[copy.base_offset] = len(offsets)
            written += 1
        for base in [b for b in stored if b not in copies]:  # deleted by retention
            del stored[base]
        return written
