"""A fault-injecting layer under kdelay.fsio: crash points, lost page cache, ENOSPC.

`FaultInjector` replaces the mutating functions of `kdelay.fsio` (open_append when it
creates a file, write, fsync, fdatasync, truncate, rename, unlink, fsync_dir, and the
temp-file creation inside atomic_write) with wrappers that count every operation and can

- raise `SimulatedCrash` (a BaseException, so no `except Exception` in the engine can
  swallow it) before operation N, after which every further operation raises it too
  (the machine is dead: nothing more reaches the disk);
- raise OSError(ENOSPC) from operations that allocate space (write, file creation).

It also keeps a model of what is durable, so that `apply_crash` can turn the directory
into what a machine would find after rebooting:

- file contents: the bytes a file held at its last fsync (or when the injector started)
  are durable; anything written or truncated since lives only in the page cache;
- directory entries: the names a directory held at its last fsync_dir (or at start) are
  durable; creates, renames and unlinks since may be undone.

Crash modes: "process" (kill -9: the page cache survives, everything written is there),
"power" (only durable state survives: unsynced tails vanish, unsynced renames, creates and
unlinks are undone), "torn" (power loss where the page cache was part-written back: each
unsynced file keeps its durable bytes up to its first unsynced change, then a random-length,
partly garbled piece of what followed in the page cache, then (unless it was truncated since
its last fsync) its durable bytes beyond that piece, as a disk keeps the old bytes where an
overwrite in place had not reached; directory operations are undone).
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import fsio

__all__ = ["CRASH_MODES", "FaultInjector", "SimulatedCrash", "close_abandoned"]

CRASH_MODES = ("process", "power", "torn")


class SimulatedCrash(BaseException):
    """The machine died before the operation that raised it took effect."""


@dataclass
class _Dir:
    durable: dict[str, int]          # name -> inode at the last fsync_dir (or start)


@dataclass
class FaultInjector:
    """Wraps kdelay.fsio. Use as a context manager (installs/uninstalls the wrappers).

    `crash_at`: raise SimulatedCrash before the operation with this 0-based index.
    `enospc`: a predicate over (op name, path) saying whether that op fails with ENOSPC.
    `roots`: directories whose state is modelled for `apply_crash`.
    """

    roots: list[str]
    crash_at: int | None = None
    enospc: Callable[[str, str], bool] | None = None
    seed: int = 0
    ops: list[tuple[str, str]] = field(default_factory=list)
    crashed: bool = False

    def __post_init__(self) -> None:
        self.roots = [os.path.abspath(r) for r in self.roots]
        self._saved: dict[str, Callable] = {}
        self._synced: dict[int, bytes] = {}      # inode -> durable content
        self._last: dict[int, bytes] = {}        # inode -> content when it left the namespace
        self._dirs: dict[str, _Dir] = {}
        # the model keys contents by inode number, which a filesystem hands out again once
        # a file is gone: every inode the model has seen is held open until the reboot,
        # so no new file can take its number and its bytes
        self._pins: dict[int, int] = {}
        self._cut: set[int] = set()              # inodes truncated since their last fsync
        self._rng = random.Random(self.seed)
        for root in self.roots:
            self._snapshot_tree(root)

    # ------------------------------------------------------------------ model

    def _snapshot_tree(self, root: str) -> None:
        """Everything on disk when the injector starts is taken as durable."""
        if not os.path.isdir(root):
            return
        for dirpath, _dirnames, filenames in os.walk(root):
            entries = {}
            for name in filenames:
                p = os.path.join(dirpath, name)
                st = os.stat(p)
                entries[name] = st.st_ino
                self._pin(p, st.st_ino)
                with open(p, "rb") as f:
                    self._synced[st.st_ino] = f.read()
            self._dirs[os.path.abspath(dirpath)] = _Dir(entries)

    def _dir(self, dirpath: str) -> _Dir:
        dirpath = os.path.abspath(dirpath)
        d = self._dirs.get(dirpath)
        if d is None:
            # a directory the model had not seen: created during the run, empty when durable
            d = self._dirs[dirpath] = _Dir({})
        return d

    def _tracked(self, path: str) -> bool:
        p = os.path.abspath(path)
        return any(p == r or p.startswith(r + os.sep) for r in self.roots)

    def _pin(self, path: str, ino: int) -> None:
        if ino not in self._pins:
            with contextlib.suppress(OSError):
                self._pins[ino] = os.open(path, os.O_RDONLY)

    def _unpin(self) -> None:
        for fd in self._pins.values():
            os.close(fd)
        self._pins.clear()

    @staticmethod
    def _read(path: str) -> bytes | None:
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def _remember(self, path: str) -> None:
        """Keep the current bytes of a file about to leave the namespace (unlink or be
        renamed over), in case the undone directory operation brings it back."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return
        data = self._read(path)
        if data is not None:
            self._last[st.st_ino] = data
            self._pin(path, st.st_ino)

    # ------------------------------------------------------------------ counting

    def _step(self, op: str, path: str) -> None:
        if self.crashed:
            raise SimulatedCrash(f"after crash: {op} {path}")
        index = len(self.ops)
        self.ops.append((op, path))
        if self.crash_at is not None and index == self.crash_at:
            self.crashed = True
            raise SimulatedCrash(f"crash point {index}: {op} {path}")
        if self.enospc is not None and self.enospc(op, path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    # ------------------------------------------------------------------ wrappers

    def _open_append(self, path: str) -> int:
        creating = not os.path.exists(path)
        if creating:
            self._step("create", path)
        return self._saved["open_append"](path)

    def _write(self, fd: int, data: bytes, position: int) -> None:
        path = _fd_path(fd)
        try:
            self._step("write", path)
        except (SimulatedCrash, OSError):
            # a write the crash interrupted may have reached the page cache in part; a disk
            # that fills up takes a short write first, then refuses the rest
            if self._rng.random() < 0.5 and len(data) > 1:
                self._saved["write"](fd, bytes(data)[: self._rng.randrange(1, len(data))],
                                     position)
            raise
        self._saved["write"](fd, data, position)

    def _fsync(self, fd: int, op: str = "fsync") -> None:
        self._step(op, _fd_path(fd))
        self._saved[op](fd)
        # re-open through /proc: the descriptor may be write-only (atomic_write's temp file)
        with open(f"/proc/self/fd/{fd}", "rb") as f:
            ino = os.fstat(f.fileno()).st_ino
            self._synced[ino] = f.read()
            self._cut.discard(ino)
            self._pin(f"/proc/self/fd/{fd}", ino)

    def _fdatasync(self, fd: int) -> None:
        self._fsync(fd, "fdatasync")

    def _truncate(self, fd: int, size: int) -> None:
        self._step("truncate", _fd_path(fd))
        self._cut.add(os.fstat(fd).st_ino)
        self._saved["truncate"](fd, size)

    def _rename(self, src: str, dst: str) -> None:
        self._step("rename", dst)
        self._remember(dst)
        self._saved["rename"](src, dst)

    def _unlink(self, path: str) -> None:
        if not os.path.exists(path):
            return self._saved["unlink"](path)  # a no-op is no crash point
        self._step("unlink", path)
        self._remember(path)
        self._saved["unlink"](path)

    def _fsync_dir(self, path: str) -> None:
        self._step("fsync_dir", path)
        self._saved["fsync_dir"](path)
        d = self._dir(path)
        entries = {}
        for name in os.listdir(path):
            p = os.path.join(path, name)
            if os.path.isfile(p):
                entries[name] = os.stat(p).st_ino
                self._pin(p, entries[name])
        d.durable = entries

    def _atomic_write(self, path: str, data: bytes, *, sync_dir: bool = True) -> None:
        tmp = path + ".tmp"
        self._step("create", tmp)
        # the original's inner write/fsync/rename/fsync_dir go through the wrappers above
        self._saved["atomic_write"](path, data, sync_dir=sync_dir)

    # ------------------------------------------------------------------ install

    def __enter__(self) -> FaultInjector:
        for name in ("open_append", "write", "fsync", "fdatasync", "truncate", "rename",
                     "unlink", "fsync_dir", "atomic_write"):
            self._saved[name] = getattr(fsio, name)
            setattr(fsio, name, getattr(self, "_" + name))
        return self

    def __exit__(self, *exc) -> None:
        for name, fn in self._saved.items():
            setattr(fsio, name, fn)
        if not self.crashed:  # no reboot to model: the inodes may go
            self._unpin()

    # ------------------------------------------------------------------ the reboot

    def apply_crash(self, mode: str) -> dict[str, str]:
        """Rewrite every modelled directory into what survives a crash in `mode`; returns
        {path: what happened} for the files that changed. Call after uninstalling and after
        `close_abandoned` on the dead objects (their descriptors and locks)."""
        if mode not in CRASH_MODES:
            raise ValueError(mode)
        try:
            return self._reboot(mode)
        finally:
            self._unpin()

    def _reboot(self, mode: str) -> dict[str, str]:
        changes: dict[str, str] = {}
        if mode == "process":
            return changes
        for dirpath, d in list(self._dirs.items()):
            if not os.path.isdir(dirpath):
                continue
            current = {}
            for name in os.listdir(dirpath):
                p = os.path.join(dirpath, name)
                if os.path.isfile(p):
                    current[name] = os.stat(p).st_ino
            target: dict[str, bytes] = {}
            for name, ino in d.durable.items():
                target[name] = self._survivor(os.path.join(dirpath, name), ino,
                                              current.get(name) == ino, mode)
            for name, ino in current.items():
                if ino != d.durable.get(name):
                    changes.setdefault(os.path.join(dirpath, name), "namespace change undone")
            for name in current:
                os.unlink(os.path.join(dirpath, name))
            for name, data in target.items():
                p = os.path.join(dirpath, name)
                # new inode: stale memmaps of the dead process keep the old one alive
                with open(p, "wb") as f:
                    f.write(data)
                if data != self._synced.get(d.durable[name]):
                    changes[p] = "unsynced bytes survived in part"
        return changes

    def _survivor(self, path: str, ino: int, still_linked: bool, mode: str) -> bytes:
        """The bytes a durable directory entry points at after the crash."""
        if still_linked:
            now = self._read(path) or b""
        else:
            now = self._last.get(ino, self._synced.get(ino, b""))
        durable = self._synced.get(ino)
        if durable is None:
            # created and named durably, never fsync'd: its data may be anywhere from
            # nothing to everything
            durable = b""
        if mode == "power" or now == durable:
            return durable
        # torn: keep the common prefix, then part of what was in the page cache, possibly
        # garbled (blocks written back in any order, or not at all)
        common = 0
        limit = min(len(now), len(durable))
        while common < limit and now[common] == durable[common]:
            common += 1
        keep = self._rng.randint(common, len(now))
        tail = bytearray(now[common:keep])
        if tail and self._rng.random() < 0.5:
            i = self._rng.randrange(len(tail))
            j = min(len(tail), i + self._rng.randint(1, 64))
            tail[i:j] = bytes(self._rng.getrandbits(8) for _ in range(j - i))
        survivor = durable[:common] + bytes(tail)
        if len(survivor) < len(durable) and ino not in self._cut:
            # an overwrite in place: where it had not reached the disk, the old bytes remain
            survivor += durable[len(survivor):]
        return survivor


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"<fd {fd}>"


def close_abandoned(log) -> None:
    """Drop an open Log as a crashed process would: close its descriptors (releasing the
    directory lock) without flushing, persisting or marking anything."""
    life = getattr(log, "_life", log)  # a Log keeps its descriptors in log/local/open_and_close.py
    finalizer = getattr(life, "finalizer", None)
    if finalizer is not None:
        finalizer.detach()  # the descriptors are closed here, once
    for seg in list(getattr(log, "_segments", ())):
        # open_fd: a segment whose .log a lazy open never opened is not opened now
        fd = getattr(seg, "open_fd", getattr(seg, "fd", -1))
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
            seg.fd = -1
    cancels = getattr(log, "_cancels", None)
    if cancels is not None:
        cancels.close()  # only closes journal descriptors: writes nothing
    groups = getattr(getattr(log, "clients", None), "positions", None)
    if groups is not None:
        groups.close()  # only closes the commit journal's descriptor: writes nothing
    fd = getattr(life, "lock_fd", -1)
    if fd is not None and fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)
        life.lock_fd = -1
    log._closed = True
    flusher = getattr(getattr(log, "_maintenance", None), "_flusher", None)
    if flusher is not None:
        flusher.join(timeout=2)
