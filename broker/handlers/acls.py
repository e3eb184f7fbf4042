"""ACL administration: DescribeAcls (29), CreateAcls (30), DeleteAcls (31), v1-3 as in Kafka 4 (v0 was removed).

Kafka's AclApis: the CLUSTER resource is checked first (DESCRIBE to describe, ALTER to create or delete; else
CLUSTER_AUTHORIZATION_FAILED), then, without an authorizer, SECURITY_DISABLED. A request holding the code 0 (UNKNOWN)
for a resource type, pattern type, operation or permission type is one Kafka's parser refuses: the connection is
closed. Any other unknown code reads as UNKNOWN and gets INVALID_REQUEST with the controller's message, per binding
(create) or per filter (delete); describing with it matches nothing.

The bindings live in the metadata store, and any broker of a cluster writes them there itself instead of forwarding
the request to the controller: the store's keys are content-addressed (broker/cluster/etcd_store.py), so concurrent
writers need no serialising, and the check above runs where the client's principal is known (a forwarded request
reaches the controller as the forwarding broker's principal). Every broker's authorizer follows the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import structlog

from strata.protocol.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey, api_name, response_class

from ..authorization import authorize
from ..network import CloseConnection
from ..replica_manager import pace
from ..request_context import RequestContext
from ..services import BrokerServices

log = structlog.get_logger("strata.acls")

_CLUSTER_AUTH_FAILED = "Cluster authorization failed."
_NO_AUTHORIZER_DESCRIBE = "No Authorizer is configured on the broker"
_NO_AUTHORIZER = "No Authorizer is configured."

E = TypeVar("E", ResourceType, PatternType, AclOperation, AclPermissionType)


def _enum(kind: type[E], code: int) -> E:
    """Kafka's fromCode: a code it does not know reads as UNKNOWN."""
    try:
        return kind(code)
    except ValueError:
        return kind(0)


def _refuse_unknown(ctx: RequestContext, items: Iterable[Any], codes: Callable[[Any], tuple[int, ...]]) -> None:
    """Close the connection if an entry holds the code 0 (Kafka's request parser throws: "... contains UNKNOWN
    elements"), as Kafka's broker does with a request it cannot parse."""
    if any(0 in codes(item) for item in items):
        log.warning(
            "closing connection: ACL request with UNKNOWN elements",
            api=api_name(ctx.api_key),
            client_id=ctx.client_id,
            peer=ctx.client_address,
        )
        raise CloseConnection


def _filter_codes(f: Any) -> tuple[int, ...]:
    return (f.resource_type_filter, f.pattern_type_filter, f.operation, f.permission_type)


def _filter(f: Any) -> AclBindingFilter:
    return AclBindingFilter(
        _enum(ResourceType, f.resource_type_filter),
        f.resource_name_filter,
        _enum(PatternType, f.pattern_type_filter),
        f.principal_filter,
        f.host_filter,
        _enum(AclOperation, f.operation),
        _enum(AclPermissionType, f.permission_type),
    )


def _sort_key(b: AclBinding) -> tuple[int, int, str, str, str, int, int]:
    p, e = b.pattern, b.entry
    return (p.resource_type, p.pattern_type, p.name, e.principal, e.host, e.operation, e.permission_type)


async def describe_acls(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.DESCRIBE_ACLS)

    def error(code: int, message: str) -> Any:
        return Resp(version=ctx.api_version, throttle_time_ms=0, error_code=code, error_message=message, resources=[])

    _refuse_unknown(ctx, (req,), _filter_codes)
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _CLUSTER_AUTH_FAILED)
    if ctx.authorizer is None:
        return error(ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER_DESCRIBE)
    filt = _filter(req)
    matched = []
    for n, b in enumerate(services.store.acls()):
        await pace(n)
        if filt.matches(b):
            matched.append(b)
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in sorted(matched, key=_sort_key):
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    Res = Resp.DescribeAclsResource
    Acl = Res.AclDescription
    resources = []
    n = 0
    for p, entries in by_pattern.items():
        acls = []
        for e in entries:
            await pace(n)
            n += 1
            acls.append(
                Acl(principal=e.principal, host=e.host, operation=e.operation, permission_type=e.permission_type)
            )
        rtype, ptype = int(p.resource_type), int(p.pattern_type)
        resources.append(Res(resource_type=rtype, resource_name=p.name, pattern_type=ptype, acls=acls))
    return Resp(version=ctx.api_version, throttle_time_ms=0, error_code=0, error_message=None, resources=resources)


