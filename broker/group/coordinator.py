"""GroupCoordinator: classic consumer groups, KIP-848 consumer groups (their protocol is consumer/manager.py's) and
committed offsets, a state machine on the coordinator runtime over `__consumer_offsets`
(strata.broker.coordinator.runtime).

Semantics follow Apache Kafka's classic group coordinator (GroupMetadataManager/ClassicGroup in Kafka 3.7+/4.x):
two-step join with MEMBER_ID_REQUIRED (JoinGroup v4+), generations starting at 1, protocol selection by votes,
`group.initial.rebalance.delay.ms` for the first rebalance of an empty group, rebalance and session timeouts,
static membership (`group.instance.id`) with FENCED_INSTANCE_ID, pending-sync expiry, and offset retention.

Everything runs on the broker's event loop. State changes are synchronous; timers are `loop.call_later` handles;
parked JoinGroup/SyncGroup requests are futures resolved by state transitions. The runtime owns the topic: it loads
a partition's groups when this broker becomes its leader (`begin_load`, `replay`, `complete_load`), drops them when
it resigns (`unload`), and resolves a write once the records are committed, in the order the coordinator produced
them. Each group belongs to partition `abs(hash(group)) % offsets.topic.num.partitions`; requests for groups of a
partition still loading get COORDINATOR_LOAD_IN_PROGRESS. Committed offsets (storage, expiration) are offsets.py's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from strata.protocol import consumer_protocol
from strata.protocol.errors import ErrorCode
from strata.protocol.wire import WireFormatError

from ..coordinator.runtime import (
    LOAD_BUFFER_DEFAULT,
    CoordinatorMetadataStore,
    CoordinatorReplicaManager,
    CoordinatorRuntime,
    CoordinatorTopic,
)
from .consumer import records as consumer_records
from .consumer.classic import (
    assignment_blob,
    by_id,
    classic_heartbeat,
    classic_join,
    classic_leave,
    classic_sync,
    parse_subscription,
)
from .consumer.group import GROUP_TYPE as CONSUMER_GROUP_TYPE
from .consumer.group import ConsumerGroup
from .consumer.manager import ConsumerGroupManager, ConsumerLoad, HeartbeatError, HeartbeatRequest, HeartbeatResult
from .consumer.member import ClassicMemberMetadata, ConsumerGroupMember
from .consumer.offsets import validate_offset_commit, validate_offset_fetch
from .group import GROUP_TYPE, ClassicGroup, GroupState, JoinResult, Member, SyncResult
from .offsets import OffsetMetadataManager, map_append_error
from .records import (
    OFFSETS_TOPIC,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetAndMetadata,
    OffsetCommitKey,
    RecordFormatError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
)

if TYPE_CHECKING:
    from strata.config import BrokerConfig

log = structlog.get_logger("strata.group")

S = GroupState
E = ErrorCode
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000  # Kafka's GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS


@dataclass(slots=True)
class JoinParams:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    api_version: int


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker settings the group coordinator uses (`group.*`, `offset*.`), read once."""

    initial_rebalance_delay_ms: int
    min_session_timeout_ms: int
    max_session_timeout_ms: int
    max_group_size: int
    offset_metadata_max_bytes: int
    retention_ms: int
    retention_check_interval_ms: int
    offsets_topic: CoordinatorTopic

    @classmethod
    def from_broker_config(cls, cfg: BrokerConfig) -> GroupConfig:
        return cls(
            initial_rebalance_delay_ms=int(cfg["group.initial.rebalance.delay.ms"]),
            min_session_timeout_ms=int(cfg["group.min.session.timeout.ms"]),
            max_session_timeout_ms=int(cfg["group.max.session.timeout.ms"]),
            max_group_size=int(cfg["group.max.size"]),
            offset_metadata_max_bytes=int(cfg["offset.metadata.max.bytes"]),
            retention_ms=int(cfg["offsets.retention.minutes"]) * 60_000,
            retention_check_interval_ms=int(cfg["offsets.retention.check.interval.ms"]),
            offsets_topic=CoordinatorTopic(
                OFFSETS_TOPIC,
                int(cfg["offsets.topic.num.partitions"]),
                int(cfg["offsets.topic.replication.factor"]),
                int(cfg["offsets.topic.segment.bytes"]),
                int(cfg.get("offsets.load.buffer.size", LOAD_BUFFER_DEFAULT)),
            ),
        )


@dataclass(slots=True)
class GroupLoad:
    """The groups of one `__consumer_offsets` partition as its records replay (installed when the load ends)."""

    now: int
    groups: dict[str, ClassicGroup] = field(default_factory=dict)
    consumer: ConsumerLoad | None = None


