"""The KIP-848 server-side assignors (`uniform`, `range`) on seeded random groups and on hand-made cases: every
subscribed partition assigned exactly once and only to a subscriber, balance, minimal movement (stickiness),
determinism, co-partitioning and rack preference."""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest

from strata.broker.group.assignors import (
    ASSIGNOR_NAMES,
    Assignment,
    MemberSubscriptionSpec,
    TopicSpec,
    assignor_by_name,
)

UNIFORM = assignor_by_name("uniform")
RANGE = assignor_by_name("range")
assert UNIFORM is not None and RANGE is not None


def tid(n: int) -> uuid.UUID:
    return uuid.UUID(int=n + 1)


def topic(n: int, partitions: int, racks: dict[int, frozenset[str]] | None = None) -> TopicSpec:
    return TopicSpec(tid(n), f"t{n}", partitions, racks or {})


def member(
    mid: str,
    subs: set[uuid.UUID],
    owned: dict[uuid.UUID, frozenset[int]] | None = None,
    rack: str | None = None,
    inst: str | None = None,
) -> MemberSubscriptionSpec:
    return MemberSubscriptionSpec(mid, rack, frozenset(subs), dict(owned or {}), inst)


def with_owned(members: dict[str, MemberSubscriptionSpec], assignment: Assignment) -> dict[str, MemberSubscriptionSpec]:
    """The members again, each owning what `assignment` gave it (the next rebalance's input)."""
    return {
        m: MemberSubscriptionSpec(s.member_id, s.rack, s.subscribed_topic_ids, assignment.get(m, {}), s.instance_id)
        for m, s in members.items()
    }


def loads(a: Assignment) -> dict[str, int]:
    return {m: sum(len(ps) for ps in tps.values()) for m, tps in a.items()}


def check_exactly_once(members, topics, a: Assignment) -> None:
    """Every partition of a subscribed topic is assigned once, to a member subscribed to its topic."""
    seen: Counter[tuple[uuid.UUID, int]] = Counter()
    assert set(a) == set(members)
    for m, tps in a.items():
        for t, ps in tps.items():
            assert t in members[m].subscribed_topic_ids
            assert ps, "no empty partition sets"
            for p in ps:
                assert 0 <= p < topics[t].partitions
                seen[(t, p)] += 1
    subscribed = {t for s in members.values() for t in s.subscribed_topic_ids if t in topics}
    expected = {(t, p) for t in subscribed for p in range(topics[t].partitions)}
    assert set(seen) == expected
    assert all(n == 1 for n in seen.values())


def check_balanced(members, a: Assignment) -> None:
    """Members with the same subscription own counts within one of each other; and no partition could move to a
    less loaded subscriber of its topic to improve that (the per-topic fixpoint the uniform assignor reaches)."""
    load = loads(a)
    by_subs: dict[frozenset, list[int]] = {}
    for m, s in members.items():
        by_subs.setdefault(s.subscribed_topic_ids, []).append(load[m])
    for counts in by_subs.values():
        assert max(counts) - min(counts) <= 1, counts
    for m, tps in a.items():
        for t in tps:
            for other, s in members.items():
                if t in s.subscribed_topic_ids:
                    assert load[m] - load[other] <= 1, (m, other, t)


def random_group(rng: random.Random, homogeneous: bool, racks: bool = False):
    n_topics = rng.randint(1, 6)
    rack_names = ["a", "b", "c"]
    topics = {}
    for n in range(n_topics):
        count = rng.randint(0, 24)
        pr = {p: frozenset(rng.sample(rack_names, rng.randint(1, 2))) for p in range(count)} if racks else {}
        topics[tid(n)] = topic(n, count, pr)
    all_ids = list(topics)
    n_members = rng.randint(1, 12)
    common = set(rng.sample(all_ids, rng.randint(1, n_topics)))
    members = {}
    for i in range(n_members):
        subs = common if homogeneous else set(rng.sample(all_ids, rng.randint(1, n_topics)))
        rack = rng.choice(rack_names) if racks and rng.random() < 0.8 else None
        members[f"member-{i:02d}"] = member(f"member-{i:02d}", subs, rack=rack)
    return members, topics


