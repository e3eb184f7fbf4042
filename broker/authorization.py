"""The one place handlers ask the authorizer: `authorize` for one resource, `filter_authorized` for many.

Without an authorizer (`authorizer.class.name` empty) everything is allowed, as in Kafka. A denial is counted in
`strata_authorizer_denials_total` (listener, operation, resource type: never a resource name, so the label set stays
bounded) and logged on the `strata.authorizer` logger at INFO, as Kafka's `kafka.authorizer.logger` logs denied
operations (the principal is no secret; one line per request names the principal, host, request and the first
resources denied).
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog

from strata.protocol.acl import AclOperation, ResourceType
from strata.protocol.registry import api_name

from .request_context import RequestContext

log = structlog.get_logger("strata.authorizer")


def client_host(ctx: RequestContext) -> str:
    """The client's address without its port (an ACL's host is an address, IPv6 without brackets)."""
    addr = ctx.client_address
    host = addr.rpartition(":")[0] if ":" in addr else addr
    return host.strip("[]")


_LOGGED_NAMES = 20  # a request denied on many resources logs one line naming the first few


def _denied(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, names: list[str]) -> None:
    if ctx.metrics is not None:
        ctx.metrics.authorizer_denials(ctx.listener, operation.name, resource_type.name, len(names))
    log.info(
        "authorization denied",
        principal=str(ctx.principal),
        host=client_host(ctx),
        operation=operation.name,
        resource_type=resource_type.name,
        resources=names[:_LOGGED_NAMES],
        denied=len(names),
        request=api_name(ctx.api_key),
        listener=ctx.listener,
    )


def authorize(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    """May the request's principal, from its host, perform `operation` on the resource? (True without authorizer.)"""
    authorizer = ctx.authorizer
    if authorizer is None:
        return True
    if authorizer.authorize(ctx.principal, client_host(ctx), int(operation), int(resource_type), name):
        return True
    _denied(ctx, operation, resource_type, [name])
    return False


def authorize_by_resource_type(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType) -> bool:
    """May the principal perform `operation` on at least one resource of the type? Kafka asks this of an idempotent
    producer without IDEMPOTENT_WRITE on the cluster (WRITE on any topic will do). True without authorizer."""
    authorizer = ctx.authorizer
    if authorizer is None:
        return True
    if authorizer.authorize_by_resource_type(ctx.principal, client_host(ctx), int(operation), int(resource_type)):
        return True
    _denied(ctx, operation, resource_type, ["<any>"])
    return False


def filter_authorized(
    ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, names: Iterable[str]
) -> set[str]:
    """The names among `names` the principal may perform `operation` on (all of them without an authorizer).

    Each distinct name is decided (and a denial counted) once."""
    distinct = set(names)
    authorizer = ctx.authorizer
    if authorizer is None:
        return distinct
    principal, host = ctx.principal, client_host(ctx)
    op, rtype = int(operation), int(resource_type)
    allowed = {n for n in distinct if authorizer.authorize(principal, host, op, rtype, n)}
    if len(allowed) < len(distinct):
        _denied(ctx, operation, resource_type, sorted(distinct - allowed))
    return allowed


__all__ = ["authorize", "authorize_by_resource_type", "client_host", "filter_authorized"]
