"""ApiVersions (key 18): the versions of every API the broker answers, no more (librdkafka
sends telemetry requests to a broker that advertises them)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32Timedelta

from .. import protocol
from ..answer_template import template_or_none
from ..dispatcher import API_VERSIONS_KEY, Api, RequestContext
from ..responses import element, has

if TYPE_CHECKING:
    from ..dispatcher import Dispatcher


def api_versions_response(response_type: type, dispatcher: Dispatcher,
                          error: ErrorCode = ErrorCode.none) -> Any:
    """An ApiVersions response of `response_type`'s version listing the dispatcher's APIs."""
    entry = element(response_type, "api_keys")
    keys = tuple(entry(api_key=i16(a.key), min_version=i16(a.min_version),
                       max_version=i16(a.max_version))
                 for a in sorted(dispatcher.apis.values(), key=lambda a: a.key))
    fields: dict[str, Any] = {"error_code": error, "api_keys": keys}
    if has(response_type, "throttle_time"):
        fields["throttle_time"] = i32Timedelta.parse(timedelta(0))
    if has(response_type, "supported_features"):
        fields["supported_features"] = ()
    if has(response_type, "finalized_features_epoch"):
        fields["finalized_features_epoch"] = -1
    if has(response_type, "finalized_features"):
        fields["finalized_features"] = ()
    if has(response_type, "zk_migration_ready"):
        fields["zk_migration_ready"] = False
    return response_type(**fields)


async def handle_api_versions(ctx: RequestContext, request: Any) -> Any:
    """The same answer for every connection but its correlation id (the registered APIs
    do not change while the broker runs): kio encodes it once per version, and each
    answer is that frame with the correlation id packed in (answer_template.py; ~150 us
    a request with kio, the first request of every connection)."""
    answers = ctx.broker.api_versions_answers
    if ctx.api_version not in answers:
        answers[ctx.api_version] = template_or_none(
            protocol.schema(API_VERSIONS_KEY, ctx.api_version),
            lambda: api_versions_response(ctx.response_type, ctx.broker.dispatcher), 0)
    template = answers[ctx.api_version]
    if template is None:
        return api_versions_response(ctx.response_type, ctx.broker.dispatcher)
    return template.answer(ctx.header.correlation_id)


APIS = [Api(API_VERSIONS_KEY, 0, 4, handle_api_versions, before_auth=True, name="ApiVersions")]
