"""The directory lock: one process owns a log directory while a Log holds it open.

File `.lock`: flock'd (exclusive, non-blocking) while a Log holds the directory, so the
kernel releases it when the holder dies; it holds the holder's pid in ASCII decimal
(written once the lock is held, only to name the holder in LogLockedError). Readers that
take no lock (the Spark source, the CLI) never touch it; `kdelay rebuild-index` and
`kdelay compact` take it as a Log would.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from ...errors import LogLockedError
from ..segments.layout import LOCK_FILE

ONE_OWNER = ("one process owns a log: share the Log between threads, or read it with the "
             "Spark source or the CLI, which take no lock; for many processes, run "
             "`kdelay serve` (a Kafka-protocol broker) as the one that owns it")


def take_lock(directory: str) -> int:
    """Take the directory's exclusive lock (flock on .lock, released by the kernel when the
    holder dies) and record this process's pid in it; returns the descriptor that holds it.
    Raises LogLockedError, naming the holder's pid, if taken."""
    fd = os.open(os.path.join(directory, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _holder_pid(fd)
        os.close(fd)
        raise LogLockedError(f"log directory {directory} is locked by {lock_holder(pid)}; "
                             f"{ONE_OWNER}", pid) from None
    # the pid only names the holder in messages: failing to record it (a full disk) must
    # not refuse the open. Written before the truncate, so a reader never sees it empty;
    # not rewritten when it is there already (a reopen in one process writes nothing).
    mine = b"%d\n" % os.getpid()
    with contextlib.suppress(OSError):
        if os.pread(fd, len(mine) + 1, 0) != mine:
            os.pwrite(fd, mine, 0)
            os.ftruncate(fd, len(mine))
    return fd


def lock_holder(pid: int | None) -> str:
    """Who holds a log's lock, as error messages name it (`pid` from LogLockedError)."""
    if pid is None:
        return "another open Log"
    if pid == os.getpid():
        return f"this process (pid {pid}), which has it open already"
    return f"process {pid}"


def _holder_pid(fd: int) -> int | None:
    """The pid the lock file names, if that process is alive: a file left by a holder that
    died (or by one that wrote no pid) names nobody."""
    try:
        pid = int(os.pread(fd, 32, 0).split(b"\n", 1)[0])
    except (OSError, ValueError):
        return None
    if not 0 < pid < 1 << 31:
        return None
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # it exists, as another user's
    return pid
