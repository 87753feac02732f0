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


def peek_key_version(frame: bytes) -> tuple[int, int]:
    """The API key and version a request frame starts with (FrameError if it is too short)."""
    if len(frame) < 8:  # key, version, correlation id
        raise FrameError(f"a request of {len(frame)} bytes is too short for a header")
    return _KEY_VERSION.unpack_from(frame)


def peek_correlation_id(frame: bytes) -> int:
    return _SIZE.unpack_from(frame, 4)[0]


def decode_request(frame: bytes, api_schema: Schema) -> tuple[Any, Any]:
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
    """What kio's writers write a response into: small writes gathered in a bytearray,
    large ones (a Fetch's record batches) kept by reference, all joined once at the end,
    so that a batch's bytes are copied once here rather than as a BytesIO grows."""

    __slots__ = ("parts", "small", "size")

    def __init__(self) -> None:
        self.parts: list = []
        self.small = bytearray()
        self.size = 0

    def write(self, data: Any) -> int:
        n = len(data)
        if n >= 4096:
            if self.small:
                self.parts.append(self.small)
                self.small = bytearray()
            self.parts.append(data)
        else:
            self.small += data
        self.size += n
        return n


def encode_response(api_schema: Schema, correlation_id: int, response: Any) -> bytes:
    """The response frame, size prefix included."""
    out = _Chunks()
    api_schema.write_header(out, api_schema.response_header_type(correlation_id=correlation_id))
    api_schema.write_response(out, response)
    return b"".join([_SIZE.pack(out.size), *out.parts, out.small])


def read_size(prefix: bytes) -> int:
    return _SIZE.unpack(prefix)[0]
