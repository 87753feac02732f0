"""A segment's bytes as the Spark readers see them: a local .log file, or the `.log` object
of a remote-only segment's committed copy (tiered storage), read by ranged requests.

Every Spark reader (scan.py, range_read.py, live.py, checks.py through the source) opens a
segment here and reads positions of its .log and its persisted indexes through the same
calls, wherever the segment lives. The driver lists a partition's segments (local .log
files and remote-only `N.remote` markers, layout.classify) and hands the remote copy to
the task in its plan; the task reaches the store from the directory's
`remote-storage.json` and the environment (credentials, as the AWS SDKs read them), and
fetches its own byte ranges (RemoteStore.get_ranges): nothing goes through the driver, and
nothing is written to the partition directory (a remote index is fetched and checked
against its manifest as the log's own cache does, index_cache.py, into a temporary file,
mapped, and the file removed; one that fails the checks reads as no index).

A remote copy never changes (compaction rewrites only segments not yet copied), so it has
no compaction merge to check. A local segment whose .log is deleted after planning because
local retention removed it (its `N.remote` marker stays) is read from its copy instead: the
same bytes at the same positions.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from collections.abc import Sequence

from ..errors import CorruptLogError, KdelayError
from ..index.base import AbstractIndex
from ..index.deliver_after_index import DeliverAfterIndex
from ..index.index_file import IndexFileError
from ..index.offset_index import OffsetIndex
from ..log.segments.layout import (
    DLYINDEX_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    REMOTE_SUFFIX,
    segment_file,
)
from ..log.tiered import tier
from ..log.tiered.index_cache import checked_index_object, load_copy_index
from ..log.tiered.manifest import RemoteCopy
from ..log.tiered.remote_marker import read_remote_marker
from ..remote.store import ObjectMissingError, RemoteStore

__all__ = ["LocalBytes", "RemoteBytes", "SegmentBytes", "file_ident", "open_segment",
           "remote_store"]

FileIdent = int | tuple  # see file_ident


def file_ident(st: os.stat_result, sealed: bool) -> FileIdent:
    """What tells a catalogued .log from a file that replaced it, as far as a stat can.

    The inode alone does not: a filesystem hands a freed inode number to the next file it
    makes (ext4 does within milliseconds), so a segment compaction rewrote twice can come
    back under the inode the reader catalogued, with other bytes at other positions. A
    sealed .log never changes in place, so its ctime, set when it was written and again
    when the swap renamed it into place, tells the two apart: (inode, ctime_ns). The
    segment being appended to changes its ctime with every append and is never rewritten
    by compaction: its inode alone (a plain int), until it is sealed; the catalogue then
    takes it afresh under its sealed identity."""
    return (st.st_ino, st.st_ctime_ns) if sealed else st.st_ino


class SegmentBytes:
    """One segment's .log, open for reading positions, and its persisted indexes."""

    base: int
    path: str  # for messages: the local path, or the remote object's full name
    size: int
    ident: int  # the local file's inode (LocalBytes only: read where `remote` is None)

    def is_file(self, ident: FileIdent) -> bool:
        """Are these the bytes of the file a catalogue identified by `ident` (file_ident,
        sealed or not as it was catalogued)? A remote copy never changes: always."""
        return True
    remote: RemoteCopy | None = None  # set when the bytes come from the store

    def read(self, pos: int, length: int) -> bytes:
        """`length` bytes at `pos` (fewer at the end)."""
        raise NotImplementedError

    def read_into(self, view: memoryview, pos: int) -> int:
        """Fill `view` from `pos`; how many bytes there were."""
        raise NotImplementedError

    def gather(self, positions: Sequence[int], sizes: Sequence[int], buf: bytearray) -> list[int]:
        """Read each (position, size) into `buf` one after another; how many bytes of each
        were there (fewer: the file ends inside it)."""
        raise NotImplementedError

    def dly_index(self) -> DeliverAfterIndex | None:
        """The persisted DeliverAfterIndex if it is current for these bytes, else None."""
        return self._index(DeliverAfterIndex, DLYINDEX_SUFFIX)

    def offset_index(self) -> OffsetIndex | None:
        return self._index(OffsetIndex, INDEX_SUFFIX)

    def _index(self, cls: type[AbstractIndex], suffix: str):
        raise NotImplementedError

    def still_current(self) -> bool:
        """Are these still the segment's bytes (not replaced by a compaction's swap)?"""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> SegmentBytes:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LocalBytes(SegmentBytes):
    """A local .log through one descriptor (so a file replaced meanwhile reads whole)."""

    def __init__(self, directory: str, base: int, fd: int):
        self.directory = directory
        self.base = base
        self.path = segment_file(directory, base, LOG_SUFFIX)
        self.fd = fd
        st = self._stat = os.fstat(fd)
        self.size, self.ident = st.st_size, st.st_ino

    def is_file(self, ident: FileIdent) -> bool:
        return ident == file_ident(self._stat, not isinstance(ident, int))

    def read(self, pos: int, length: int) -> bytes:
        return os.pread(self.fd, length, pos)

    def read_into(self, view: memoryview, pos: int) -> int:
        return os.preadv(self.fd, [view], pos)

    def gather(self, positions: Sequence[int], sizes: Sequence[int], buf: bytearray) -> list[int]:
        got, rel = [], 0
        for pos, size in zip(positions, sizes, strict=True):
            got.append(os.preadv(self.fd, [memoryview(buf)[rel:rel + size]], pos))
            rel += size
        return got

    def _index(self, cls: type[AbstractIndex], suffix: str):
        try:
            return cls.load(segment_file(self.directory, self.base, suffix),
                            base_offset=self.base, log_bytes=self.size)
        except (IndexFileError, ValueError, OSError):
            return None

    def still_current(self) -> bool:
        # the inode alone is exact here: while this descriptor holds the file open, no new
        # file can be given its inode number (see file_ident)
        try:
            return os.stat(self.path).st_ino == self.ident
        except FileNotFoundError:
            # deleted by local retention once copied: the copy holds these very bytes
            return os.path.exists(segment_file(self.directory, self.base, REMOTE_SUFFIX))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class RemoteBytes(SegmentBytes):
    """A remote-only segment's `.log` object, read by ranged requests."""

    remote: RemoteCopy  # (never None here)

    def __init__(self, store: RemoteStore, copy: RemoteCopy):
        self.store = store
        self.remote = copy
        self.base = copy.base_offset
        self.size = copy.size
        self.name = copy.object_name(LOG_SUFFIX)
        self.path = store.describe(self.name)

    def read(self, pos: int, length: int) -> bytes:
        end = min(pos + length, self.size)
        if end <= pos:
            return b""
        return self.store.get_ranges(self.name, [pos], [end])[0]

    def read_into(self, view: memoryview, pos: int) -> int:
        got = self.read(pos, len(view))
        view[:len(got)] = got
        return len(got)

    def gather(self, positions: Sequence[int], sizes: Sequence[int], buf: bytearray) -> list[int]:
        starts = [min(p, self.size) for p in positions]
        ends = [min(p + s, self.size) for p, s in zip(positions, sizes, strict=True)]
        wanted = [i for i, (s, e) in enumerate(zip(starts, ends, strict=True)) if e > s]
        parts = self.store.get_ranges(self.name, [starts[i] for i in wanted],
                                      [ends[i] for i in wanted]) if wanted else []
        fetched = dict(zip(wanted, parts, strict=True))
        got, rel = [], 0
        for i, size in enumerate(sizes):
            part = fetched.get(i, b"")
            buf[rel:rel + len(part)] = part
            got.append(len(part))
            rel += size
        return got

    def _index(self, cls: type[AbstractIndex], suffix: str):
        # an object its manifest does not vouch for reads as no index: the .log is walked
        try:
            raw = checked_index_object(self.store, self.remote, suffix)
        except (CorruptLogError, ObjectMissingError):
            return None
        # the loaders map a file: a temporary one, removed once mapped
        with tempfile.NamedTemporaryFile(prefix="kdelay-remote-", suffix=suffix) as f:
            f.write(raw)
            f.flush()
            try:
                return load_copy_index(f.name, self.remote, cls,
                                       self.store.describe(self.remote.object_name(suffix)))
            except (IndexFileError, CorruptLogError, ValueError):
                return None

    def still_current(self) -> bool:
        return True  # a committed copy never changes