def random_owned(rng: random.Random, members, topics) -> dict[str, MemberSubscriptionSpec]:
    """Arbitrary current assignments: random partitions (some of unsubscribed topics, some out of range, some
    claimed by two members), as a coordinator may hold after topics, partitions and subscriptions changed."""
    out = {}
    for m, s in members.items():
        owned: dict[uuid.UUID, frozenset[int]] = {}
        for t in topics:
            if rng.random() < 0.5:
                owned[t] = frozenset(rng.sample(range(topics[t].partitions + 2), rng.randint(0, 2)))
        out[m] = MemberSubscriptionSpec(m, s.rack, s.subscribed_topic_ids, owned, s.instance_id)
    return out


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("homogeneous", [True, False])
def test_uniform_random_groups(seed, homogeneous):
    rng = random.Random(seed)
    members, topics = random_group(rng, homogeneous, racks=seed % 3 == 0)
    members = random_owned(rng, members, topics)
    a = UNIFORM.assign(members, topics)
    check_exactly_once(members, topics, a)
    check_balanced(members, a)
    # Stable: members owning their target get it again (no movement without a change).
    again = with_owned(members, a)
    assert UNIFORM.assign(again, topics) == a
    # Deterministic: the members' order in the mapping does not matter.
    shuffled = list(members.items())
    rng.shuffle(shuffled)
    assert UNIFORM.assign(dict(shuffled), topics) == a


def without_double_claims(members) -> dict[str, MemberSubscriptionSpec]:
    """The members, a partition claimed by two of them owned by the first only."""
    claimed: set[tuple[uuid.UUID, int]] = set()
    out = {}
    for m in sorted(members):
        s = members[m]
        owned = {}
        for t, ps in s.owned.items():
            owned[t] = frozenset(p for p in ps if (t, p) not in claimed)
            claimed |= {(t, p) for p in ps}
        out[m] = MemberSubscriptionSpec(m, s.rack, s.subscribed_topic_ids, owned, s.instance_id)
    return out


def retained_bound(members, topics) -> int:
    """How many owned partitions a balanced homogeneous assignment can keep at most: each member keeps up to its
    quota, the members owning most getting the extra partitions."""
    valid = [
        sum(
            len({p for p in ps if p < topics[t].partitions}) for t, ps in s.owned.items() if t in s.subscribed_topic_ids
        )
        for s in members.values()
    ]
    total = sum(topics[t].partitions for t in next(iter(members.values())).subscribed_topic_ids)
    base, extra = divmod(total, len(members))
    quotas = [base + 1] * extra + [base] * (len(members) - extra)
    return sum(min(v, q) for v, q in zip(sorted(valid, reverse=True), quotas, strict=True))


def kept(members, a: Assignment) -> int:
    return sum(len(ps & members[m].owned.get(t, frozenset())) for m, tps in a.items() for t, ps in tps.items())


@pytest.mark.parametrize("seed", range(40))
def test_uniform_homogeneous_moves_only_the_minimum(seed):
    rng = random.Random(1000 + seed)
    members, topics = random_group(rng, homogeneous=True)
    members = without_double_claims(random_owned(rng, members, topics))
    a = UNIFORM.assign(members, topics)
    assert kept(members, a) == retained_bound(members, topics)


def test_seventh_member_takes_one_partition_from_six():
    topics = {tid(0): topic(0, 42)}
    six = {f"m{i}": member(f"m{i}", {tid(0)}) for i in range(6)}
    before = UNIFORM.assign(six, topics)
    assert sorted(loads(before).values()) == [7] * 6
    seven = with_owned(six, before) | {"m6": member("m6", {tid(0)})}
    after = UNIFORM.assign(seven, topics)
    assert sorted(loads(after).values()) == [6] * 7
    for m in six:  # each old member lost exactly one partition and gained none
        assert after[m][tid(0)] < before[m][tid(0)]
        assert len(before[m][tid(0)] - after[m][tid(0)]) == 1


def test_seventh_member_uneven_counts_moves_minimum():
    """12 partitions over 6 (2 each) then 7 members: five keep 2, one keeps 1, the newcomer gets 1: one move."""
    topics = {tid(0): topic(0, 12)}
    six = {f"m{i}": member(f"m{i}", {tid(0)}) for i in range(6)}
    before = UNIFORM.assign(six, topics)
    after = UNIFORM.assign(with_owned(six, before) | {"new": member("new", {tid(0)})}, topics)
    moved = sum(len(before[m][tid(0)] - after[m].get(tid(0), frozenset())) for m in six)
    assert moved == 1
    assert loads(after)["new"] == 1


