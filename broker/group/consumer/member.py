"""A member of a KIP-848 consumer group (Kafka's ConsumerGroupMember): what it subscribes to, and where its
reconciliation stands. Immutable: the heartbeat path builds an updated copy, compares, and writes records for what
changed before the group adopts it."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum

Assignment = Mapping[uuid.UUID, frozenset[int]]  # topic id -> partitions
EMPTY: Assignment = {}


class MemberState(IntEnum):
    """Kafka's modern MemberState (its byte values are what the current-assignment record stores)."""

    STABLE = 0  # owns its target assignment (at the member's epoch)
    UNREVOKED_PARTITIONS = 1  # must acknowledge revoking `pending_revocation` before it gets a new epoch
    UNRELEASED_PARTITIONS = 2  # waits for partitions other members still own
    UNKNOWN = 127


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member that joined with the classic protocol (JoinGroup) into a consumer group."""

    session_timeout_ms: int
    protocols: list[tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    classic: ClassicMemberMetadata | None = None

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state == MemberState.STABLE and self.member_epoch == target_epoch

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def subscription_key(self) -> tuple[object, ...]:
        """What the group epoch depends on: a change here bumps it (Kafka's hasMemberSubscriptionChanged)."""
        return (self.subscribed_topic_names, self.subscribed_topic_regex, self.server_assignor, self.rack_id)


def assignment_size(a: Assignment) -> int:
    return sum(len(p) for p in a.values())


def same_assignment(a: Assignment, b: Assignment) -> bool:
    """Equal ignoring topics with no partitions."""
    return {t: p for t, p in a.items() if p} == {t: p for t, p in b.items() if p}


__all__ = [
    "EMPTY",
    "Assignment",
    "ClassicMemberMetadata",
    "ConsumerGroupMember",
    "MemberState",
    "assignment_size",
    "same_assignment",
]
