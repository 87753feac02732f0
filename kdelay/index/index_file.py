"""The on-disk format shared by every index kind (.index, .timeindex, .dlyindex).

    header (64 bytes, little-endian)
      0  8s  magic       b"KDLYIDX1" / b"KOFFIDX1" / b"KTIMIDX1" (kind and version)
      8  q   base_offset the segment's base offset (must match the file name)
     16  q   log_bytes   size of the .log the index was built from (staleness check)
     24  q   next_offset the segment's last offset + 1 (log end without reading the log)
     32  q   entries     number of entries
     40  q   reserved
     48  q   reserved
     56  I   data_crc    CRC-32C of everything after the header
     60  I   header_crc  CRC-32C of bytes 0..56
    columns, one after another, each `entries` values long, in the kind's column order

A reader maps the columns with numpy.memmap, so loading costs no copy and searching is
numpy's searchsorted on the page cache. Any mismatch raises IndexFileError; the caller
then rebuilds the index from its .log.
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

HEADER = struct.Struct("<8sqqqqqqII")
HEADER_SIZE = HEADER.size
assert HEADER_SIZE == 64


class IndexMeta(NamedTuple):
    base_offset: int
    log_bytes: int
    next_offset: int
    entries: int


def encode_index(magic: bytes, meta: IndexMeta, columns: list[np.ndarray]) -> bytes:
    """The bytes of an index file (header and columns)."""
    body = b"".join(np.ascontiguousarray(c).tobytes() for c in columns)
    head = HEADER.pack(magic, meta.base_offset, meta.log_bytes, meta.next_offset, meta.entries,
                       0, 0, crc32c.crc32c(body), 0)
    return head[:60] + struct.pack("<I", crc32c.crc32c(head[:56])) + body


def write_index(path: str, magic: bytes, meta: IndexMeta, columns: list[np.ndarray], *,
                atomic: bool = True) -> None:
    """Write an index file: atomically (temp file + rename), or, with `atomic=False`, in
    place with one fsync (for a file published later by a rename of its own)."""
    data = encode_index(magic, meta, columns)
    if atomic:
        fsio.atomic_write(path, data)
    else:
        fsio.write_new(path, data)


def read_meta(path: str, magic: bytes) -> tuple[IndexMeta, int]:
    """(header fields, data crc) of an index file, checking magic and header CRC."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_SIZE)
    except FileNotFoundError:
        raise IndexFileError(f"{path}: missing") from None
    except OSError as e:
        raise IndexFileError(f"{path}: {e}") from None
    return _parse_header(head, path, magic)


class RawHeader(NamedTuple):
    """An index header as found, before any check but its length."""

    magic: bytes
    meta: IndexMeta
    data_crc: int
    header_crc_ok: bool


def unpack_header(head: bytes) -> RawHeader | None:
    """The one parse of the 64-byte header; None if `head` is shorter than a header."""
    if len(head) < HEADER_SIZE:
        return None
    fields = HEADER.unpack_from(head)
    return RawHeader(fields[0], IndexMeta(fields[1], fields[2], fields[3], fields[4]),
                     fields[7], crc32c.crc32c(head[:56]) == fields[8])


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


def _parse_header(head: bytes, path: str, magic: bytes) -> tuple[IndexMeta, int]:
    raw = unpack_header(head)
    if raw is None:
        raise IndexFileError(f"{path}: truncated header")
    if raw.magic != magic:
        raise IndexFileError(f"{path}: bad magic {raw.magic!r}")
    if not raw.header_crc_ok:
        raise IndexFileError(f"{path}: header checksum mismatch")
    meta = raw.meta
    if meta.entries < 0 or meta.log_bytes < 0:
        raise IndexFileError(f"{path}: negative sizes in header")
    return meta, raw.data_crc