def test_member_leaving_only_its_partitions_move():
    topics = {tid(0): topic(0, 10), tid(1): topic(1, 7)}
    members = {f"m{i}": member(f"m{i}", {tid(0), tid(1)}) for i in range(4)}
    before = UNIFORM.assign(members, topics)
    rest = with_owned({m: s for m, s in members.items() if m != "m2"}, before)
    after = UNIFORM.assign(rest, topics)
    for m in rest:
        for t, ps in before[m].items():
            assert ps <= after[m].get(t, frozenset())  # survivors keep everything they had


def test_heterogeneous_subscriptions_balance_per_topic():
    """A subscribes to T0 and T1, B and C only to T1: T0's 6 partitions can go only to A, so A takes fewer of T1."""
    topics = {tid(0): topic(0, 6), tid(1): topic(1, 12)}
    members = {
        "A": member("A", {tid(0), tid(1)}),
        "B": member("B", {tid(1)}),
        "C": member("C", {tid(1)}),
    }
    a = UNIFORM.assign(members, topics)
    check_exactly_once(members, topics, a)
    assert a["A"][tid(0)] == frozenset(range(6))
    assert loads(a) == {"A": 6, "B": 6, "C": 6}


def test_uniform_rack_aware_when_balance_allows():
    """Each partition has its replica in one rack; two members per rack: everyone reads in its own rack."""
    racks = {p: frozenset({"abc"[p % 3]}) for p in range(12)}
    topics = {tid(0): topic(0, 12, racks)}
    members = {f"m{r}{i}": member(f"m{r}{i}", {tid(0)}, rack=r) for r in "abc" for i in range(2)}
    a = UNIFORM.assign(members, topics)
    check_exactly_once(members, topics, a)
    assert sorted(loads(a).values()) == [2] * 6
    for m, tps in a.items():
        assert all(racks[p] == {members[m].rack} for p in tps[tid(0)]), (m, tps)


def test_uniform_rack_steers_what_moves():
    """Racks a, b hold the replicas of even and odd partitions. A member of rack a owns all 12 when a member of rack b
    joins: it gives up the partitions of rack b (not the first six) and the newcomer takes them: both read locally."""
    racks = {p: frozenset({"ab"[p % 2]}) for p in range(12)}
    topics = {tid(0): topic(0, 12, racks)}
    members = {
        "ma": member("ma", {tid(0)}, {tid(0): frozenset(range(12))}, rack="a"),
        "mb": member("mb", {tid(0)}, rack="b"),
    }
    a = UNIFORM.assign(members, topics)
    assert a == {"ma": {tid(0): frozenset(range(0, 12, 2))}, "mb": {tid(0): frozenset(range(1, 12, 2))}}
    # a group formed at once reads locally too, with members of three racks and a neutral member
    racks3 = {p: frozenset({"abc"[p % 3]}) for p in range(12)}
    topics3 = {tid(0): topic(0, 12, racks3)}
    members3 = {f"m{r}": member(f"m{r}", {tid(0)}, rack=r) for r in "abc"} | {"none": member("none", {tid(0)})}
    a3 = UNIFORM.assign(members3, topics3)
    assert sorted(loads(a3).values()) == [3] * 4
    for m in ("ma", "mb", "mc"):
        assert {racks3[p] for p in a3[m][tid(0)]} == {frozenset({members3[m].rack})}


def test_uniform_stickiness_beats_racks():
    """Partitions owned across racks stay while balance holds: a partition never moves for its rack alone."""
    racks = {p: frozenset({"ab"[p % 2]}) for p in range(4)}
    topics = {tid(0): topic(0, 4, racks)}
    crossed = {
        "ma": member("ma", {tid(0)}, {tid(0): frozenset({1, 3})}, rack="a"),
        "mb": member("mb", {tid(0)}, {tid(0): frozenset({0, 2})}, rack="b"),
    }
    assert UNIFORM.assign(crossed, topics) == {"ma": {tid(0): frozenset({1, 3})}, "mb": {tid(0): frozenset({0, 2})}}


