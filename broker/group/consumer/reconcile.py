"""The reconciliation of one member towards its target assignment (KIP-848; Kafka's CurrentAssignmentBuilder).

A partition moves in two steps: its previous owner is asked to revoke it (its epoch stays until it acknowledges by
no longer listing the partition as owned in a heartbeat), and only then can its new owner be given it. While a
partition still has an owner, the member that targets it waits in UNRELEASED_PARTITIONS and keeps what it has.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace

from .member import Assignment, ConsumerGroupMember, MemberState

S = MemberState
Owned = Sequence[tuple[uuid.UUID, Sequence[int]]] | None  # the heartbeat's topic_partitions (None: not sent)
PartitionEpoch = Callable[[uuid.UUID, int], int]  # the epoch of the partition's current owner, -1 if free


class FencedMember(Exception):
    """The member must drop all its partitions and rejoin (FENCED_MEMBER_EPOCH)."""


def _owns_any(owned: Owned, partitions: Assignment) -> bool:
    """Whether the member still reports owning any of `partitions`; not reporting counts as owning them."""
    if owned is None:
        return True
    for tid, parts in owned:
        pending = partitions.get(tid)
        if pending and any(p in pending for p in parts):
            return True
    return False


def _next(
    member: ConsumerGroupMember,
    epoch: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: Owned,
) -> ConsumerGroupMember:
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    adding: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for tid in set(target) | set(member.assigned):
        want = target.get(tid, frozenset())
        have = member.assigned.get(tid, frozenset())
        keep = have & want
        gone = have - keep
        new = want - keep
        free = frozenset(p for p in new if partition_epoch(tid, p) == -1)
        unreleased = unreleased or len(free) < len(new)
        if keep:
            assigned[tid] = keep
        if gone:
            revoking[tid] = gone
        if free:
            adding[tid] = free
    if revoking and _owns_any(owned, revoking):
        # keep the current epoch until the member acknowledges the revocation
        return replace(
            member,
            state=S.UNREVOKED_PARTITIONS,
            member_epoch=epoch,
            previous_member_epoch=member.member_epoch,
            assigned=assigned,
            pending_revocation=revoking,
        )
    for tid, parts in adding.items():
        assigned[tid] = assigned.get(tid, frozenset()) | parts
    return replace(
        member,
        state=S.UNRELEASED_PARTITIONS if unreleased else S.STABLE,
        member_epoch=target_epoch,
        previous_member_epoch=member.member_epoch,
        assigned=assigned,
        pending_revocation={},
    )


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: Owned,
) -> ConsumerGroupMember:
    """The member's next state towards (`target_epoch`, `target`); `owned` is what it reported owning."""
    if member.state == S.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if member.state == S.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    if member.state == S.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if owned is None or len(owned) > 0:
        raise FencedMember(
            "The consumer group member is in a unknown state. The member must abandon all its partitions and rejoin."
        )
    return _next(member, target_epoch, target_epoch, target, partition_epoch, owned)


__all__ = ["FencedMember", "Owned", "PartitionEpoch", "reconcile"]