def load_index(path: str, magic: bytes, dtypes: list[np.dtype], *, base_offset: int,
               log_bytes: int) -> tuple[IndexMeta, list[np.ndarray]]:
    """Map a persisted index, verifying it belongs to this segment, covers exactly
    `log_bytes` of its .log, and that its data checksum matches. The file is opened once:
    header read, size checked and data mapped through the same descriptor."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below; the map outlives it
    except FileNotFoundError:
        raise IndexFileError(f"{path}: missing") from None
    except OSError as e:
        raise IndexFileError(f"{path}: {e}") from None
    with f:
        meta, data_crc = _parse_header(f.read(HEADER_SIZE), path, magic)
        mismatches = currency_mismatches(meta, base_offset=base_offset, log_bytes=log_bytes)
        if mismatches and mismatches[0].field == "base_offset":
            raise IndexFileError(
                f"{path}: base offset {meta.base_offset}, expected {base_offset}")
        if mismatches:
            raise IndexFileError(
                f"{path}: stale (covers {meta.log_bytes} log bytes, the log has {log_bytes})")
        widths = [np.dtype(d).itemsize for d in dtypes]
        expected = HEADER_SIZE + meta.entries * sum(widths)
        size = os.fstat(f.fileno()).st_size
        if size != expected:
            raise IndexFileError(f"{path}: {size} bytes, header implies {expected}")
        if meta.entries == 0:
            if data_crc != crc32c.crc32c(b""):
                raise IndexFileError(f"{path}: data checksum mismatch")
            return meta, [np.empty(0, dtype=d) for d in dtypes]
        # a plain ndarray over an mmap: np.memmap's Python-level hooks cost more than the
        # searches themselves
        data = np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ),
                             dtype=np.uint8)[HEADER_SIZE:]
    if crc32c.crc32c(data) != data_crc:
        raise IndexFileError(f"{path}: data checksum mismatch")
    columns = []
    pos = 0
    for d, w in zip(dtypes, widths, strict=True):
        n = meta.entries * w
        columns.append(data[pos:pos + n].view(d))
        pos += n
    return meta, columns


# ---------------------------------------------------------------------------- lenient reading


@dataclass
class IndexReading:
    """A persisted index read without trusting it, for tools: `problems` lists what is
    wrong with the file itself (empty when header and data checksums hold); `columns` are
    the entries (None when the file is too damaged to hold them); `magic` is what the file
    says it is (None if unread)."""

    path: str
    meta: IndexMeta | None = None
    columns: list[np.ndarray] | None = None
    header_crc_ok: bool = False
    data_crc_ok: bool = False
    problems: list[str] = field(default_factory=list)
    missing: bool = False
    magic: bytes | None = None

    @property
    def entries(self) -> int:
        return 0 if self.columns is None else len(self.columns[0])


def read_lenient(path: str, magic: bytes, dtypes: list[np.dtype]) -> IndexReading:
    """Read whatever an index file holds and say why it is unreadable, never raising for
    damage (IsADirectoryError propagates: the caller asked for the wrong thing). Reads the
    whole file; O(file size)."""
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
    if head.magic != magic:
        out.problems.append(f"not a kdelay index: magic {head.magic!r}, expected {magic!r}")
        return out
    out.header_crc_ok = head.header_crc_ok
    if not out.header_crc_ok:
        out.problems.append("header checksum mismatch")
        return out
    out.meta = meta = head.meta
    n = meta.entries
    body = raw[HEADER_SIZE:]
    entry_size = sum(np.dtype(d).itemsize for d in dtypes)
    if n < 0 or len(body) != n * entry_size:
        out.problems.append(f"{len(raw)} bytes, but the header's {n} entries need "
                            f"{HEADER_SIZE + max(n, 0) * entry_size}")
        return out
    out.data_crc_ok = crc32c.crc32c(body) == head.data_crc
    if not out.data_crc_ok:
        out.problems.append("data checksum mismatch")
    cols, pos = [], 0
    for d in dtypes:
        cols.append(np.frombuffer(body, dtype=d, count=n, offset=pos))
        pos += n * np.dtype(d).itemsize
    out.columns = cols
    return out
