"""Kafka's wire frames and messages, with kio's classes generated from Kafka's own schemas.

A frame is a big-endian int32 size and that many bytes. A request's first four bytes are its
API key and version, which pick the header and body schemas; kio reads both (record batches
stay raw bytes) and writes responses. Readers and writers are built once per (key, version)
and cached: decoding a request costs the schema reader only (about 1-2 µs for a Produce).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from .errors import FrameError
from .record_parts import RecordParts

_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hh")


@dataclass(frozen=True, slots=True)
class Schema:
    """How to read one (api key, version)'s requests and write its responses."""
    request_type: type
    response_type: type
    read_header: Any
    read_request: Any
    write_header: Any
    write_response: Any
    response_header_type: type


@cache
def schema(api_key: int, api_version: int) -> Schema:
    """The cached readers and writers of one API version (KeyError-free: raises LookupError
    from kio for an API or version its schemas do not have)."""
    request_type = load_request_schema(api_key, api_version)
    response_type = load_response_schema(api_key, api_version)
    response_header_type = response_type.__header_schema__
    return Schema(request_type, response_type,
                  entity_reader(request_type.__header_schema__), entity_reader(request_type),
                  entity_writer(response_header_type), entity_writer(response_type),
                  response_header_type)


def peek_key_version(frame: bytes | memoryview) -> tuple[int, int]:
    """The API key and version a request frame starts with (FrameError if it is too short)."""
    if len(frame) < 8:  # key, version, correlation id
        raise FrameError(f"a request of {len(frame)} bytes is too short for a header")
    return _KEY_VERSION.unpack_from(frame)


def peek_correlation_id(frame: bytes | memoryview) -> int:
    return _SIZE.unpack_from(frame, 4)[0]


def decode_request(frame: bytes | memoryview, api_schema: Schema) -> tuple[Any, Any]:
    """(header, request) of one frame; FrameError when it does not parse or has bytes left."""
    try:
        header, used = api_schema.read_header(frame, 0)
        request, body = api_schema.read_request(frame, used)
    except Exception as e:  # kio raises several types for malformed input
        raise FrameError(f"the request does not parse: {type(e).__name__}: {e}") from None
    if used + body != len(frame):
        raise FrameError(f"{len(frame) - used - body} bytes left over after the request")
    return header, request


class _Chunks:
    """What kio's writers write a response into: small writes gathered in bytearrays, large
    ones and a Fetch's record batches (record_parts.RecordParts: their buffers) kept by
    reference, in order, so that a batch's bytes are never copied here: the frame goes to
    the socket as these parts.
    The first part starts with room for the frame's size prefix."""

    __slots__ = ("parts", "small", "size")

    def __init__(self) -> None:
        self.small = bytearray(4)  # the size prefix, filled in by frame()
        self.parts: list = [self.small]
        self.size = 0

    def write(self, data: Any) -> int:
        n = len(data)
        if type(data) is RecordParts:  # a Fetch's batches: their buffers, in order
            self.parts.extend(data.parts)
            self.small = bytearray()
            self.parts.append(self.small)
        elif n >= 4096:
            self.parts.append(data)
            self.small = bytearray()
            self.parts.append(self.small)
        else:
            self.small += data
        self.size += n
        return n

    def frame(self) -> list:
        _SIZE.pack_into(self.parts[0], 0, self.size)
        return self.parts if self.small else self.parts[:-1]


def encode_response(api_schema: Schema, correlation_id: int, response: Any) -> list:
    """The response frame, size prefix included, as a list of buffers to write in order
    (one for a small answer; a Fetch's record batches are parts of their own, not copied)."""
    out = _Chunks()
    api_schema.write_header(out, api_schema.response_header_type(correlation_id=correlation_id))
    api_schema.write_response(out, response)
    return out.frame()

