"""Rack awareness shared by the assignors: which members share a rack with a partition's replicas.

As Kafka's assignors, an assignment is rack-aware only when there is something to match: at least one member sends a
rack (`client.rack`) and at least one partition has replica racks. A member without a rack, or a partition whose
replica racks are unknown, is neutral: neither matched nor mismatched, so it is placed by balance and stickiness alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from .spec import MemberSubscriptionSpec, TopicSpec

_NO_RACKS: frozenset[str] = frozenset()


class RackView:
    """Answers rack questions for one assignment run."""

    def __init__(self, members: Mapping[str, MemberSubscriptionSpec], topics: Mapping[uuid.UUID, TopicSpec]) -> None:
        self._topics = topics
        self.enabled = any(m.rack is not None for m in members.values()) and any(
            any(racks for racks in t.partition_racks.values()) for t in topics.values()
        )

    def racks(self, topic_id: uuid.UUID, partition: int) -> frozenset[str]:
        """The racks of the partition's replicas; empty when unknown or when the run is not rack-aware."""
        if not self.enabled:
            return _NO_RACKS
        topic = self._topics.get(topic_id)
        return topic.partition_racks.get(partition, _NO_RACKS) if topic is not None else _NO_RACKS

    def matches(self, rack: str | None, topic_id: uuid.UUID, partition: int) -> bool:
        """The member's rack holds a replica of the partition."""
        return rack is not None and rack in self.racks(topic_id, partition)

    def mismatches(self, rack: str | None, topic_id: uuid.UUID, partition: int) -> bool:
        """Both sides have racks and none is shared: another member may read the partition in its own rack."""
        if rack is None:
            return False
        racks = self.racks(topic_id, partition)
        return bool(racks) and rack not in racks
