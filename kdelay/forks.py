"""Forked children: an open Log, and everything attached to it, belongs to the process that
opened it.

fork() (gunicorn --preload, Celery's prefork pool, multiprocessing's "fork") copies an open
Log into the child with all its descriptors: appends from two processes would each take
the same next offsets and overwrite each other's batches, and the indexes of both would be
wrong. So every object that holds file handles for its user (a Log, a Topic, a
QueueConsumer) records its process in an `Ownership` when it opens. In a forked child,
before any of the child's own code runs (os.register_at_fork), each one's `_orphaned()`
closes it for good and writes nothing; its usual closed check then refuses every call with
ForkedProcessError, saying why.

So the fork check costs nothing per call: it is the closed flag each object tests anyway
(os.getpid() is a system call, ~0.35 µs here, asked only once a call is refused).
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol, Self

from .errors import ForkedProcessError, LogClosedError

__all__ = ["Orphanable", "Owned", "Ownership"]


class Orphanable(Protocol):
    def _orphaned(self) -> None:
        """In a forked child: closed for good, without writing anything and without taking
        a lock (a thread of the parent may have held it at the fork)."""


_open: weakref.WeakSet[Orphanable] = weakref.WeakSet()


class Ownership:
    """The process an open object belongs to (the one that made this), and the error a
    call on it is refused with once it is closed. Registers the object, weakly, for
    `_orphaned()` in forked children."""

    __slots__ = ("what", "pid")

    def __init__(self, owner: Orphanable, what: str):
        self.what = what  # e.g. "log /data/t-0", for messages
        self.pid = os.getpid()
        _open.add(owner)

    def refusal(self) -> LogClosedError:
        """ForkedProcessError in a process other than the owner's (a forked child), else
        LogClosedError."""
        pid = os.getpid()
        if pid != self.pid:
            return ForkedProcessError(
                f"{self.what} was opened by process {self.pid}; this is process {pid}, "
                f"forked from it, where it is closed: a forked child must open its own Log "
                f"(after the parent closes it), or the parent must open it after forking")
        return LogClosedError(f"{self.what} is closed")

    def check_close_again(self) -> None:
        """Closing what is closed already does nothing, except in a forked child, where
        close is refused like every other call (it must not release what the parent
        holds)."""
        if os.getpid() != self.pid:
            raise self.refusal()


def _after_fork_in_child() -> None:
    for owner in list(_open):
        owner._orphaned()
    _open.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Owned:
    """What an object with an Ownership shares (a Log, a Topic, a QueueConsumer): `closed`,
    the check every call makes, and closing as a context manager. The object sets `_closed`
    and `_owner`, and defines `close` and `_orphaned`."""

    _closed: bool
    _owner: Ownership

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        """LogClosedError once closed; ForkedProcessError in a forked child."""
        if self._closed:
            raise self._owner.refusal()

    def __enter__(self) -> Self:
        return self

    def close(self) -> None:
        """Each owner closes its own way."""
        raise NotImplementedError

    def __exit__(self, *exc: object) -> None:
        self.close()