class GroupCoordinator:
    """The classic group protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) and the group admin APIs; the
    `CoordinatorShard` of `self.runtime`. Offset requests are validated here against the protocol (member,
    generation) and stored by `self.offsets` (offsets.py)."""

    def __init__(
        self,
        config: GroupConfig,
        replica_manager: CoordinatorReplicaManager,
        store: CoordinatorMetadataStore,
        *,
        clock: Callable[[], int] | None = None,
        broker_config: BrokerConfig | None = None,
    ) -> None:
        self.config = config
        self.initial_rebalance_delay_ms: int = config.initial_rebalance_delay_ms
        self.min_session_timeout_ms: int = config.min_session_timeout_ms
        self.max_session_timeout_ms: int = config.max_session_timeout_ms
        self.max_group_size: int = config.max_group_size
        self.retention_check_interval_ms: int = config.retention_check_interval_ms
        self.groups: dict[str, ClassicGroup] = {}
        self.consumer_groups: dict[str, ConsumerGroup] = {}  # KIP-848 groups (consumer/manager.py); ids are unique
        self.classic_rebalances = 0  # classic rebalances started (Kafka's classic-group-rebalance sensor)
        self._now = clock or (lambda: int(time.time() * 1000))
        self._timers: dict[tuple, asyncio.TimerHandle] = {}
        self._retention_task: asyncio.Task[None] | None = None
        self.runtime: CoordinatorRuntime[GroupLoad] = CoordinatorRuntime(
            config.offsets_topic, self, replica_manager, store, clock=self._now
        )
        self.offsets = OffsetMetadataManager(
            self.groups,
            self.runtime,
            metadata_max_bytes=config.offset_metadata_max_bytes,
            retention_ms=config.retention_ms,
            has_timers=self._has_timers,
            consumer_groups=self.consumer_groups,
        )
        self.consumer = ConsumerGroupManager(
            broker_config if broker_config is not None else _default_broker_config(),
            self.consumer_groups,
            self.runtime,
            store,
            self,
            now=self._now,
            classic_group_state=self._classic_group_state,
            take_classic_group=self._take_classic_group,
            upgrade=self._upgrade,
            downgrade=self._downgrade,
        )

    @classmethod
    def from_broker_config(
        cls,
        cfg: BrokerConfig,
        replica_manager: CoordinatorReplicaManager,
        store: CoordinatorMetadataStore,
        *,
        clock: Callable[[], int] | None = None,
    ) -> GroupCoordinator:
        return cls(GroupConfig.from_broker_config(cfg), replica_manager, store, clock=clock, broker_config=cfg)

    # -- the runtime's state, as the handlers, the server and tests see it ------------------------------------------
    @property
    def active(self) -> bool:
        return self.runtime.active

    @property
    def num_partitions(self) -> int:
        return self.runtime.num_partitions

    @num_partitions.setter
    def num_partitions(self, n: int) -> None:
        self.runtime.num_partitions = n

    @property
    def owned(self) -> set[int]:
        """`__consumer_offsets` partitions this broker leads (the groups it coordinates)."""
        return self.runtime.owned

    @property
    def loading(self) -> set[int]:
        return self.runtime.loading

    @property
    def loaded(self) -> asyncio.Event:
        return self.runtime.loaded

    # =========================================================================================================
    # lifecycle
    async def startup(self) -> None:
        await self.runtime.startup()
        if self.retention_check_interval_ms > 0:
            self._retention_task = asyncio.create_task(self._retention_loop(), name="offsets-retention")

    async def shutdown(self, drain_timeout: float = 5.0) -> None:
        """Answer parked requests with NOT_COORDINATOR, stop timers, let queued writes finish (bounded)."""
        self.runtime.deactivate()
        for h in self._timers.values():
            h.cancel()
        self._timers.clear()
        for g in self.groups.values():
            for m in list(g.members.values()):
                g.complete_join(m, JoinResult(E.NOT_COORDINATOR, member_id=m.member_id))
                g.complete_sync(m, SyncResult(E.NOT_COORDINATOR))
        await self.runtime.shutdown(drain_timeout)
        if self._retention_task is not None:
            self._retention_task.cancel()
            await asyncio.gather(self._retention_task, return_exceptions=True)
            self._retention_task = None

    # =========================================================================================================
    # timers
    def _schedule(self, key: tuple, delay_ms: float, fn: Callable, *args: Any) -> None:
        self._cancel(key)
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_later(max(delay_ms, 0) / 1000.0, self._fire, key, fn, args)

    def _fire(self, key: tuple, fn: Callable, args: tuple) -> None:
        self._timers.pop(key, None)
        if not self.active:
            return
        try:
            fn(*args)
        except Exception:
            log.exception("group timer failed", timer=key[0], group=key[1])

    def _cancel(self, key: tuple) -> None:
        h = self._timers.pop(key, None)
        if h is not None:
            h.cancel()

    def schedule(self, key: tuple, delay_ms: float, fn: Callable, *args: Any) -> None:
        """A timer for the consumer groups (consumer/manager.py): `fn(*args)` after `delay_ms`, replacing `key`'s."""
        self._schedule(key, delay_ms, fn, *args)

    def cancel(self, key: tuple) -> None:
        self._cancel(key)

    def scheduled(self, key: tuple) -> bool:
        return key in self._timers

    def _classic_group_state(self, group_id: str) -> str | None:
        """None (no classic group), "empty" (offsets at most: it may become a consumer group) or "active"."""
        g = self.groups.get(group_id)
        if g is None or g.is_in(S.DEAD):
            return None
        return "empty" if g.is_in(S.EMPTY) and not g.members and not g.pending_members else "active"

    def _take_classic_group(self, group_id: str) -> ClassicGroup | None:
        """A classic group becoming a consumer group leaves the classic groups (its offsets go along); members
        parked in JoinGroup/SyncGroup are told to rejoin (REBALANCE_IN_PROGRESS), as Kafka's upgrade does."""
        g = self.groups.pop(group_id, None)
        if g is not None:
            for m in list(g.members.values()):
                g.complete_join(m, JoinResult(E.REBALANCE_IN_PROGRESS, member_id=m.member_id))
                g.complete_sync(m, SyncResult(E.REBALANCE_IN_PROGRESS))
            self._cancel_group_timers(group_id)
            g.transition_to(S.DEAD, self._now())
        return g

    def _upgrade(self, group_id: str) -> tuple[ConsumerGroup, list[consumer_records.Record]] | None:
        """Kafka's online upgrade (convertToConsumerGroup): a classic group of the "consumer" embedded protocol
        becomes a consumer group whose members are its members at its generation, each owning its last assignment
        (they will be asked to rejoin). The records replace the classic group's; nothing is installed here."""
        g = self.groups.get(group_id)
        if g is None or not g.uses_consumer_protocol() or g.num_members > self.consumer.config.max_size:
            return None
        topics = self.consumer.topics()
        cg = ConsumerGroup(group_id, self._now())
        cg.group_epoch = cg.assignment_epoch = g.generation_id
        try:
            for m in g.members.values():
                sub = parse_subscription(m.metadata(g.protocol_name))
                assigned = {
                    tid: frozenset(ps) for tid, ps in by_id(consumer_protocol.assigned_partitions(m.assignment), topics)
                }
                cm = ConsumerGroupMember(
                    m.member_id,
                    instance_id=m.group_instance_id,
                    rack_id=sub.rack,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=tuple(sub.topics),
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    member_epoch=g.generation_id,
                    previous_member_epoch=g.generation_id,
                    assigned=assigned,
                    classic=ClassicMemberMetadata(m.session_timeout_ms, list(m.protocols)),
                )
                cg.update_member(cm)
                cg.target[cm.member_id] = assigned
        except (consumer_protocol.ConsumerProtocolError, WireFormatError, UnicodeDecodeError):
            log.warning("cannot upgrade a classic group: its consumer protocol metadata is malformed", group=group_id)
            return None
        records: list[consumer_records.Record] = [(encode_group_metadata_key(group_id), None)]
        records += [consumer_records.member_metadata_record(group_id, m) for m in cg.members.values()]
        records.append(consumer_records.group_epoch_record(group_id, cg.group_epoch))
        records += [consumer_records.target_member_record(group_id, mid, a) for mid, a in cg.target.items()]
        records.append(consumer_records.target_epoch_record(group_id, cg.assignment_epoch))
        records += [consumer_records.current_assignment_record(group_id, m) for m in cg.members.values()]
        return cg, records

    def _downgrade(self, cg: ConsumerGroup, leaving: str) -> tuple[list[consumer_records.Record], Callable[[], None]]:
        """Kafka's online downgrade (convertToClassicGroup): the last consumer-protocol member leaves, the classic
        members carry on in a classic group at the group epoch, with their current assignments; it rebalances at
        once. (records, install)."""
        gid = cg.group_id
        g = ClassicGroup(gid, self._now())
        g.generation_id = cg.group_epoch
        g.protocol_type = consumer_protocol.PROTOCOL_TYPE
        assignments: dict[str, bytes] = {}
        for m in cg.members.values():
            if m.member_id == leaving or m.classic is None:
                continue
            assignments[m.member_id] = assignment_blob(m.assigned, self.consumer.store)
            g.add(
                Member(
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.classic.session_timeout_ms,
                    consumer_protocol.PROTOCOL_TYPE,
                    m.classic.protocols,
                    assignments[m.member_id],
                )
            )
        g.protocol_name = g.select_protocol()
        g.state = g.previous_state = S.STABLE
        g.subscribed_topics = g.compute_subscribed_topics()
        records = self.consumer.delete_records(cg) + [self._group_metadata_kv(g, assignments)]

        def install() -> None:
            self.consumer_groups.pop(gid, None)
            cg.dead = True
            g.offsets = cg.offsets
            g.pending_txn_offsets = cg.pending_txn_offsets
            self.groups[gid] = g
            for m in g.members.values():
                self._schedule_heartbeat(g, m)
            self._prepare_rebalance(g, f"Downgrade group {gid} from consumer to classic.")

        return records, install

    def _has_timers(self, group_id: str) -> bool:
        """Whether the group has a timer running, or a consumer group change is being written (it stays)."""
        return any(k[1] == group_id for k in self._timers) or self.consumer.busy(group_id)

    def _cancel_group_timers(self, group_id: str) -> None:
        for key in [k for k in self._timers if k[1] == group_id]:
            self._cancel(key)

    def _schedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None:
        self._schedule(
            ("hb", group.group_id, member.member_id),
            member.session_timeout_ms if timeout_ms is None else timeout_ms,
            self._expire_heartbeat,
            group.group_id,
            member.member_id,
        )

    # =========================================================================================================
    # __consumer_offsets: the runtime's topic and partitions
    def partition_for(self, group_id: str) -> int:
        return self.runtime.partition_for(group_id)

    def offsets_topic_exists(self) -> bool:
        return self.runtime.topic_exists()

    async def ensure_offsets_topic(self) -> bool:
        """Create `__consumer_offsets` on first use (compacted, internal). False if it cannot be created."""
        return await self.runtime.ensure_topic()

    def check_group(self, group_id: str | None) -> ErrorCode:
        """Errors that apply before any group logic: inactive, invalid id, no offsets topic, still loading."""
        if not self.active:
            return E.COORDINATOR_NOT_AVAILABLE
        if not group_id:
            return E.INVALID_GROUP_ID
        return self.runtime.check(group_id)

    # ---- leadership of __consumer_offsets partitions (ReplicaManager.apply_partition_state) -------------------
    def on_become_leader(self, partition: int) -> None:
        """This broker now leads `partition`: the runtime loads its groups (Kafka's onElection)."""
        self.runtime.on_become_leader(partition)

    def on_resign(self, partition: int) -> None:
        """This broker no longer leads `partition`: the runtime unloads its groups (Kafka's onResignation)."""
        self.runtime.on_resign(partition)

    # ---- the runtime's callbacks (CoordinatorShard): a partition's groups loaded from its records, unloaded ----
    def begin_load(self, partition: int) -> GroupLoad:
        now = self._now()
        return GroupLoad(now, consumer=ConsumerLoad(now))

    def replay(self, state: GroupLoad, key: bytes | None, value: bytes | None) -> None:
        loaded, now = state.groups, state.now
        if key is None:
            return
        try:
            ck = consumer_records.decode_key(key)
            if ck is not None:
                if state.consumer is not None:
                    self._replay_consumer(state, state.consumer, ck, value)
                return
            k = decode_key(key)
            consumer_group = state.consumer.groups.get(k.group) if state.consumer and k is not None else None
            if isinstance(k, OffsetCommitKey) and consumer_group is not None:
                if value is None:
                    consumer_group.offsets.pop((k.topic, k.partition), None)
                else:
                    consumer_group.offsets[(k.topic, k.partition)] = decode_offset_commit_value(value)
            elif isinstance(k, OffsetCommitKey):
                g = loaded.get(k.group)
                if value is None:
                    if g is not None:
                        g.offsets.pop((k.topic, k.partition), None)
                    return
                if g is None:
                    g = loaded[k.group] = ClassicGroup(k.group, now)
                g.offsets[(k.topic, k.partition)] = decode_offset_commit_value(value)
            elif isinstance(k, GroupMetadataKey):
                old = loaded.pop(k.group, None)
                if value is None:
                    if old is not None and old.offsets:
                        fresh = loaded[k.group] = ClassicGroup(k.group, now)
                        fresh.offsets = old.offsets
                    return
                v = decode_group_metadata_value(value)
                g = loaded[k.group] = ClassicGroup(k.group, now)
                if old is not None:
                    g.offsets = old.offsets
                g.generation_id = v.generation
                g.protocol_type = v.protocol_type or None
                g.protocol_name = v.protocol
                g.current_state_timestamp = v.current_state_timestamp if v.current_state_timestamp >= 0 else None
                for mm in v.members:
                    m = Member(
                        mm.member_id,
                        mm.group_instance_id,
                        mm.client_id,
                        mm.client_host,
                        mm.rebalance_timeout,
                        mm.session_timeout,
                        g.protocol_type or "",
                        [(v.protocol or "", mm.subscription)],
                        mm.assignment,
                    )
                    g.add(m)
                g.leader_id = v.leader if v.leader in g.members else next(iter(g.members), None)
                g.state = S.STABLE if g.members else S.EMPTY
                g.previous_state = g.state
        except (RecordFormatError, UnicodeDecodeError, ValueError) as e:
            log.warning("skipping an unreadable offsets-topic record", error=str(e))

    @staticmethod
    def _replay_consumer(
        state: GroupLoad, load: ConsumerLoad, key: consumer_records.ConsumerGroupKey, value: bytes | None
    ) -> None:
        """A consumer group record; a group created over an empty classic one takes its offsets, and a deleted one
        that still has offsets (it became a classic group) leaves them to a classic group."""
        before = load.groups.get(key.group)
        ConsumerGroupManager.replay(load, key, value)
        gone = value is None and key.version == consumer_records.GROUP_EPOCH and before is not None
        if gone and before is not None and (before.offsets or before.pending_txn_offsets):
            g = state.groups.setdefault(key.group, ClassicGroup(key.group, state.now))
            g.offsets.update(before.offsets)
            g.pending_txn_offsets.update(before.pending_txn_offsets)
        if value is not None and key.version == consumer_records.GROUP_EPOCH:
            old = state.groups.get(key.group)
            if old is not None and not old.members:
                cg = load.groups[key.group]
                cg.offsets.update(old.offsets)
                cg.pending_txn_offsets.update(old.pending_txn_offsets)
                del state.groups[key.group]

    def replay_transactional(self, state: GroupLoad, producer_id: int, key: bytes | None, value: bytes | None) -> None:
        """An offset commit written in a transaction (TxnOffsetCommit): pending until its marker."""
        if key is None:
            return
        try:
            k = decode_key(key)
            if not isinstance(k, OffsetCommitKey) or value is None:
                return
            g: ClassicGroup | ConsumerGroup | None = state.groups.get(k.group)
            if g is None and state.consumer is not None:
                g = state.consumer.groups.get(k.group)
            if g is None:
                g = state.groups[k.group] = ClassicGroup(k.group, state.now)
            g.pending_txn_offsets.setdefault(producer_id, {})[(k.topic, k.partition)] = decode_offset_commit_value(
                value
            )
        except (RecordFormatError, UnicodeDecodeError, ValueError) as e:
            log.warning("skipping an unreadable offsets-topic record", error=str(e))

    def replay_end_txn(self, state: GroupLoad, producer_id: int, commit: bool) -> None:
        consumer = state.consumer.groups.values() if state.consumer is not None else ()
        for g in [*state.groups.values(), *consumer]:
            pending = g.pending_txn_offsets.pop(producer_id, None)
            if pending is not None and commit:
                g.offsets.update(pending)

    def complete_load(self, partition: int, state: GroupLoad) -> None:
        for gid, g in state.groups.items():
            g.subscribed_topics = g.compute_subscribed_topics()
            self.groups[gid] = g
            self.offsets.track_pending(g)
            for m in g.members.values():
                self._schedule_heartbeat(g, m)
        if state.consumer is not None:
            for gid, cg in ConsumerGroupManager.finish_load(state.consumer).items():
                self.groups.pop(gid, None)
                self.consumer_groups[gid] = cg
                self.offsets.track_pending(cg)
                self.consumer.schedule_loaded(cg)

    def unload(self, partition: int) -> None:
        """The groups of a resigned partition are gone from here: their members get NOT_COORDINATOR and find the
        new coordinator."""
        now = self._now()
        for gid, g in list(self.groups.items()):
            if self.partition_for(gid) != partition:
                continue
            for m in list(g.members.values()):
                g.complete_join(m, JoinResult(E.NOT_COORDINATOR, member_id=m.member_id))
                g.complete_sync(m, SyncResult(E.NOT_COORDINATOR))
            self._cancel_group_timers(gid)
            self.offsets.untrack_pending(g)
            g.transition_to(S.DEAD, now)
            del self.groups[gid]
        for gid, cg in list(self.consumer_groups.items()):
            if self.partition_for(gid) == partition:
                self.consumer.drop(gid)
                self.offsets.untrack_pending(cg)
                del self.consumer_groups[gid]

    def _group_metadata_kv(self, group: ClassicGroup, assignment: dict[str, bytes]) -> tuple[bytes, bytes]:
        members = [
            MemberMetadata(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata(group.protocol_name),
                assignment.get(m.member_id, b""),
            )
            for m in group.members.values()
        ]
        value = GroupMetadataValue(
            group.protocol_type or "",
            group.generation_id,
            group.protocol_name,
            group.leader_id,
            group.state_timestamp_or_default(),
            members,
        )
        return encode_group_metadata_key(group.group_id), encode_group_metadata_value(value)

    # =========================================================================================================
    # JoinGroup
    async def join_group(self, p: JoinParams) -> JoinResult:
        err = self.check_group(p.group_id)
        if err:
            return JoinResult(err, member_id=p.member_id)
        if not self.min_session_timeout_ms <= p.session_timeout_ms <= self.max_session_timeout_ms:
            return JoinResult(E.INVALID_SESSION_TIMEOUT, member_id=p.member_id)
        if p.group_id in self.consumer_groups:
            res = await self._classic_join_to_consumer_group(p)
            if res is not None:
                return res
        fut = asyncio.get_running_loop().create_future()
        self._join(p, fut)
        return await fut

    async def _classic_join_to_consumer_group(self, p: JoinParams) -> JoinResult | None:
        """A classic member joins a consumer group: a non-empty one takes it as a classic member
        (consumer/classic.py); an empty one becomes a classic group (its records go, its offsets stay) and the join
        proceeds there (None)."""
        group_id = p.group_id
        async with self.consumer.locked(group_id):
            cg = self.consumer_groups.get(group_id)
            if cg is None:
                return None
            if cg.members:
                return await classic_join(
                    self.consumer,
                    cg,
                    p.member_id,
                    p.group_instance_id,
                    p.client_id,
                    p.client_host,
                    p.session_timeout_ms,
                    p.rebalance_timeout_ms,
                    p.protocol_type,
                    p.protocols,
                    p.api_version,
                )
            err = await self.runtime.write(self.partition_for(group_id), self.consumer.delete_records(cg))
            if err:
                return JoinResult(map_append_error(err, False), member_id=p.member_id)
            if self.consumer_groups.get(group_id) is not cg:
                return None
            self.consumer.drop(group_id)
            del self.consumer_groups[group_id]
            cg.dead = True
            g = self.groups[group_id] = ClassicGroup(group_id, self._now())
            g.offsets = cg.offsets
            g.pending_txn_offsets = cg.pending_txn_offsets
            log.info("an empty consumer group became a classic group", group=group_id)
            return None

    def _join(self, p: JoinParams, fut: asyncio.Future) -> None:
        unknown = p.member_id == ""
        group = self.groups.get(p.group_id)
        if group is None:
            if not unknown:
                fut.set_result(JoinResult(E.UNKNOWN_MEMBER_ID, member_id=p.member_id))
                return
            group = self.groups[p.group_id] = ClassicGroup(p.group_id, self._now())
        if not self._accept_joining_member(group, p.member_id):
            if group.has_member(p.member_id):
                self._remove_current_member(group, p.member_id)
            fut.set_result(JoinResult(E.GROUP_MAX_SIZE_REACHED, member_id=""))
        elif unknown:
            self._join_new_member(p, group, fut)
        else:
            self._join_existing_member(p, group, fut)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        if group.is_in(S.EMPTY, S.DEAD):
            return True
        if group.is_in(S.PREPARING_REBALANCE):
            m = group.members.get(member_id)
            return (m is not None and m.is_awaiting_join) or group.num_awaiting_join < self.max_group_size
        return group.has_member(member_id) or group.num_members < self.max_group_size

    def _join_new_member(self, p: JoinParams, group: ClassicGroup, fut: asyncio.Future) -> None:
        if group.is_in(S.DEAD):
            fut.set_result(JoinResult(E.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(p.protocol_type, [n for n, _ in p.protocols]):
            fut.set_result(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_id = group.generate_member_id(p.client_id, p.group_instance_id)
        if p.group_instance_id is not None:
            existing = group.static_member_id(p.group_instance_id)
            if existing is not None:
                log.info(
                    "static member rejoins with a new member id",
                    group=group.group_id,
                    instance=p.group_instance_id,
                    old=existing,
                    new=new_id,
                )
                self._update_static_member(p, group, p.group_instance_id, existing, new_id, fut)
            else:
                self._add_member_and_rebalance(p, group, new_id, fut)
        elif p.api_version >= 4:
            # Two-step join: hand out a member id, expect the member back with it within the session timeout.
            group.pending_members.add(new_id)
            self._schedule(
                ("hb", group.group_id, new_id), p.session_timeout_ms, self._expire_heartbeat, group.group_id, new_id
            )
            fut.set_result(JoinResult(E.MEMBER_ID_REQUIRED, member_id=new_id))
        else:
            self._add_member_and_rebalance(p, group, new_id, fut)

    def _join_existing_member(self, p: JoinParams, group: ClassicGroup, fut: asyncio.Future) -> None:
        mid = p.member_id
        if group.is_in(S.DEAD):
            fut.set_result(JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id=mid))
            return
        if not group.supports_protocols(p.protocol_type, [n for n, _ in p.protocols]):
            fut.set_result(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=mid))
            return
        if group.is_pending(mid):
            self._add_member_and_rebalance(p, group, mid, fut)
            return
        err = group.validate_member(mid, p.group_instance_id)
        if err:
            fut.set_result(JoinResult(err, member_id=mid))
            return
        member = group.members[mid]
        if group.is_in(S.PREPARING_REBALANCE):
            self._update_member_and_rebalance(p, group, member, fut)
        elif group.is_in(S.COMPLETING_REBALANCE):
            if member.matches(p.protocols):
                # The member missed its JoinGroup response: send the current generation again.
                fut.set_result(self._current_generation(group, mid, with_members=group.is_leader(mid)))
            else:
                self._update_member_and_rebalance(p, group, member, fut)
        elif group.is_in(S.STABLE):
            if group.is_leader(mid) or not member.matches(p.protocols):
                # The leader rejoining forces a rebalance (it may have seen metadata changes).
                self._update_member_and_rebalance(p, group, member, fut)
            else:
                fut.set_result(self._current_generation(group, mid, with_members=False))
        else:
            fut.set_result(JoinResult(E.UNKNOWN_MEMBER_ID, member_id=mid))

    def _current_generation(
        self,
        group: ClassicGroup,
        member_id: str,
        with_members: bool,
        leader: str | None = None,
        skip_assignment: bool = False,
    ) -> JoinResult:
        return JoinResult(
            E.NONE,
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=(leader if leader is not None else group.leader_id) or "",
            members=group.current_members_metadata() if with_members else [],
            skip_assignment=skip_assignment,
        )

    def _add_member_and_rebalance(
        self, p: JoinParams, group: ClassicGroup, member_id: str, fut: asyncio.Future
    ) -> None:
        m = Member(
            member_id,
            p.group_instance_id,
            p.client_id,
            p.client_host,
            p.rebalance_timeout_ms,
            p.session_timeout_ms,
            p.protocol_type,
            p.protocols,
        )
        m.is_new = True
        if group.is_in(S.PREPARING_REBALANCE) and group.previous_state == S.EMPTY:
            group.new_member_added = True
        group.add(m, fut)
        # A new member parked in JoinGroup cannot heartbeat: bound its wait instead.
        self._schedule_heartbeat(group, m, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance_or_complete_join(group, f"adding member {member_id}")

    def _update_member_and_rebalance(
        self, p: JoinParams, group: ClassicGroup, member: Member, fut: asyncio.Future
    ) -> None:
        if member.join_future is not None and member.join_future is not fut and not member.join_future.done():
            # A retried JoinGroup (new connection) replaces the parked one; answer the stale one.
            member.join_future.set_result(JoinResult(E.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        group.update_member(member, p.protocols, p.rebalance_timeout_ms, p.session_timeout_ms, fut)
        self._maybe_prepare_rebalance_or_complete_join(group, f"member {member.member_id} (re)joining")

    def _update_static_member(
        self, p: JoinParams, group: ClassicGroup, instance_id: str, old_id: str, new_id: str, fut: asyncio.Future
    ) -> None:
        current_leader = group.leader_id
        self._cancel(("hb", group.group_id, old_id))
        new = group.replace_static_member(instance_id, old_id, new_id)
        self._schedule_heartbeat(group, new)
        old_protocols, old_rt, old_st = new.protocols, new.rebalance_timeout_ms, new.session_timeout_ms
        group.update_member(new, p.protocols, p.rebalance_timeout_ms, p.session_timeout_ms, fut)
        if group.is_in(S.STABLE):
            if (group.protocol_name or "") == group.select_protocol():
                # Same protocol: persist the new member id and hand the member its current assignment.
                assignment = {m.member_id: m.assignment for m in group.members.values()}
                written = self.runtime.write(
                    self.partition_for(group.group_id), [self._group_metadata_kv(group, assignment)]
                )
                self.runtime.spawn(
                    self._finish_static_rejoin(
                        p, group, new, old_id, new_id, current_leader, (old_protocols, old_rt, old_st), written
                    )
                )
            else:
                self._maybe_prepare_rebalance_or_complete_join(group, f"static member {new_id} changed protocols")
        elif group.is_in(S.COMPLETING_REBALANCE):
            # The leader may already be assigning with the old member id: rebalance so nobody is left out.
            self._prepare_rebalance(group, f"static member {new_id} rejoined during CompletingRebalance")
        else:
            self._maybe_complete_join_phase(group)

    async def _finish_static_rejoin(
        self,
        p: JoinParams,
        group: ClassicGroup,
        new: Member,
        old_id: str,
        new_id: str,
        current_leader: str | None,
        old: tuple,
        written: asyncio.Future,
    ) -> None:
        err = await written
        if err:
            fut = new.join_future
            group.update_member(new, old[0], old[1], old[2], None)
            if new_id in group.members and p.group_instance_id is not None:
                self._cancel(("hb", group.group_id, new_id))
                restored = group.replace_static_member(p.group_instance_id, new_id, old_id)
                self._schedule_heartbeat(group, restored)
            if fut is not None and not fut.done():
                fut.set_result(
                    JoinResult(
                        map_append_error(err, False),
                        member_id="",
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=current_leader or "",
                    )
                )
            return
        if p.api_version >= 9:
            is_leader = group.is_leader(new_id)
            group.complete_join(
                new, self._current_generation(group, new_id, with_members=is_leader, skip_assignment=is_leader)
            )
        else:
            # Older clients must not re-run the assignment: tell them the old leader id.
            group.complete_join(
                new, self._current_generation(group, new_id, with_members=False, leader=current_leader or "")
            )

    # -- rebalance -------------------------------------------------------------------------------------------
    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join_phase(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        if not group.is_in(S.PREPARING_REBALANCE):
            return
        if group.previous_state == S.EMPTY:
            return  # the initial rebalance completes on its (group.initial.rebalance.delay.ms) timer
        if group.has_all_members_joined():
            self._complete_join(group)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(S.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment(group, E.REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        initial = group.is_in(S.EMPTY)
        if initial:
            delay = self.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._schedule(
                ("join", group.group_id), delay, self._try_complete_initial_rebalance, group.group_id, delay, remaining
            )
        group.transition_to(S.PREPARING_REBALANCE, self._now())
        self.classic_rebalances += 1
        log.info("preparing to rebalance", group=group.group_id, generation=group.generation_id, reason=reason)
        if not initial:
            self._maybe_complete_join_else_schedule(group)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup) -> None:
        if group.has_all_members_joined():
            self._complete_join(group)
        else:
            self._schedule(
                ("join", group.group_id), group.rebalance_timeout_ms(), self._complete_join_by_id, group.group_id
            )

    def _try_complete_initial_rebalance(self, group_id: str, delay: int, remaining: int) -> None:
        group = self.groups.get(group_id)
        if group is None or not group.is_in(S.PREPARING_REBALANCE):
            return
        if group.new_member_added and remaining != 0:
            group.new_member_added = False
            new_delay = min(self.initial_rebalance_delay_ms, remaining)
            new_remaining = max(remaining - delay, 0)
            self._schedule(
                ("join", group_id), new_delay, self._try_complete_initial_rebalance, group_id, new_delay, new_remaining
            )
        else:
            self._complete_join(group)

    def _complete_join_by_id(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and group.is_in(S.PREPARING_REBALANCE):
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        gid = group.group_id
        self._cancel(("join", gid))
        for m in group.not_yet_rejoined():
            if not m.is_static:
                self._cancel(("hb", gid, m.member_id))
                group.complete_sync(m, SyncResult(E.UNKNOWN_MEMBER_ID))
                group.remove(m.member_id)
        if group.is_in(S.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined (only static members that did not come back): wait one more rebalance timeout.
            self._schedule(("join", gid), group.rebalance_timeout_ms(), self._complete_join_by_id, gid)
            return
        group.init_next_generation(self._now())
        if group.is_in(S.EMPTY):
            log.info("group is empty", group=gid, generation=group.generation_id)
            self.runtime.write_nowait(
                self.partition_for(gid), [self._group_metadata_kv(group, {})], f"empty group {gid}"
            )
            return
        log.info(
            "rebalance: new generation",
            group=gid,
            generation=group.generation_id,
            protocol=group.protocol_name,
            members=group.num_members,
            leader=group.leader_id,
        )
        for m in list(group.members.values()):
            res = self._current_generation(group, m.member_id, with_members=group.is_leader(m.member_id))
            group.complete_join(m, res)
            self._schedule_heartbeat(group, m)
            m.is_new = False
            group.pending_sync_members.add(m.member_id)
        self._schedule(("sync", gid), group.rebalance_timeout_ms(), self._expire_pending_sync, gid, group.generation_id)

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.pending_sync_members.clear()
        self._cancel(("sync", group.group_id))

    def _expire_pending_sync(self, group_id: str, generation: int) -> None:
        group = self.groups.get(group_id)
        if group is None or group.generation_id != generation:
            return
        if group.is_in(S.COMPLETING_REBALANCE, S.STABLE) and group.pending_sync_members:
            late = list(group.pending_sync_members)
            for mid in late:
                self._cancel(("hb", group_id, mid))
                group.remove(mid)
            self._prepare_rebalance(group, f"members {late} did not sync in time")

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_in(S.DEAD):
            return
        if group.is_pending(member_id):
            group.remove(member_id)
            if group.is_in(S.PREPARING_REBALANCE) and group.has_all_members_joined():
                self._complete_join(group)
            return
        m = group.members.get(member_id)
        if m is None or m.has_satisfied_heartbeat():
            return
        log.info("member session expired", group=group_id, member=member_id)
        group.complete_join(m, JoinResult(E.UNKNOWN_MEMBER_ID))
        group.complete_sync(m, SyncResult(E.UNKNOWN_MEMBER_ID))
        group.remove(member_id)
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, f"member {member_id} session expired")
        elif group.is_in(S.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)

    def _remove_current_member(self, group: ClassicGroup, member_id: str) -> None:
        m = group.members[member_id]
        self._cancel(("hb", group.group_id, member_id))
        group.complete_join(m, JoinResult(E.UNKNOWN_MEMBER_ID))
        group.complete_sync(m, SyncResult(E.UNKNOWN_MEMBER_ID))
        group.remove(member_id)

    # -- assignment propagation ------------------------------------------------------------------------------
    def _reset_and_propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, error)

    def _set_and_propagate_assignment(self, group: ClassicGroup, assignment: dict[str, bytes]) -> None:
        for m in group.members.values():
            m.assignment = assignment.get(m.member_id, b"")
        self._propagate_assignment(group, E.NONE)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error == E.NONE
        for m in list(group.members.values()):
            res = SyncResult(
                error, group.protocol_type if ok else None, group.protocol_name if ok else None, m.assignment
            )
            if group.complete_sync(m, res):
                self._schedule_heartbeat(group, m)

    # =========================================================================================================
    # SyncGroup / Heartbeat / LeaveGroup
    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: list[tuple[str, bytes]],
    ) -> SyncResult:
        err = self.check_group(group_id)
        if err:
            return SyncResult(err)
        cg = self.consumer_groups.get(group_id)
        if cg is not None:
            return classic_sync(self.consumer, cg, member_id, instance_id, generation_id, protocol_type, protocol_name)
        group = self.groups.get(group_id)
        if group is None or group.is_in(S.EMPTY):
            return SyncResult(E.UNKNOWN_MEMBER_ID)
        if group.is_in(S.DEAD):
            return SyncResult(E.COORDINATOR_NOT_AVAILABLE)
        err = group.validate_member(member_id, instance_id)
        if err:
            return SyncResult(err)
        if generation_id != group.generation_id:
            return SyncResult(E.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncResult(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_in(S.PREPARING_REBALANCE):
            return SyncResult(E.REBALANCE_IN_PROGRESS)
        member = group.members[member_id]
        if group.is_in(S.STABLE):
            self._remove_pending_sync_member(group, member_id)
            return SyncResult(E.NONE, group.protocol_type, group.protocol_name, member.assignment)
        # CompletingRebalance: park until the leader's assignment is stored.
        fut = asyncio.get_running_loop().create_future()
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result(SyncResult(E.REBALANCE_IN_PROGRESS))
        member.sync_future = fut
        self._remove_pending_sync_member(group, member_id)
        if group.is_leader(member_id):
            assignment = {m: bytes(a) for m, a in assignments}
            for mid in group.members:
                assignment.setdefault(mid, b"")
            written = self.runtime.write(self.partition_for(group_id), [self._group_metadata_kv(group, assignment)])
            self.runtime.spawn(self._store_assignment(group, generation_id, assignment, written))
        return await fut

    async def _store_assignment(
        self, group: ClassicGroup, generation: int, assignment: dict[str, bytes], written: asyncio.Future
    ) -> None:
        err = await written
        if not (group.is_in(S.COMPLETING_REBALANCE) and group.generation_id == generation):
            return  # a member joined or left meanwhile: that rebalance answers everyone
        if err:
            self._reset_and_propagate_assignment(group, map_append_error(err, False))
            self._maybe_prepare_rebalance_or_complete_join(group, f"error {err} storing the assignment")
        else:
            self._set_and_propagate_assignment(group, assignment)
            group.transition_to(S.STABLE, self._now())
            log.info("group is stable", group=group.group_id, generation=generation, members=group.num_members)

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if group.is_in(S.DEAD, S.EMPTY, S.PREPARING_REBALANCE) or not group.pending_sync_members:
            self._cancel(("sync", group.group_id))

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int) -> ErrorCode:
        err = self.check_group(group_id)
        if err:
            return err
        cg = self.consumer_groups.get(group_id)
        if cg is not None:
            return classic_heartbeat(self.consumer, cg, member_id, instance_id, generation_id)
        group = self.groups.get(group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        err = group.validate_member(member_id, instance_id)
        if err:
            return err
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        if group.is_in(S.EMPTY):
            return E.UNKNOWN_MEMBER_ID
        self._schedule_heartbeat(group, group.members[member_id])
        if group.is_in(S.PREPARING_REBALANCE):
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def is_consumer_group(self, group_id: str) -> bool:
        return group_id in self.consumer_groups

    async def leave_consumer_group(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """LeaveGroup of classic members of a consumer group; any left over once it became a classic group leave
        that one."""
        err = self.check_group(group_id)
        if err:
            return err, []
        async with self.consumer.locked(group_id):
            cg = self.consumer_groups.get(group_id)
            if cg is None:
                return self.leave_group(group_id, members)
            results, rest = await classic_leave(self.consumer, cg, members)
        if rest:
            top, more = self.leave_group(group_id, rest)
            results += more if not top else [(m, i, top) for m, i in rest]
        return E.NONE, results

    def leave_group(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        err = self.check_group(group_id)
        if err:
            return err, []
        group = self.groups.get(group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID, [(m, i, E.UNKNOWN_MEMBER_ID) for m, i in members]
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE, []
        results: list[tuple[str, str | None, ErrorCode]] = []
        left = []
        for mid, iid in members:
            if mid == "":
                # Administrative removal of a static member by its instance id.
                target = group.static_member_id(iid) if iid is not None else None
                if target is not None:
                    self._remove_current_member(group, target)
                    results.append((mid, iid, E.NONE))
                    left.append(target)
                else:
                    results.append((mid, iid, E.UNKNOWN_MEMBER_ID))
            elif group.is_pending(mid):
                group.remove(mid)
                self._cancel(("hb", group_id, mid))
                results.append((mid, iid, E.NONE))
                left.append(mid)
            else:
                err = group.validate_member(mid, iid)
                if err:
                    results.append((mid, iid, err))
                else:
                    self._remove_current_member(group, mid)
                    results.append((mid, iid, E.NONE))
                    left.append(mid)
        if left:
            log.info("members left", group=group_id, members=left)
            if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, f"members {left} left")
            elif group.is_in(S.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        return E.NONE, results

    # =========================================================================================================
    # offsets
    def _validate_offset_commit(
        self, group: ClassicGroup, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_in(S.EMPTY):
            return E.NONE  # admin client or a consumer without group management
        if generation_id >= 0 or member_id or instance_id is not None:
            err = group.validate_member(member_id, instance_id)
            if err:
                return err
            if generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION
        elif not group.is_in(S.EMPTY):
            return E.UNKNOWN_MEMBER_ID
        if group.is_in(S.COMPLETING_REBALANCE):
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        offsets: dict[tuple[str, int], OffsetAndMetadata],
        api_version: int,
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """Returns (group-level error, per-partition errors); a group-level error applies to every partition."""
        err = self.check_group(group_id)
        if err:
            return err, {}
        cg = self.consumer_groups.get(group_id)
        if cg is not None:
            err = validate_offset_commit(cg, member_id, generation_id, False, api_version)
            return (err, {}) if err else (E.NONE, await self.offsets.store(cg, offsets))
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return (E.GROUP_ID_NOT_FOUND if api_version >= 9 else E.ILLEGAL_GENERATION), {}
            group = self.groups[group_id] = ClassicGroup(group_id, self._now())
            log.info("created a simple group through an offset commit", group=group_id)
        else:
            err = self._validate_offset_commit(group, member_id, instance_id, generation_id)
            if err:
                return err, {}
        return E.NONE, await self.offsets.store(group, offsets)

    async def commit_transactional_offsets(
        self,
        group_id: str,
        producer: tuple[int, int],
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        offsets: dict[tuple[str, int], OffsetAndMetadata],
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """TxnOffsetCommit (Kafka's handleTxnCommitOffsets): as an offset commit, but the offsets count only once
        the producer's transaction commits. A group that does not exist is created (a simple group)."""
        err = self.check_group(group_id)
        if err:
            return err, {}
        cg = self.consumer_groups.get(group_id)
        if cg is not None:  # as Kafka's validateTransactionalOffsetCommit: epoch -1 only into an empty group
            err = validate_offset_commit(cg, member_id, generation_id, True, 5)
            if err:
                return err, {}
            return E.NONE, await self.offsets.store_transactional(cg, producer, offsets)
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ClassicGroup(group_id, self._now())
        elif generation_id >= 0 or member_id or instance_id is not None:
            err = self._validate_offset_commit(group, member_id, instance_id, generation_id)
            if err and err != E.REBALANCE_IN_PROGRESS:
                return err, {}
        return E.NONE, await self.offsets.store_transactional(group, producer, offsets)

    def has_pending_txn_offset(self, group_id: str, tp: tuple[str, int]) -> bool:
        """Whether an open transaction has written an offset of `tp` for the group (OffsetFetch require_stable)."""
        g: ClassicGroup | ConsumerGroup | None = self.groups.get(group_id) or self.consumer_groups.get(group_id)
        return g is not None and any(tp in pending for pending in g.pending_txn_offsets.values())

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """WriteTxnMarkers appended `producer_id`'s marker to `__consumer_offsets` partition `partition`."""
        self.offsets.complete_transaction(partition, producer_id, commit)

    def fetch_offsets(
        self, group_id: str, topics: list[tuple[str, list[int]]] | None
    ) -> tuple[ErrorCode, list[tuple[str, list[tuple[int, OffsetAndMetadata | None]]]]]:
        """Committed offsets of the requested partitions (topics=None: every committed partition)."""
        err = self.check_group(group_id)
        if err:
            return err, []
        return E.NONE, self.offsets.fetch(group_id, topics)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        """OffsetFetch v9+ from a consumer group member: its member id and epoch must be current."""
        cg = self.consumer_groups.get(group_id)
        if cg is None or self.check_group(group_id):
            return E.NONE  # (the fetch itself answers coordinator errors; classic groups do not check)
        return validate_offset_fetch(cg, member_id, member_epoch)

    # =========================================================================================================
    # KIP-848 consumer groups (consumer/manager.py)
    async def consumer_group_heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        """ConsumerGroupHeartbeat: COORDINATOR_NOT_AVAILABLE when stopped, the request's own errors, then whether
        this broker coordinates the group (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS), as Kafka orders them."""
        if not self.active:
            return HeartbeatResult(E.COORDINATOR_NOT_AVAILABLE)
        try:
            self.consumer.validate(req)
        except HeartbeatError as e:
            return HeartbeatResult(e.code, e.message)
        err = self.runtime.check(req.group_id)
        if err:
            return HeartbeatResult(err)
        return await self.consumer.heartbeat(req)

    def describe_consumer_group(self, group_id: str) -> tuple[ErrorCode, str | None, ConsumerGroup | None]:
        """ConsumerGroupDescribe of one group: (error, message, group)."""
        if not group_id:
            return E.INVALID_GROUP_ID, None, None
        err = self.check_group(group_id)
        if err:
            return err, None, None
        g = self.consumer_groups.get(group_id)
        if g is None:
            if self.groups.get(group_id) is not None and not self.groups[group_id].is_in(S.DEAD):
                return E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.", None
            return E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        return E.NONE, None, g

    # =========================================================================================================
    # admin: list / describe / delete
    def list_groups(
        self, states: list[str] | None = None, types: list[str] | None = None
    ) -> tuple[ErrorCode, list[ClassicGroup | ConsumerGroup]]:
        err = E.NONE if self.active else E.COORDINATOR_NOT_AVAILABLE
        if self.loading:
            err = E.COORDINATOR_LOAD_IN_PROGRESS
        wanted_states = {s.lower() for s in states} if states else None
        wanted_types = {t.lower() for t in types} if types else None
        out: list[ClassicGroup | ConsumerGroup] = []
        if wanted_types is None or GROUP_TYPE in wanted_types:
            out += [
                g
                for g in self.groups.values()
                if not g.is_in(S.DEAD) and (wanted_states is None or g.state.value.lower() in wanted_states)
            ]
        if wanted_types is None or CONSUMER_GROUP_TYPE in wanted_types:
            out += [
                g
                for g in self.consumer_groups.values()
                if wanted_states is None or g.state.value.lower() in wanted_states
            ]
        return err, sorted(out, key=lambda g: g.group_id)

    def describe_group(self, group_id: str) -> tuple[ErrorCode, ClassicGroup | ConsumerGroup | None]:
        err = self.check_group(group_id)
        if err:
            return err, None
        cg = self.consumer_groups.get(group_id)
        if cg is not None:
            return E.NONE, cg
        g = self.groups.get(group_id)
        if g is None or g.is_in(S.DEAD):
            return E.GROUP_ID_NOT_FOUND, None
        return E.NONE, g

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        writes: dict[int, list] = {}
        deleted: list[tuple[str, int]] = []
        for gid in group_ids:
            err = self.check_group(gid)
            if err:
                results[gid] = err
                continue
            cg = self.consumer_groups.get(gid)
            if cg is not None:
                if cg.members or self.consumer.busy(gid):  # (busy: a member's join is being written)
                    results[gid] = E.NON_EMPTY_GROUP
                    continue
                p = self.partition_for(gid)
                kvs = writes.setdefault(p, [])
                kvs += [(encode_offset_commit_key(gid, t, i), None) for (t, i) in sorted(cg.offsets)]
                kvs += self.consumer.delete_records(cg)
                cg.dead = True
                self.consumer.drop(gid)
                del self.consumer_groups[gid]
                deleted.append((gid, p))
                continue
            g = self.groups.get(gid)
            if g is None or g.is_in(S.DEAD):
                results[gid] = E.GROUP_ID_NOT_FOUND
            elif g.is_in(S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE):
                results[gid] = E.NON_EMPTY_GROUP
            else:
                p = self.partition_for(gid)
                kvs = writes.setdefault(p, [])
                kvs += [(encode_offset_commit_key(gid, t, i), None) for (t, i) in sorted(g.offsets)]
                kvs.append((encode_group_metadata_key(gid), None))
                g.transition_to(S.DEAD, self._now())
                self._cancel_group_timers(gid)
                del self.groups[gid]
                deleted.append((gid, p))
        pending = {p: self.runtime.write(p, kvs) for p, kvs in writes.items()}  # enqueue all before awaiting
        errors = {p: await f for p, f in pending.items()}
        for gid, p in deleted:
            results[gid] = map_append_error(errors[p], False) if errors[p] else E.NONE
            if not errors[p]:
                log.info("deleted group", group=gid)
        return results

    async def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        err = self.check_group(group_id)
        if err:
            return err, {}
        cg = self.consumer_groups.get(group_id)
        if cg is not None:
            return await self.offsets.delete(cg, partitions)
        g = self.groups.get(group_id)
        if g is None or g.is_in(S.DEAD):
            return E.GROUP_ID_NOT_FOUND, {}
        if g.is_in(S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE) and not g.uses_consumer_protocol():
            return E.NON_EMPTY_GROUP, {}
        return await self.offsets.delete(g, partitions)

    # =========================================================================================================
    # offsets retention (offsets.retention.minutes)
    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retention_check_interval_ms / 1000.0)
            try:
                await self.expire_offsets()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("offset expiration failed")

    async def expire_offsets(self, now: int | None = None) -> tuple[int, int]:
        """Expire offsets per Kafka's rules; delete Empty groups left without offsets. Returns (offsets, groups)."""
        if not self.active:
            return 0, 0
        return await self.offsets.expire(self._now() if now is None else now)


def _default_broker_config() -> BrokerConfig:
    from strata.config import BrokerConfig

    return BrokerConfig.load(None)


__all__ = ["GroupConfig", "GroupCoordinator", "JoinParams"]
