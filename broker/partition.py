"""Partition: one hosted partition's replication state -- leader or follower, leader epoch, ISR, the followers'
fetch positions and the high watermark (Kafka's `kafka.cluster.Partition`, reduced to what Strata needs).

Everything here is synchronous and runs on the event loop; the ReplicaManager drives it (AlterPartition writes to the
metadata store, purgatories, the fetcher). Times are monotonic milliseconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container
from dataclasses import dataclass

from strata.protocol.errors import ErrorCode
from strata.storage.log import LogAppendInfo, UnifiedLog

from .cluster.model import PartitionState
from .metadata_store import TopicInfo

NEVER = -1e18  # "never caught up / never fetched" (monotonic clocks may start near 0)


def now_ms() -> float:
    return time.monotonic() * 1000.0


@dataclass(slots=True)
class FollowerState:
    """The leader's view of one follower (Kafka's Replica/ReplicaState); -1 offsets are unknown."""

    broker_id: int
    log_end_offset: int = -1
    log_start_offset: int = -1
    last_caught_up_ms: float = NEVER
    last_fetch_leader_leo: int = -1
    last_fetch_ms: float = NEVER
    # what this follower's fetch of the partition and the log looked like when its last answer was "nothing new"
    # (ReplicaManager._read_once): the same again answers the same without a read
    idle_fetch: tuple | None = None

    def update_fetch_state(self, fetch_offset: int, log_start_offset: int, fetch_ms: float, leader_leo: int) -> None:
        """A follower fetched from `fetch_offset` (its LEO). It was caught up at this fetch if it asked for the
        leader's LEO, or at its previous fetch if it now asks for at least what the leader's LEO was then."""
        if fetch_offset >= leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, fetch_ms)
        elif fetch_offset >= self.last_fetch_leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_leo = leader_leo
        self.last_fetch_ms = fetch_ms

    def is_caught_up(self, leader_leo: int, at_ms: float, max_lag_ms: float) -> bool:
        return self.log_end_offset == leader_leo or at_ms - self.last_caught_up_ms <= max_lag_ms

    def reset(self, at_ms: float, leader_leo: int, new_leader: bool, in_sync: bool) -> None:
        """On a new leader epoch (Kafka's resetReplicaState): a broker that just became leader knows nothing about
        its followers; ISR members get a full lag period to show up."""
        self.last_caught_up_ms = at_ms if in_sync else NEVER
        if new_leader:
            self.log_end_offset = self.log_start_offset = self.last_fetch_leader_leo = -1
            self.last_fetch_ms = NEVER
        else:
            self.last_fetch_leader_leo = leader_leo
            self.last_fetch_ms = at_ms


class Partition:
    """A hosted partition; `log` is the local UnifiedLog. Until a state is applied it is neither leader nor
    follower (leader_id -1)."""

    def __init__(
        self,
        topic: TopicInfo,
        index: int,
        log: UnifiedLog,
        local_broker_id: int = 0,
        max_lag_ms: float = 30000,
        ineligible: Callable[[], Container[int]] = frozenset,
    ) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.local_broker_id = local_broker_id
        self.max_lag_ms = max_lag_ms  # replica.lag.time.max.ms
        # brokers that may not join the ISR now (controlled shutdown: MetadataStore.shutting_down)
        self.ineligible = ineligible
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.isr: tuple[int, ...] = ()
        self.replicas: tuple[int, ...] = ()
        self.followers: dict[int, FollowerState] = {}
        self.leader_epoch_start_offset = -1
        self.pending_isr: tuple[int, ...] | None = None  # an AlterPartition in flight (Kafka's PendingIsrChange)

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic.name, self.index)

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic.name}-{self.index}, leader={self.leader_id}, epoch={self.leader_epoch}, "
            f"isr={list(self.isr)}, replicas={list(self.replicas)})"
        )

    # ---- state --------------------------------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id and self.leader_id >= 0

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """LSO: first offset of the earliest undecided transaction, or the HW (READ_COMMITTED reads below it)."""
        return self.log.last_stable_offset

    @property
    def maximal_isr(self) -> set[int]:
        """The ISR the HW must respect while an ISR change is in flight: the union of the committed and the
        proposed one (wider is safer: KIP-497's 'maximal ISR')."""
        if self.pending_isr is None:
            return set(self.isr)
        return set(self.isr) | set(self.pending_isr)

    def effective_min_isr(self) -> int:
        """min.insync.replicas capped by the replication factor (Kafka's effectiveMinIsr)."""
        return min(self.log.config.min_insync_replicas, max(len(self.replicas), 1))

    @property
    def is_under_min_isr(self) -> bool:
        return self.is_leader and len(self.isr) < self.effective_min_isr()

    @property
    def is_under_replicated(self) -> bool:
        return self.is_leader and len(self.isr) < len(self.replicas)

    def is_newer_or_same(self, state: PartitionState) -> bool:
        """False for a state older than the one applied (a stale image must never move epochs back)."""
        if state.leader_epoch != self.leader_epoch:
            return state.leader_epoch > self.leader_epoch
        return state.partition_epoch >= self.partition_epoch

    def set_state(self, state: PartitionState) -> None:
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.isr = tuple(state.isr)
        self.replicas = tuple(dict.fromkeys((*state.replicas, *state.adding)))

    def check_epoch(self, current_leader_epoch: int, require_leader: bool = True) -> ErrorCode:
        """Kafka's getLocalLog checks: a request's current_leader_epoch (-1: not given) first, then leadership."""
        if current_leader_epoch >= 0 and current_leader_epoch != self.leader_epoch:
            return (
                ErrorCode.FENCED_LEADER_EPOCH
                if current_leader_epoch < self.leader_epoch
                else ErrorCode.UNKNOWN_LEADER_EPOCH
            )
        if require_leader and not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE

    # ---- leader side --------------------------------------------------------------------------------------------
    def make_leader(self, state: PartitionState, at_ms: float, sync: bool = True) -> bool:
        """Become (or stay) leader in `state`. Returns whether this is a new leader epoch for this broker.
        `sync=False`: the epoch checkpoint is written without fsync (the caller has it fsynced)."""
        was_leader = self.is_leader
        new_epoch = not was_leader or state.leader_epoch != self.leader_epoch
        self.set_state(state)
        leo = self.log.log_end_offset
        if new_epoch:
            # Kafka's makeLeader: the new epoch starts at the LEO; followers are tracked afresh.
            self.log.leader_epoch_cache.assign(state.leader_epoch, leo, sync=sync)
            self.leader_epoch_start_offset = leo
            self.pending_isr = None
        for rid in self.replicas:
            if rid == self.local_broker_id:
                continue
            fs = self.followers.get(rid)
            if fs is None:
                fs = self.followers[rid] = FollowerState(rid)
                fs.reset(at_ms, leo, True, rid in self.isr)
            elif new_epoch:
                fs.reset(at_ms, leo, not was_leader, rid in self.isr)
        for rid in [r for r in self.followers if r not in self.replicas]:
            del self.followers[rid]
        return new_epoch

    def make_follower(self, state: PartitionState) -> bool:
        """Follow `state.leader`. Returns whether the leader or its epoch changed (the fetcher must restart)."""
        changed = self.is_leader or state.leader != self.leader_id or state.leader_epoch != self.leader_epoch
        self.set_state(state)
        self.followers.clear()
        self.pending_isr = None
        self.leader_epoch_start_offset = -1
        return changed

    def append_records_to_leader(
        self,
        records: bytes | memoryview,
        *,
        from_client: bool = True,
        verified_producers: frozenset[int] = frozenset(),
    ) -> LogAppendInfo:
        """Append as leader; `from_client=False` is Kafka's AppendOrigin COORDINATOR (transaction markers),
        `verified_producers` the producers whose transaction the coordinator verified (KIP-890)."""
        info = self.log.append_as_leader(
            records, self.leader_epoch, from_client=from_client, verified_producers=verified_producers
        )
        self.maybe_increment_hw(now_ms() if self.followers else 0.0)  # the time matters to followers only
        return info

    def maybe_increment_hw(self, at_ms: float) -> bool:
        """HW = min LEO over the maximal ISR and over caught-up followers (so a lagging follower can catch up to
        the HW and rejoin); never moves back; frozen while the ISR is below min.insync.replicas (Kafka 3.7+)."""
        if not self.is_leader or len(self.isr) < self.effective_min_isr():
            return False
        log = self.log
        new_hw = log.log_end_offset
        if self.followers:
            maximal = self.maximal_isr
            ineligible = None
            for rid, fs in self.followers.items():
                if fs.log_end_offset >= new_hw:
                    continue
                if rid in maximal:
                    new_hw = fs.log_end_offset
                elif fs.log_end_offset >= 0 and fs.is_caught_up(log.log_end_offset, at_ms, self.max_lag_ms):
                    if ineligible is None:
                        ineligible = self.ineligible()
                    if rid not in ineligible:  # Kafka's shouldWaitForReplicaToJoinIsr
                        new_hw = fs.log_end_offset
        if new_hw > log.high_watermark:
            log.update_high_watermark(new_hw)
            return True
        return False

    def update_follower_fetch_state(
        self, replica_id: int, fetch_offset: int, log_start_offset: int, at_ms: float
    ) -> bool:
        """A follower fetch arrived; returns whether the HW moved. False (and no change) for a non-replica."""
        fs = self.followers.get(replica_id)
        if fs is None:
            return False
        before = fs.log_end_offset
        fs.update_fetch_state(fetch_offset, log_start_offset, at_ms, self.log.log_end_offset)
        return fs.log_end_offset != before and self.maybe_increment_hw(at_ms)

    def is_follower_in_sync(self, replica_id: int) -> bool:
        """Kafka's isFollowerInSync: caught up to the HW and into this leader's epoch."""
        fs = self.followers.get(replica_id)
        return (
            fs is not None
            and fs.log_end_offset >= self.log.high_watermark
            and self.leader_epoch_start_offset >= 0
            and fs.log_end_offset >= self.leader_epoch_start_offset
        )

    def isr_to_expand(self, replica_id: int) -> tuple[int, ...] | None:
        """The ISR with `replica_id` added, when it qualifies and no change is in flight."""
        if (
            not self.is_leader
            or self.pending_isr is not None
            or replica_id in self.isr
            or replica_id not in self.replicas
            or not self.is_follower_in_sync(replica_id)
            or replica_id in self.ineligible()
        ):
            return None
        return (*self.isr, replica_id)

    def out_of_sync_replicas(self, at_ms: float) -> list[int]:
        leo = self.log.log_end_offset
        out = []
        for rid in self.isr:
            if rid == self.local_broker_id:
                continue
            fs = self.followers.get(rid)
            if fs is None or not fs.is_caught_up(leo, at_ms, self.max_lag_ms):
                out.append(rid)
        return out

    def isr_to_shrink(self, at_ms: float) -> tuple[int, ...] | None:
        if not self.is_leader or self.pending_isr is not None:
            return None
        out = self.out_of_sync_replicas(at_ms)
        if not out:
            return None
        return tuple(r for r in self.isr if r not in out)

    def check_enough_replicas(self, required_offset: int, epoch: int) -> tuple[bool, ErrorCode]:
        """DelayedProduce (acks=-1): done once the HW reaches `required_offset` (last offset + 1). A leadership
        change since the append answers NOT_LEADER_OR_FOLLOWER; an ISR below min.insync.replicas answers
        NOT_ENOUGH_REPLICAS_AFTER_APPEND (the HW is frozen then, so waiting could only time out)."""
        if not self.is_leader or self.leader_epoch != epoch:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        min_isr = self.effective_min_isr()
        if self.log.high_watermark >= required_offset:
            if len(self.maximal_isr) >= min_isr:
                return True, ErrorCode.NONE
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        if len(self.isr) < min_isr:
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return False, ErrorCode.NONE


__all__ = ["FollowerState", "Partition", "now_ms"]
