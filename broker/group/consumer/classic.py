"""Classic-protocol members inside a consumer group (Kafka's classicGroupJoin/Sync/Heartbeat/LeaveToConsumerGroup):
during a rolling upgrade or downgrade a group holds members of both protocols. A classic member's JoinGroup goes
through the same steps as a heartbeat (its subscription and owned partitions come from its protocol metadata) and
is answered at once with its member epoch as the generation and no leader: the broker assigns. SyncGroup returns
its current assignment; Heartbeat answers REBALANCE_IN_PROGRESS when it has to rejoin to make progress (the group
epoch moved past it, it must revoke partitions, or partitions it waits for were released).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from strata.protocol import consumer_protocol
from strata.protocol.errors import ErrorCode
from strata.protocol.wire import ByteReader, WireFormatError

from ..group import JoinResult, SyncResult
from .group import PROTOCOL_TYPE, ConsumerGroup
from .member import Assignment, ClassicMemberMetadata, ConsumerGroupMember, MemberState
from .records import (
    Record,
    current_assignment_record,
    member_metadata_record,
    member_tombstones,
    target_member_record,
)

if TYPE_CHECKING:
    from .manager import ConsumerGroupManager

E = ErrorCode


@dataclass(frozen=True, slots=True)
class Subscription:
    """A ConsumerProtocolSubscription (any version): topics, owned partitions (v1+), rack (v3+)."""

    topics: list[str]
    owned: list[tuple[str, list[int]]]
    rack: str | None


def parse_subscription(blob: bytes) -> Subscription:
    r = ByteReader(bytes(blob))
    version = r.int16()
    topics = [r.string() for _ in range(max(r.int32(), 0))]
    r.take(max(r.int32(), 0))  # user data
    owned: list[tuple[str, list[int]]] = []
    rack = None
    if version >= 1 and r.remaining() > 0:
        for _ in range(max(r.int32(), 0)):
            t = r.string()
            owned.append((t, [r.int32() for _ in range(max(r.int32(), 0))]))
        if version >= 2 and r.remaining() >= 4:
            r.int32()  # generation
        if version >= 3 and r.remaining() > 0:
            rack = r.nullable_string()
    return Subscription(topics, owned, rack)


def by_id(pairs: list[tuple[str, list[int]]], topics: Mapping[str, Any]) -> list[tuple[uuid.UUID, list[int]]]:
    """(topic name, partitions) -> (topic id, partitions), for topics that exist."""
    return [(topics[t].topic_id, ps) for t, ps in pairs if t in topics]


def assignment_blob(a: Assignment, store: Any) -> bytes:
    """A member's partitions as a ConsumerProtocolAssignment (version 0, topic names)."""
    named = []
    for tid, ps in sorted(a.items(), key=str):
        info = store.topic_by_id(tid) if store is not None else None
        if info is not None:
            named.append((info.name, sorted(ps)))
    return consumer_protocol.encode_assignment(named)


def _protocol_name(g: ConsumerGroup, protocols: list[tuple[str, bytes]]) -> str | None:
    """The first of the member's protocols that every classic member of the group supports (Kafka's
    supportsClassicProtocols), or None."""
    others = [m.classic.protocols for m in g.members.values() if m.classic is not None]
    for name, _ in protocols:
        if all(any(n == name for n, _ in ps) for ps in others):
            return name
    return None


def _needs_rejoin(g: ConsumerGroup, m: ConsumerGroupMember) -> bool:
    """Kafka's classic heartbeat rule: rejoin when the group epoch moved past the member, when it must revoke, or
    when partitions it waits for are free now."""
    if m.member_epoch < g.group_epoch or m.state == MemberState.UNREVOKED_PARTITIONS:
        return True
    if m.state == MemberState.UNRELEASED_PARTITIONS:
        target = g.target_of(m.member_id)
        waiting = [(t, p) for t, ps in target.items() for p in ps if p not in m.assigned.get(t, frozenset())]
        return all(g.partition_epoch(t, p) == -1 for t, p in waiting)
    return False


