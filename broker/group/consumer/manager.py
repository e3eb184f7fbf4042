"""The KIP-848 consumer group protocol on `__consumer_offsets` (Kafka's GroupMetadataManager, consumer part):
ConsumerGroupHeartbeat, member session and rebalance timeouts, the group epoch / target assignment / reconciliation
loop, and the records that persist it (records.py).

A heartbeat runs under its group's lock: it computes the member's update, the group epoch bump, the new target
assignment and the member's next step of reconciliation, writes the records, and only once they are committed
applies them to the in-memory group (`_apply`); a load replays the same records (`ConsumerLoad`). A failed write
changes nothing, and the member retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import structlog

from strata.config.dynamic import group_config_values
from strata.protocol.errors import ErrorCode
from strata.protocol.uuids import kafka_uuid_str

from ..assignors import ASSIGNOR_NAMES, MemberSubscriptionSpec, TopicSpec, assignor_by_name
from ..records import encode_group_metadata_key
from ..regex import CompiledRegex, InvalidRegex, compile_subscription_regex
from .classic import replace_records
from .group import ConsumerGroup
from .member import Assignment, ConsumerGroupMember, MemberState, same_assignment
from .reconcile import FencedMember, Owned, reconcile
from .records import (
    CURRENT_ASSIGNMENT,
    GROUP_EPOCH,
    MEMBER_METADATA,
    PARTITION_METADATA,
    TARGET_ASSIGNMENT_EPOCH,
    TARGET_ASSIGNMENT_MEMBER,
    ConsumerGroupKey,
    Record,
    TopicMetadata,
    current_assignment_record,
    decode_current_assignment,
    decode_epoch,
    decode_member_metadata,
    decode_partition_metadata,
    decode_target_member,
    group_epoch_record,
    group_tombstones,
    member_metadata_record,
    member_tombstones,
    partition_metadata_record,
    target_epoch_record,
    target_member_record,
)

if TYPE_CHECKING:
    from strata.config import BrokerConfig

    from ...coordinator.runtime import CoordinatorRuntime

log = structlog.get_logger("strata.group")

E = ErrorCode
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
RESOURCE_GROUP = 32  # ConfigResource type GROUP: per-group consumer.session.timeout.ms / heartbeat.interval.ms
ASSIGN_OFF_LOOP_MEMBERS = 100
REGEX_CACHE_SIZE = 1024  # larger groups compute their target assignment in a worker thread
MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


class HeartbeatError(Exception):
    """A ConsumerGroupHeartbeat answered with an error code and message (Kafka's ApiException)."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


@runtime_checkable
class TopicsSource(Protocol):
    """The metadata image as the consumer groups read it: the topics, group config overrides, change callbacks."""

    def topics(self) -> Mapping[str, Any]: ...

    def config_overrides(self, resource_type: int, name: str) -> dict[str, str]: ...

    def add_listener(self, callback: Callable[[str, object], None]) -> None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> Any: ...

    def brokers(self) -> Mapping[int, Any]: ...

    def partition_state(self, topic: str, partition: int) -> Any: ...


class Timers(Protocol):
    """The coordinator's timers (one per key, rescheduling replaces)."""

    def schedule(self, key: tuple, delay_ms: float, fn: Callable, *args: Any) -> None: ...

    def cancel(self, key: tuple) -> None: ...

    def scheduled(self, key: tuple) -> bool: ...


_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def _assignor_name(entry: str) -> str:
    """An entry of `group.consumer.assignors`: an assignor's name, or Kafka's class name for it."""
    return _ASSIGNOR_CLASSES.get(entry.strip(), entry.strip())


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """`group.consumer.*` settings read once (the per-group session and heartbeat come from the GROUP configs)."""

    max_size: int
    assignors: tuple[str, ...]
    migration_policy: str

    @classmethod
    def from_broker_config(cls, cfg: BrokerConfig) -> ConsumerGroupConfig:
        return cls(
            max_size=int(cfg["group.consumer.max.size"]),
            assignors=tuple(_assignor_name(a) for a in cfg["group.consumer.assignors"]),
            migration_policy=str(cfg["group.consumer.migration.policy"]).lower(),
        )


@dataclass(slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: list[str] | None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    topic_partitions: list[tuple[uuid.UUID, list[int]]] | None
    client_id: str = ""
    client_host: str = ""
    api_version: int = 1


@dataclass(slots=True)
class HeartbeatResult:
    error: ErrorCode = E.NONE
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


@dataclass(slots=True)
class ConsumerLoad:
    """Consumer groups of one partition as its records replay."""

    now: int
    groups: dict[str, ConsumerGroup] = field(default_factory=dict)
    targets: dict[str, dict[str, Assignment]] = field(default_factory=dict)
    current: dict[str, dict[str, Any]] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)


@dataclass(slots=True)
class Change:
    """What a heartbeat (or a fence) decided, applied to the group once its records are committed."""

    records: list[Record] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)
    members: list[ConsumerGroupMember] = field(default_factory=list)
    group_epoch: int | None = None
    metadata: dict[str, TopicMetadata] | None = None
    targets: dict[str, Assignment] | None = None
    assignment_epoch: int | None = None