def test_uniform_rack_never_breaks_balance():
    """All replicas in rack a, one member in a: it still gets only its share."""
    topics = {tid(0): topic(0, 9, {p: frozenset({"a"}) for p in range(9)})}
    members = {"x": member("x", {tid(0)}, rack="a"), "y": member("y", {tid(0)}, rack="b"), "z": member("z", {tid(0)})}
    a = UNIFORM.assign(members, topics)
    assert loads(a) == {"x": 3, "y": 3, "z": 3}


def test_uniform_empty_and_unknown_topics():
    assert UNIFORM.assign({}, {}) == {}
    members = {"m": member("m", {tid(5)})}  # a topic the coordinator did not describe
    assert UNIFORM.assign(members, {}) == {"m": {}}
    topics = {tid(0): topic(0, 0)}
    assert UNIFORM.assign({"m": member("m", {tid(0)})}, topics) == {"m": {}}


# -- range ---------------------------------------------------------------------------------------------------------
def test_range_co_partitions_topics():
    topics = {tid(0): topic(0, 7), tid(1): topic(1, 7)}
    members = {m: member(m, {tid(0), tid(1)}) for m in ("c", "a", "b")}
    a = RANGE.assign(members, topics)
    check_exactly_once(members, topics, a)
    assert a["a"] == {tid(0): frozenset({0, 1, 2}), tid(1): frozenset({0, 1, 2})}
    assert a["b"] == {tid(0): frozenset({3, 4}), tid(1): frozenset({3, 4})}
    assert a["c"] == {tid(0): frozenset({5, 6}), tid(1): frozenset({5, 6})}


def test_range_static_members_first_and_stable():
    topics = {tid(0): topic(0, 4)}
    members = {
        "zzz": member("zzz", {tid(0)}, inst="i-1"),
        "aaa": member("aaa", {tid(0)}),
        "yyy": member("yyy", {tid(0)}, inst="i-0"),
    }
    a = RANGE.assign(members, topics)
    assert a["yyy"] == {tid(0): frozenset({0, 1})}
    assert a["zzz"] == {tid(0): frozenset({2})}
    assert a["aaa"] == {tid(0): frozenset({3})}
    # a static member rejoining with a new member id keeps its range
    members["new-id"] = member("new-id", {tid(0)}, inst="i-0")
    del members["yyy"]
    assert RANGE.assign(members, topics)["new-id"] == a["yyy"]


@pytest.mark.parametrize("seed", range(30))
def test_range_random_groups(seed):
    rng = random.Random(2000 + seed)
    members, topics = random_group(rng, homogeneous=seed % 2 == 0, racks=seed % 3 == 0)
    a = RANGE.assign(members, topics)
    check_exactly_once(members, topics, a)
    # per topic, the counts of its subscribers differ by at most one
    for t in topics:
        counts = [len(a[m].get(t, ())) for m, s in members.items() if t in s.subscribed_topic_ids]
        if counts:
            assert max(counts) - min(counts) <= 1
    assert RANGE.assign(dict(reversed(list(members.items()))), topics) == a
    # co-partitioned topics give each member the same partition numbers
    for t1 in topics:
        for t2 in topics:
            subs1 = {m for m, s in members.items() if t1 in s.subscribed_topic_ids}
            subs2 = {m for m, s in members.items() if t2 in s.subscribed_topic_ids}
            if subs1 == subs2 and topics[t1].partitions == topics[t2].partitions:
                for m in subs1:
                    assert a[m].get(t1) == a[m].get(t2)


def test_range_rack_aware():
    """Partition p has its replica in rack 'ab'[p % 2]: each member takes its rack's partitions."""
    racks = {p: frozenset({"ab"[p % 2]}) for p in range(4)}
    topics = {tid(0): topic(0, 4, racks), tid(1): topic(1, 4, racks)}
    members = {"m1": member("m1", {tid(0), tid(1)}, rack="b"), "m2": member("m2", {tid(0), tid(1)}, rack="a")}
    a = RANGE.assign(members, topics)
    assert a["m1"] == {tid(0): frozenset({1, 3}), tid(1): frozenset({1, 3})}
    assert a["m2"] == {tid(0): frozenset({0, 2}), tid(1): frozenset({0, 2})}


def test_assignor_names():
    assert ASSIGNOR_NAMES == ("uniform", "range")
    assert assignor_by_name("sticky") is None
    for name in ASSIGNOR_NAMES:
        found = assignor_by_name(name)
        assert found is not None and found.name == name
