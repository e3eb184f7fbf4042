"""The `uniform` assignor (Kafka's UniformAssignor): balanced first, then sticky, rack-aware where it can be.

Priorities, in order (as Kafka's: balance > stickiness), with racks steering only what moves anyway:
- balance: members with the same subscription own partition counts that differ by at most one;
- stickiness: a member keeps what it owns unless balance takes it away, and only the excess moves (a 7th member
  joining 6 takes one partition from each of the members that must give one up; nothing else moves), so a group
  whose members own their target gets the same assignment again;
- racks: a member giving partitions up gives those without a replica in its rack first, and a partition that moves
  goes to a member with room in a rack holding one of its replicas if there is one. A group formed member by member
  ends up reading in its own racks where the replicas allow it, without a partition ever moving for its rack alone.
Deterministic: the same input gives the same assignment, whatever the order of the members in the mapping.

Two algorithms, as Kafka: when every member subscribes to the same topics, quotas are computed up front (the
members owning most keep the extra partitions); otherwise partitions go topic by topic to the least loaded subscriber
and a balancing pass then moves partitions from the most to the least loaded subscribers of each topic until no two
subscribers of a topic differ by more than one (each move lowers the sum of squared loads, so it terminates).
"""

from __future__ import annotations

import heapq
import uuid
from collections import deque
from collections.abc import Mapping, Sequence

from .racks import RackView
from .spec import Assignment, MemberSubscriptionSpec, TopicSpec

TopicPartition = tuple[uuid.UUID, int]


class _Run:
    """One assignment run: the members in id order, what each holds so far and who owned what before."""

    def __init__(self, members: Mapping[str, MemberSubscriptionSpec], topics: Mapping[uuid.UUID, TopicSpec]) -> None:
        self.ids = sorted(members)
        self.specs = [members[m] for m in self.ids]
        self.topics = topics
        self.subs = [frozenset(t for t in s.subscribed_topic_ids if t in topics) for s in self.specs]
        self.racks = RackView(members, topics)
        self.held: list[set[TopicPartition]] = [set() for _ in self.ids]
        self.owner: dict[TopicPartition, int] = {}
        for i, spec in enumerate(self.specs):
            for topic_id in sorted(spec.owned):
                if topic_id not in self.subs[i]:
                    continue  # unsubscribed: revoked
                count = topics[topic_id].partitions
                for p in sorted(spec.owned[topic_id]):
                    tp = (topic_id, p)
                    if 0 <= p < count and tp not in self.owner:  # else gone, or claimed twice: the first keeps it
                        self.give(i, tp)

    def rack_cost(self, rack: str | None, tp: TopicPartition) -> int:
        """0 when the member's rack holds a replica, 2 when it holds none, 1 when either side has no rack."""
        if self.racks.matches(rack, *tp):
            return 0
        return 2 if self.racks.mismatches(rack, *tp) else 1

    def give(self, member: int, tp: TopicPartition) -> None:
        self.held[member].add(tp)
        self.owner[tp] = member

    def take(self, member: int, tp: TopicPartition) -> None:
        self.held[member].discard(tp)
        del self.owner[tp]

    def result(self) -> Assignment:
        out: Assignment = {}
        for member_id, held in zip(self.ids, self.held, strict=True):
            by_topic: dict[uuid.UUID, set[int]] = {}
            for topic_id, p in held:
                by_topic.setdefault(topic_id, set()).add(p)
            out[member_id] = {t: frozenset(ps) for t, ps in by_topic.items()}
        return out


class UniformAssignor:
    """Kafka's `uniform` server-side assignor (the default of `group.consumer.assignors`)."""

    name = "uniform"

    def assign(
        self, members: Mapping[str, MemberSubscriptionSpec], topics: Mapping[uuid.UUID, TopicSpec]
    ) -> Assignment:
        if not members:
            return {}
        run = _Run(members, topics)
        if all(s == run.subs[0] for s in run.subs):
            _assign_homogeneous(run)
        else:
            _assign_heterogeneous(run)
        return run.result()


def _assign_homogeneous(run: _Run) -> None:
    """Every member subscribes to the same topics: fixed quotas, the extra partitions to those owning most."""
    members = range(len(run.ids))
    everything = [(t, p) for t in sorted(run.subs[0]) for p in range(run.topics[t].partitions)]
    base, extra = divmod(len(everything), len(run.ids))
    quota = [base] * len(run.ids)
    for i in sorted(members, key=lambda i: (-len(run.held[i]), i))[:extra]:
        quota[i] += 1
    for i in members:
        if len(run.held[i]) > quota[i]:
            spec = run.specs[i]
            ranked = sorted(run.held[i], key=lambda tp: (run.rack_cost(spec.rack, tp), tp))
            for tp in ranked[quota[i] :]:
                run.take(i, tp)
    room = [quota[i] - len(run.held[i]) for i in members]
    _fill(run, [tp for tp in everything if tp not in run.owner], room)


