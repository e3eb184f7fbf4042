"""Kafka's authorized operations: the AclOperation codes a principal may perform on a resource, which Metadata,
DescribeCluster and DescribeGroups return as a bit set when the client asks (``include_*_authorized_operations``).

Every handler computes them through :func:`authorized_operations`, so the authorizer of the security work decides
them in one place; without an authorizer, Kafka answers every operation the resource type supports
(``AclOperation.supportedOperations``), and so does Strata.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from strata.protocol.acl import (
    CLUSTER_NAME,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

from .authorization import authorize, client_host
from .request_context import RequestContext

_Op = AclOperation
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset(
        {_Op.READ, _Op.WRITE, _Op.CREATE, _Op.DESCRIBE, _Op.DELETE, _Op.ALTER, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS}
    ),
    # Kafka 4.x: group configs (KIP-848) made DESCRIBE_CONFIGS and ALTER_CONFIGS group operations
    ResourceType.GROUP: frozenset({_Op.READ, _Op.DESCRIBE, _Op.DELETE, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset(
        {
            _Op.CREATE,
            _Op.CLUSTER_ACTION,
            _Op.DESCRIBE_CONFIGS,
            _Op.ALTER_CONFIGS,
            _Op.IDEMPOTENT_WRITE,
            _Op.ALTER,
            _Op.DESCRIBE,
        }
    ),
}


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, resource_name: str) -> set[int]:
    """The supported operations on the resource that the request's principal may perform (all without an
    authorizer)."""
    supported = SUPPORTED_OPERATIONS[resource_type]
    authorizer = ctx.authorizer
    if authorizer is None:
        return {int(op) for op in supported}
    host = client_host(ctx)
    return {
        int(op)
        for op in supported
        if authorizer.authorize(ctx.principal, host, int(op), int(resource_type), resource_name)
    }


def requested_operations(
    ctx: RequestContext, asked: bool, resource_type: ResourceType, resource_name: str
) -> set[int] | None:
    """The field's value: the authorized operations if the client asked, else None (encoded as INT32_MIN, Kafka's
    "not requested")."""
    return authorized_operations(ctx, resource_type, resource_name) if asked else None


def cluster_operations(ctx: RequestContext, asked: bool) -> set[int] | None:
    """The cluster's authorized operations (Metadata v8-10, DescribeCluster): not asked, None; without DESCRIBE on
    the cluster, none at all (Kafka answers 0 then, whatever else the principal may do)."""
    if not asked:
        return None
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return set()
    return authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)


def allowed_quietly(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    """A check whose refusal is no denial (Kafka's logIfDenied=false): whether to list a topic in an unnamed listing,
    whether a cluster-wide permission spares the per-resource checks. Not counted, not logged."""
    authorizer = ctx.authorizer
    return authorizer is None or authorizer.authorize(
        ctx.principal, client_host(ctx), int(operation), int(resource_type), name
    )


@runtime_checkable
class ListsAcls(Protocol):
    """An authorizer that can list its bindings (StandardAuthorizer), as Kafka's authorizeByResourceType needs."""

    def acls(self, filt: AclBindingFilter | None = None) -> list[AclBinding]: ...


def authorize_by_resource_type(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType) -> bool:
    """Kafka's Authorizer.authorizeByResourceType: may the principal perform `operation` on at least one resource of
    the type? Super users (and a type without any ACL when allow.everyone.if.no.acl.found) may; otherwise some
    ALLOW binding of the principal (or User:*) and host for exactly this operation (or ALL) must not be covered by a
    DENY: a LITERAL allow by a LITERAL deny of the same name or a PREFIXED deny of one of its prefixes, a PREFIXED
    allow by a PREFIXED deny of one of its prefixes; a LITERAL `*` DENY refuses everything, a `*` ALLOW allows."""
    authorizer = ctx.authorizer
    if authorizer is None:
        return True
    host = client_host(ctx)
    # a name no binding is about: super users, and allow.everyone.if.no.acl.found over a type without bindings
    if authorizer.authorize(ctx.principal, host, int(operation), int(resource_type), "hardcode"):
        return True
    if not isinstance(authorizer, ListsAcls):
        return False
    return _some_allow_undenied(
        authorizer.acls(AclBindingFilter(resource_type=resource_type)), str(ctx.principal), host, operation
    )


def _some_allow_undenied(bindings: Iterable[AclBinding], principal: str, host: str, operation: AclOperation) -> bool:
    deny: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
    allow: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
    for b in bindings:
        e, p = b.entry, b.pattern
        if e.host not in (host, WILDCARD) or e.principal not in (principal, WILDCARD_PRINCIPAL):
            continue
        if e.operation not in (operation, AclOperation.ALL) or p.pattern_type not in deny:
            continue
        if e.permission_type == AclPermissionType.DENY:
            if p.pattern_type == PatternType.LITERAL and p.name == WILDCARD:
                return False
            deny[p.pattern_type].add(p.name)
        elif e.permission_type == AclPermissionType.ALLOW:
            if p.pattern_type == PatternType.LITERAL and p.name == WILDCARD:
                return True
            allow[p.pattern_type].add(p.name)
    for pattern_type, names in allow.items():
        for name in names:
            if pattern_type == PatternType.LITERAL and name in deny[PatternType.LITERAL]:
                continue
            if not any(name[:i] in deny[PatternType.PREFIXED] for i in range(1, len(name) + 1)):
                return True
    return False


__all__ = [
    "CLUSTER_NAME",
    "SUPPORTED_OPERATIONS",
    "AclOperation",
    "ResourceType",
    "allowed_quietly",
    "authorize_by_resource_type",
    "authorized_operations",
    "client_host",
    "cluster_operations",
    "requested_operations",
]
