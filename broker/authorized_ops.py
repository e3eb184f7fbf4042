"""Kafka's authorized operations: the AclOperation codes a principal may perform on a resource, which Metadata,
DescribeCluster and DescribeGroups return as a bit set when the client asks (``include_*_authorized_operations``).

Every handler computes them through :func:`authorized_operations`, so the authorizer of the security work decides
them in one place; without an authorizer, Kafka answers every operation the resource type supports
(``AclOperation.supportedOperations``), and so does Strata.
"""

from __future__ import annotations

from strata.protocol.acl import CLUSTER_NAME, AclOperation, ResourceType

from .authorization import client_host
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


__all__ = [
    "CLUSTER_NAME",
    "SUPPORTED_OPERATIONS",
    "AclOperation",
    "ResourceType",
    "authorized_operations",
    "client_host",
    "requested_operations",
]
