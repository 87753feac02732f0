"""Idempotent producers' state of one partition at an offset: `producer-state.snapshot` in the
partition directory (docs/formats.md, "Producer state"), as Kafka's `.snapshot` files.

The broker writes it when the partition's active segment changes (a roll), holding every
producer's state from the batches below that offset, the new segment's base, and at a
clean stop at the log end; after a restart the state is the snapshot plus a walk of the
batch headers from its offset (producer_state.py): at most the active segment, however
many the log has. Little-endian:

    header:   magic "KDPSNAP1" (8) | offset (int64) | producers (uint32) |
              CRC-32C of everything after these 24 bytes, then of the 20 before it (uint32)
    producer: producer id (int64) | epoch (int16) | batches (uint8, 1..5) | 0 (uint8) |
              last append time, ms (int64)
    batch:    first sequence (int32) | last sequence (int32) | base offset (int64)

Replaced atomically (fsio.atomic_write: a temp file, fsynced, renamed, the directory
fsynced), so a crash leaves the old snapshot or the new one. A snapshot that does not read
back whole is damaged (SnapshotDamagedError): the broker never trusts it and rebuilds the
state from the log. Cost: O(producers) to write or read.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import crc32c

from .. import fsio
from ..errors import KdelayError

SNAPSHOT_FILE = "producer-state.snapshot"
MAGIC = b"KDPSNAP1"
RECENT = 5  # batches remembered per producer and partition, as Kafka does
_HEADER = struct.Struct("<8sqII")
_PRODUCER = struct.Struct("<qhBxq")
_BATCH = struct.Struct("<iiq")


class SnapshotDamagedError(KdelayError):
    """A producer-state snapshot that does not read back whole: rebuilt from the log."""


@dataclass
class SnapshotEntry:
    """One producer's state: its epoch, when it last appended (log clock, ms), and its
    newest batches as (first sequence, last sequence, base offset), oldest first."""
    epoch: int
    last_time: int
    batches: list[tuple[int, int, int]]


def snapshot_path(directory: str) -> str:
    return os.path.join(directory, SNAPSHOT_FILE)


def encode(offset: int, producers: dict[int, SnapshotEntry]) -> bytes:
    body = bytearray()
    for pid, e in producers.items():
        body += _PRODUCER.pack(pid, e.epoch, len(e.batches), e.last_time)
        for first, last, base in e.batches:
            body += _BATCH.pack(first, last, base)
    head = _HEADER.pack(MAGIC, offset, len(producers), 0)[:20]
    crc = crc32c.crc32c(head, crc32c.crc32c(bytes(body)))
    return head + struct.pack("<I", crc) + bytes(body)


def decode(data: bytes, path: str = "") -> tuple[int, dict[int, SnapshotEntry]]:
    """(offset, producers) of a snapshot's bytes; SnapshotDamagedError unless whole."""
    if len(data) < _HEADER.size:
        raise SnapshotDamagedError(f"{path}: {len(data)} bytes, shorter than a header")
    magic, offset, count, crc = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise SnapshotDamagedError(f"{path}: not a producer-state snapshot (magic {magic!r})")
    if crc != crc32c.crc32c(data[:20], crc32c.crc32c(data[_HEADER.size:])):
        raise SnapshotDamagedError(f"{path}: CRC-32C mismatch")
    if offset < 0:
        raise SnapshotDamagedError(f"{path}: offset {offset}")
    producers: dict[int, SnapshotEntry] = {}
    pos = _HEADER.size
    try:
        for _ in range(count):
            pid, epoch, n, last_time = _PRODUCER.unpack_from(data, pos)
            pos += _PRODUCER.size
            if pid < 0 or epoch < 0 or not 1 <= n <= RECENT or pid in producers:
                raise SnapshotDamagedError(f"{path}: bad producer entry at byte "
                                           f"{pos - _PRODUCER.size}")
            batches = [_BATCH.unpack_from(data, pos + i * _BATCH.size) for i in range(n)]
            pos += n * _BATCH.size
            if any(not 0 <= base < offset for _, _, base in batches):
                raise SnapshotDamagedError(f"{path}: producer {pid} names a batch at or "
                                           f"past the snapshot's offset {offset}")
            producers[pid] = SnapshotEntry(epoch, last_time, batches)
    except struct.error:
        raise SnapshotDamagedError(f"{path}: truncated at byte {pos}") from None
    if pos != len(data):
        raise SnapshotDamagedError(f"{path}: {len(data) - pos} bytes past the last entry")
    return offset, producers


def read_snapshot(directory: str) -> tuple[int, dict[int, SnapshotEntry]] | None:
    """The partition's snapshot (None: it has none); SnapshotDamagedError if damaged."""
    path = snapshot_path(directory)
    try:
        data = fsio.read_small(path)
    except OSError as e:
        raise SnapshotDamagedError(f"{path}: unreadable: {e}") from None
    return None if data is None else decode(data, path)


def write_snapshot(directory: str, offset: int, producers: dict[int, SnapshotEntry]) -> None:
    """Replace the partition's snapshot atomically. Every batch named must lie below
    `offset`, and the log must hold `offset`'s predecessors durably (a roll fsyncs them)."""
    fsio.atomic_write(snapshot_path(directory), encode(offset, producers))