def _fill(run: _Run, unassigned: Sequence[TopicPartition], room: list[int]) -> None:
    """Places partitions into members' free room: into a member of a matching rack first, then round robin."""

    def place(i: int, tp: TopicPartition) -> None:
        run.give(i, tp)
        room[i] -= 1

    pending = list(unassigned)
    if run.racks.enabled:
        by_rack: dict[str, deque[int]] = {}
        for i, spec in enumerate(run.specs):
            if spec.rack is not None and room[i] > 0:
                by_rack.setdefault(spec.rack, deque()).append(i)
        rest = []
        for tp in pending:
            best: tuple[int, str] | None = None
            for rack in run.racks.racks(*tp):
                queue = by_rack.get(rack)
                while queue and room[queue[0]] == 0:
                    queue.popleft()
                if queue and (best is None or (-room[queue[0]], rack) < best):
                    best = (-room[queue[0]], rack)
            if best is None:
                rest.append(tp)
                continue
            queue = by_rack[best[1]]
            place(queue[0], tp)
            queue.rotate(-1)  # spread the rack's partitions over its members
        pending = rest
    # Round robin over the members with room, so each gets partitions of every topic rather than one topic's block.
    open_members = deque(i for i in range(len(room)) if room[i] > 0)
    for tp in pending:
        while room[open_members[0]] == 0:
            open_members.popleft()
        place(open_members[0], tp)
        open_members.rotate(-1)


def _top(heap: list[tuple[int, int]], load: list[int]) -> tuple[int, int] | None:
    """The heap's first entry still true to `load` (stale entries, pushed before a load changed, are dropped)."""
    while heap and heap[0][0] != load[heap[0][1]]:
        heapq.heappop(heap)
    return heap[0] if heap else None


def _assign_heterogeneous(run: _Run) -> None:
    """Members subscribe to different topics: least-loaded subscriber per partition, then balance per topic."""
    load = [len(h) for h in run.held]
    subscribers: dict[uuid.UUID, list[int]] = {}
    for i, subs in enumerate(run.subs):
        for t in subs:
            subscribers.setdefault(t, []).append(i)
    # Topics with most partitions per subscriber first (they are the hardest to balance), as Kafka orders them.
    order = sorted(subscribers, key=lambda t: (-run.topics[t].partitions / len(subscribers[t]), len(subscribers[t]), t))
    for t in order:
        _place_topic(run, t, subscribers[t], load)
    parts: dict[uuid.UUID, dict[int, set[int]]] = {t: {i: set() for i in subscribers[t]} for t in order}
    for (t, p), i in run.owner.items():
        parts[t][i].add(p)
    moved = True
    while moved:
        moved = False
        for t in order:
            moved |= _balance_topic(run, t, subscribers[t], parts[t], load)


def _place_topic(run: _Run, t: uuid.UUID, subscribers: list[int], load: list[int]) -> None:
    unassigned = [p for p in range(run.topics[t].partitions) if (t, p) not in run.owner]
    if not unassigned:
        return
    heap = [(load[i], i) for i in subscribers]
    heapq.heapify(heap)
    rack_heaps: dict[str, list[tuple[int, int]]] = {}
    if run.racks.enabled:
        for i in subscribers:
            rack = run.specs[i].rack
            if rack is not None:
                rack_heaps.setdefault(rack, []).append((load[i], i))
        for h in rack_heaps.values():
            heapq.heapify(h)
    for p in unassigned:
        least = _top(heap, load)
        assert least is not None
        choice = least
        matched = False
        for rack in run.racks.racks(t, p):
            entry = _top(rack_heaps.get(rack, []), load)
            if entry is not None and entry[0] == least[0] and (not matched or entry < choice):
                choice, matched = entry, True
        i = choice[1]
        run.give(i, (t, p))
        load[i] += 1
        heapq.heappush(heap, (load[i], i))
        rack = run.specs[i].rack
        if rack in rack_heaps:
            heapq.heappush(rack_heaps[rack], (load[i], i))


def _balance_topic(
    run: _Run, t: uuid.UUID, subscribers: list[int], parts: dict[int, set[int]], load: list[int]
) -> bool:
    """Moves the topic's partitions from its most to its least loaded subscribers while they differ by more than one."""
    donors = [(-load[i], i) for i in subscribers if parts[i]]
    takers = [(load[i], i) for i in subscribers]
    heapq.heapify(donors)
    heapq.heapify(takers)
    moved = False
    while True:
        while donors and (-donors[0][0] != load[donors[0][1]] or not parts[donors[0][1]]):
            heapq.heappop(donors)
        taker = _top(takers, load)
        if not donors or taker is None:
            return moved
        d, r = donors[0][1], taker[1]
        if load[d] - load[r] <= 1:
            return moved
        if run.racks.enabled:  # one its receiver reads in its rack, else one its donor reads across racks
            r_rack, d_rack = run.specs[r].rack, run.specs[d].rack
            p = min(parts[d], key=lambda p: (run.rack_cost(r_rack, (t, p)), -run.rack_cost(d_rack, (t, p)), -p))
        else:
            p = max(parts[d])
        parts[d].remove(p)
        parts[r].add(p)
        run.take(d, (t, p))
        run.give(r, (t, p))
        load[d] -= 1
        load[r] += 1
        heapq.heappush(donors, (-load[d], d))
        heapq.heappush(donors, (-load[r], r))
        heapq.heappush(takers, (load[d], d))
        heapq.heappush(takers, (load[r], r))
        moved = True
