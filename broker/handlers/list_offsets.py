"""ListOffsets: latest (-1), earliest (-2), max timestamp (-3, v7+), earliest local (-4, v8+), latest tiered
(-5, v9+), earliest pending upload (-6, v11+), and lookups by timestamp through the time index.

A sentinel asked below the version that introduced it is answered UNSUPPORTED_VERSION for that partition, as
Kafka's ReplicaManager does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from strata.protocol.constants import CONSUMER_REPLICA_ID, DEBUG_REPLICA_ID
from strata.protocol.constants import EARLIEST_LOCAL_TIMESTAMP as EARLIEST_LOCAL
from strata.protocol.constants import EARLIEST_PENDING_UPLOAD_TIMESTAMP as EARLIEST_PENDING_UPLOAD
from strata.protocol.constants import EARLIEST_TIMESTAMP as EARLIEST
from strata.protocol.constants import LATEST_TIERED_TIMESTAMP as LATEST_TIERED
from strata.protocol.constants import LATEST_TIMESTAMP as LATEST
from strata.protocol.constants import LIST_OFFSETS_SENTINEL_MIN_VERSION as _MIN_VERSION
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey, response_class

from ..authorization import filter_authorized
from ..authorized_ops import AclOperation, ResourceType
from ..replica_manager import READ_COMMITTED, pace
from ..request_context import RequestContext
from ..services import BrokerServices


async def lookup(
    services: BrokerServices, partition, ts: int, isolation: int, from_replica: bool = False
) -> tuple[int, int, int]:
    """(timestamp, offset, leader_epoch) for one partition; -1s when nothing matches. Followers and debug tools
    (`from_replica`) get the log end offset for LATEST, consumers the HW (or LSO with READ_COMMITTED), and a
    search by time finds consumers only offsets below that (Kafka's lastFetchableOffset)."""
    ulog = partition.log
    if from_replica:
        fetchable = ulog.log_end_offset
    else:
        fetchable = partition.last_stable_offset if isolation == READ_COMMITTED else partition.high_watermark
    if ts == LATEST:
        return -1, fetchable, _epoch(ulog, fetchable)
    if ts == EARLIEST:
        return -1, ulog.log_start_offset, _epoch(ulog, ulog.log_start_offset)
    if ts == EARLIEST_LOCAL:
        return -1, ulog.local_log_start_offset, _epoch(ulog, ulog.local_log_start_offset)
    # a read-replica topic's remote data is read through its origin's RemoteLogManager
    rlm = services.replica_manager.remote_reader(partition) or services.remote_log_manager
    tiered = ulog.remote_log_enabled and rlm is not None
    if ts == LATEST_TIERED:
        # KIP-1005: the highest offset in remote storage, -1 when nothing (or no remote storage) is there.
        off = ulog.highest_offset_in_remote_storage if tiered else -1
        return -1, off, _epoch(ulog, off) if off >= 0 else -1
    if ts == EARLIEST_PENDING_UPLOAD:
        # KIP-1023: the first offset not yet in remote storage; -1 on a topic without remote storage, and -1 while a
        # leader does not know yet what is there (nothing copied by its lineage, but local data already deleted).
        # Never above the LSO: only segments wholly below it are copied, so an open transaction's data is pending.
        highest = ulog.highest_offset_in_remote_storage if tiered else -1
        if not tiered or (highest < 0 and ulog.local_log_start_offset != ulog.log_start_offset):
            return -1, -1, -1
        off = max(highest + 1, ulog.log_start_offset)
        return -1, off, _epoch(ulog, off)
    # A real timestamp (>= 0) is looked up in the remote time indexes first; MAX_TIMESTAMP (-3) is not a time to
    # search for (the remote lookup would answer the first record with a timestamp >= -3, i.e. the log start).
    if ts >= 0 and rlm is not None and tiered and ulog.log_start_offset < ulog.local_log_start_offset:
        found = await rlm.find_offset_by_timestamp(ulog, ts)  # remote time indexes first
        if found is not None:
            epoch = found.leader_epoch if found.leader_epoch is not None else -1
            return found.timestamp, found.offset, epoch
    # A lookup by time may inflate stored batches (bounded by iter_records): a worker thread keeps the loop free.
    found = await asyncio.to_thread(ulog.fetch_offset_by_timestamp, ts)
    if found is None or found.offset >= fetchable:
        return -1, -1, -1
    epoch = found.leader_epoch if found.leader_epoch is not None else -1
    return found.timestamp, found.offset, epoch


def _epoch(ulog, offset: int) -> int:
    e = ulog.epoch_for_offset(offset)
    if e is None:
        e = ulog.latest_epoch
    return -1 if e is None else e


async def handle(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.LIST_OFFSETS)
    TopicResp = Resp.ListOffsetsTopicResponse
    PartResp = TopicResp.ListOffsetsPartitionResponse
    v = ctx.api_version
    isolation = req.isolation_level if v >= 2 else 0
    replica_id = req.replica_id  # -1 consumer, -2 debug (may read a follower), >= 0 a follower
    rm = services.replica_manager
    # DESCRIBE on each topic (followers included, as in Kafka); a topic not allowed answers TOPIC_AUTHORIZATION_FAILED
    # on every partition, before anything says whether it exists
    describable = filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in req.topics))
    topics = []
    n = 0
    for t in req.topics:
        parts = []
        allowed = t.name in describable
        for p in t.partitions:
            n += 1
            await pace(n)  # thousands of partitions: other connections get a turn
            ts = p.timestamp
            partition = rm.get_partition(t.name, p.partition_index) if allowed else None
            code = ErrorCode.NONE
            out = (-1, -1, -1)
            if not allowed:
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif partition is None:
                code = rm.not_hosted_error(t.name, p.partition_index)
            elif ts < 0 and v < _MIN_VERSION.get(ts, 0):
                code = ErrorCode.UNSUPPORTED_VERSION
            elif ts < EARLIEST_PENDING_UPLOAD:
                code = ErrorCode.UNSUPPORTED_VERSION  # no such sentinel
            elif code := partition.check_epoch(
                p.current_leader_epoch if v >= 4 else -1, require_leader=replica_id != DEBUG_REPLICA_ID
            ):
                pass
            elif (
                ts == LATEST
                and replica_id == CONSUMER_REPLICA_ID
                and partition.is_leader
                and partition.leader_epoch_start_offset > partition.high_watermark
            ):
                # A new leader whose HW has not yet reached its epoch's start: what is committed is unknown.
                code = ErrorCode.OFFSET_NOT_AVAILABLE
            else:
                try:
                    out = await lookup(
                        services, partition, ts, isolation, from_replica=replica_id != CONSUMER_REPLICA_ID
                    )
                except Exception as e:  # noqa: BLE001 - remote storage unreachable for a timestamp lookup
                    code = ErrorCode(getattr(e, "error_code", ErrorCode.KAFKA_STORAGE_ERROR))
            timestamp, offset, epoch = out
            if v == 0:
                parts.append(
                    PartResp(
                        partition_index=p.partition_index,
                        error_code=code,
                        old_style_offsets=[offset] if offset >= 0 else [],
                    )
                )
            else:
                parts.append(
                    PartResp(
                        partition_index=p.partition_index,
                        error_code=code,
                        timestamp=timestamp,
                        offset=offset,
                        leader_epoch=epoch,
                    )
                )
        topics.append(TopicResp(name=t.name, partitions=parts))
    return Resp(version=v, throttle_time_ms=0, topics=topics)