def open_segment(directory: str, base: int, remote: RemoteCopy | None = None
                 ) -> SegmentBytes | None:
    """Segment `base` of partition directory `directory`: its local .log if there is one,
    else its remote copy (`remote`, as planned, or as its marker says now). None when it
    is gone altogether (retention)."""
    try:
        return LocalBytes(directory, base, os.open(segment_file(directory, base, LOG_SUFFIX),
                                                   os.O_RDONLY))
    except FileNotFoundError:
        pass
    copy = remote or read_remote_marker(directory, base)
    if copy is None:
        return None
    return RemoteBytes(remote_store(directory), copy)


def remote_store(directory: str) -> RemoteStore:
    """The store of the directory's tiered storage, from its `remote-storage.json` (one
    per process and store). Raises KdelayError when the directory records none."""
    store = tier.recorded_store(directory, _cached_store)
    if store is None:
        raise KdelayError(f"{directory}: a segment is held only in an object store, but the "
                          f"directory records no store ({tier.SETTINGS_FILE} is missing)")
    return store


def _cached_store(url: str, options: dict, partition: str) -> RemoteStore:
    return _store(url, json.dumps(options, sort_keys=True), partition)


@functools.lru_cache(maxsize=64)
def _store(url: str, options: str, partition: str) -> RemoteStore:
    return RemoteStore.open(url, json.loads(options), partition)
