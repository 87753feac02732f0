"""ApiVersions (key 18): the versions of every API the broker answers, no more (librdkafka
sends telemetry requests to a broker that advertises them)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32Timedelta

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
    return api_versions_response(ctx.response_type, ctx.broker.dispatcher)


APIS = [Api(API_VERSIONS_KEY, 0, 4, handle_api_versions, before_auth=True, name="ApiVersions")]
