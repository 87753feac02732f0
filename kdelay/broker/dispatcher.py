"""Requests dispatched by API key, as Kafka's KafkaApis does: one handler per API, each
family of APIs in a module of kdelay.broker.apis, and ApiVersions listing exactly what the
handlers answer.

Cost per request: a dict lookup, kio's decode and encode, and the handler's own work.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from . import protocol
from .answer_template import Encoded
from .errors import FrameError

if TYPE_CHECKING:
    from .connection import Connection
    from .state import BrokerState

log = logging.getLogger("kdelay.broker")

API_VERSIONS_KEY = 18


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a handler knows of the request it answers."""
    api_key: int
    api_version: int
    header: Any                 # kio's RequestHeader (client_id, correlation_id)
    response_type: type         # kio's response class of this API version
    broker: BrokerState
    connection: Connection


Handler = Callable[[RequestContext, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Api:
    """One API the broker answers: versions min..max (inclusive), its handler (returns the
    response, or None for no answer at all, as a Produce with acks=0 wants), and whether it
    is allowed before SASL authentication (only ApiVersions and the SASL handshake are)."""
    key: int
    min_version: int
    max_version: int
    handle: Handler
    before_auth: bool = False
    name: str = field(default="")


class Dispatcher:
    """API key -> Api; answers one request frame."""

    def __init__(self, apis: Iterable[Api]):
        self.apis: dict[int, Api] = {}
        for api in apis:
            if api.key in self.apis:
                raise ValueError(f"API key {api.key} registered twice")
            self.apis[api.key] = api
        # an observer of every answered request: (api key, error or None, seconds); the
        # operations endpoint's metrics set it
        self.observe: Callable[[int, str | None, float], None] | None = None

    def supports(self, key: int, version: int) -> bool:
        api = self.apis.get(key)
        return api is not None and api.min_version <= version <= api.max_version

    async def answer(self, frame: bytes | memoryview, broker: BrokerState, conn: Connection
                     ) -> list | None:
        """The response frame for one request frame, as buffers to write in order
        (protocol.encode_response; None: no answer is due). Raises
        FrameError when the connection must be closed instead."""
        key, version = protocol.peek_key_version(frame)
        api = self.apis.get(key)
        if api is None:
            raise FrameError(f"unknown API key {key}")
        if not api.min_version <= version <= api.max_version:
            if key == API_VERSIONS_KEY:  # the protocol's one error answer for a version
                return self._unsupported_api_versions(frame)
            raise FrameError(f"API {api.name or key} version {version} is not supported "
                             f"({api.min_version}..{api.max_version})")
        if not api.before_auth and not conn.authenticated:
            raise FrameError(f"API {api.name or key} before SASL authentication")
        api_schema = protocol.schema(key, version)
        try:
            header, request = protocol.decode_request(frame, api_schema)
        except FrameError as e:
            raise FrameError(f"{api.name or key} v{version}: {e}") from None
        ctx = RequestContext(key, version, header, api_schema.response_type, broker, conn)
        started = time.perf_counter()
        error: str | None = None
        try:
            response = await api.handle(ctx, request)
        except Exception as e:
            error = type(e).__name__
            raise
        finally:
            if self.observe is not None:
                self.observe(key, error, time.perf_counter() - started)
        if response is None or isinstance(response, Encoded):
            return response  # no answer, or one the handler encoded (answer_template.py)
        return protocol.encode_response(api_schema, header.correlation_id, response)

    def _unsupported_api_versions(self, frame: bytes | memoryview) -> list:
        """ApiVersions at a version the broker lacks: a v0 answer with UNSUPPORTED_VERSION
        and the versions it has, so that the client can retry at one of them."""
        from .apis.api_versions import api_versions_response
        v0 = protocol.schema(API_VERSIONS_KEY, 0)
        response = api_versions_response(v0.response_type, self, ErrorCode.unsupported_version)
        return protocol.encode_response(v0, protocol.peek_correlation_id(frame), response)
