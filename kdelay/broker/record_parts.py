"""A Fetch partition's records field as the buffers it is made of, not joined: each stored
batch served as its new header (served_header.pyx, 43 bytes) and its stored bytes from
after deliverAfter to its end, a read-only view of the segment's memory mapping (the
reader's view: due_batches), which the socket is given as it is. The response frame is
written as these parts (protocol.encode_response), so a batch's records are never copied
in this process: the kernel copies them, once, from the page cache into the socket.

A view keeps its mapping alive (mapped_file.pyx: retention or a remap that closes the
mapping while a response is still being sent only marks it closed; the memory goes when
the last view is released), and the file under it is never rewritten in place (retention
unlinks, compaction and the tiered sync rename), so bytes checked when read are the bytes
sent.

Small batches are gathered into one buffer with the headers around them (a copy of a few
hundred bytes costs less than a buffer of its own in the socket's gather list).
Cost per batch: the header (served_header) and a list append, or a small copy."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .served_header import STORED_REST, served_header

GATHER_BELOW = 4096  # stored bodies smaller than this are copied into the gathered buffer


class RecordParts:
    """Served batches back to back, as a list of buffers (see the module); len() is the
    size of their bytes, as kio writes before them."""

    __slots__ = ("parts", "_gather", "_size")

    def __init__(self) -> None:
        self.parts: list[Any] = []
        self._gather: bytearray | None = None
        self._size = 0

    def add_stored(self, stored: Any, base_offset: int) -> None:
        """A stored batch (bytes or a view of its mapping; its CRC already checked) served
        at `base_offset` (batch_rewrite.py says what changes)."""
        header = served_header(stored, base_offset)
        body = memoryview(stored)[STORED_REST:]
        self._size += len(header) + len(body)
        self._add(header)
        self._add(body)

    def add_batch(self, batch: bytes) -> None:
        """A batch already in its served form (re-encoded: batch_rewrite.as_v2_only)."""
        self._size += len(batch)
        self._add(batch)

    def _add(self, data: Any) -> None:
        if len(data) < GATHER_BELOW:
            if self._gather is None:
                self._gather = bytearray()
                self.parts.append(self._gather)
            self._gather += data
        else:
            self.parts.append(data)
            self._gather = None

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        return iter(self.parts)

    def __bytes__(self) -> bytes:
        """The batches joined (a copy: for tests and callers that need one buffer)."""
        return b"".join(self.parts)
