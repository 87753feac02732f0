"""The append horizon: what a lock-free reader in another process may assume about appends
it has not seen yet.

A reader that does not hold the log's lock (the Spark streaming source) must decide, for a
time E, "every record due at or before E is already in the files I am about to read". The
danger is an append that chose its deliverAfter (from the writer's log clock) before the
reader planned, but whose bytes reach the .log after the reader read it. The writer closes
that gap by publishing, in a tiny shared file, whether an append is in progress and a lower
bound of the deliverAfter it will get.

File `append.horizon` in the partition directory, 32 bytes, little-endian int64 words,
owned by the process holding the log's lock (rewritten whole by `Log.open`, updated in
place through a shared memory map; never fsync'd: it describes a live process only):

    0  magic  b"KDLYHRZ1"
    8  pid    the writer's process id
    16 seq    even: no append in progress; odd: an append is in progress
    24 floor  while seq is odd: a lower bound of that append's deliverAfter

Writer protocol (`Horizon.writing`, horizon_writer.pyx, around every write that reads the
log clock, under the log's lock, or `start` and `end`, which it calls, on the append path;
`start` calls `begin`): begin stores floor = the log clock's current floor, then seq += 1
(odd), then executes a full memory barrier so both stores are visible before the log clock
is read; the append then reads the clock (never below floor: the log clock is monotonic),
writes its batch, and `end` stores floor = the clock it used, then seq += 1 (even).

Reader rule (`read_bound`): read the wall clock R, then this file, then the segment files.
* idle (seq even), no file, or a writer that no longer exists: any append not yet visible
  starts after the reader read the file, so reads the writer's clock after R: its
  deliverAfter >= R. Every record with deliverAfter <= R - 1 is in the files.
* in progress (seq odd, floor F): that append's deliverAfter >= F, later ones' >= R as
  above: every record with deliverAfter <= min(R, F) - 1 is in the files.
The bound assumes the writer's log clock does not lag the reader's wall clock (the default
log clock is that same wall clock, and its monotonic floor only pushes it ahead). A reader
must also never move its own bound backwards (it keeps the max of what it has used).

Cost to the writer: four 8-byte stores into a mapped page and one fence per append, in C
(a few tens of nanoseconds).
"""

from __future__ import annotations

import os
import threading

import numpy as np

from .layout import HORIZON_FILE

__all__ = ["HORIZON_FILE", "check_file", "read_bound", "read_state"]
MAGIC = b"KDLYHRZ1"
SIZE = 32
PID_WORD, SEQ_WORD, FLOOR_WORD = 1, 2, 3  # word indexes (the writer's: horizon_writer.pyx)


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_file(directory: str) -> str | None:
    """Why the directory's horizon file is malformed, or None (absent or well-formed).
    A malformed file is harmless (readers treat it as "no writer", the next Log.open
    rewrites it); `kdelay verify` reports it as a warning."""
    path = os.path.join(directory, HORIZON_FILE)
    try:
        with open(path, "rb") as f:
            raw = f.read(SIZE + 1)
    except FileNotFoundError:
        return None
    if len(raw) != SIZE:
        return f"{len(raw)} bytes, expected {SIZE}"
    if raw[:8] != MAGIC:
        return f"bad magic {raw[:8]!r}"
    if int.from_bytes(raw[8:16], "little", signed=True) < 0:
        return "negative pid"
    return None


def read_state(directory: str) -> tuple[bool, int] | None:
    """(append in progress?, floor) as published, or None when there is no live writer
    (no file, a damaged one, or its writer process is gone)."""
    path = os.path.join(directory, HORIZON_FILE)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        prev = None
        for _ in range(1000):  # two identical reads in a row are one consistent state
            raw = os.pread(fd, SIZE, 0)
            if raw == prev:
                break
            prev = raw
        else:
            raw = None
    finally:
        os.close(fd)
    if raw is None or len(raw) != SIZE or raw[:8] != MAGIC:
        return None
    _, pid, seq, floor = np.frombuffer(raw, dtype="<i8").tolist()
    if not _alive(pid):
        return None
    return bool(seq % 2), floor


def read_bound(directory: str, now: int) -> int:
    """The largest deliverAfter E such that every record of the log at `directory` due at
    or before E is already visible in its files, given the reader's wall clock `now`, taken
    before this call. Read the segment files only after this returns."""
    _barrier_reader()
    state = read_state(directory)
    if state is not None and state[0]:
        return min(now, state[1]) - 1
    return now - 1


_READER_FENCE = threading.Lock()


def _new_fence_in_child() -> None:
    # a reader thread of the parent may have held the fence at the fork, and no thread of
    # the child would ever release it: the child's lock-free readers would wait forever
    global _READER_FENCE
    _READER_FENCE = threading.Lock()


os.register_at_fork(after_in_child=_new_fence_in_child)


def _barrier_reader() -> None:
    _READER_FENCE.acquire()
    _READER_FENCE.release()
