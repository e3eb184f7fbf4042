"""GroupCoordinator state machine and persistence, in-process over a real ReplicaManager/UnifiedLog stack.

Timeouts are short (group.min.session.timeout.ms=10) so expiry paths run in milliseconds; tests wait on
conditions (bounded), never on fixed sleeps.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from strata.broker.group.coordinator import JoinParams
from strata.broker.group.group import GroupState
from strata.broker.group.records import (
    OFFSETS_TOPIC,
    GroupMetadataKey,
    OffsetAndMetadata,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from strata.broker.server import KafkaServer
from strata.config import BrokerConfig
from strata.protocol import consumer_protocol as cp
from strata.protocol.errors import ErrorCode as E
from strata.protocol.records import iter_batches, iter_records

SUB_T = cp.encode_subscription(["t"])
SUB_TU = cp.encode_subscription(["t", "u"])


def make_server(tmp_path, **overrides) -> KafkaServer:
    props = {
        "log.dirs": str(tmp_path / "data"),
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "metrics.listener": "",
        "group.initial.rebalance.delay.ms": 0,
        "group.min.session.timeout.ms": 10,
        "offsets.topic.num.partitions": 3,
    }
    props.update(overrides)
    server = KafkaServer(BrokerConfig.from_dict(props))
    server.log_manager.startup()
    server.replica_manager.load_partitions()
    return server


class H:
    """One coordinator on one server; `reopen()` simulates a broker restart on the same log dirs."""

    def __init__(self, tmp_path, **overrides):
        self.tmp_path = tmp_path
        self.overrides = overrides
        self.server = make_server(tmp_path, **overrides)
        self.coord = self.server.group_coordinator

    async def start(self) -> H:
        await self.coord.startup()
        await asyncio.wait_for(self.coord.loaded.wait(), 10)
        # In a broker the first FindCoordinator creates the offsets topic; these tests call the coordinator directly.
        assert await self.coord.ensure_offsets_topic()
        return self

    async def close(self) -> None:
        await self.coord.shutdown()
        self.server.log_manager.shutdown()

    async def reopen(self) -> H:
        await self.close()
        self.server = make_server(self.tmp_path, **self.overrides)
        self.coord = self.server.group_coordinator
        return await self.start()

    def params(
        self,
        group="g",
        member_id="",
        *,
        protocols=(("range", SUB_T),),
        version=5,
        instance=None,
        session=300,
        rebalance=2000,
        client="c",
        ptype="consumer",
    ) -> JoinParams:
        return JoinParams(
            group,
            member_id,
            instance,
            client,
            "/127.0.0.1",
            session,
            rebalance,
            ptype,
            [(n, m) for n, m in protocols],
            version,
        )

    async def join(self, group="g", member_id="", **kw):
        return await asyncio.wait_for(self.coord.join_group(self.params(group, member_id, **kw)), 10)

    def join_task(self, group="g", member_id="", **kw) -> asyncio.Task:
        return asyncio.create_task(self.coord.join_group(self.params(group, member_id, **kw)))

    async def join_new(self, group="g", **kw):
        """Two-step join of a new dynamic member (v4+)."""
        r = await self.join(group, **kw)
        assert r.error == E.MEMBER_ID_REQUIRED and r.member_id
        return await self.join(group, r.member_id, **kw)

    async def sync(self, group, generation, member_id, assignments=(), instance=None):
        return await asyncio.wait_for(
            self.coord.sync_group(group, generation, member_id, instance, None, None, list(assignments)), 10
        )

    def group(self, gid="g"):
        return self.coord.groups.get(gid)

    def records(self, partition: int) -> list[tuple[object, bytes | None]]:
        """Decoded (key, value bytes) of one __consumer_offsets partition, in log order."""
        log = self.server.replica_manager.get_partition(OFFSETS_TOPIC, partition).log
        data = log.read(log.log_start_offset, 1 << 24, None, True).records
        out: list[tuple[object, bytes | None]] = []
        for pos, _ in iter_batches(data):
            for r in iter_records(data, pos):
                assert r.key is not None  # every __consumer_offsets record has a key
                out.append((decode_key(r.key), r.value))
        return out


async def until(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def tps(assignment: bytes) -> list[tuple[str, list[int]]]:
    return cp.assigned_partitions(assignment)


# -- join / sync ----------------------------------------------------------------------------------------------------
def test_two_step_join_generation_one_and_sync(tmp_path):
    async def main():
        h = await H(tmp_path).start()
        r = await h.join(version=4, client="cli")
        assert r.error == E.MEMBER_ID_REQUIRED and r.member_id.startswith("cli-") and r.generation_id == -1
        assert h.group().is_pending(r.member_id)
        j = await h.join(member_id=r.member_id, version=4)
        assert (j.error, j.generation_id, j.leader, j.member_id, j.protocol_name) == (
            E.NONE,
            1,
            r.member_id,
            r.member_id,
            "range",
        )
        assert j.members == [(r.member_id, None, SUB_T)]  # the leader gets every member's metadata
        assert h.group().state == GroupState.COMPLETING_REBALANCE
        asg = cp.encode_assignment([("t", [0, 1])])
        s = await h.sync("g", 1, j.member_id, [(j.member_id, asg)])
        assert (s.error, s.assignment, s.protocol_type, s.protocol_name) == (E.NONE, asg, "consumer", "range")
        assert h.group().state == GroupState.STABLE
        assert h.coord.heartbeat("g", j.member_id, None, 1) == E.NONE
        assert h.coord.heartbeat("g", j.member_id, None, 2) == E.ILLEGAL_GENERATION
        assert h.coord.heartbeat("g", "nobody", None, 1) == E.UNKNOWN_MEMBER_ID
        assert h.coord.heartbeat("other", "nobody", None, 1) == E.UNKNOWN_MEMBER_ID
        await h.close()

    run(main())


def test_join_v3_needs_no_member_id_and_validation_errors(tmp_path):
    async def main():
        h = await H(tmp_path).start()
        j = await h.join(version=3)
        assert j.error == E.NONE and j.generation_id == 1 and j.member_id
        assert (await h.join("", version=3)).error == E.INVALID_GROUP_ID
        assert (await h.join("g2", session=5)).error == E.INVALID_SESSION_TIMEOUT
        assert (await h.join("g2", member_id="ghost")).error == E.UNKNOWN_MEMBER_ID
        # a non-empty group only admits members speaking its protocol type and one of its protocols
        assert (await h.join(ptype="connect", version=3)).error == E.INCONSISTENT_GROUP_PROTOCOL
        assert (await h.join(protocols=(("sticky", SUB_T),), version=3)).error == E.INCONSISTENT_GROUP_PROTOCOL
        await h.close()

    run(main())


def test_rebalance_on_new_member_and_protocol_vote(tmp_path):
    async def main():
        h = await H(tmp_path).start()
        a = await h.join_new(protocols=(("range", SUB_T), ("roundrobin", SUB_T)))
        await h.sync("g", 1, a.member_id, [(a.member_id, b"")])
        # b joins: the group prepares a rebalance; a learns it from its heartbeat and rejoins
        r = await h.join(protocols=(("roundrobin", SUB_T), ("range", SUB_T)))
        tb = h.join_task(member_id=r.member_id, protocols=(("roundrobin", SUB_T), ("range", SUB_T)))
        await until(lambda: h.group().state == GroupState.PREPARING_REBALANCE)
        assert h.coord.heartbeat("g", a.member_id, None, 1) == E.REBALANCE_IN_PROGRESS
        assert not tb.done()
        # c prefers roundrobin too: 2 votes against 1
        rc = await h.join(protocols=(("roundrobin", SUB_T), ("range", SUB_T)))
        tc = h.join_task(member_id=rc.member_id, protocols=(("roundrobin", SUB_T), ("range", SUB_T)))
        ja = await h.join(member_id=a.member_id, protocols=(("range", SUB_T), ("roundrobin", SUB_T)))
        jb, jc = await asyncio.wait_for(asyncio.gather(tb, tc), 5)
        assert {x.generation_id for x in (ja, jb, jc)} == {2}
        assert {x.protocol_name for x in (ja, jb, jc)} == {"roundrobin"}
        assert ja.leader == a.member_id and len(ja.members) == 3 and jb.members == [] and jc.members == []
        # followers park in SyncGroup until the leader's assignment is stored
        sb = asyncio.create_task(h.sync("g", 2, jb.member_id))
        await asyncio.sleep(0)
        assert not sb.done()
        asg = {m: cp.encode_assignment([("t", [i])]) for i, m in enumerate((ja.member_id, jb.member_id))}
        sa = await h.sync("g", 2, ja.member_id, asg.items())
        assert sa.assignment == asg[ja.member_id]
        assert (await sb).assignment == asg[jb.member_id]
        assert (await h.sync("g", 2, jc.member_id)).assignment == b""  # left out by the leader: empty
        assert h.group().state == GroupState.STABLE
        await h.close()

    run(main())


def test_initial_rebalance_delay_collects_members_into_generation_one(tmp_path):
    async def main():
        h = await H(tmp_path, **{"group.initial.rebalance.delay.ms": 150}).start()
        t1 = h.join_task(version=3)
        t2 = h.join_task(version=3)
        j1, j2 = await asyncio.wait_for(asyncio.gather(t1, t2), 5)
        assert j1.generation_id == j2.generation_id == 1
        assert h.group().num_members == 2
        await h.close()

    run(main())


def test_session_expiry_evicts_and_rebalances(tmp_path):
    async def main():
        h = await H(tmp_path).start()
        a = await h.join_new(session=2000)
        await h.sync("g", 1, a.member_id, [(a.member_id, b"")])
        rb = await h.join(session=60)
        tb = h.join_task(member_id=rb.member_id, session=60)
        await until(lambda: h.group().state == GroupState.PREPARING_REBALANCE)
        ja = await h.join(member_id=a.member_id, session=2000)
        jb = await tb
        assert ja.generation_id == jb.generation_id == 2
        await h.sync("g", 2, ja.member_id, [(ja.member_id, b""), (jb.member_id, b"")])
        await h.sync("g", 2, jb.member_id)
        # b never heartbeats: after its 60 ms session it is removed and the group rebalances
        await until(lambda: not h.group().has_member(jb.member_id))
        assert h.coord.heartbeat("g", ja.member_id, None, 2) == E.REBALANCE_IN_PROGRESS
        j = await h.join(member_id=ja.member_id, session=2000)
        assert j.generation_id == 3 and [m for m, _, _ in j.members] == [ja.member_id]
        await h.close()

    run(main())


def test_pending_member_that_never_returns_expires(tmp_path):
    async def main():
        h = await H(tmp_path).start()
        r = await h.join(session=30)
        assert r.error == E.MEMBER_ID_REQUIRED
        await until(lambda: not h.group().is_pending(r.member_id))
        assert (await h.join(member_id=r.member_id)).error == E.UNKNOWN_MEMBER_ID
        await h.close()

    run(main())


def test_leave_group(tmp_path):
    async def main():
        h = await H(tmp_path).start()
        a = await h.join_new()
        await h.sync("g", 1, a.member_id, [(a.member_id, b"")])
        top, res = h.coord.leave_group("g", [("ghost", None), (a.member_id, None)])
        assert top == E.NONE and res == [("ghost", None, E.UNKNOWN_MEMBER_ID), (a.member_id, None, E.NONE)]
        g = h.group()
        assert g.state == GroupState.EMPTY and g.generation_id == 2 and g.num_members == 0
        assert h.coord.leave_group("nope", [("x", None)])[0] == E.UNKNOWN_MEMBER_ID
        # the empty group's metadata (generation 2, no members) is persisted
        p = h.coord.partition_for("g")
        await until(
            lambda: any(
                isinstance(k, GroupMetadataKey) and v and decode_group_metadata_value(v).generation == 2
                for k, v in h.records(p)
            )
        )
        await h.close()

    run(main())


def test_static_membership_replaces_member_without_rebalance_and_fences_old_id(tmp_path):
    async def main():
        h = await H(tmp_path).start()
        j = await h.join(instance="i1", version=5)  # static members skip MEMBER_ID_REQUIRED
        assert j.error == E.NONE and j.member_id.startswith("i1-")
        asg = cp.encode_assignment([("t", [0, 1, 2])])
        await h.sync("g", 1, j.member_id, [(j.member_id, asg)], instance="i1")
        # the same instance restarts (unknown member id): new id, same generation, its old assignment
        j2 = await h.join(instance="i1", version=5)
        assert j2.error == E.NONE and j2.member_id != j.member_id and j2.generation_id == 1
        assert j2.leader == j.member_id  # < v9: the old leader id, so the client does not re-assign
        s = await h.sync("g", 1, j2.member_id, instance="i1")
        assert s.error == E.NONE and s.assignment == asg
        assert h.coord.heartbeat("g", j.member_id, "i1", 1) == E.FENCED_INSTANCE_ID
        assert h.coord.heartbeat("g", j2.member_id, "i1", 1) == E.NONE
        assert (await h.join(member_id=j.member_id, instance="i1")).error == E.FENCED_INSTANCE_ID
        assert h.group().generation_id == 1 and h.group().state == GroupState.STABLE
        # v9: the static leader rejoining is told to skip the assignment
        j3 = await h.join(instance="i1", version=9)
        assert j3.skip_assignment and j3.leader == j3.member_id and len(j3.members) == 1
        # leave by instance id (administrative removal)
        assert h.coord.leave_group("g", [("", "i1")]) == (E.NONE, [("", "i1", E.NONE)])
        assert h.group().state == GroupState.EMPTY
        await h.close()

    run(main())


def test_sync_errors(tmp_path):
    async def main():
        h = await H(tmp_path).start()
        assert (await h.sync("g", 1, "m")).error == E.UNKNOWN_MEMBER_ID
        a = await h.join_new()
        assert (await h.sync("g", 7, a.member_id)).error == E.ILLEGAL_GENERATION
        bad = await asyncio.wait_for(h.coord.sync_group("g", 1, a.member_id, None, "connect", None, []), 5)
        assert bad.error == E.INCONSISTENT_GROUP_PROTOCOL
        await h.close()

    run(main())


def test_rebalance_timeout_removes_members_that_do_not_rejoin(tmp_path):
    async def main():
        h = await H(tmp_path).start()
        a = await h.join_new(session=5000, rebalance=100)
        await h.sync("g", 1, a.member_id, [(a.member_id, b"")])
        b = await h.join_new(session=5000, rebalance=100)  # a never rejoins: dropped after 100 ms
        assert b.generation_id == 2 and [m for m, _, _ in b.members] == [b.member_id]
        assert not h.group().has_member(a.member_id)
        await h.close()

    run(main())


def test_group_max_size(tmp_path):
    async def main():
        h = await H(tmp_path, **{"group.max.size": 1}).start()
        a = await h.join_new()
        await h.sync("g", 1, a.member_id, [(a.member_id, b"")])
        assert (await h.join()).error == E.GROUP_MAX_SIZE_REACHED  # full: refused before any member id
        assert h.group().num_members == 1 and not h.group().pending_members
        await h.close()

    run(main())


# -- offsets ----------------------------------------------------------------------------------------------------------
def om(offset, metadata="", epoch=-1):
    return OffsetAndMetadata(offset, epoch, metadata, int(time.time() * 1000))


def test_offset_commit_validation_and_fetch(tmp_path):
    async def main():
        h = await H(tmp_path).start()
        c = h.coord
        # simple (admin) commit to an unknown group creates it; with a generation it is refused
        assert await c.commit_offsets("s", -1, "", None, {("t", 0): om(5, "meta", 2)}, 8) == (
            E.NONE,
            {("t", 0): E.NONE},
        )
        assert (await c.commit_offsets("x", 3, "m", None, {("t", 0): om(1)}, 8))[0] == E.ILLEGAL_GENERATION
        assert (await c.commit_offsets("x", 3, "m", None, {("t", 0): om(1)}, 9))[0] == E.GROUP_ID_NOT_FOUND
        err, data = c.fetch_offsets("s", [("t", [0, 1])])
        assert err == E.NONE and data[0][0] == "t"
        (p0, o0), (p1, o1) = data[0][1]
        assert (p0, o0.offset, o0.metadata, o0.leader_epoch, p1, o1) == (0, 5, "meta", 2, 1, None)
        assert c.fetch_offsets("s", None) == (E.NONE, [("t", [(0, c.groups["s"].offsets[("t", 0)])])])
        assert c.fetch_offsets("unknown", None) == (E.NONE, [])
        big = om(1, "x" * 5000)
        assert (await c.commit_offsets("s", -1, "", None, {("t", 1): big}, 8))[1] == {
            ("t", 1): E.OFFSET_METADATA_TOO_LARGE
        }
        # members commit with their generation; CompletingRebalance refuses; admin commits refused when not empty
        a = await h.join_new()
        assert (await c.commit_offsets("g", 1, a.member_id, None, {("t", 0): om(1)}, 8))[0] == E.REBALANCE_IN_PROGRESS
        await h.sync("g", 1, a.member_id, [(a.member_id, b"")])
        assert (await c.commit_offsets("g", 1, a.member_id, None, {("t", 0): om(1)}, 8))[0] == E.NONE
        assert (await c.commit_offsets("g", 0, a.member_id, None, {("t", 0): om(1)}, 8))[0] == E.ILLEGAL_GENERATION
        assert (await c.commit_offsets("g", 1, "who", None, {("t", 0): om(1)}, 8))[0] == E.UNKNOWN_MEMBER_ID
        assert (await c.commit_offsets("g", -1, "", None, {("t", 0): om(1)}, 8))[0] == E.UNKNOWN_MEMBER_ID
        await h.close()

    run(main())


def test_records_are_kafka_formatted_and_survive_restart(tmp_path):
    async def main():
        h = await H(tmp_path).start()
        a = await h.join_new(protocols=(("range", SUB_TU),), client="cli")
        asg = cp.encode_assignment([("t", [0]), ("u", [0])])
        await h.sync("g", 1, a.member_id, [(a.member_id, asg)])
        assert (
            await h.coord.commit_offsets("g", 1, a.member_id, None, {("t", 0): om(10, "x", 4), ("u", 0): om(3)}, 8)
        )[0] == E.NONE
        p = h.coord.partition_for("g")
        recs = h.records(p)
        keys = [k for k, _ in recs]
        assert OffsetCommitKey("g", "t", 0) in keys and GroupMetadataKey("g") in keys
        v = decode_offset_commit_value(dict(recs)[OffsetCommitKey("g", "t", 0)])
        assert (v.offset, v.metadata, v.leader_epoch) == (10, "x", 4)
        gm = decode_group_metadata_value([val for k, val in recs if k == GroupMetadataKey("g")][-1])
        assert (gm.generation, gm.protocol, gm.leader, gm.protocol_type) == (1, "range", a.member_id, "consumer")
        assert [(m.member_id, m.client_id, m.subscription, m.assignment) for m in gm.members] == [
            (a.member_id, "cli", SUB_TU, asg)
        ]
        # restart: the group comes back Stable with its member, generation, assignment and offsets
        h = await h.reopen()
        g = h.group()
        assert g.state == GroupState.STABLE and g.generation_id == 1 and g.leader_id == a.member_id
        assert g.members[a.member_id].assignment == asg and g.subscribed_topics == {"t", "u"}
        assert g.offsets[("t", 0)].offset == 10 and g.offsets[("u", 0)].offset == 3
        assert h.coord.heartbeat("g", a.member_id, None, 1) == E.NONE
        # the member is gone for good: its session expires, the group empties at generation 2
        g.members[a.member_id].session_timeout_ms = 20
        h.coord._schedule_heartbeat(g, g.members[a.member_id])
        await until(lambda: h.group().state == GroupState.EMPTY)
        assert h.group().generation_id == 2
        await h.close()

    run(main())


def test_delete_groups_and_offsets(tmp_path):
    async def main():
        h = await H(tmp_path).start()
        c = h.coord
        await c.commit_offsets("s", -1, "", None, {("t", 0): om(1), ("t", 1): om(2), ("u", 0): om(3)}, 8)
        a = await h.join_new(protocols=(("range", SUB_T),))
        await h.sync("g", 1, a.member_id, [(a.member_id, b"")])
        await c.commit_offsets("g", 1, a.member_id, None, {("t", 0): om(1), ("v", 0): om(1)}, 8)
        # OffsetDelete: the subscribed topic is protected while the group has members
        assert await c.delete_offsets("g", [("t", 0), ("v", 0)]) == (
            E.NONE,
            {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("v", 0): E.NONE},
        )
        assert ("v", 0) not in h.group("g").offsets and ("t", 0) in h.group("g").offsets
        assert (await c.delete_offsets("nope", [("t", 0)]))[0] == E.GROUP_ID_NOT_FOUND
        assert await c.delete_offsets("s", [("t", 1)]) == (E.NONE, {("t", 1): E.NONE})
        res = await c.delete_groups(["g", "s", "nope", ""])
        assert res == {"g": E.NON_EMPTY_GROUP, "s": E.NONE, "nope": E.GROUP_ID_NOT_FOUND, "": E.INVALID_GROUP_ID}
        assert "s" not in c.groups and c.fetch_offsets("s", [("t", [0])])[1][0][1][0][1] is None
        # tombstones are in the log: after a restart "s" stays deleted, "g" keeps its offsets
        p = c.partition_for("s")
        assert (GroupMetadataKey("s"), None) in h.records(p)
        h = await h.reopen()
        assert "s" not in h.coord.groups
        assert set(h.group("g").offsets) == {("t", 0)}
        await h.close()

    run(main())


def test_offset_retention(tmp_path):
    async def main():
        h = await H(tmp_path, **{"offsets.retention.minutes": 1}).start()
        c = h.coord
        now = int(time.time() * 1000)
        await c.commit_offsets("s", -1, "", None, {("t", 0): om(1)}, 8)
        a = await h.join_new(protocols=(("range", SUB_T),))
        await h.sync("g", 1, a.member_id, [(a.member_id, b"")])
        await c.commit_offsets("g", 1, a.member_id, None, {("t", 0): om(1), ("u", 0): om(1)}, 8)
        assert await c.expire_offsets(now + 30_000) == (0, 0)  # nothing is a minute old yet
        # a minute later: the simple group loses its offset and is deleted; the Stable group keeps the offset
        # of its subscribed topic t but loses u's
        assert await c.expire_offsets(now + 61_000) == (2, 1)
        assert "s" not in c.groups and set(h.group("g").offsets) == {("t", 0)}
        # once the group is empty, the retention clock starts when it became empty
        c.leave_group("g", [(a.member_id, None)])
        emptied = h.group("g").current_state_timestamp
        assert await c.expire_offsets(emptied + 59_000) == (0, 0)
        assert await c.expire_offsets(emptied + 60_000) == (1, 1)
        assert "g" not in c.groups
        h = await h.reopen()
        assert h.coord.groups == {}
        await h.close()

    run(main())


def test_load_in_progress_and_inactive(tmp_path):
    async def main():
        h = await H(tmp_path).start()
        await h.join_new()
        p = h.coord.partition_for("g")
        h.coord.loading.add(p)
        assert (await h.join()).error == E.COORDINATOR_LOAD_IN_PROGRESS
        assert h.coord.fetch_offsets("g", None)[0] == E.COORDINATOR_LOAD_IN_PROGRESS
        assert h.coord.list_groups()[0] == E.COORDINATOR_LOAD_IN_PROGRESS
        h.coord.loading.discard(p)
        await h.close()
        assert h.coord.heartbeat("g", "m", None, 1) == E.COORDINATOR_NOT_AVAILABLE

    run(main())


def test_list_and_describe(tmp_path):
    async def main():
        h = await H(tmp_path).start()
        c = h.coord
        a = await h.join_new()
        await h.sync("g", 1, a.member_id, [(a.member_id, b"x")])
        await c.commit_offsets("s", -1, "", None, {("t", 0): om(1)}, 8)
        err, groups = c.list_groups()
        assert err == E.NONE and [(g.group_id, g.state.value, g.protocol_type) for g in groups] == [
            ("g", "Stable", "consumer"),
            ("s", "Empty", None),
        ]
        assert [g.group_id for g in c.list_groups(["stable"])[1]] == ["g"]
        assert c.list_groups(None, ["consumer"])[1] == []
        assert [g.group_id for g in c.list_groups(None, ["Classic"])[1]] == ["g", "s"]
        assert c.describe_group("nope") == (E.GROUP_ID_NOT_FOUND, None)
        assert c.describe_group("g")[1].members[a.member_id].assignment == b"x"
        await h.close()

    run(main())


@pytest.mark.parametrize("parked", ["join", "sync"])
def test_shutdown_answers_parked_requests(tmp_path, parked):
    async def main():
        h = await H(tmp_path).start()
        a = await h.join_new(rebalance=60000)
        await h.sync("g", 1, a.member_id, [(a.member_id, b"")])
        r = await h.join(rebalance=60000)
        t = h.join_task(member_id=r.member_id, rebalance=60000)  # parked until a rejoins (60 s)
        if parked == "sync":
            await until(lambda: h.group().state == GroupState.PREPARING_REBALANCE)
            ja = await h.join(member_id=a.member_id, rebalance=60000)
            jb = await t
            assert ja.generation_id == jb.generation_id == 2
            t = asyncio.create_task(h.sync("g", 2, jb.member_id))  # parked until the leader syncs
        await asyncio.sleep(0.01)
        assert not t.done()
        await h.close()
        assert (await asyncio.wait_for(t, 5)).error == E.NOT_COORDINATOR

    run(main())


def test_commit_with_retention_time_writes_value_version_1_and_expires_on_its_own(tmp_path):
    async def main():
        h = await H(tmp_path).start()
        c = h.coord
        now = int(time.time() * 1000)
        o = OffsetAndMetadata(9, -1, "", now, now + 1000)  # OffsetCommit v2-4 with retention_time_ms=1000
        assert (await c.commit_offsets("r", -1, "", None, {("t", 0): o}, 2))[1] == {("t", 0): E.NONE}
        [(_, raw)] = [(k, v) for k, v in h.records(c.partition_for("r")) if isinstance(k, OffsetCommitKey)]
        assert raw[:2] == b"\x00\x01" and decode_offset_commit_value(raw).expire_timestamp == now + 1000
        assert await c.expire_offsets(now + 999) == (0, 0)
        assert await c.expire_offsets(now + 1000) == (1, 1)  # long before offsets.retention.minutes
        await h.close()

    run(main())
