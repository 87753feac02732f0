"""The tail of a live log as a lock-free reader sees it: an append in flight, or damage.

A writer appends a batch with one `pwrite` between `Horizon.begin` and `Horizon.end`
(append_horizon.py); a failed write is cut off again before the append returns
(segment.py), and opening a log truncates a torn tail. So while a writer holds the log,
the only short batch its files can end in is the one it is writing now. A reader that
walks the active .log meanwhile (a writer descheduled in the middle of its `pwrite` can
stay there for as long as the scheduler likes) must not call that damage. The same bytes
with no live writer, or with one that is not appending, are a torn tail (a crash) or
damage, as before.
"""

from __future__ import annotations

import os
import sys

from ...errors import CorruptLogError
from ..batch import codec
from . import append_horizon
from .layout import LOCK_FILE, LOG_SUFFIX, segment_bases, segment_file

__all__ = ["append_in_flight", "in_flight_message", "is_short_batch", "lock_held"]
_PROC_LOCKS = "/proc/locks"


def is_short_batch(path: str, position: int, end: int) -> bool:
    """Are the bytes of the .log at `path` from `position` up to `end` the start of one
    batch cut short: fewer than a header, or a sane header whose batch runs past `end`?
    (What a `pwrite` in progress leaves; a garbled header is not that.)"""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        head = os.pread(fd, codec.HEADER_SIZE, position)
    finally:
        os.close(fd)
    available = min(len(head), end - position)
    if available < codec.HEADER_SIZE:
        return available > 0
    try:
        h = codec.parse_header(head, 0, available=sys.maxsize)  # any length: checked below
    except CorruptLogError:
        return False
    return position + h.size > end


def lock_held(directory: str) -> bool:
    """Does a process hold the directory's lock (directory_lock.take_lock's flock on .lock)? A
    reader must not try to take it, even for a moment: a Log.open at that moment would
    fail. Linux lists every flock in /proc/locks; elsewhere this says True and the append
    horizon's own check of its writer's pid decides. A writer killed -9 has released the
    lock even while its process lingers unreaped (its pid still answers)."""
    try:
        inode = str(os.stat(os.path.join(directory, LOCK_FILE)).st_ino)
    except FileNotFoundError:
        return False  # no Log ever opened the directory
    try:
        with open(_PROC_LOCKS) as f:
            table = f.read()
    except OSError:
        return True  # no lock table here: the horizon decides
    for line in table.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:1442100 0 EOF" ("1: -> FLOCK ..." waits)
        fields = line.split()
        if "->" not in fields and "FLOCK" in fields and "WRITE" in fields and \
                fields[-3].rpartition(":")[2] == inode:
            return True
    return False


def append_in_flight(directory: str, base_offset: int, position: int, end: int) -> bool:
    """Is the framing break at `position` of segment `base_offset`, in bytes a reader walked
    up to `end`, the batch a live writer is appending right now (not damage)? It is when
    the segment is the directory's last (the active one), the bytes from `position` to
    `end` are a batch cut short (`is_short_batch`), and, read after those bytes, the
    directory's lock is held and the append horizon says its writer is alive with an
    append in progress. Costs a directory listing and a few small reads: call it only for
    a break at the end of a walk."""
    if segment_bases(directory)[-1:] != [base_offset]:
        return False
    state = append_horizon.read_state(directory)
    if state is None or not state[0] or not lock_held(directory):
        return False
    return is_short_batch(segment_file(directory, base_offset, LOG_SUFFIX), position, end)


def in_flight_message(position: int, end: int) -> str:
    """How readers report an append in flight found at `position` of bytes walked to `end`."""
    return (f"an append is in progress: the last {end - position} bytes are the start of "
            f"the batch its live writer is writing")
