"""A KIP-848 consumer group (Kafka's ConsumerGroup): group epoch, target assignment and its epoch, members and the
partition ownership that reconciliation checks, and the committed offsets (shared with offsets.py).

States (Kafka's ConsumerGroupState): EMPTY (no member), ASSIGNING (the group epoch is ahead of the target
assignment), RECONCILING (some member has not reached the target assignment epoch), STABLE; DEAD once deleted.
Pure state: the manager (manager.py) decides, writes records, then applies them here.
"""

from __future__ import annotations

import uuid
from enum import Enum

from ..records import OffsetAndMetadata
from .member import EMPTY, Assignment, ConsumerGroupMember
from .records import TopicMetadata

GROUP_TYPE = "consumer"
PROTOCOL_TYPE = "consumer"


class ConsumerGroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


CS = ConsumerGroupState


class ConsumerGroup:
    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}  # member id -> target assignment
        self.partition_epochs: dict[tuple[uuid.UUID, int], int] = {}  # owned (or being revoked) -> owner's epoch
        self.subscription_metadata: dict[str, TopicMetadata] = {}  # subscribed topic name -> id, partitions
        self.dead = False
        self.current_state_timestamp: int | None = now_ms
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        self.pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetAndMetadata]] = {}
        self.pending_members: set[str] = set()  # (offsets.py reads it; a consumer group has none)

    # -- state ---------------------------------------------------------------------------------------------------
    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return CS.DEAD
        if not self.members:
            return CS.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return CS.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return CS.RECONCILING
        return CS.STABLE

    def is_empty(self) -> bool:
        return not self.members

    def is_in(self, *states: object) -> bool:
        """offsets.py's check: a consumer group is DEAD only once deleted (classic states never match others)."""
        return any(getattr(s, "value", None) == self.state.value for s in states)

    @property
    def protocol_type(self) -> str:
        return PROTOCOL_TYPE

    # -- members -------------------------------------------------------------------------------------------------
    def member(self, member_id: str) -> ConsumerGroupMember | None:
        return self.members.get(member_id)

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        mid = self.static_members.get(instance_id) if instance_id is not None else None
        return self.members.get(mid) if mid is not None else None

    def update_member(self, m: ConsumerGroupMember) -> None:
        """Add or replace a member (same id), keeping ownership and the static index in step."""
        old = self.members.get(m.member_id)
        if old is not None:
            self._release(old)
            if old.instance_id is not None and old.instance_id != m.instance_id:
                self.static_members.pop(old.instance_id, None)
        self.members[m.member_id] = m
        if m.instance_id is not None:
            self.static_members[m.instance_id] = m.member_id
        self._own(m)

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        old = self.members.pop(member_id, None)
        if old is not None:
            self._release(old)
            if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
                del self.static_members[old.instance_id]
        self.target.pop(member_id, None)
        return old

    def _own(self, m: ConsumerGroupMember) -> None:
        for a in (m.assigned, m.pending_revocation):
            for tid, parts in a.items():
                for p in parts:
                    self.partition_epochs[(tid, p)] = m.member_epoch

    def _release(self, m: ConsumerGroupMember) -> None:
        for a in (m.assigned, m.pending_revocation):
            for tid, parts in a.items():
                for p in parts:
                    if self.partition_epochs.get((tid, p)) == m.member_epoch:
                        del self.partition_epochs[(tid, p)]

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def target_of(self, member_id: str) -> Assignment:
        return self.target.get(member_id, EMPTY)

    # -- subscriptions -------------------------------------------------------------------------------------------
    def subscribed_names(self) -> set[str]:
        return {n for m in self.members.values() for n in m.subscribed_topic_names}

    def regexes(self) -> set[str]:
        return {m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex}

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return topic in self.subscription_metadata

    def __repr__(self) -> str:
        return (
            f"ConsumerGroup({self.group_id!r}, {self.state.value}, epoch={self.group_epoch}, "
            f"assignment_epoch={self.assignment_epoch}, members={list(self.members)})"
        )


__all__ = ["GROUP_TYPE", "PROTOCOL_TYPE", "ConsumerGroup", "ConsumerGroupState"]
