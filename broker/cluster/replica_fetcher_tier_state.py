"""The replica fetcher's tier state machine: its BuildingRemoteLogAuxState step (KIP-405; Kafka's
ReplicaFetcherTierStateMachine and buildRemoteLogAuxState). `ReplicaFetcher.build_remote_log_aux_state`
(replica_fetcher.py) calls it between Truncating and Fetching; it is a module of its own because it is the fetcher's
only part that reads remote storage (through the RemoteLogManager and the RLMM).

A follower fetching below the leader's local log start gets OFFSET_MOVED_TO_TIERED_STORAGE (109). It then:

1. asks the leader (ListOffsets -4 EARLIEST_LOCAL) for its earliest local offset and that offset's epoch -- or, with
   `follower.fetch.last.tiered.offset.enable` (KIP-1023) and an empty local log, for the last tiered offset (-5) and
   starts just past it;
2. finds the epoch of the offset just below where it will start (OffsetForLeaderEpoch for the previous epoch when the
   start offset could open its epoch);
3. waits (bounded) until the local RLMM holds the COPY_SEGMENT_FINISHED segment covering (epoch, start - 1);
4. fetches that segment's leader-epoch checkpoint and producer snapshot from remote storage;
5. truncates the local log fully, starts it at the start offset with log start = the earliest remote segment's
   start (`UnifiedLog.truncate_fully_and_start_at`), restores the epoch cache (entries below the start) and the
   producer state (`UnifiedLog.restore_aux_state`) and the highest offset in remote storage.

Any failure counts in BuildRemoteLogAuxStateErrorsPerSec and the partition retries after an exponential backoff.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import structlog

from strata.protocol.constants import EARLIEST_LOCAL_TIMESTAMP as EARLIEST_LOCAL
from strata.protocol.constants import LATEST_TIERED_TIMESTAMP as LATEST_TIERED
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey
from strata.storage.checkpoints import CheckpointFormatError
from strata.storage.epoch_cache import EpochEntry, decode_checkpoint
from strata.storage.producer_state import decode_snapshot

if TYPE_CHECKING:
    from ..partition import Partition
    from .replica_fetcher import PartitionFetchState, ReplicaFetcher

log = structlog.get_logger("strata.replica_fetcher_tier_state")

MAX_BACKOFF_S = 5.0
RLMM_WAIT_S = 1.0  # one attempt waits at most this long for the RLMM to load the partition

_attempts: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


class AuxStateError(Exception):
    """A retriable failure of the rebuild (leader error, segment not in the RLMM yet, remote fetch failed)."""


def parse_epoch_checkpoint(data: bytes) -> list[EpochEntry]:
    """Entries of a leader-epoch checkpoint ("0\\n<count>\\n<epoch> <offset>..." as shipped with a segment)."""
    try:
        return decode_checkpoint(data, "remote leader-epoch checkpoint")
    except CheckpointFormatError as e:
        raise AuxStateError(str(e)) from e


def backoff_s(base_s: float, attempt: int) -> float:
    """Exponential backoff from `base_s`, capped at MAX_BACKOFF_S (attempt 1 -> base)."""
    return min(MAX_BACKOFF_S, base_s * (2 ** max(0, attempt - 1)))


async def _list_offset(f: ReplicaFetcher, st: PartitionFetchState, timestamp: int) -> tuple[int, int]:
    """(offset, leader epoch) the leader answers for a special ListOffsets timestamp."""
    from .replica_fetcher import LeaderError

    try:
        return await f.list_offset(st, timestamp)
    except LeaderError as e:
        raise AuxStateError(f"ListOffsets {timestamp}: error {e.error_code}") from None


async def _epoch_end_offset(f: ReplicaFetcher, st: PartitionFetchState, epoch: int) -> tuple[int, int]:
    """The leader's (greatest epoch <= `epoch`, its end offset)."""
    from strata.protocol.registry import REQUEST_CLASSES

    from .replica_fetcher import OFFSET_FOR_LEADER_EPOCH_VERSION

    T = REQUEST_CLASSES[ApiKey.OFFSET_FOR_LEADER_EPOCH].OffsetForLeaderTopic
    resp = await f.request(
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        OFFSET_FOR_LEADER_EPOCH_VERSION,
        replica_id=f.rm.broker_id,
        topics=[
            T(
                topic=st.topic,
                partitions=[
                    T.OffsetForLeaderPartition(
                        partition=st.partition, current_leader_epoch=st.leader_epoch, leader_epoch=epoch
                    )
                ],
            )
        ],
    )
    for tr in resp.topics:
        for pr in tr.partitions:
            if pr.partition == st.partition:
                if pr.error_code != ErrorCode.NONE:
                    raise AuxStateError(f"OffsetForLeaderEpoch {epoch}: error {pr.error_code}")
                return pr.leader_epoch, pr.end_offset
    raise AuxStateError("OffsetForLeaderEpoch: partition missing from the answer")


