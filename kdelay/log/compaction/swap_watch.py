"""A compaction's swap as a reader without the log's lock sees it, and waiting one out.

swap.install renames a rewritten segment's files into place one by one: from the rename
that commits it (`<base>.log.swap` appears) to its last one (that file becomes
`<base>.log`), the directory holds a mix of old and new (a merged-away .log already
deleted, new indexes and marker beside the old .log). A listing without a `.log.swap`
shows old or new, never a mix. A swap takes a few renames, but its process may be
descheduled in the middle of it; one whose process died stays until the next Log.open
completes it, and only a process holding the log's lock can be swapping.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from ..segments.layout import LOG_SUFFIX, SWAP_SUFFIX, parse_segment_name
from ..segments.live_tail import lock_held

__all__ = ["between_swaps", "swapping", "wait_out_swaps"]
T = TypeVar("T")
_SWAPPING = LOG_SUFFIX + SWAP_SUFFIX


def swapping(names: Iterable[str]) -> bool:
    """Does this directory listing show a swap being installed (or left half done)?"""
    return any(n.endswith(_SWAPPING) and parse_segment_name(n) is not None for n in names)


def wait_out_swaps(directory: str, attempt: Callable[[], T | None], timeout_s: float
                   ) -> T | None:
    """`attempt()` until it returns something other than None, trying again every 10 ms
    while a process holds the directory's lock, for up to `timeout_s`. None when it never
    did: nobody holds the lock (a swap left half done by a process that died), or the time
    ran out."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = attempt()
        if got is not None or not lock_held(directory) or time.monotonic() > deadline:
            return got
        time.sleep(0.01)


def between_swaps(directory: str, timeout_s: float) -> list[str] | None:
    """The directory's names from a listing that shows no swap being installed (see
    wait_out_swaps; None: it still showed one)."""
    def attempt() -> list[str] | None:
        names = os.listdir(directory)
        return None if swapping(names) else names

    return wait_out_swaps(directory, attempt, timeout_s)
