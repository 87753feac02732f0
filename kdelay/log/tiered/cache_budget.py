"""CacheBudget: the bound on what remote segments hold in the local cache (their indexes
and the byte ranges fetched), LogConfig.remote_cache_bytes, shared by one log's remote
segments.

Each holder (a remote segment) is charged for what it caches; past the bound, the holders
used least recently are told to drop what they hold (`evict()`), never the one being
charged, so a single segment larger than the bound is still served. Thread-safe: holders
are charged from readers and from index prefetches.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol


class Holder(Protocol):
    def evict(self) -> None:
        """Drop everything cached (and call CacheBudget.release)."""


class CacheBudget:
    def __init__(self, limit: int):
        self.limit = limit
        self.held = 0
        self._by_holder: OrderedDict[Holder, int] = OrderedDict()
        self._lock = threading.Lock()

    def charge(self, holder: Holder, nbytes: int, *, evict: bool = True) -> None:
        """`holder` now caches `nbytes` more and was just used; past the bound, evict the
        least recently used others (unless `evict` is False: the next charge will)."""
        with self._lock:
            self._by_holder[holder] = self._by_holder.get(holder, 0) + nbytes
            self._by_holder.move_to_end(holder)
            self.held += nbytes
            victims, excess = [], self.held - self.limit if evict else 0
            for other, n in self._by_holder.items():  # least recently used first
                if excess <= 0:
                    break
                if other is not holder and n:
                    victims.append(other)
                    excess -= n
        for other in victims:
            other.evict()

    def touch(self, holder: Holder) -> None:
        """`holder` was used: it is the last to be evicted."""
        with self._lock:
            if holder in self._by_holder:
                self._by_holder.move_to_end(holder)

    def release(self, holder: Holder) -> None:
        """`holder` dropped everything it cached."""
        with self._lock:
            self.held -= self._by_holder.pop(holder, 0)
