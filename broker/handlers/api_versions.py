"""ApiVersions: the advertised table and, from v3, the features Strata implements (Kafka's SupportedFeatures and
FinalizedFeatures tagged fields): transaction.version 1 (no KIP-890 part 2), so clients keep the TV1 protocol, and
group.version 1 (KIP-848 consumer groups: ConsumerGroupHeartbeat and ConsumerGroupDescribe). Nothing else goes in
the tagged fields (old librdkafka fails on default tags)."""

from __future__ import annotations

from typing import Any

from strata.protocol.registry import SUPPORTED_VERSIONS, ApiKey, response_class

from ..request_context import RequestContext
from ..services import BrokerServices

# feature -> (min, max) supported level; the finalized level is the max (one broker build per cluster)
FEATURES = {"transaction.version": (0, 1), "group.version": (0, 1)}  # group.version 1: KIP-848 consumer groups
FEATURES_EPOCH = 0


async def handle(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.API_VERSIONS)
    AV = Resp.ApiVersion
    v = ctx.api_version
    resp = Resp(
        version=v,
        error_code=0,
        throttle_time_ms=0,
        api_keys=[AV(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())],
    )
    if v >= 3:
        resp.supported_features = [
            Resp.SupportedFeatureKey(name=n, min_version=lo, max_version=hi) for n, (lo, hi) in FEATURES.items()
        ]
        resp.finalized_features_epoch = FEATURES_EPOCH
        resp.finalized_features = [
            Resp.FinalizedFeatureKey(name=n, max_version_level=hi, min_version_level=hi)
            for n, (_, hi) in FEATURES.items()
        ]
    return resp