async def classic_join(
    mgr: ConsumerGroupManager,
    g: ConsumerGroup,
    member_id: str,
    instance_id: str | None,
    client_id: str,
    client_host: str,
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    protocol_type: str,
    protocols: list[tuple[str, bytes]],
    api_version: int,
) -> JoinResult:
    """JoinGroup of a classic member into (non-empty) consumer group `g`, under the group's lock."""
    from .manager import Change, HeartbeatError

    unknown = member_id == ""
    if unknown:
        member_id = str(uuid.uuid4())
    try:
        mgr.check_size(g, member_id)
    except HeartbeatError as e:
        return JoinResult(e.code, member_id="" if unknown else member_id)
    name = _protocol_name(g, protocols) if protocol_type == PROTOCOL_TYPE and protocols else None
    if name is None:
        return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id="" if unknown else member_id)
    if unknown and instance_id is None and api_version >= 4:
        return JoinResult(E.MEMBER_ID_REQUIRED, member_id=member_id)
    change = Change()
    replaced: ConsumerGroupMember | None = None
    if instance_id is None:
        member = g.member(member_id) or ConsumerGroupMember(member_id)
    else:
        existing = g.static_member(instance_id)
        if existing is None or existing.member_id == member_id:
            member = existing or g.member(member_id) or ConsumerGroupMember(member_id)
        elif not unknown:
            return JoinResult(E.FENCED_INSTANCE_ID, member_id=member_id)
        else:  # a new incarnation of the static member takes its slot and partitions
            member = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
            replaced = existing
            change.records += mgr.replace_member_records(g, existing, member)
    try:
        sub = parse_subscription(dict(protocols).get(name, protocols[0][1]))
    except (WireFormatError, UnicodeDecodeError):
        return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
    topics = mgr.topics()
    updated = replace(
        member,
        instance_id=instance_id,
        rack_id=sub.rack if sub.rack is not None else member.rack_id,
        rebalance_timeout_ms=rebalance_timeout_ms,
        subscribed_topic_names=tuple(sub.topics),
        subscribed_topic_regex=None,
        server_assignor=None,
        client_id=client_id,
        client_host=client_host,
        classic=ClassicMemberMetadata(session_timeout_ms, list(protocols)),
    )
    try:
        reconciled = await mgr.join_or_update(g, False, member, replaced, updated, by_id(sub.owned, topics), change)
    except HeartbeatError as e:
        return JoinResult(e.code, member_id=member_id)
    mgr.timers.cancel(("cg-join", g.group_id, reconciled.member_id))
    mgr.classic_deadline("sync", g.group_id, reconciled)
    return JoinResult(
        E.NONE,
        member_id=reconciled.member_id,
        generation_id=reconciled.member_epoch,
        protocol_type=PROTOCOL_TYPE,
        protocol_name=name,
        leader="",
        members=[],
    )


def _validate(g: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int) -> ErrorCode:
    m = g.member(member_id)
    if instance_id is not None:
        owner = g.static_members.get(instance_id)
        if owner is None:
            return E.UNKNOWN_MEMBER_ID
        if owner != member_id:
            return E.FENCED_INSTANCE_ID
    if m is None or not m.uses_classic_protocol:
        return E.UNKNOWN_MEMBER_ID
    if generation_id != m.member_epoch:
        return E.ILLEGAL_GENERATION
    return E.NONE


def classic_sync(
    mgr: ConsumerGroupManager,
    g: ConsumerGroup,
    member_id: str,
    instance_id: str | None,
    generation_id: int,
    protocol_type: str | None,
    protocol_name: str | None,
) -> SyncResult:
    err = _validate(g, member_id, instance_id, generation_id)
    if err:
        return SyncResult(err)
    m = g.members[member_id]
    name = _protocol_name(g, m.classic.protocols) if m.classic is not None else None
    if (protocol_type is not None and protocol_type != PROTOCOL_TYPE) or (
        protocol_name is not None and protocol_name != name
    ):
        return SyncResult(E.INCONSISTENT_GROUP_PROTOCOL)
    mgr.timers.cancel(("cg-sync", g.group_id, m.member_id))
    if g.group_epoch > m.member_epoch and m.state != MemberState.UNREVOKED_PARTITIONS:
        mgr.classic_deadline("join", g.group_id, m, if_absent=True)
        return SyncResult(E.REBALANCE_IN_PROGRESS)
    mgr.schedule_session(g.group_id, m)
    return SyncResult(E.NONE, PROTOCOL_TYPE, name, assignment_blob(m.assigned, mgr.store))


def classic_heartbeat(
    mgr: ConsumerGroupManager, g: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int
) -> ErrorCode:
    err = _validate(g, member_id, instance_id, generation_id)
    if err:
        return err
    m = g.members[member_id]
    mgr.schedule_session(g.group_id, m)
    if not _needs_rejoin(g, m):
        return E.NONE
    mgr.classic_deadline("join", g.group_id, m, if_absent=True)
    return E.REBALANCE_IN_PROGRESS


async def classic_leave(
    mgr: ConsumerGroupManager, g: ConsumerGroup, members: list[tuple[str, str | None]]
) -> tuple[list[tuple[str, str | None, ErrorCode]], list[tuple[str, str | None]]]:
    """LeaveGroup of classic members (by member id, or by instance id alone: an admin removing a static member);
    (results, the members not handled because the group became a classic group meanwhile)."""
    out: list[tuple[str, str | None, ErrorCode]] = []
    for n, (mid, iid) in enumerate(members):
        if mgr.groups.get(g.group_id) is not g:
            return out, members[n:]
        target = g.static_members.get(iid) if mid == "" and iid is not None else mid
        m = g.member(target) if target else None
        if m is None or (iid is not None and g.static_members.get(iid) != m.member_id):
            out.append((mid, iid, E.UNKNOWN_MEMBER_ID if m is None else E.FENCED_INSTANCE_ID))
            continue
        await mgr.fence(g, m)
        out.append((mid, iid, E.NONE))
    return out, []


def replace_records(
    group_id: str, old: ConsumerGroupMember, new: ConsumerGroupMember, target: Assignment
) -> list[Record]:
    """Kafka's replaceMember: the old incarnation's records go, the new one's take its subscription and target."""

    return [
        *member_tombstones(group_id, old.member_id),
        member_metadata_record(group_id, new),
        target_member_record(group_id, new.member_id, target),
        current_assignment_record(group_id, new),
    ]


__all__ = [
    "Subscription",
    "assignment_blob",
    "by_id",
    "classic_heartbeat",
    "classic_join",
    "classic_leave",
    "classic_sync",
    "parse_subscription",
    "replace_records",
]
