"""Client quota administration (KIP-546): DescribeClientQuotas (48) and AlterClientQuotas (49), v0-1.

Describe answers from this broker's metadata image with Kafka's filter semantics (ClientQuotasImage.describe);
alter validates each entity and value as Kafka's ClientQuotaControlManager and writes what passes in one atomic
change of the metadata store (the local file, or one etcd transaction that any broker may make: quotas touch no
partition state, so unlike topic changes they need no controller to order them, and every broker's watch applies
them at once). DESCRIBE_CONFIGS on the cluster to describe, ALTER_CONFIGS to alter, as Kafka checks.
"""

from __future__ import annotations

from typing import Any

from strata.protocol.acl import CLUSTER_NAME, AclOperation, ResourceType
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey, response_class

from ..authorization import authorize
from ..replica_manager import pace
from ..request_context import RequestContext
from ..security.client_quotas import (
    QuotaEntity,
    QuotaRequestError,
    check_quota_value,
    entity_from_wire,
    parse_filter,
)
from ..services import BrokerServices
from .admin import MAX_RECORDS_PER_USER_OP

_CLUSTER_AUTH_FAILED = "Cluster authorization failed."  # Kafka's Errors.CLUSTER_AUTHORIZATION_FAILED message
# Kafka's controller writes one record per changed key and refuses an operation of more than
# MAX_RECORDS_PER_USER_OP of them as a whole (PolicyViolationException; the response carries Errors' message)
_POLICY_VIOLATION = "Request parameters do not satisfy the configured policy."


def _authorized(ctx: RequestContext, operation: AclOperation) -> bool:
    return authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


async def describe_client_quotas(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.DESCRIBE_CLIENT_QUOTAS)
    Entry = Resp.EntryData

    def error(code: int, message: str) -> Any:  # Kafka's getErrorResponse: no entries (null)
        return Resp(version=ctx.api_version, throttle_time_ms=0, error_code=code, error_message=message, entries=None)

    if not _authorized(ctx, AclOperation.DESCRIBE_CONFIGS):
        return error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _CLUSTER_AUTH_FAILED)
    try:
        flt = parse_filter(((c.entity_type, c.match_type, c.match) for c in req.components), req.strict)
    except QuotaRequestError as e:
        return error(e.code, str(e))
    entries = []
    for n, (entity, values) in enumerate(
        sorted(services.store.client_quotas().items(), key=lambda kv: kv[0].store_key())
    ):
        await pace(n)
        if not flt.matches(entity):
            continue
        entries.append(
            Entry(
                entity=[Entry.EntityData(entity_type=t, entity_name=n) for t, n in entity.components()],
                values=[Entry.ValueData(key=k, value=v) for k, v in sorted(values.items())],
            )
        )
    return Resp(version=ctx.api_version, throttle_time_ms=0, error_code=0, error_message=None, entries=entries)


async def alter_client_quotas(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.ALTER_CLIENT_QUOTAS)
    Entry = Resp.EntryData

    def result(entry: Any, code: int, message: str | None) -> Any:  # the entity as the request named it
        entity = [Entry.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity]
        return Entry(error_code=code, error_message=message, entity=entity)

    if not _authorized(ctx, AclOperation.ALTER_CONFIGS):
        refused = [result(e, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _CLUSTER_AUTH_FAILED) for e in req.entries]
        return Resp(version=ctx.api_version, throttle_time_ms=0, entries=refused)
    results: list[Any] = []
    changes: dict[QuotaEntity, dict[str, float | None]] = {}
    first: dict[QuotaEntity, int] = {}  # entity -> index of its first result
    for n, entry in enumerate(req.entries):
        await pace(n)
        try:
            entity = entity_from_wire((e.entity_type, e.entity_name) for e in entry.entity)
            if entity in first:
                # Kafka answers an entity named twice with this error, and changes nothing of it
                changes.pop(entity, None)
                dup = QuotaRequestError(ErrorCode.INVALID_REQUEST, f"Ignoring duplicate entity {entity.kafka_str()}")
                earlier = results[first[entity]]
                earlier.error_code, earlier.error_message = dup.code, str(dup)
                raise dup
            first[entity] = len(results)
            ops: dict[str, float | None] = {}
            for op in entry.ops:
                if op.key in ops:
                    raise QuotaRequestError(
                        ErrorCode.INVALID_REQUEST,
                        f"Duplicate quota key {op.key} not updating quota for this entity {entity.kafka_str()}",
                    )
                if not op.remove:
                    check_quota_value(op.key, op.value)
                ops[op.key] = None if op.remove else float(op.value)
        except QuotaRequestError as e:
            results.append(result(entry, e.code, str(e)))
            continue
        changes[entity] = ops
        results.append(result(entry, ErrorCode.NONE, None))
    if _records(services, changes) > MAX_RECORDS_PER_USER_OP:
        for n, r in enumerate(results):  # one result per entry already: every one refused
            await pace(n)
            r.error_code, r.error_message = ErrorCode.POLICY_VIOLATION, _POLICY_VIOLATION
        return Resp(version=ctx.api_version, throttle_time_ms=0, entries=results)
    if changes and not req.validate_only:
        await services.store.alter_client_quotas(changes)
    return Resp(version=ctx.api_version, throttle_time_ms=0, entries=results)


def _records(services: BrokerServices, changes: dict[QuotaEntity, dict[str, float | None]]) -> int:
    """The ClientQuotaRecords Kafka's controller would write: one per key whose value changes."""
    stored = services.store.client_quotas()
    n = 0
    for entity, ops in changes.items():
        current = stored.get(entity, {})
        n += sum(1 for k, v in ops.items() if (k in current if v is None else current.get(k) != v))
    return n
