"""A read-only check of partition directories that a live writer may be changing, run
again until what it finds holds still (`settle`): used by `kdelay verify` and `stats`
(kdelay/tools/) and by Spark's verify (kdelay/spark/checks.py) alike."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")  # what a check returns

_SUBDIRS = ("", "groups")


def fingerprint(directories: Sequence[str]) -> frozenset:
    """What a writer changes in partition directories: every file's name, inode, size and
    mtime (each directory itself and its groups/ subdirectory). Equal before and after a
    check: nothing moved while it read."""
    out = set()
    for directory in directories:
        for sub in _SUBDIRS:
            try:
                with os.scandir(os.path.join(directory, sub)) as it:
                    for e in it:
                        try:
                            st = e.stat()
                        except FileNotFoundError:
                            continue
                        out.add((directory, sub, e.name, st.st_ino, st.st_size,
                                 st.st_mtime_ns))
            except (FileNotFoundError, NotADirectoryError):
                continue
    return frozenset(out)


def in_motion(message: str) -> str:
    """How a check reports, as information, a problem `settle` did not find every time."""
    return f"in motion (changed while checked; not seen again): {message}"


def settle(directories: str | Sequence[str], run: Callable[[bool], T],
           problems: Callable[[T], set], attempts: int = 3) -> tuple[T, set]:
    """Run a read-only check of `directories` (one, or several: `run(first)`) so that a
    live log (another process appending, rolling, applying retention, compacting,
    committing) is not reported damaged for what is merely in motion. A check that finds
    nothing, or during which nothing in the directories changed, is the answer. Otherwise
    it runs again (up to `attempts`), and only problems found by every run count: real
    damage stays where it is, while what a check saw half-done (a file deleted between
    listing and reading, an index persisted mid-check, a segment compaction swapped in)
    is gone or elsewhere the next time. Returns the last run's result and the problems
    that count. Costs one run on a still log."""
    dirs = [directories] if isinstance(directories, str) else list(directories)
    found: set = set()
    persistent: set | None = None
    for i in range(max(1, attempts)):
        before = fingerprint(dirs)
        result = run(i == 0)
        found = problems(result)
        if not found or fingerprint(dirs) == before:
            return result, found
        persistent = found if persistent is None else persistent & found
    return result, persistent or set()
