"""Kafka's authorized operations: the AclOperation codes a principal may perform on a resource, which Metadata,
DescribeCluster and DescribeGroups return as a bit set when the client asks (``include_*_authorized_operations``).

Every handler computes them through :func:`authorized_operations`, so the authorizer of the security work decides
them in one place; without an authorizer, Kafka answers every operation the resource type supports
(``AclOperation.supportedOperations``), and so does Strata.
"""

from __future__ import annotations

from strata.protocol.acl import CLUSTER_NAME, AclOperation, ResourceType

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


__all__ = [
    "CLUSTER_NAME",
    "SUPPORTED_OPERATIONS",
    "AclOperation",
    "ResourceType",
    "allowed_quietly",
    "authorized_operations",
    "client_host",
    "cluster_operations",
    "requested_operations",
]