def _creation_codes(c: Any) -> tuple[int, ...]:
    return (c.resource_type, c.resource_pattern_type, c.operation, c.permission_type)


def _binding(c: Any) -> AclBinding:
    return AclBinding(
        ResourcePattern(
            _enum(ResourceType, c.resource_type), c.resource_name, _enum(PatternType, c.resource_pattern_type)
        ),
        AccessControlEntry(
            c.principal, c.host, _enum(AclOperation, c.operation), _enum(AclPermissionType, c.permission_type)
        ),
    )


async def create_acls(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.CREATE_ACLS)
    Result = Resp.AclCreationResult
    creations = req.creations or []

    async def answer(outcomes: list[tuple[int, str | None]]) -> Any:
        results = []
        for n, (code, msg) in enumerate(outcomes):
            await pace(n)
            results.append(Result(error_code=code, error_message=msg))
        return Resp(version=ctx.api_version, throttle_time_ms=0, results=results)

    _refuse_unknown(ctx, creations, _creation_codes)
    if not authorize(ctx, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return await answer([(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _CLUSTER_AUTH_FAILED)] * len(creations))
    if ctx.authorizer is None:
        return await answer([(ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)] * len(creations))
    outcomes: list[tuple[int, str | None]] = []
    valid: list[AclBinding] = []
    for n, c in enumerate(creations):
        await pace(n)
        binding = _binding(c)
        try:
            binding.validate()
        except AclError as e:
            outcomes.append((ErrorCode.INVALID_REQUEST, str(e)))
            continue
        valid.append(binding)
        outcomes.append((ErrorCode.NONE, None))
    if valid:
        try:
            await services.store.create_acls(valid)
        except Exception as e:  # noqa: BLE001 - the store unreachable: every binding to create failed
            log.warning("creating ACLs failed", error=repr(e), acls=len(valid))
            failed = (ErrorCode.UNKNOWN_SERVER_ERROR, "The ACLs could not be stored; try again")
            outcomes = [failed if code == ErrorCode.NONE else (code, msg) for code, msg in outcomes]
        else:
            log.info("ACLs created", principal=str(ctx.principal), acls=[b.to_json() for b in valid[:20]], n=len(valid))
    return await answer(outcomes)


async def delete_acls(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.DELETE_ACLS)
    FilterResult = Resp.DeleteAclsFilterResult
    Matching = FilterResult.DeleteAclsMatchingAcl
    filters = req.filters or []

    async def refuse_all(code: int, msg: str) -> Any:
        results = []
        for n in range(len(filters)):
            await pace(n)
            results.append(FilterResult(error_code=code, error_message=msg, matching_acls=[]))
        return Resp(version=ctx.api_version, throttle_time_ms=0, filter_results=results)

    _refuse_unknown(ctx, filters, _filter_codes)
    if not authorize(ctx, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return await refuse_all(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _CLUSTER_AUTH_FAILED)
    if ctx.authorizer is None:
        return await refuse_all(ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)
    parsed = [_filter(f) for f in filters]
    errors: dict[int, str] = {}
    for i, filt in enumerate(parsed):
        await pace(i)
        try:
            filt.validate_for_delete()
        except AclError as e:
            errors[i] = str(e)
    valid = [f for i, f in enumerate(parsed) if i not in errors]
    try:
        matched = iter(await services.store.delete_acls(valid) if valid else [])
    except Exception as e:  # noqa: BLE001 - the store unreachable: nothing was deleted
        log.warning("deleting ACLs failed", error=repr(e))
        return await refuse_all(ErrorCode.UNKNOWN_SERVER_ERROR, "The ACLs could not be deleted; try again")
    results = []
    deleted = 0
    for i in range(len(parsed)):
        await pace(i)
        if i in errors:
            results.append(
                FilterResult(error_code=ErrorCode.INVALID_REQUEST, error_message=errors[i], matching_acls=[])
            )
            continue
        found = sorted(next(matched), key=_sort_key)
        deleted += len(found)
        acls = [Matching(error_code=0, error_message=None, **b.wire_fields()) for b in found]
        results.append(FilterResult(error_code=0, error_message=None, matching_acls=acls))
    if deleted:
        log.info("ACLs deleted", principal=str(ctx.principal), matched=deleted)
    return Resp(version=ctx.api_version, throttle_time_ms=0, filter_results=results)


__all__ = ["create_acls", "delete_acls", "describe_acls"]
