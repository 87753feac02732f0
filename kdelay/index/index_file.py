"""The on-disk format shared by every index kind (.index, .timeindex, .dlyindex, and the
cancellations' cache .cancelindex).

    header (64 bytes, little-endian)
      0  8s  magic          7 bytes naming the kind (b"KDLYIDX", b"KOFFIDX", b"KTIMIDX",
                            b"KCANIDX"), then the format version, b"2"
      8  q   base_offset    the segment's base offset (must match the file name)
     16  q   log_bytes      size of the .log the index was built from (staleness check)
     24  q   next_offset    the segment's last offset + 1 (log end without reading the log)
     32  q   entries        number of entries n
     40  q   chunk_entries  entries per chunk C (>= 1)
     48  q   reserved
     56  I   table_crc      CRC-32C of the chunk table
     60  I   header_crc     CRC-32C of bytes 0..56
    columns, one after another, each n values long, in the kind's column order
    chunk table: ceil(n / C) uint32, the CRC of each chunk, entries [k*C, (k+1)*C) of every
      column in turn (chunk_checks.chunk_crc)

A reader maps the file (numpy views over an mmap: loading costs no copy, and searching is
numpy's searchsorted on the page cache) and checks the header and the chunk table at once;
then every chunk (`load_index`, `map_index(lazy=False)`), or the first and last chunk and
the others on first use (`map_index(lazy=True)`, chunk_checks.py). A header, table
or chunk that does not hold raises IndexFileError when found on loading; the caller then
rebuilds the index from its .log.

Version 1 (magic ending in b"1") had no chunks: bytes 40..56 were reserved, byte 56 held
the CRC of all the columns, and no table followed. Such a file is still read, and checked
whole when it is mapped; every index written is version 2.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from typing import NamedTuple

import crc32c
import numpy as np

from .. import fsio
from ..errors import IndexFileError
from .chunk_checks import ChunkChecks, FileId, chunk_table

HEADER = struct.Struct("<8sqqqqqqII")
HEADER_SIZE = HEADER.size
assert HEADER_SIZE == 64
KIND_BYTES = 7  # the magic's first 7 bytes name the kind, the last one the format version
VERSION = b"2"
VERSION_1 = b"1"  # one CRC over all the columns, no chunks
# 128 KiB of a .dlyindex, checked in about 10 µs; smaller chunks cost more Python per
# entry checked (1024: twice the time of one CRC over the whole file)
CHUNK_ENTRIES = 4096
# an index file this small is read whole on loading rather than mapped (a map costs more
# than reading a few pages)
SMALL_INDEX_BYTES = 64 << 10


def kind_of(magic: bytes) -> bytes:
    """The kind a magic names, whatever its format version."""
    return magic[:KIND_BYTES]


class IndexMeta(NamedTuple):
    base_offset: int
    log_bytes: int
    next_offset: int
    entries: int


def encode_index(magic: bytes, meta: IndexMeta, columns: list[np.ndarray]) -> bytes:
    """The bytes of an index file of `magic`'s kind in the current format version (header,
    columns, chunk table): what `write_index` writes, and tiered storage uploads."""
    columns = [np.ascontiguousarray(c) for c in columns]
    table = chunk_table(columns, CHUNK_ENTRIES)
    body = b"".join(c.tobytes() for c in columns) + table.tobytes()
    head = HEADER.pack(kind_of(magic) + VERSION, meta.base_offset, meta.log_bytes,
                       meta.next_offset, meta.entries, CHUNK_ENTRIES, 0, crc32c.crc32c(table.data),
                       0)
    return head[:60] + struct.pack("<I", crc32c.crc32c(head[:56])) + body


def write_index(path: str, magic: bytes, meta: IndexMeta, columns: list[np.ndarray], *,
                atomic: bool = True) -> None:
    """Write an index file (encode_index): atomically (temp file + rename), or, with
    `atomic=False`, in place with one fsync (for a file published later by a rename of its
    own)."""
    data = encode_index(magic, meta, columns)
    if atomic:
        fsio.atomic_write(path, data)
    else:
        fsio.write_new(path, data)


def read_meta(path: str, magic: bytes) -> tuple[IndexMeta, int]:
    """(header fields, the header's checksum of the rest: of the chunk table, or in version
    1 of the columns) of an index file, checking magic and header CRC."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_SIZE)
    except FileNotFoundError:
        raise IndexFileError(f"{path}: missing") from None
    except OSError as e:
        raise IndexFileError(f"{path}: {e}") from None
    raw = _parse_header(head, path, magic)
    return raw.meta, raw.crc


