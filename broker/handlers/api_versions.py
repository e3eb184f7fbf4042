"""ApiVersions: the advertised table, and nothing in the tagged fields (old librdkafka fails on default tags)."""

from __future__ import annotations

from typing import Any

from strata.protocol.registry import SUPPORTED_VERSIONS, ApiKey, response_class

from ..request_context import RequestContext
from ..services import BrokerServices


async def handle(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.API_VERSIONS)
    AV = Resp.ApiVersion
    return Resp(
        version=ctx.api_version,
        error_code=0,
        throttle_time_ms=0,
        api_keys=[AV(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())],
    )
