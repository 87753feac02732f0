"""SaslHandshake (17) and SaslAuthenticate (36): the only requests, with ApiVersions, that a
connection may send before it has authenticated. Handshake v1 only: its exchange travels in
SaslAuthenticate requests (v0's raw tokens are not Kafka frames). A failed authentication
is answered with SASL_AUTHENTICATION_FAILED and the connection is then closed."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i64Timedelta

from ..dispatcher import Api, RequestContext
from ..responses import has
from ..security.sasl import SUPPORTED, AuthenticationFailed, Exchange

log = logging.getLogger("kdelay.broker")


async def handle_sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    conn = ctx.connection
    users = ctx.broker.sasl_users
    if users is None:  # the listener does not use SASL
        conn.closing = True
        return ctx.response_type(error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    if conn.authenticated:
        conn.closing = True
        return ctx.response_type(error_code=ErrorCode.illegal_sasl_state, mechanisms=SUPPORTED)
    if request.mechanism not in SUPPORTED:
        conn.closing = True
        log.warning("connection from %s: unsupported SASL mechanism %r", conn.peer,
                    request.mechanism)
        return ctx.response_type(error_code=ErrorCode.unsupported_sasl_mechanism,
                                 mechanisms=SUPPORTED)
    conn.sasl = Exchange(request.mechanism, users)
    return ctx.response_type(error_code=ErrorCode.none, mechanisms=SUPPORTED)


def _authenticate_response(ctx: RequestContext, error: ErrorCode, message: str | None,
                           data: bytes) -> Any:
    fields: dict[str, Any] = {"error_code": error, "error_message": message, "auth_bytes": data}
    if has(ctx.response_type, "session_lifetime"):
        fields["session_lifetime"] = i64Timedelta.parse(timedelta(0))  # no re-authentication needed
    return ctx.response_type(**fields)


async def handle_sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    conn = ctx.connection
    exchange = conn.sasl
    if exchange is None or conn.authenticated:
        conn.closing = True
        return _authenticate_response(ctx, ErrorCode.illegal_sasl_state,
                                      "SaslAuthenticate without a SaslHandshake first", b"")
    try:
        answer = exchange.step(request.auth_bytes)
    except AuthenticationFailed as e:
        conn.closing = True
        log.warning("connection from %s: SASL %s authentication failed: %s", conn.peer,
                    exchange.mechanism, e)
        return _authenticate_response(ctx, ErrorCode.sasl_authentication_failed, str(e), b"")
    if exchange.done:
        conn.authenticated, conn.principal, conn.sasl = True, exchange.user, None
        log.info("connection from %s authenticated as %r (%s)", conn.peer, exchange.user,
                 exchange.mechanism)
    return _authenticate_response(ctx, ErrorCode.none, None, answer)


APIS = [
    Api(17, 1, 1, handle_sasl_handshake, before_auth=True, name="SaslHandshake"),
    Api(36, 0, 2, handle_sasl_authenticate, before_auth=True, name="SaslAuthenticate"),
]
