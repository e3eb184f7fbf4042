"""What an assignor is given and returns: the member and topic specs and the assignor protocol."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

Assignment = dict[str, dict[uuid.UUID, frozenset[int]]]


@dataclass(frozen=True)
class MemberSubscriptionSpec:
    """One member as the assignor sees it: `owned` is its current assignment, which the sticky assignor keeps."""

    member_id: str
    rack: str | None
    subscribed_topic_ids: frozenset[uuid.UUID]
    owned: Mapping[uuid.UUID, frozenset[int]]
    instance_id: str | None = None


@dataclass(frozen=True)
class TopicSpec:
    """A subscribed topic: its partition count and, per partition, the racks of its replicas ({} when unknown)."""

    topic_id: uuid.UUID
    name: str
    partitions: int
    partition_racks: Mapping[int, frozenset[str]] = field(default_factory=dict)


class ConsumerGroupAssignor(Protocol):
    """Kafka's ConsumerGroupPartitionAssignor: a name the clients ask for and a pure `assign`."""

    name: str

    def assign(
        self, members: Mapping[str, MemberSubscriptionSpec], topics: Mapping[uuid.UUID, TopicSpec]
    ) -> Assignment: ...
