"""Server-side partition assignors of KIP-848 consumer groups (`group.remote.assignor`, `group.consumer.assignors`).

The group coordinator computes a group's target assignment with one of these: it hands over every member's
subscription (topic ids, rack, what it owns now) and the subscribed topics' metadata, and gets back the partitions
each member should own. Assignors are pure functions of their input (deterministic, no I/O), so the coordinator may run
them off the request path. Topics a member subscribes to but `topics` does not describe are skipped (the coordinator
resolves names to ids and leaves out topics that do not exist).
"""

from __future__ import annotations

from .range import RangeAssignor
from .spec import Assignment, ConsumerGroupAssignor, MemberSubscriptionSpec, TopicSpec
from .uniform import UniformAssignor

_ASSIGNORS: dict[str, ConsumerGroupAssignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
ASSIGNOR_NAMES: tuple[str, ...] = tuple(_ASSIGNORS)


def assignor_by_name(name: str) -> ConsumerGroupAssignor | None:
    """The assignor `group.remote.assignor` / `group.consumer.assignors` names, or None if the broker has none."""
    return _ASSIGNORS.get(name)


__all__ = [
    "ASSIGNOR_NAMES",
    "Assignment",
    "ConsumerGroupAssignor",
    "MemberSubscriptionSpec",
    "RangeAssignor",
    "TopicSpec",
    "UniformAssignor",
    "assignor_by_name",
]
