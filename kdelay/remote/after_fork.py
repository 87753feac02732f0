"""Object store requests in a forked child: refused, never hung.

obstore (Rust) runs every request on a pool of runtime threads that it starts in the
process at the first request. fork() copies none of them: in a child forked after the
parent made a request, every request waits forever for threads that are not there, on a
store made before the fork or after it, file://, memory:// and S3 alike (measured with
obstore 0.12: a put in such a child never returns). A child forked before the parent's
first request is unaffected (it starts its own threads).

So the parent notes that it made a request (one global flag, set per request: nothing
next to a request's cost), and in a forked child (os.register_at_fork) every store open
and request raises RemoteStorageError saying why and what to do instead. The child's own
local logs are unaffected; its tiered logs must be opened in processes started with
"spawn" or "forkserver", or in workers forked before the parent touched a store (e.g.
not in a gunicorn --preload master)."""

from __future__ import annotations

import os

from ..errors import RemoteStorageError

__all__ = ["before_request", "check_usable"]

_requested = False  # this process has made a store request (obstore's threads run)
_forked_from: int | None = None  # set in a child forked after such a request


def check_usable() -> None:
    """RemoteStorageError in a child forked after its parent made a store request."""
    if _forked_from is not None:
        raise RemoteStorageError(
            f"object store requests cannot be made in process {os.getpid()}: it was forked "
            f"from process {_forked_from} after that one made some, and obstore's request "
            f"threads do not survive a fork (its requests would wait forever). Open logs "
            f"with tiered storage in processes started with 'spawn' or 'forkserver', or "
            f"fork before the parent's first store request")


def before_request() -> None:
    """Called before every store request: refused in such a child, else noted."""
    global _requested
    if _forked_from is not None:
        check_usable()
    _requested = True


def _after_fork_in_child() -> None:
    global _forked_from
    if _requested and _forked_from is None:
        _forked_from = os.getppid()


os.register_at_fork(after_in_child=_after_fork_in_child)
