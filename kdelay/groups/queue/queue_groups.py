"""The queue groups of one Log, which owns them as it owns its consumer-group positions.

A queue group open in this process has one live state per Log (kdelay.clients.queue's
GroupPartition, shared by the group's QueueConsumers on that Log). The Log holds it here:
the first member attaches it, the last one to detach closes it, every append notifies it
(its members wake if the batch is due before they would), and the Log's close closes it
(its members are refused from then on).
Every group, open here or not, also has its state files (state_store). `group_counts`
reports each group of a partition from its live state when it has one, else from its
files: `Log.metrics()["queues"]` and `kdelay stats` both call it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar, cast

from ...errors import KdelayError
from ...fetch.long_poll import due_in_ms
from ...records import AppendResult, DeliveryKey
from . import state_store

__all__ = ["LiveGroup", "QueueGroups", "group_counts"]


class LiveGroup(Protocol):
    """What the Log needs of a live queue group."""

    closed: bool

    def counts(self, now: int) -> dict: ...

    def notify(self, due_in: int = 0) -> None: ...

    def close(self) -> None: ...


G = TypeVar("G", bound=LiveGroup)
AppendListener = Callable[[AppendResult], None]


class QueueGroups:
    """The live queue groups of one open Log, with how many members each has."""

    def __init__(self, log_path: str, add_append_listener: Callable[[AppendListener], None]):
        self.log_path = log_path
        self._add_append_listener: Callable[[AppendListener], None] | None = add_append_listener
        self._live: dict[str, tuple[LiveGroup, int]] = {}  # group -> (state, members)
        self._lock = threading.Lock()

    def attach(self, group: str, open_group: Callable[[], G]) -> G:
        """One more member of `group`: its live state, made by `open_group()` for the first
        one (or when the one held was closed under it)."""
        with self._lock:
            state, members = self._live.get(group, (None, 0))
            if state is None or state.closed:
                if self._add_append_listener is not None:  # the first group: listen once
                    self._add_append_listener(self._appended)
                    self._add_append_listener = None
                state, members = open_group(), 0
            self._live[group] = (state, members + 1)
            # every state held was made by an `open_group` of the same kind (the callers'
            # one kind of live group), which the dict of them does not say
            return cast(G, state)

    def detach(self, group: str, state: LiveGroup) -> None:
        """One member fewer: the last one closes the state (its files stay)."""
        with self._lock:
            held, members = self._live.get(group, (None, 0))
            if held is not state:
                return  # closed and replaced already
            if members > 1:
                self._live[group] = (state, members - 1)
                return
            del self._live[group]
            state.close()

    def close(self) -> None:
        """The Log is closing (it refuses every call already): every live group closes, so
        that none of its members writes again; a group attached later finds the Log
        closed."""
        with self._lock:
            live, self._live = self._live, {}
        for state, _ in live.values():
            state.close()

    def orphaned(self) -> None:
        """In a forked child (the Log's `_orphaned`): every live group is closed for good,
        without taking a lock (a thread of the parent may have held one at the fork) and
        without writing anything."""
        for state, _ in list(self._live.values()):
            state.closed = True

    def live(self) -> dict[str, LiveGroup]:
        with self._lock:
            return {group: state for group, (state, _) in self._live.items()}

    def _appended(self, result: AppendResult) -> None:
        """The Log's append listener: notify every live group of when the batch comes due."""
        due_in = due_in_ms(result)
        for state in self.live().values():
            state.notify(due_in)

    def counts(self, now: int, due_after: Callable[[DeliveryKey | None], int]
               ) -> dict[str, dict]:
        """`group_counts` of this Log's partition, live groups from memory. Call without
        the Log's lock: a live group's counts take the group's lock, which a poll holds
        while it reads the Log."""
        return group_counts(self.log_path, now, due_after, self.live())


def group_counts(log_path: str, now: int, due_after: Callable[[DeliveryKey | None], int],
                 live: Mapping[str, LiveGroup] | None = None) -> dict[str, dict]:
    """Per queue group of the partition at `log_path` (with state files, or live): acquired,
    available, delayed, acked, rejected, in_flight and cursor; a group whose files cannot
    be read reports {"error": message} instead. A group in `live` counts from memory,
    others from their files (state_store.offline_counts). `available` also counts the
    records due now that the group has not reached yet: `due_after(cursor)`, which leaves
    cancelled records out (no poll returns them)."""
    live = live or {}
    out: dict[str, dict] = {}
    for group in sorted(set(state_store.group_names(log_path)) | set(live)):
        state = live.get(group)
        if state is not None:
            counts = state.counts(now)
        else:
            try:
                counts = state_store.offline_counts(state_store.load(log_path, group), now)
            except KdelayError as e:
                out[group] = {"error": str(e)}
                continue
        counts["available"] += due_after(counts["cursor"])
        out[group] = counts
    return out