async def _start_point(f: ReplicaFetcher, p: Partition, st: PartitionFetchState) -> tuple[int, int]:
    """(next fetch offset, epoch of next offset - 1)."""
    ulog = p.log
    if (
        f.rm.config.get("follower.fetch.last.tiered.offset.enable")
        and ulog.log_end_offset == 0
        and ulog.log_start_offset == 0
    ):
        last_tiered, epoch = await _list_offset(f, st, LATEST_TIERED)
        if last_tiered >= 0 and epoch >= 0:
            return last_tiered + 1, epoch  # KIP-1023: the epoch answered is that of the last tiered offset
    local_start, epoch = await _list_offset(f, st, EARLIEST_LOCAL)
    if local_start <= 0 or epoch < 0:
        raise AuxStateError(f"leader's earliest local offset {local_start} (epoch {epoch}) has nothing tiered below")
    target = epoch
    if epoch > 0:
        # local_start may open its epoch: the offset below then belongs to an earlier one.
        prev_epoch, prev_end = await _epoch_end_offset(f, st, epoch - 1)
        if prev_epoch >= 0 and prev_end >= local_start:
            target = prev_epoch
    return local_start, target


async def _rebuild(f: ReplicaFetcher, p: Partition, st: PartitionFetchState) -> bool:
    from strata.remote.executors import POOL, READ
    from strata.remote.rlm import topic_id_partition
    from strata.remote.rsm import IndexType

    rm = f.rm
    rlm, rlmm = rm.rlm, rm.rlmm
    if rlm is None or rlmm is None or not p.log.remote_log_enabled:
        raise AuxStateError("remote log storage is not (yet) running for this partition on this broker")
    next_offset, epoch = await _start_point(f, p, st)
    if f.current_partition(st) is not p:
        return False
    tip = topic_id_partition(p.log)
    try:
        if tip not in rlmm.followed_partitions():
            # The subscription made when this broker became follower can fail (the metadata partition was not
            # hosted here yet): subscribe again on every attempt until it holds.
            rlmm.on_partition_leadership_changes([], [tip])
        await rlmm.wait_until_ready(tip, timeout_s=RLMM_WAIT_S)
    except Exception as e:  # a timeout or an RLMM error: retry later
        raise AuxStateError(f"RLMM not ready for {tip}: {e!r}") from e
    meta = rlmm.remote_log_segment_metadata(tip, epoch, next_offset - 1)
    if meta is None:
        raise AuxStateError(f"no copied remote segment covers epoch {epoch} offset {next_offset - 1} yet")
    pool = POOL.set(READ)  # a read of remote storage: the reader pool's threads
    try:
        checkpoint = parse_epoch_checkpoint(await rlm.rsm.fetch_index(meta, IndexType.LEADER_EPOCH))
        producers = decode_snapshot(await rlm.rsm.fetch_index(meta, IndexType.PRODUCER_SNAPSHOT))
    finally:
        POOL.reset(pool)
    if f.current_partition(st) is not p:
        return False
    segments = rlmm.list_remote_log_segments(tip)
    earliest_remote = min((s.start_offset for s in segments), default=meta.start_offset)
    ulog = p.log
    log.info(
        "rebuilding follower aux state from remote storage",
        topic=st.topic,
        partition=st.partition,
        leo=ulog.log_end_offset,
        next_offset=next_offset,
        epoch=epoch,
        segment_start=meta.start_offset,
        segment_end=meta.end_offset,
        log_start=earliest_remote,
        epochs=len(checkpoint),
        producers=len(producers),
    )
    f.manager.truncate_fully(p, next_offset, log_start_offset=min(earliest_remote, next_offset))
    ulog.restore_aux_state(checkpoint, producers)  # epochs below next_offset, producer state as of it
    ulog.update_highest_offset_in_remote_storage(meta.end_offset)
    await rlm.sync_highest_copied_offset(ulog)
    return True


async def build_remote_log_aux_state(f: ReplicaFetcher, p: Partition, st: PartitionFetchState) -> bool:
    """One attempt; on failure the partition's fetch is delayed with exponential backoff. True when rebuilt."""
    metrics = getattr(f.rm.rlm, "metrics", None)
    if metrics is not None:
        metrics.build_aux_state_requests.labels(st.topic).inc()
    try:
        done = await _rebuild(f, p, st)
    except Exception as e:  # noqa: BLE001 - every failure is retried (with backoff)
        n = _attempts.get(st, 0) + 1
        _attempts[st] = n
        delay = backoff_s(f.rm.config["replica.fetch.backoff.ms"] / 1000.0, n)
        if metrics is not None:
            metrics.build_aux_state_errors.labels(st.topic).inc()
        log.info(
            "building remote log aux state failed; retrying",
            topic=st.topic,
            partition=st.partition,
            attempt=n,
            retry_in_s=delay,
            error=str(e) or repr(e),
        )
        f.delay(st, delay)
        return False
    _attempts.pop(st, None)
    return done


__all__ = ["AuxStateError", "backoff_s", "build_remote_log_aux_state", "parse_epoch_checkpoint"]
