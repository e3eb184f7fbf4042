"""Cluster admin APIs: ElectLeaders (v0-2, preferred and unclean), AlterPartitionReassignments (v0-1) and
ListPartitionReassignments (v0). The controller answers them (other brokers forward them to it,
broker/cluster/forwarding.py): they compare-and-set partition states in the metadata store, and the controller's
passes complete reassignments (broker/cluster/controller.py)."""

from __future__ import annotations

from typing import Any

from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey, response_class

from ..authorization import authorize
from ..authorized_ops import CLUSTER_NAME, AclOperation, ResourceType
from ..cluster.controller import (
    ELECTION_PREFERRED,
    ELECTION_UNCLEAN,
    alter_reassignment,
    list_reassignments,
)
from ..cluster.controller import (
    elect_leaders as do_elect,
)
from ..request_context import RequestContext
from ..services import BrokerServices

_NOT_CONTROLLER = "This is not the correct controller for this cluster."
_CLUSTER_AUTH_FAILED = "Cluster authorization failed."


def _cluster_allowed(ctx: RequestContext, operation: AclOperation) -> bool:
    """ElectLeaders and AlterPartitionReassignments need ALTER on the cluster, ListPartitionReassignments DESCRIBE;
    a refusal is Kafka's getErrorResponse: CLUSTER_AUTHORIZATION_FAILED at the top and on every partition named."""
    return authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def _is_controller(services: BrokerServices) -> bool:
    return services.topic_manager.is_controller()


async def elect_leaders(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.ELECT_LEADERS)
    TopicRes = Resp.ReplicaElectionResult
    PartRes = TopicRes.PartitionResult
    v = ctx.api_version
    election_type = req.election_type if v >= 1 else ELECTION_PREFERRED
    wanted: list[tuple[str, int]] | None = None
    results: dict[tuple[str, int], tuple[ErrorCode, str | None]]
    if req.topic_partitions is not None:
        wanted = [(t.topic, p) for t in req.topic_partitions for p in t.partitions]
    top = ErrorCode.NONE
    if not _cluster_allowed(ctx, AclOperation.ALTER):
        results = {tp: (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _CLUSTER_AUTH_FAILED) for tp in wanted or []}
        top = ErrorCode.CLUSTER_AUTHORIZATION_FAILED if v >= 1 else ErrorCode.NONE  # v0: no top-level error code
    elif election_type not in (ELECTION_PREFERRED, ELECTION_UNCLEAN):
        return Resp(version=v, throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, replica_election_results=[])
    elif not _is_controller(services):
        if v == 0:  # no top-level error code: every partition asked for gets it
            results = {tp: (ErrorCode.NOT_CONTROLLER, _NOT_CONTROLLER) for tp in wanted or []}
        else:
            return Resp(version=v, throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER, replica_election_results=[])
    else:
        results = await do_elect(services.store, election_type, wanted)
    by_topic: dict[str, list] = {}
    for (t, p), (err, msg) in results.items():
        by_topic.setdefault(t, []).append(PartRes(partition_id=p, error_code=err, error_message=msg))
    topics = [TopicRes(topic=t, partition_result=parts) for t, parts in by_topic.items()]
    return Resp(version=v, throttle_time_ms=0, error_code=top, replica_election_results=topics)


async def alter_partition_reassignments(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
    TopicRes = Resp.ReassignableTopicResponse
    PartRes = TopicRes.ReassignablePartitionResponse
    allow_rf_change = bool(getattr(req, "allow_replication_factor_change", True)) if ctx.api_version >= 1 else True
    if not _cluster_allowed(ctx, AclOperation.ALTER):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return Resp(
            version=ctx.api_version,
            throttle_time_ms=0,
            allow_replication_factor_change=allow_rf_change,
            error_code=code,
            error_message=_CLUSTER_AUTH_FAILED,
            responses=[
                TopicRes(
                    name=t.name,
                    partitions=[
                        PartRes(partition_index=p.partition_index, error_code=code, error_message=_CLUSTER_AUTH_FAILED)
                        for p in t.partitions
                    ],
                )
                for t in req.topics
            ],
        )
    if not _is_controller(services):
        return Resp(
            version=ctx.api_version,
            throttle_time_ms=0,
            allow_replication_factor_change=allow_rf_change,
            error_code=ErrorCode.NOT_CONTROLLER,
            error_message=_NOT_CONTROLLER,
            responses=[],
        )
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            target = list(p.replicas) if p.replicas is not None else None
            err, msg = await alter_reassignment(services.store, t.name, p.partition_index, target, allow_rf_change)
            parts.append(PartRes(partition_index=p.partition_index, error_code=err, error_message=msg))
        topics.append(TopicRes(name=t.name, partitions=parts))
    return Resp(
        version=ctx.api_version,
        throttle_time_ms=0,
        allow_replication_factor_change=allow_rf_change,
        error_code=0,
        error_message=None,
        responses=topics,
    )


async def list_partition_reassignments(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.LIST_PARTITION_REASSIGNMENTS)
    TopicRes = Resp.OngoingTopicReassignment
    PartRes = TopicRes.OngoingPartitionReassignment
    wanted = None
    if req.topics is not None:
        wanted = [(t.name, list(t.partition_indexes)) for t in req.topics]
    if not _cluster_allowed(ctx, AclOperation.DESCRIBE):
        return Resp(
            version=ctx.api_version,
            throttle_time_ms=0,
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            error_message=_CLUSTER_AUTH_FAILED,
            topics=[
                TopicRes(
                    name=t,
                    partitions=[
                        PartRes(partition_index=p, replicas=[], adding_replicas=[], removing_replicas=[]) for p in ps
                    ],
                )
                for t, ps in wanted or []
            ],
        )
    if not _is_controller(services):
        return Resp(
            version=ctx.api_version,
            throttle_time_ms=0,
            error_code=ErrorCode.NOT_CONTROLLER,
            error_message=_NOT_CONTROLLER,
            topics=[],
        )
    ongoing = list_reassignments(services.store, wanted)
    topics = [
        TopicRes(
            name=t,
            partitions=[
                PartRes(
                    partition_index=p,
                    replicas=list(s.replicas),
                    adding_replicas=list(s.adding),
                    removing_replicas=list(s.removing),
                )
                for p, s in parts
            ],
        )
        for t, parts in ongoing.items()
    ]
    return Resp(version=ctx.api_version, throttle_time_ms=0, error_code=0, error_message=None, topics=topics)
