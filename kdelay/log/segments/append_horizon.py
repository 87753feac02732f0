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

Writer protocol (`Horizon.writing`, around every write that reads the log clock, under the
log's lock, or `start` and `end`, which it calls, on the append path; `start` calls
`begin`): begin stores floor = the log clock's current floor, then seq += 1 (odd), then executes a
full memory barrier (a lock-prefixed instruction, via a mutex) so both stores are visible
before the log clock is read; the append then reads the clock (never below floor: the log
clock is monotonic), writes its batch, and `end` stores floor = the clock it used, then
seq += 1 (even).

Reader rule (`read_bound`): read the wall clock R, then this file, then the segment files.
* idle (seq even), no file, or a writer that no longer exists: any append not yet visible
  starts after the reader read the file, so reads the writer's clock after R: its
  deliverAfter >= R. Every record with deliverAfter <= R - 1 is in the files.
* in progress (seq odd, floor F): that append's deliverAfter >= F, later ones' >= R as
  above: every record with deliverAfter <= min(R, F) - 1 is in the files.
The bound assumes the writer's log clock does not lag the reader's wall clock (the default
log clock is that same wall clock, and its monotonic floor only pushes it ahead). A reader
must also never move its own bound backwards (it keeps the max of what it has used).

Cost to the writer: two 8-byte stores into a mapped page and one uncontended mutex
round trip per append (well under a microsecond).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import sys
import threading
from collections.abc import Callable

import numpy as np

from .layout import HORIZON_FILE

__all__ = ["HORIZON_FILE", "Horizon", "check_file", "read_bound", "read_state"]
MAGIC = b"KDLYHRZ1"
SIZE = 32
_PID, _SEQ, _FLOOR = 1, 2, 3  # word indexes


class Horizon:
    """The writer's side. Created by `Log.open` after it has taken the lock."""

    def __init__(self, directory: str, floor: int):
        path = os.path.join(directory, HORIZON_FILE)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, SIZE)
            self._map = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        # plain 8-byte stores: a native int64 view on little-endian machines (a few tens of
        # ns each, aligned, so never torn on x86-64/arm64), numpy's '<i8' elsewhere
        self._words = (memoryview(self._map).cast("q") if sys.byteorder == "little"
                       else np.frombuffer(self._map, dtype="<i8"))
        self._fence = threading.Lock()
        self._map[0:8] = MAGIC
        self._words[_SEQ] = 0
        self._words[_FLOOR] = floor
        self._words[_PID] = os.getpid()
        self._seq = 0
        self._write_floor = self._write_used = floor  # see writing()
        self._write_clock: Callable[[], int] | None = None

    def writing(self, floor: int, clock: Callable[[], int]) -> Horizon:
        """`with horizon.writing(floor, clock) as now:` a write at the log clock `now`,
        published as under way (`begin(floor)`) from before the clock is read until the
        block ends (`end` with the clock used, or with `floor` if reading it raised).
        The horizon is its own context manager, armed here: writes come one at a time
        (under the log's lock), and a fresh object per append would cost more than the
        stores it publishes."""
        self._write_floor = floor
        self._write_clock = clock
        return self

    def __enter__(self) -> int:
        return self.start(self._write_floor, self._write_clock)

    def __exit__(self, *exc: object) -> None:
        self.end(self._write_used)

    def start(self, floor: int, clock: Callable[[], int]) -> int:
        """`begin(floor)`, then read the clock: the clock the write uses (`end` it with
        that). A clock that raises ends the write at `floor`. (What `with writing(...)`
        does on entry, for the append path, which calls it and `end` directly.)"""
        self.begin(floor)
        try:
            self._write_used = clock()
        except BaseException:
            self.end(floor)
            raise
        return self._write_used

    def begin(self, floor: int) -> None:
        self._words[_FLOOR] = floor
        self._seq += 1
        self._words[_SEQ] = self._seq
        # acquiring a mutex is a lock-prefixed read-modify-write: a full barrier on x86-64
        # and an acquire/release pair elsewhere, so the stores above it are visible first
        self._fence.acquire()
        self._fence.release()

    def end(self, used: int) -> None:
        self._words[_FLOOR] = used
        self._seq += 1
        self._words[_SEQ] = self._seq

    def close(self) -> None:
        """The writer is gone: readers treat the file as "no writer" (pid 0)."""
        if self._seq % 2:
            self.end(int(self._words[_FLOOR]))
        self._words[_PID] = 0
        if isinstance(self._words, memoryview):
            self._words.release()
        self._words = None  # release the buffer export before unmapping
        with contextlib.suppress(BufferError, ValueError):
            self._map.close()


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


def _barrier_reader() -> None:
    _READER_FENCE.acquire()
    _READER_FENCE.release()
