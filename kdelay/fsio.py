"""Every file operation the engine performs that matters for durability goes through here.

Keeping them in one module gives one seam for fault injection (crash points, ENOSPC) and
one place that states the durability rules: data is fsync'd before the rename that
publishes it, and the directory is fsync'd after a rename, create or unlink.
"""

from __future__ import annotations

import contextlib
import os

__all__ = [
    "atomic_write", "fdatasync", "fsync", "fsync_dir", "open_append", "open_existing", "open_read",
    "pread", "rename", "write_new", "truncate", "unlink", "write", "read_small",
]

O_BINARY = getattr(os, "O_BINARY", 0)


def open_append(path: str) -> int:
    """Open (creating if needed) a file for appending; returns the descriptor."""
    return os.open(path, os.O_RDWR | os.O_CREAT | O_BINARY, 0o666)


def open_existing(path: str) -> int:
    """Open an existing file for reading and writing in place (FileNotFoundError if it is
    gone: nothing is created)."""
    return os.open(path, os.O_RDWR | O_BINARY)


def open_read(path: str) -> int:
    """Open an existing file read-only (a reader that must outlive a concurrent unlink or
    rename of the name keeps reading the same file through it)."""
    return os.open(path, os.O_RDONLY | O_BINARY)


def write(fd: int, data: bytes, position: int) -> None:
    """Write all of `data` at `position` (a short write is retried until done)."""
    n = os.pwrite(fd, data, position)
    if n == len(data):  # the usual case: all of it at once
        return
    view = memoryview(data)[n:]
    position += n
    while view:
        n = os.pwrite(fd, view, position)
        view = view[n:]
        position += n


def pread(fd: int, size: int, position: int) -> bytes:
    return os.pread(fd, size, position)


def fsync(fd: int) -> None:
    os.fsync(fd)


def fdatasync(fd: int) -> None:
    """Make the file's bytes durable, and its size, but not its times: for a file rewritten
    in place, cheaper than fsync where the platform has it."""
    _fdatasync(fd)


_fdatasync = getattr(os, "fdatasync", os.fsync)


def truncate(fd: int, size: int) -> None:
    os.ftruncate(fd, size)


def rename(src: str, dst: str) -> None:
    os.replace(src, dst)


def unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, *, sync_dir: bool = True) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new file:
    write a temp file, fsync it, rename over, fsync the directory."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | O_BINARY, 0o666)
    try:
        write(fd, data, 0)
        fsync(fd)
    finally:
        os.close(fd)
    rename(tmp, path)
    if sync_dir:
        fsync_dir(os.path.dirname(os.path.abspath(path)))


def write_new(path: str, data: bytes) -> None:
    """Create (or overwrite) `path` with `data` and fsync it; no rename, no directory fsync:
    for a file that is itself temporary until a later rename publishes it (compaction's
    `.cleaned` files), so that rename's directory fsync makes the name durable."""
    fd = open_append(path)
    try:
        truncate(fd, 0)
        write(fd, data, 0)
        fsync(fd)
    finally:
        os.close(fd)


def read_small(path: str) -> bytes | None:
    """The whole of a small file, or None if it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