class RawHeader(NamedTuple):
    """An index header as found, before any check but its length."""

    magic: bytes
    meta: IndexMeta
    chunk_entries: int  # 0 in version 1 (reserved there)
    crc: int  # of the chunk table; in version 1 of the columns
    header_crc_ok: bool

    @property
    def version(self) -> bytes:
        return self.magic[KIND_BYTES:]

    def body_bytes(self, entry_size: int) -> int:
        """How many bytes follow the header in a file this header describes."""
        n = self.meta.entries
        chunks = -(-n // self.chunk_entries) if self.version == VERSION and n > 0 else 0
        return n * entry_size + 4 * chunks


def unpack_header(head: bytes) -> RawHeader | None:
    """The one parse of the 64-byte header; None if `head` is shorter than a header."""
    if len(head) < HEADER_SIZE:
        return None
    fields = HEADER.unpack_from(head)
    return RawHeader(fields[0], IndexMeta(fields[1], fields[2], fields[3], fields[4]),
                     fields[5], fields[7], crc32c.crc32c(head[:56]) == fields[8])


def known_magic(found: bytes, magic: bytes) -> bool:
    """Is `found` the magic of `magic`'s kind, in a format version this module reads?"""
    return kind_of(found) == kind_of(magic) and found[KIND_BYTES:] in (VERSION, VERSION_1)


class Mismatch(NamedTuple):
    """Why an index is not current for its .log: `field` ("base_offset" or "log_bytes")
    holds `found` in the index header where the segment has `expected`."""

    field: str
    found: int
    expected: int


def currency_mismatches(meta: IndexMeta, *, base_offset: int | None,
                        log_bytes: int | None) -> list[Mismatch]:
    """The one rule for "is this index current for this .log?": it must name the segment's
    base offset and have been built from exactly `log_bytes` of the .log (checksums are
    checked separately). Returns every mismatch, empty when current; a None argument is
    unknown to the caller and not checked."""
    out = []
    if base_offset is not None and meta.base_offset != base_offset:
        out.append(Mismatch("base_offset", meta.base_offset, base_offset))
    if log_bytes is not None and meta.log_bytes != log_bytes:
        out.append(Mismatch("log_bytes", meta.log_bytes, log_bytes))
    return out


def _parse_header(head: bytes, path: str, magic: bytes) -> RawHeader:
    raw = unpack_header(head)
    if raw is None:
        raise IndexFileError(f"{path}: truncated header")
    if not known_magic(raw.magic, magic):
        raise IndexFileError(f"{path}: bad magic {raw.magic!r}")
    if not raw.header_crc_ok:
        raise IndexFileError(f"{path}: header checksum mismatch")
    meta = raw.meta
    if meta.entries < 0 or meta.log_bytes < 0:
        raise IndexFileError(f"{path}: negative sizes in header")
    if raw.version == VERSION and raw.chunk_entries < 1:
        raise IndexFileError(f"{path}: {raw.chunk_entries} entries per chunk")
    return raw


def _column_views(body: np.ndarray, dtypes: list[np.dtype], n: int) -> list[np.ndarray]:
    """The columns of `n` entries at the start of `body` (bytes after the header)."""
    columns, pos = [], 0
    for d in dtypes:
        width = n * np.dtype(d).itemsize
        columns.append(body[pos:pos + width].view(d))
        pos += width
    return columns


def load_index(path: str, magic: bytes, dtypes: list[np.dtype], *, base_offset: int,
               log_bytes: int) -> tuple[IndexMeta, list[np.ndarray]]:
    """Map a persisted index and check it whole (map_index with `lazy=False`)."""
    meta, columns, _ = map_index(path, magic, dtypes, base_offset=base_offset,
                                 log_bytes=log_bytes, lazy=False)
    return meta, columns


def map_index(path: str, magic: bytes, dtypes: list[np.dtype], *, base_offset: int,
              log_bytes: int, lazy: bool) -> tuple[IndexMeta, list[np.ndarray], ChunkChecks]:
    """Map a persisted index, verifying it belongs to this segment, covers exactly
    `log_bytes` of its .log, and that its header and chunk table checksums match; then
    every chunk's, or with `lazy` those of the first and last chunk only (what opening a
    log reads: a segment's first and last keys), the others as reads reach them (the
    ChunkChecks returned; the file is removed if one fails then). The file is opened
    once: header read, size checked and data read (a small file) or mapped through the
    same descriptor."""
    try:
        fd = os.open(path, os.O_RDONLY | fsio.O_BINARY)
    except FileNotFoundError:
        raise IndexFileError(f"{path}: missing") from None
    except OSError as e:
        raise IndexFileError(f"{path}: {e}") from None
    try:
        st = os.fstat(fd)
        # a small file is read whole in one call (cheaper than a map), a larger one mapped;
        # either way its chunks are checked as `lazy` says
        small = st.st_size <= SMALL_INDEX_BYTES
        data = os.pread(fd, st.st_size if small else HEADER_SIZE, 0)
        raw = _parse_header(data[:HEADER_SIZE], path, magic)
        meta = raw.meta
        mismatches = currency_mismatches(meta, base_offset=base_offset, log_bytes=log_bytes)
        if mismatches and mismatches[0].field == "base_offset":
            raise IndexFileError(
                f"{path}: base offset {meta.base_offset}, expected {base_offset}")
        if mismatches:
            raise IndexFileError(
                f"{path}: stale (covers {meta.log_bytes} log bytes, the log has {log_bytes})")
        expected = _file_bytes(raw, dtypes)
        if st.st_size != expected or (small and len(data) != expected):
            raise IndexFileError(f"{path}: {st.st_size} bytes, header implies {expected}")
        # a plain ndarray over an mmap: np.memmap's Python-level hooks cost more than the
        # searches themselves (no map for an empty index: nothing to read)
        if meta.entries == 0:
            body = np.empty(0, np.uint8)
        elif small:
            body = np.frombuffer(data, dtype=np.uint8)[HEADER_SIZE:]
        else:
            body = np.frombuffer(mmap.mmap(fd, 0, access=mmap.ACCESS_READ),
                                 dtype=np.uint8)[HEADER_SIZE:]
    except OSError as e:  # a directory by that name, an I/O error
        raise IndexFileError(f"{path}: {e}") from None
    finally:
        os.close(fd)
    checked = _check_body(path, raw, body, dtypes, lazy=lazy, file_id=(st.st_dev, st.st_ino))
    if checked.problem is not None:
        spans = checked.damaged
        where = f" (entries {spans[0][0]}..{spans[0][1] - 1}" \
                f"{' and more' if len(spans) > 1 else ''})" if spans else ""
        raise IndexFileError(f"{path}: {checked.problem}{where}")
    assert checked.checks is not None  # None only with a problem, raised above
    return meta, checked.columns, checked.checks


def _file_bytes(head: RawHeader, dtypes: list[np.dtype]) -> int:
    """The size of the file `head` describes, for an index of columns `dtypes`."""
    return HEADER_SIZE + head.body_bytes(sum(np.dtype(d).itemsize for d in dtypes))


class _CheckedBody(NamedTuple):
    """An index file's columns and what their checksums say (see _check_body)."""

    columns: list[np.ndarray]
    checks: ChunkChecks | None  # None if the chunk table fails its checksum
    problem: str | None  # None: every checksum checked holds
    damaged: list[tuple[int, int]]  # the entries [start, stop) of each chunk that fails


def _check_body(path: str, head: RawHeader, body: np.ndarray, dtypes: list[np.dtype], *,
                lazy: bool = False, file_id: FileId | None = None) -> _CheckedBody:
    """The columns in `body` (the bytes after the header, as long as `head` says) with their
    checksums checked: the one over all of them (version 1), or the chunk table's, then
    every chunk's (with `lazy`, the first and last chunk's: the returned ChunkChecks checks
    the others as reads reach them, and removes the file `file_id` if one fails)."""
    n = head.meta.entries
    columns = _column_views(body, dtypes, n)
    if head.version == VERSION_1:
        ok = crc32c.crc32c(body.data) == head.crc
        return _CheckedBody(columns, ChunkChecks.trusted(columns),
                           None if ok else "data checksum mismatch", [])
    table = body[sum(c.nbytes for c in columns):].view("<u4")
    if crc32c.crc32c(table.data) != head.crc:
        return _CheckedBody(columns, None, "chunk table checksum mismatch", [])
    checks = ChunkChecks(path, columns, table, head.chunk_entries, first_byte=HEADER_SIZE,
                         file_id=file_id)
    damaged = [checks.span(k) for k in checks.damaged(checks.ends if lazy else None)]
    return _CheckedBody(columns, checks, "data checksum mismatch" if damaged else None, damaged)


# ---------------------------------------------------------------------------- lenient reading


@dataclass
class IndexReading:
    """A persisted index read without trusting it, for tools: `problems` lists what is
    wrong with the file itself (empty when header, chunk table and data checksums hold);
    `columns` are the entries (None when the file is too damaged to hold them);
    `damaged_entries` the entries [start, stop) of each chunk that fails its checksum;
    `magic` is what the file says it is (None if unread)."""

    path: str
    meta: IndexMeta | None = None
    columns: list[np.ndarray] | None = None
    header_crc_ok: bool = False
    data_crc_ok: bool = False
    problems: list[str] = field(default_factory=list)
    missing: bool = False
    magic: bytes | None = None
    damaged_entries: list[tuple[int, int]] = field(default_factory=list)

    @property
    def entries(self) -> int:
        return 0 if self.columns is None else len(self.columns[0])


def read_lenient(path: str, magic: bytes, dtypes: list[np.dtype]) -> IndexReading:
    """Read whatever an index file holds and say why it is unreadable, never raising for
    damage (IsADirectoryError propagates: the caller asked for the wrong thing). Reads the
    whole file and checks every chunk; O(file size)."""
    out = IndexReading(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        out.missing = True
        out.problems.append("missing")
        return out
    except IsADirectoryError:
        raise
    except OSError as e:
        out.problems.append(f"unreadable: {e.strerror}")
        return out
    head = unpack_header(raw)
    if head is None:
        out.problems.append(f"truncated: {len(raw)} bytes, shorter than the "
                            f"{HEADER_SIZE}-byte header")
        return out
    out.magic = head.magic
    if not known_magic(head.magic, magic):
        out.problems.append(f"not a kdelay index: magic {head.magic!r}, expected {magic!r}")
        return out
    out.header_crc_ok = head.header_crc_ok
    if not out.header_crc_ok:
        out.problems.append("header checksum mismatch")
        return out
    out.meta = meta = head.meta
    n = meta.entries
    if head.version == VERSION and head.chunk_entries < 1:
        out.problems.append(f"header says {head.chunk_entries} entries per chunk")
        return out
    need = _file_bytes(head, dtypes) if n > 0 else HEADER_SIZE
    if n < 0 or len(raw) != need:
        out.problems.append(f"{len(raw)} bytes, but the header's {n} entries need {need}")
        return out
    checked = _check_body(path, head, np.frombuffer(raw, dtype=np.uint8)[HEADER_SIZE:], dtypes)
    out.columns = checked.columns
    out.damaged_entries = checked.damaged
    out.data_crc_ok = checked.problem is None
    if checked.problem is not None:
        out.problems.append(checked.problem)
    return out
