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


def write_index(path: str, magic: bytes, meta: IndexMeta, columns: list[np.ndarray]) -> None:
    body = b"".join(np.ascontiguousarray(c).tobytes() for c in columns)
    head = HEADER.pack(magic, meta.base_offset, meta.log_bytes, meta.next_offset, meta.entries,
                       0, 0, crc32c.crc32c(body), 0)
    head = head[:60] + struct.pack("<I", crc32c.crc32c(head[:56]))
    fsio.atomic_write(path, head + body)


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


def _parse_header(head: bytes, path: str, magic: bytes) -> tuple[IndexMeta, int]:
    if len(head) < HEADER_SIZE:
        raise IndexFileError(f"{path}: truncated header")
    fields = HEADER.unpack(head)
    if fields[0] != magic:
        raise IndexFileError(f"{path}: bad magic {fields[0]!r}")
    if crc32c.crc32c(head[:56]) != fields[8]:
        raise IndexFileError(f"{path}: header checksum mismatch")
    meta = IndexMeta(fields[1], fields[2], fields[3], fields[4])
    if meta.entries < 0 or meta.log_bytes < 0:
        raise IndexFileError(f"{path}: negative sizes in header")
    return meta, fields[7]


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
        if meta.base_offset != base_offset:
            raise IndexFileError(
                f"{path}: base offset {meta.base_offset}, expected {base_offset}")
        if meta.log_bytes != log_bytes:
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
