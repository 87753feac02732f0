"""A response shape encoded by kio once, answered again with its varying numbers written in.

The broker's commonest answer is the same few dozen bytes each time but for a few
integers: a Produce to one partition differs from the last only in its correlation id and
the offsets. Encoding it through kio's generic writers and building its dataclasses costs
~20-30 µs a request; here kio encodes the shape once, with a marker value in each varying
int64 field and in the correlation id, the markers' places are found in the bytes, and each
answer is a copy of those bytes with the values packed in (~1 µs). kio stays the one
authority on the layout: a shape whose markers are not each found exactly once (a field
encoded other than as a fixed-width big-endian integer) is refused, and the caller uses
kio as before (tests/broker/test_answer_template.py holds the two byte-identical).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from .protocol import Schema, encode_response

_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
# markers: values no answer field is likely to hold by chance (the uniqueness check below
# is what makes them safe), within what a datetime field can carry (ms before year 9999)
CORRELATION_MARKER = 0x5EEDC0DE
INT64_MARKER = 0xB5EED0C0FF00


class Encoded(list):
    """A response frame already encoded, as the buffers to write (protocol.encode_response's
    form): a handler returning one is answered with it as it is."""


class AnswerTemplate:
    """One response shape: `make(*values)` builds its kio response from `count` int64 values
    (see the module)."""

    __slots__ = ("_frame", "_correlation_at", "_at")

    def __init__(self, api_schema: Schema, make: Callable[..., Any], count: int):
        markers = [INT64_MARKER + k for k in range(count)]
        frame = b"".join(bytes(p) for p in encode_response(api_schema, CORRELATION_MARKER,
                                                           make(*markers)))
        self._frame = frame
        self._correlation_at = _only_place(frame, _INT32.pack(CORRELATION_MARKER))
        self._at = tuple(_only_place(frame, _INT64.pack(m)) for m in markers)

    def answer(self, correlation_id: int, *values: int) -> Encoded:
        """The frame of this shape with these values (as many as the shape's count). Cost:
        one copy of a few dozen bytes, a pack per value."""
        out = bytearray(self._frame)
        _INT32.pack_into(out, self._correlation_at, correlation_id)
        for at, value in zip(self._at, values, strict=True):
            _INT64.pack_into(out, at, value)
        return Encoded((out,))


def template_or_none(api_schema: Schema, make: Callable[..., Any], count: int
                     ) -> AnswerTemplate | None:
    """An AnswerTemplate of this shape, or None where kio's encoding cannot be one (the
    caller then encodes each answer with kio, as before)."""
    try:
        return AnswerTemplate(api_schema, make, count)
    except ValueError:
        return None


def _only_place(frame: bytes, marker: bytes) -> int:
    at = frame.find(marker)
    if at < 0 or frame.find(marker, at + 1) >= 0:
        raise ValueError("a marker is not found exactly once in the encoded shape")
    return at