class ClassicOffsets(Protocol):
    """What an empty classic group hands over when it becomes a consumer group."""

    offsets: dict
    pending_txn_offsets: dict


def classic_group_tombstone(group_id: str) -> Record:
    return encode_group_metadata_key(group_id), None


def _throw_if_empty(value: str | None, message: str) -> None:
    if value is not None and not value.strip():
        raise HeartbeatError(E.INVALID_REQUEST, message)


class ConsumerGroupManager:
    def __init__(
        self,
        cfg: BrokerConfig,
        groups: dict[str, ConsumerGroup],
        runtime: CoordinatorRuntime[Any],
        store: object,
        timers: Timers,
        *,
        now: Callable[[], int],
        classic_group_state: Callable[[str], str | None],
        take_classic_group: Callable[[str], ClassicOffsets | None],
        upgrade: Callable[[str], tuple[ConsumerGroup, list[Record]] | None] = lambda gid: None,
        downgrade: Callable[[ConsumerGroup, str], tuple[list[Record], Callable[[], None]]] | None = None,
    ) -> None:
        self.cfg = cfg
        self.config = ConsumerGroupConfig.from_broker_config(cfg)
        self.groups = groups
        self.runtime = runtime
        self.topics_source = store if isinstance(store, TopicsSource) else None
        self.timers = timers
        self.now = now
        self.classic_group_state = classic_group_state
        self.take_classic_group = take_classic_group
        self.upgrade = upgrade
        self.downgrade = downgrade
        self._locks: dict[str, asyncio.Lock] = {}
        self._lock_users: dict[str, int] = {}  # group id -> changes holding or awaiting its lock
        self._regex_cache: dict[str, CompiledRegex] = {}
        self.stale_metadata: set[str] = set()  # groups whose subscribed topics changed since their last heartbeat
        self.rebalances = 0  # group epoch bumps (Kafka's consumer-group-rebalance sensor)
        if self.topics_source is not None:
            self.topics_source.add_listener(self.on_metadata_change)

    # -- the metadata image ----------------------------------------------------------------------------------------
    @property
    def store(self) -> TopicsSource | None:
        return self.topics_source

    def topics(self) -> Mapping[str, Any]:
        return self.topics_source.topics() if self.topics_source is not None else {}

    def replace_member_records(
        self, g: ConsumerGroup, old: ConsumerGroupMember, new: ConsumerGroupMember
    ) -> list[Record]:
        return replace_records(g.group_id, old, new, g.target_of(old.member_id))

    # -- configuration ---------------------------------------------------------------------------------------------
    def _group_values(self, group_id: str) -> dict[str, Any]:
        overrides = self.topics_source.config_overrides(RESOURCE_GROUP, group_id) if self.topics_source else {}
        try:
            return group_config_values(self.cfg.values, overrides)
        except Exception:  # noqa: BLE001 - a stored override outside new bounds: the broker defaults apply
            return group_config_values(self.cfg.values, {})

    def session_timeout_ms(self, group_id: str) -> int:
        return int(self._group_values(group_id)["consumer.session.timeout.ms"])

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return int(self._group_values(group_id)["consumer.heartbeat.interval.ms"])

    @property
    def default_assignor(self) -> str:
        return self.config.assignors[0] if self.config.assignors else ASSIGNOR_NAMES[0]

    def supported_assignors(self) -> list[str]:
        return [a for a in self.config.assignors if assignor_by_name(a) is not None]

    def busy(self, group_id: str) -> bool:
        """A change of the group is being computed or written, or waits to be."""
        return group_id in self._lock_users

    @contextlib.asynccontextmanager
    async def locked(self, group_id: str) -> AsyncIterator[None]:
        """The group's lock: one change of a group at a time. A lock lives while someone holds or waits for it and
        its group exists (clients name group ids: none is kept for the others)."""
        lk = self._locks.get(group_id)
        if lk is None:
            lk = self._locks[group_id] = asyncio.Lock()
        self._lock_users[group_id] = self._lock_users.get(group_id, 0) + 1
        try:
            async with lk:
                yield
        finally:
            left = self._lock_users[group_id] - 1
            if left:
                self._lock_users[group_id] = left
            else:
                del self._lock_users[group_id]
                if group_id not in self.groups:
                    self._locks.pop(group_id, None)

    # -- metadata changes (MetadataStore listener) -------------------------------------------------------------------
    def on_metadata_change(self, kind: str, key: object) -> None:
        """A topic was created, deleted or grew: groups subscribed to it (by name or regex) recompute their
        subscription metadata at their next heartbeat, which bumps the group epoch if it changed."""
        if kind != "topic":
            return
        for gid, g in self.groups.items():
            if key in g.subscription_metadata or key in g.subscribed_names() or g.regexes():
                self.stale_metadata.add(gid)

    def _regex(self, pattern: str) -> CompiledRegex:
        rx = self._regex_cache.get(pattern)
        if rx is None:
            if len(self._regex_cache) >= REGEX_CACHE_SIZE:  # clients choose the patterns: bounded
                self._regex_cache.clear()
            rx = self._regex_cache[pattern] = compile_subscription_regex(pattern)
        return rx

    def _subscription_metadata(self, members: Iterable[ConsumerGroupMember]) -> dict[str, TopicMetadata]:
        topics = self.topics()
        names: set[str] = set()
        patterns: set[str] = set()
        for m in members:
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                patterns.add(m.subscribed_topic_regex)
        if patterns:
            compiled = [self._regex(p) for p in patterns]
            for name, info in topics.items():
                if not getattr(info, "internal", False) and any(rx.fullmatch(name) for rx in compiled):
                    names.add(name)
        out = {}
        for n in names:
            info = topics.get(n)
            if info is not None:
                out[n] = TopicMetadata(info.topic_id, n, int(info.partitions))
        return out

    def _member_topic_ids(self, m: ConsumerGroupMember, metadata: Mapping[str, TopicMetadata]) -> frozenset[uuid.UUID]:
        ids = {metadata[n].topic_id for n in m.subscribed_topic_names if n in metadata}
        if m.subscribed_topic_regex:
            rx = self._regex(m.subscribed_topic_regex)
            ids.update(t.topic_id for n, t in metadata.items() if rx.fullmatch(n))
        return frozenset(ids)

    # =============================================================================================================
    # ConsumerGroupHeartbeat
    def validate(self, req: HeartbeatRequest) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        _throw_if_empty(req.group_id, "GroupId can't be empty.")
        if req.group_id == "":
            raise HeartbeatError(E.INVALID_REQUEST, "GroupId can't be empty.")
        _throw_if_empty(req.instance_id, "InstanceId can't be empty.")
        _throw_if_empty(req.rack_id, "RackId can't be empty.")
        if (req.api_version >= 1 or req.member_epoch != 0) and not req.member_id.strip():
            raise HeartbeatError(E.INVALID_REQUEST, "MemberId can't be empty.")
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise HeartbeatError(E.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
            if req.topic_partitions is None or req.topic_partitions:
                raise HeartbeatError(E.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise HeartbeatError(
                    E.INVALID_REQUEST, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
                )
        elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                raise HeartbeatError(E.INVALID_REQUEST, "InstanceId can't be null.")
        elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise HeartbeatError(E.INVALID_REQUEST, "MemberEpoch is invalid.")
        if req.subscribed_topic_regex:
            try:
                self._regex(req.subscribed_topic_regex)
            except InvalidRegex as e:
                raise HeartbeatError(
                    E.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid regular expression: {e}.",
                ) from None
        if req.server_assignor is not None and req.server_assignor not in self.supported_assignors():
            raise HeartbeatError(
                E.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self.supported_assignors())}.",
            )

    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        try:
            self.validate(req)
            if req.member_id == "":  # v0 join: the coordinator names the member (v1+: the client does, KIP-1082)
                req.member_id = kafka_uuid_str(uuid.uuid4())
            async with self.locked(req.group_id):
                if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                    return await self._leave(req)
                return await self._heartbeat(req)
        except HeartbeatError as e:
            return HeartbeatResult(e.code, e.message)

    def _group_for(self, req: HeartbeatRequest, change: Change) -> tuple[ConsumerGroup, bool]:
        """The group, or a new one for a member joining (epoch 0), over an empty classic group (its metadata record
        goes, its offsets stay) or converting a classic group in use (Kafka's online upgrade); (group, created)."""
        gid = req.group_id
        g = self.groups.get(gid)
        if g is not None:
            return g, False
        if req.member_epoch != 0:
            raise HeartbeatError(E.UNKNOWN_MEMBER_ID, f"Consumer group {gid} not found.")
        classic = self.classic_group_state(gid)
        if classic == "active":
            converted = self.upgrade(gid) if self.config.migration_policy in ("upgrade", "bidirectional") else None
            if converted is None:
                raise HeartbeatError(E.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group.")
            g, records = converted
            change.records += records
            return g, True
        if classic == "empty":
            change.records.append(classic_group_tombstone(gid))
        return ConsumerGroup(gid, self.now()), True

    async def write(self, group_id: str, records: Sequence[Record]) -> None:
        """Write a change's records; a failed write, or a partition resigned meanwhile (its groups are gone from
        here), answers the error and changes nothing."""
        if not records:
            return
        partition = self.runtime.partition_for(group_id)
        err = await self.runtime.write(partition, records)
        if err:
            from ..offsets import map_append_error

            raise HeartbeatError(map_append_error(err, False))
        if partition not in self.runtime.owned:
            raise HeartbeatError(E.NOT_COORDINATOR)

    def _check_epoch(self, m: ConsumerGroupMember, received: int, owned: Owned) -> None:
        """Kafka's throwIfConsumerGroupMemberEpochIsInvalid: a member whose epoch is ahead, or behind other than the
        previous epoch with a subset of its assignment (a lost response), must rejoin."""
        if received > m.member_epoch:
            raise HeartbeatError(
                E.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a greater member epoch ({received}) than the one known by the "
                f"group coordinator ({m.member_epoch}). The member must abandon all its partitions and rejoin.",
            )
        if received < m.member_epoch:
            subset = owned is not None and all(set(parts) <= m.assigned.get(tid, frozenset()) for tid, parts in owned)
            if received != m.previous_member_epoch or not subset:
                raise HeartbeatError(
                    E.FENCED_MEMBER_EPOCH,
                    f"The consumer group member has a smaller member epoch ({received}) than the one known by the "
                    f"group coordinator ({m.member_epoch}). The member must abandon all its partitions and rejoin.",
                )

    def _member_for(
        self, g: ConsumerGroup, req: HeartbeatRequest, change: Change
    ) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
        """(the member as it stands, or a new one; the member it replaces, a static member's old incarnation)."""
        joining = req.member_epoch == 0
        if req.instance_id is None:
            m = g.member(req.member_id)
            if m is None:
                if not joining:
                    raise HeartbeatError(
                        E.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {g.group_id}."
                    )
                return ConsumerGroupMember(req.member_id), None
            if joining and m.member_epoch != 0 and m.previous_member_epoch != 0:
                # the same member id rejoining from scratch (it was fenced client-side): it starts over
                return ConsumerGroupMember(req.member_id, assigned={}), m
            self._check_epoch(m, req.member_epoch, req.topic_partitions)
            return m, None
        existing = g.static_member(req.instance_id)
        if joining:
            if existing is None:
                m = g.member(req.member_id)
                return (m if m is not None else ConsumerGroupMember(req.member_id)), None
            if existing.member_id == req.member_id:
                self._check_epoch(existing, req.member_epoch, req.topic_partitions)
                return existing, None
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH and not existing.uses_classic_protocol:
                raise HeartbeatError(
                    E.UNRELEASED_INSTANCE_ID,
                    f"Static member {req.member_id} with instance id {req.instance_id} cannot join the group "
                    f"because the instance id is owned by member {existing.member_id}.",
                )
            # the new incarnation takes the old one's subscription and assignment (Kafka's replaceMember)
            new = replace(existing, member_id=req.member_id, member_epoch=0, previous_member_epoch=0)
            change.records += self.replace_member_records(g, existing, new)
            return new, existing
        existing = self._known_static_member(existing, req)
        self._check_epoch(existing, req.member_epoch, req.topic_partitions)
        return existing, None

    @staticmethod
    def _known_static_member(existing: ConsumerGroupMember | None, req: HeartbeatRequest) -> ConsumerGroupMember:
        """Kafka's throwIfStaticMemberIsUnknown and throwIfInstanceIdIsFenced."""
        if existing is None:
            raise HeartbeatError(E.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if existing.member_id != req.member_id:
            raise HeartbeatError(
                E.FENCED_INSTANCE_ID,
                f"Static member {req.member_id} with instance id {req.instance_id} is fenced by existing "
                f"member {existing.member_id}.",
            )
        return existing

    def check_size(self, g: ConsumerGroup, member_id: str) -> None:
        """Kafka's throwIfConsumerGroupIsFull: a member not yet in a full group is refused."""
        if len(g.members) >= self.config.max_size and g.member(member_id) is None:
            raise HeartbeatError(
                E.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of {self.config.max_size} members.",
            )

    async def _heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        change = Change()
        g, created = self._group_for(req, change)
        gid = g.group_id
        self.check_size(g, req.member_id)
        member, replaced = self._member_for(g, req, change)
        new_member = g.member(member.member_id) is None
        names = tuple(req.subscribed_topic_names) if req.subscribed_topic_names is not None else None
        regex = req.subscribed_topic_regex
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(
                req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms
            ),
            server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=names if names is not None else member.subscribed_topic_names,
            subscribed_topic_regex=(regex or None) if regex is not None else member.subscribed_topic_regex,
            client_id=req.client_id,
            client_host=req.client_host,
            classic=None,
        )
        reconciled = await self.join_or_update(g, created, member, replaced, updated, req.topic_partitions, change)
        full = req.member_epoch == 0 or (
            req.rebalance_timeout_ms != -1
            and req.subscribed_topic_names is not None
            and req.topic_partitions is not None
        )
        changed = not same_assignment(member.assigned, reconciled.assigned) or new_member
        return HeartbeatResult(
            E.NONE,
            None,
            reconciled.member_id,
            reconciled.member_epoch,
            self.heartbeat_interval_ms(gid),
            reconciled.assigned if (full or changed) else None,
        )

    async def join_or_update(
        self,
        g: ConsumerGroup,
        created: bool,
        member: ConsumerGroupMember,
        replaced: ConsumerGroupMember | None,
        updated: ConsumerGroupMember,
        owned: Owned,
        change: Change,
    ) -> ConsumerGroupMember:
        """Steps 1-3 of Kafka's heartbeat for a member of either protocol: persist the member if it changed, bump
        the group epoch if its subscription (or the subscribed topics) changed, compute the target assignment if the
        group epoch moved past it, reconcile the member; then write it all and apply it once committed."""
        gid = g.group_id
        new_member = g.member(member.member_id) is None
        bump = False
        if new_member or replaced is not None or updated != member:
            change.records.append(member_metadata_record(gid, updated))
            bump = new_member or updated.subscription_key() != member.subscription_key()
        group_epoch = g.group_epoch
        members_after = {m.member_id: m for m in g.members.values()}
        if replaced is not None:
            members_after.pop(replaced.member_id, None)
        members_after[updated.member_id] = updated
        metadata = g.subscription_metadata
        if bump or gid in self.stale_metadata or created:
            self.stale_metadata.discard(gid)
            metadata = self._subscription_metadata(members_after.values())
            if metadata != g.subscription_metadata:
                change.records.append(partition_metadata_record(gid, metadata))
                change.metadata = metadata
                bump = True
        if bump:
            group_epoch += 1
            change.records.append(group_epoch_record(gid, group_epoch))
            change.group_epoch = group_epoch
            self.rebalances += 1
            log.info("bumped the group epoch", group=gid, epoch=group_epoch)
        targets = dict(g.target)
        if replaced is not None:
            targets[updated.member_id] = targets.pop(replaced.member_id, {})
        target_epoch = g.assignment_epoch
        if group_epoch > g.assignment_epoch:
            targets = await self._target_assignment(g, members_after, metadata, targets, group_epoch, change)
            target_epoch = group_epoch
        # reconcile the member against the target, seen with the partitions other members own
        if replaced is not None:
            g_epochs = self._partition_epochs_without(g, replaced)
        else:
            g_epochs = g.partition_epoch
        try:
            reconciled = reconcile(
                updated,
                target_epoch,
                targets.get(updated.member_id, {}),
                self._owner_epoch(g, updated, g_epochs),
                owned,
            )
        except FencedMember as e:
            raise HeartbeatError(E.FENCED_MEMBER_EPOCH, str(e)) from None
        if reconciled != updated or new_member or replaced is not None:
            change.records.append(current_assignment_record(gid, reconciled))
        change.members.append(reconciled)
        if replaced is not None:
            change.remove.append(replaced.member_id)
            change.targets = targets
        await self.write(gid, change.records)
        if created:
            taken = self.take_classic_group(gid)
            if taken is not None:
                g.offsets.update(taken.offsets)
                g.pending_txn_offsets.update(taken.pending_txn_offsets)
                log.info("a classic group became a consumer group", group=gid, members=len(g.members))
            self.groups[gid] = g
            for m in g.members.values():  # (members of a converted classic group)
                self.schedule_session(gid, m)
        self._apply(g, change)
        self._after_reconcile(gid, member, reconciled)
        self.schedule_session(gid, reconciled)
        return reconciled

    @staticmethod
    def _partition_epochs_without(g: ConsumerGroup, gone: ConsumerGroupMember) -> Callable[[uuid.UUID, int], int]:
        owned = {(t, p) for a in (gone.assigned, gone.pending_revocation) for t, ps in a.items() for p in ps}

        def epoch(tid: uuid.UUID, p: int) -> int:
            return -1 if (tid, p) in owned else g.partition_epoch(tid, p)

        return epoch

    @staticmethod
    def _owner_epoch(
        g: ConsumerGroup, member: ConsumerGroupMember, base: Callable[[uuid.UUID, int], int]
    ) -> Callable[[uuid.UUID, int], int]:
        """Partition owner epochs, not counting the member's own partitions (it may be given what it holds)."""
        mine = {(t, p) for a in (member.assigned, member.pending_revocation) for t, ps in a.items() for p in ps}

        def epoch(tid: uuid.UUID, p: int) -> int:
            return -1 if (tid, p) in mine else base(tid, p)

        return epoch

    def preferred_assignor(self, g: ConsumerGroup) -> str:
        return self._preferred_assignor(g.members.values())

    def _partition_racks(self, t: TopicMetadata) -> dict[int, frozenset[str]]:
        """The racks of each partition's replicas ({} when no broker has a rack)."""
        src = self.topics_source
        if src is None:
            return {}
        brokers = src.brokers()
        info = src.topics().get(t.name)
        out = {}
        for p in range(t.partitions):
            state = src.partition_state(t.name, p)
            replicas = state.replicas if state is not None else (info.replicas(p) if info is not None else [])
            racks = frozenset(r for b in replicas if (r := getattr(brokers.get(b), "rack", None)))
            if racks:
                out[p] = racks
        return out

    def _preferred_assignor(self, members: Iterable[ConsumerGroupMember]) -> str:
        """The server assignor most members ask for (ties: the broker's order), else the broker's first."""
        counts: dict[str, int] = {}
        for m in members:
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return self.default_assignor
        order = {a: i for i, a in enumerate(self.config.assignors)}
        return max(counts, key=lambda a: (counts[a], -order.get(a, len(order))))

    async def _target_assignment(
        self,
        g: ConsumerGroup,
        members: Mapping[str, ConsumerGroupMember],
        metadata: Mapping[str, TopicMetadata],
        old_targets: Mapping[str, Assignment],
        epoch: int,
        change: Change,
    ) -> dict[str, Assignment]:
        """Kafka's TargetAssignmentBuilder: the assignor's answer for the group as it will be, and records for every
        member whose target changed, then the assignment epoch."""
        name = self._preferred_assignor(members.values())
        assignor = assignor_by_name(name)
        if assignor is None:
            raise HeartbeatError(E.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {name} is not supported.")
        by_id = {t.topic_id: t for t in metadata.values()}
        specs = {
            mid: MemberSubscriptionSpec(
                member_id=mid,
                rack=m.rack_id,
                subscribed_topic_ids=self._member_topic_ids(m, metadata),
                owned={t: p for t, p in old_targets.get(mid, {}).items() if t in by_id},
                instance_id=m.instance_id,
            )
            for mid, m in members.items()
        }
        racks = any(m.rack_id for m in members.values())  # rack-aware only when members say where they are
        topics = {
            t.topic_id: TopicSpec(
                topic_id=t.topic_id,
                name=t.name,
                partitions=t.partitions,
                partition_racks=self._partition_racks(t) if racks else {},
            )
            for t in by_id.values()
        }
        try:
            if len(specs) > ASSIGN_OFF_LOOP_MEMBERS:
                result = await asyncio.to_thread(assignor.assign, specs, topics)
            else:
                result = assignor.assign(specs, topics)
        except Exception as e:  # Kafka answers UNKNOWN_SERVER_ERROR for a failed assignor
            log.exception("assignor failed", group=g.group_id, assignor=name)
            raise HeartbeatError(
                E.UNKNOWN_SERVER_ERROR, f"Failed to compute a new target assignment for epoch {epoch}: {e}"
            ) from None
        targets: dict[str, Assignment] = {}
        for mid in members:
            new = {t: frozenset(p) for t, p in result.get(mid, {}).items() if p}
            targets[mid] = new
            if mid not in old_targets or not same_assignment(old_targets[mid], new):
                change.records.append(target_member_record(g.group_id, mid, new))
        change.records.append(target_epoch_record(g.group_id, epoch))
        change.targets = targets
        change.assignment_epoch = epoch
        log.info("computed a new target assignment", group=g.group_id, epoch=epoch, assignor=name, members=len(members))
        return targets

    def _apply(self, g: ConsumerGroup, change: Change) -> None:
        for mid in change.remove:
            g.remove_member(mid)
        if change.group_epoch is not None:
            g.group_epoch = change.group_epoch
        if change.metadata is not None:
            g.subscription_metadata = change.metadata
        if change.targets is not None:
            g.target = dict(change.targets)
        if change.assignment_epoch is not None:
            g.assignment_epoch = change.assignment_epoch
        for m in change.members:
            g.update_member(m)
        g.current_state_timestamp = self.now()

    def _after_reconcile(self, gid: str, before: ConsumerGroupMember, after: ConsumerGroupMember) -> None:
        """The rebalance timeout runs while the member has partitions to revoke (Kafka's maybeReconcile)."""
        if after.uses_classic_protocol:
            return
        if after.state == MemberState.UNREVOKED_PARTITIONS:
            if before.state != MemberState.UNREVOKED_PARTITIONS or before.member_epoch != after.member_epoch:
                self.timers.schedule(
                    ("cg-rebalance", gid, after.member_id),
                    after.rebalance_timeout_ms,
                    self._rebalance_expired,
                    gid,
                    after.member_id,
                    after.member_epoch,
                )
        else:
            self.timers.cancel(("cg-rebalance", gid, after.member_id))

    # -- leaving -------------------------------------------------------------------------------------------------------
    async def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        g = self.groups.get(req.group_id)
        if g is None:
            raise HeartbeatError(E.UNKNOWN_MEMBER_ID, f"Consumer group {req.group_id} not found.")
        if req.instance_id is None:
            m = g.member(req.member_id)
            if m is None:
                raise HeartbeatError(
                    E.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {g.group_id}."
                )
            log.info("member left the consumer group", group=g.group_id, member=m.member_id)
            await self.fence(g, m)
            return HeartbeatResult(E.NONE, None, req.member_id, req.member_epoch)
        m = self._known_static_member(g.static_member(req.instance_id), req)
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # the slot stays (with its partitions) until the instance comes back or its session expires
            leaving = replace(m, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
            await self.write(g.group_id, [current_assignment_record(g.group_id, leaving)])
            g.update_member(leaving)
            self.timers.cancel(("cg-rebalance", g.group_id, m.member_id))
            log.info("static member left temporarily", group=g.group_id, member=m.member_id, instance=req.instance_id)
            return HeartbeatResult(E.NONE, None, m.member_id, LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        log.info("static member left the consumer group", group=g.group_id, member=m.member_id)
        await self.fence(g, m)
        return HeartbeatResult(E.NONE, None, req.member_id, req.member_epoch)

    async def fence(self, g: ConsumerGroup, m: ConsumerGroupMember) -> None:
        """Kafka's consumerGroupFenceMember: the member's records go, the subscription metadata is recomputed without
        it and the group epoch bumps (the others get a new target at their next heartbeat)."""
        gid = g.group_id
        rest = [x for x in g.members.values() if x.member_id != m.member_id]
        if (
            rest
            and all(x.uses_classic_protocol for x in rest)
            and self.downgrade is not None
            and self.config.migration_policy in ("downgrade", "bidirectional")
        ):
            # the last consumer-protocol member leaves: the classic members carry on in a classic group
            records, install = self.downgrade(g, m.member_id)
            await self.write(gid, records)
            self.drop(gid)
            install()
            log.info("a consumer group became a classic group", group=gid, members=len(rest))
            return
        change = Change(records=member_tombstones(gid, m.member_id), remove=[m.member_id])
        metadata = self._subscription_metadata(rest)
        if metadata != g.subscription_metadata:
            change.records.append(partition_metadata_record(gid, metadata))
            change.metadata = metadata
        change.group_epoch = g.group_epoch + 1
        change.records.append(group_epoch_record(gid, change.group_epoch))
        self.rebalances += 1
        await self.write(gid, change.records)
        self._apply(g, change)
        self._cancel_member_timers(gid, m.member_id)

    def _cancel_member_timers(self, gid: str, member_id: str) -> None:
        for kind in ("cg-session", "cg-rebalance", "cg-join", "cg-sync"):
            self.timers.cancel((kind, gid, member_id))

    def classic_deadline(self, kind: str, gid: str, m: ConsumerGroupMember, if_absent: bool = False) -> None:
        """A classic member's join deadline (it was told to rejoin) or sync deadline (it joined): it is fenced if
        it does not send that request within its rebalance timeout (Kafka's consumer group join/sync timeouts)."""
        key = (f"cg-{kind}", gid, m.member_id)
        if not (if_absent and self.timers.scheduled(key)):
            reason = f"the classic member did not {kind} within its rebalance timeout"
            self.timers.schedule(key, m.rebalance_timeout_ms, self._deadline_expired, gid, m.member_id, reason)

    def _deadline_expired(self, gid: str, member_id: str, reason: str) -> None:
        self.runtime.spawn(self._expire(gid, member_id, None, reason))

    # -- timers --------------------------------------------------------------------------------------------------------
    def schedule_session(self, gid: str, m: ConsumerGroupMember) -> None:
        """A member's session: the group's (consumer protocol) or the one it joined with (classic protocol)."""
        ms = m.classic.session_timeout_ms if m.classic is not None else self.session_timeout_ms(gid)
        self.timers.schedule(("cg-session", gid, m.member_id), ms, self._session_expired, gid, m.member_id)

    def _session_expired(self, gid: str, member_id: str) -> None:
        self.runtime.spawn(self._expire(gid, member_id, None, "the member session expired"))

    def _rebalance_expired(self, gid: str, member_id: str, epoch: int) -> None:
        self.runtime.spawn(self._expire(gid, member_id, epoch, "it failed to revoke its partitions in time"))

    async def _expire(self, gid: str, member_id: str, epoch: int | None, reason: str) -> None:
        async with self.locked(gid):
            g = self.groups.get(gid)
            m = g.member(member_id) if g is not None else None
            if g is None or m is None or (epoch is not None and m.member_epoch != epoch):
                return
            log.info("member fenced from the consumer group", group=gid, member=member_id, reason=reason)
            try:
                await self.fence(g, m)
            except HeartbeatError as e:
                log.warning("could not fence a member", group=gid, member=member_id, error=e.code.name)

    def schedule_loaded(self, g: ConsumerGroup) -> None:
        """A loaded group's members get a fresh session (Kafka schedules them on load too)."""
        for m in g.members.values():
            self.schedule_session(g.group_id, m)
            if m.state == MemberState.UNREVOKED_PARTITIONS and not m.uses_classic_protocol:
                self.timers.schedule(
                    ("cg-rebalance", g.group_id, m.member_id),
                    m.rebalance_timeout_ms,
                    self._rebalance_expired,
                    g.group_id,
                    m.member_id,
                    m.member_epoch,
                )

    def drop(self, gid: str) -> None:
        """The group left this coordinator (unloaded or deleted): its timers and lock go."""
        g = self.groups.get(gid)
        if g is not None:
            for mid in g.members:
                self._cancel_member_timers(gid, mid)
        self.stale_metadata.discard(gid)
        if gid not in self._lock_users:
            self._locks.pop(gid, None)

    # -- deletion ------------------------------------------------------------------------------------------------------
    def delete_records(self, g: ConsumerGroup) -> list[Record]:
        return group_tombstones(g.group_id, list(g.members))

    # =============================================================================================================
    # load (the runtime's replay of consumer group records)
    @staticmethod
    def replay(state: ConsumerLoad, key: ConsumerGroupKey, value: bytes | None) -> None:
        gid = key.group
        g = state.groups.get(gid)
        if value is None:
            if g is None:
                return
            if key.version == GROUP_EPOCH:
                state.groups.pop(gid, None)
                state.targets.pop(gid, None)
                state.current.pop(gid, None)
                state.deleted.add(gid)
            elif key.version == MEMBER_METADATA and key.member_id is not None:
                g.members.pop(key.member_id, None)
            elif key.version == TARGET_ASSIGNMENT_MEMBER and key.member_id is not None:
                state.targets.get(gid, {}).pop(key.member_id, None)
            elif key.version == CURRENT_ASSIGNMENT and key.member_id is not None:
                state.current.get(gid, {}).pop(key.member_id, None)
            elif key.version == PARTITION_METADATA:
                g.subscription_metadata = {}
            return
        if g is None:
            g = state.groups[gid] = ConsumerGroup(gid, state.now)
            state.deleted.discard(gid)
        if key.version == GROUP_EPOCH:
            g.group_epoch = decode_epoch(value)
        elif key.version == PARTITION_METADATA:
            g.subscription_metadata = decode_partition_metadata(value)
        elif key.version == MEMBER_METADATA and key.member_id is not None:
            g.members[key.member_id] = decode_member_metadata(key.member_id, value)
        elif key.version == TARGET_ASSIGNMENT_EPOCH:
            g.assignment_epoch = decode_epoch(value)
        elif key.version == TARGET_ASSIGNMENT_MEMBER and key.member_id is not None:
            state.targets.setdefault(gid, {})[key.member_id] = decode_target_member(value)
        elif key.version == CURRENT_ASSIGNMENT and key.member_id is not None:
            state.current.setdefault(gid, {})[key.member_id] = decode_current_assignment(value)

    @staticmethod
    def finish_load(state: ConsumerLoad) -> dict[str, ConsumerGroup]:
        """The loaded groups: members joined with their current assignment, ownership and static index rebuilt."""
        out = {}
        for gid, g in state.groups.items():
            subs = dict(g.members)
            g.members = {}
            g.static_members = {}
            g.partition_epochs = {}
            current = state.current.get(gid, {})
            for mid, m in subs.items():
                c = current.get(mid)
                if c is not None:
                    m = replace(
                        m,
                        member_epoch=c.member_epoch,
                        previous_member_epoch=c.previous_member_epoch,
                        state=c.state,
                        assigned=c.assigned,
                        pending_revocation=c.pending_revocation,
                    )
                g.update_member(m)
            g.target = {mid: a for mid, a in state.targets.get(gid, {}).items() if mid in g.members}
            out[gid] = g
        return out


__all__ = [
    "Change",
    "ConsumerGroupConfig",
    "ConsumerGroupManager",
    "ConsumerLoad",
    "HeartbeatError",
    "HeartbeatRequest",
    "HeartbeatResult",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "MIGRATION_POLICIES",
]
