"""The operations endpoint on the broker's event loop (aiohttp).

    GET  /healthz                                      200 while the broker serves
    GET  /metrics                                      Prometheus' text format
    GET  /v1/topics                                    {"topics": [names]}
    GET  /v1/topics/{topic}                            the topic's metrics and configs
    POST /v1/topics/{topic}/partitions/{p}/cancel      {"offsets": [...]} -> {"cancelled": n}
    POST /v1/topics/{topic}/partitions/{p}/reschedule  {"offset": o, "deliver_after": ms}
                                                       or {"offset": o, "delay_ms": ms}
                                                       -> {"base_offset", "deliver_after"}

Cancel and reschedule are `Topic.cancel` and `Topic.reschedule` (so `Log.cancel` and
`Log.reschedule`): the same rules, durability and crash-safety. Errors are JSON
`{"error": ..., "message": ...}` with a 4xx status, and change nothing. With SASL users on
the broker, every request but /healthz needs HTTP Basic credentials from the same file.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ...errors import KdelayError
from ...validation import is_int
from .metrics import BrokerMetrics

if TYPE_CHECKING:
    from ..state import BrokerState

log = logging.getLogger("kdelay.broker")

MAX_BODY_BYTES = 1 << 20
MAX_CANCEL_OFFSETS = 100_000


class RequestRefused(Exception):
    def __init__(self, status: int, error: str, message: str):
        super().__init__(message)
        self.status, self.error, self.message = status, error, message


def _error(status: int, error: str, message: str) -> web.Response:
    return web.json_response({"error": error, "message": message}, status=status)


@web.middleware
async def _errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        return await handler(request)
    except RequestRefused as e:
        return _error(e.status, e.error, e.message)
    except web.HTTPRequestEntityTooLarge:
        return _error(413, "body_too_large", f"request bodies are limited to {MAX_BODY_BYTES} "
                                             "bytes")
    except web.HTTPException as e:
        if e.status >= 400:
            return _error(e.status, e.reason.lower().replace(" ", "_"), e.reason)
        raise


class OperationsEndpoint:
    def __init__(self, state: BrokerState, metrics: BrokerMetrics):
        self.state = state
        self.metrics = metrics
        self.app = web.Application(client_max_size=MAX_BODY_BYTES,
                                   middlewares=[_errors, self._auth])
        self.app.add_routes([
            web.get("/healthz", self.healthz),
            web.get("/metrics", self.prometheus),
            web.get("/v1/topics", self.topics),
            web.get("/v1/topics/{topic}", self.topic),
            web.post("/v1/topics/{topic}/partitions/{partition}/cancel", self.cancel),
            web.post("/v1/topics/{topic}/partitions/{partition}/reschedule", self.reschedule),
        ])
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None) -> None:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=tls)
        await site.start()
        # the bound port (port 0: the kernel's pick), on any event loop (uvloop's servers
        # are not asyncio.Server)
        self.port = self._runner.addresses[0][1]
        log.info("operations endpoint on %s://%s:%d", "https" if tls else "http", host,
                 self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        users = self.state.sasl_users
        if users is None or request.path == "/healthz":
            return await handler(request)
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "basic":
            try:
                name, _, password = base64.b64decode(value, validate=True).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                name, password = "", ""
            user = users.get(name)
            if user is not None and user.check_password(password):
                return await handler(request)
        return web.json_response(
            {"error": "unauthorized", "message": "HTTP Basic credentials of a SASL user needed"},
            status=401, headers={"WWW-Authenticate": 'Basic realm="kdelay"'})

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "serving"})

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.exposition(),
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def topics(self, request: web.Request) -> web.Response:
        return web.json_response({"topics": self.state.topics.names()})

    def _topic(self, request: web.Request) -> Any:
        name = request.match_info["topic"]
        topic = self.state.topics.get(name)
        if topic is None:
            raise RequestRefused(404, "unknown_topic", f"no topic {name!r}")
        return topic

    def _partition(self, request: web.Request) -> tuple[Any, int]:
        topic = self._topic(request)
        text = request.match_info["partition"]
        if not text.isdigit() or int(text) >= topic.partitions:
            raise RequestRefused(404, "unknown_partition",
                                 f"topic {topic.name!r} has no partition {text!r} (it has "
                                 f"{topic.partitions})")
        return topic, int(text)

    async def topic(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        body = topic.metrics()
        configs = getattr(self.state.topics, "configs_of", None)
        body["configs"] = configs(topic.name) if configs is not None else {}
        return web.json_response(body)

    async def _json(self, request: web.Request) -> dict:
        try:
            body = await request.json(loads=_strict_loads)
        except (ValueError, UnicodeDecodeError) as e:
            raise RequestRefused(400, "bad_json", f"the body is not JSON: {e}") from None
        if not isinstance(body, dict):
            raise RequestRefused(400, "bad_request", "the body must be a JSON object")
        return body

    async def cancel(self, request: web.Request) -> web.Response:
        topic, partition = self._partition(request)
        body = await self._json(request)
        offsets = body.get("offsets")
        if not isinstance(offsets, list) or not all(is_int(o) and o >= 0 for o in offsets):
            raise RequestRefused(400, "bad_request",
                                 '"offsets" must be a list of non-negative integers')
        if len(offsets) > MAX_CANCEL_OFFSETS:
            raise RequestRefused(400, "bad_request",
                                 f"at most {MAX_CANCEL_OFFSETS} offsets per request")
        try:
            n = topic.cancel(partition, offsets)
        except KdelayError as e:
            raise RequestRefused(409, "refused", str(e)) from None
        return web.json_response({"cancelled": n})

    async def reschedule(self, request: web.Request) -> web.Response:
        topic, partition = self._partition(request)
        body = await self._json(request)
        offset = body.get("offset")
        if not is_int(offset) or offset < 0:
            raise RequestRefused(400, "bad_request", '"offset" must be a non-negative integer')
        when = {k: body[k] for k in ("deliver_after", "delay_ms") if k in body}
        if len(when) != 1 or not all(is_int(v) and v >= 0 for v in when.values()):
            raise RequestRefused(400, "bad_request", 'give one of "deliver_after" or '
                                                     '"delay_ms", a non-negative integer')
        try:
            result = topic.reschedule(partition, offset, **when)
        except KdelayError as e:
            raise RequestRefused(409, "refused", str(e)) from None
        return web.json_response({"base_offset": result.base_offset,
                                  "last_offset": result.last_offset,
                                  "deliver_after": result.deliver_after})


def _strict_loads(text: str) -> Any:
    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=no_constants)
