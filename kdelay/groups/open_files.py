"""The descriptors of position files kept open between commits, least recently used first.

Opening a file costs about as much CPU as the in-place write and fdatasync of a commit, so a
group's file stays open; but a process may hold many logs with many groups each, so the open
ones are bounded process-wide (`budget`) and the least recently used is closed when a new
one must open. A descriptor in use (`use`) is never closed under its user: it is pinned
until the `with` block ends, and while every open one is pinned the pool goes over budget
rather than wait. Entries belong to an owner (one GroupStore), so a store never writes
through another's descriptor and `forget` drops a closed store's at once.
"""

from __future__ import annotations

import contextlib
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator

Key = tuple[int, str]  # (owner, path)


def default_budget() -> int:
    """An eighth of the process's descriptor limit (between 64 and 8,192): the rest is for
    segments, connections and whatever else the process holds."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 8192
    return max(64, min(8192, soft // 8))


class DescriptorPool:
    def __init__(self, budget: int | None = None):
        self.budget = default_budget() if budget is None else budget
        self._lock = threading.Lock()
        self._open: OrderedDict[Key, int] = OrderedDict()  # least recently used first
        self._pins: dict[Key, int] = {}
        # owners collected without close(): their descriptors are closed at the next use
        # (a finalizer may run inside a garbage collection that this lock's holder
        # triggered, so it must take no lock; list.append is atomic)
        self._dead: list[int] = []
        self.opened = 0  # how many opens so far (for tests of the bound)
        # a forked child: a parent's thread may have held the lock, or a pin, at the fork
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        self._pins.clear()

    @contextlib.contextmanager
    def use(self, owner: int, path: str, opener: Callable[[str], int]) -> Iterator[int]:
        """The open descriptor of `path` for `owner`, opened with `opener` if it is not
        open; held open until the block ends. O(1), plus a close when over budget."""
        key = (owner, path)
        with self._lock:
            self._close_dead()
            fd = self._open.get(key)
            if fd is None:
                fd = opener(path)
                self._open[key] = fd
                self.opened += 1
            else:
                self._open.move_to_end(key)
            self._pins[key] = self._pins.get(key, 0) + 1
            self._evict()
        try:
            yield fd
        finally:
            with self._lock:
                left = self._pins[key] - 1
                if left:
                    self._pins[key] = left
                else:
                    del self._pins[key]
                self._evict()

    def drop(self, owner: int, path: str) -> None:
        """Close `path`'s descriptor for `owner` (after a failed write: the next use opens
        the file afresh). A pinned one is left to the eviction of the least recently used."""
        with self._lock:
            key = (owner, path)
            if key not in self._pins:
                fd = self._open.pop(key, None)
                if fd is not None:
                    os.close(fd)

    def forget(self, owner: int) -> None:
        """Close every unpinned descriptor `owner` holds. O(open descriptors)."""
        with self._lock:
            self._close_dead()
            self._close_owned(owner)

    def forget_later(self, owner: int) -> None:
        """`forget`, at the next use of the pool: for a finalizer, which takes no lock."""
        self._dead.append(owner)

    def _close_owned(self, owner: int) -> None:
        for key in [k for k in self._open if k[0] == owner and k not in self._pins]:
            os.close(self._open.pop(key))

    def _close_dead(self) -> None:
        while self._dead:
            self._close_owned(self._dead.pop())

    def held(self, owner: int) -> int:
        with self._lock:
            return sum(1 for k in self._open if k[0] == owner)

    def _evict(self) -> None:
        """Close the least recently used unpinned descriptors until within budget. O(1)
        per close: the scan passes only pinned entries (one per thread mid-commit)."""
        while len(self._open) > self.budget:
            victim = next((k for k in self._open if k not in self._pins), None)
            if victim is None:
                return
            os.close(self._open.pop(victim))

POOL = DescriptorPool()
