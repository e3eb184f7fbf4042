"""The `range` assignor (Kafka's server-side RangeAssignor): contiguous, co-partitioned ranges per topic.

Members are ordered static members first (by `group.instance.id`), then the others by member id; each topic's
partitions are cut into ranges in that order, the first `partitions % subscribers` members taking one more. Two
topics with the same partition count and the same subscribers therefore give each member the same partition numbers
(co-partitioning, for joins), and an assignment does not change while the members and topics do not (static members
keep their ranges across restarts). Rack-aware like Kafka's client-side RangeAssignor (KIP-881): when members and
partitions have racks, each member first takes, within its quota, the partitions with a replica in its rack (for
co-partitioned topics, a partition number whose replicas share its rack in every one of them), then the quotas are
filled in order with what is left.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from .racks import RackView
from .spec import Assignment, MemberSubscriptionSpec, TopicSpec


def _member_order(members: Mapping[str, MemberSubscriptionSpec]) -> list[str]:
    def key(member_id: str) -> tuple[int, str, str]:
        instance = members[member_id].instance_id
        return (0, instance, member_id) if instance is not None else (1, "", member_id)

    return sorted(members, key=key)


class RangeAssignor:
    """Kafka's `range` server-side assignor."""

    name = "range"

    def assign(
        self, members: Mapping[str, MemberSubscriptionSpec], topics: Mapping[uuid.UUID, TopicSpec]
    ) -> Assignment:
        order = _member_order(members)
        racks = RackView(members, topics)
        subscribers: dict[uuid.UUID, list[str]] = {}
        for member_id in order:
            for t in sorted(members[member_id].subscribed_topic_ids):
                if t in topics:
                    subscribers.setdefault(t, []).append(member_id)
        # Co-partitioned topics (same partition count, same subscribers) are cut together.
        groups: dict[tuple[int, tuple[str, ...]], list[uuid.UUID]] = {}
        for t in sorted(subscribers):
            groups.setdefault((topics[t].partitions, tuple(subscribers[t])), []).append(t)
        out: Assignment = {m: {} for m in order}
        for (count, group_members), group_topics in groups.items():
            cut = _cut(count, group_members, group_topics, members, racks)
            for member_id, partitions in cut.items():
                if partitions:
                    for t in group_topics:
                        out[member_id][t] = partitions
        return out


def _cut(
    count: int,
    members: tuple[str, ...],
    group_topics: list[uuid.UUID],
    specs: Mapping[str, MemberSubscriptionSpec],
    racks: RackView,
) -> dict[str, frozenset[int]]:
    """Partition numbers 0..count-1 over `members` in order: plain ranges, or rack-matched first then ranges."""
    base, extra = divmod(count, len(members))
    quota = {m: base + (1 if k < extra else 0) for k, m in enumerate(members)}
    if not racks.enabled:
        out, start = {}, 0
        for m in members:
            out[m] = frozenset(range(start, start + quota[m]))
            start += quota[m]
        return out
    by_rack: dict[str, list[int]] = {}  # each rack's partition numbers, ascending
    for p in range(count):
        for shared in frozenset.intersection(*(racks.racks(t, p) for t in group_topics)):
            by_rack.setdefault(shared, []).append(p)
    next_index = dict.fromkeys(by_rack, 0)  # members of a rack take its partitions in order: skip what went before
    taken: dict[str, list[int]] = {m: [] for m in members}
    free = set(range(count))
    for m in members:
        rack = specs[m].rack
        if rack is None or rack not in by_rack:
            continue
        candidates, i = by_rack[rack], next_index[rack]
        while len(taken[m]) < quota[m] and i < len(candidates):
            if candidates[i] in free:
                taken[m].append(candidates[i])
                free.discard(candidates[i])
            i += 1
        next_index[rack] = i
    left = sorted(free)
    for m in members:
        need = quota[m] - len(taken[m])
        taken[m].extend(left[:need])
        del left[:need]
    return {m: frozenset(ps) for m, ps in taken.items()}
