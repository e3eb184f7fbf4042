"""The group coordinator follows the leadership of `__consumer_offsets` partitions: a resigned partition's groups are
unloaded (parked members answered NOT_COORDINATOR, requests NOT_COORDINATOR), a partition won again is reloaded from
its log (COORDINATOR_LOAD_IN_PROGRESS meanwhile). Driven through ReplicaManager.apply_partition_state, as a metadata
change would, on a single broker whose store is patched to say another broker leads."""

from __future__ import annotations

import asyncio

from strata.broker.cluster.model import PartitionState
from strata.broker.group.records import OFFSETS_TOPIC, OffsetAndMetadata
from strata.protocol.errors import ErrorCode as E
from tests.unit.test_group_coordinator import H, run, until


def test_coordinator_unloads_on_resign_and_reloads_on_election(tmp_path):
    async def main():
        h = await H(tmp_path).start()
        c, rm = h.coord, h.server.replica_manager
        gid = "g"
        p = c.partition_for(gid)
        j = await h.join_new(gid)
        assert (await h.sync(gid, 1, j.member_id, [(j.member_id, b"a")])).error == E.NONE
        err, _ = await c.commit_offsets(gid, 1, j.member_id, None, {("t", 0): OffsetAndMetadata(17)}, 8)
        assert err == E.NONE
        # another member waits in a rebalance when the partition moves away
        r = await h.join(gid)
        parked = h.join_task(gid, member_id=r.member_id)
        await until(lambda: h.group(gid).state.value == "PreparingRebalance")
        # the partition moves to broker 7 (epoch 1): this broker resigns
        store = h.server.store
        moved = PartitionState(7, 1, (7,), (0, 7), 1)
        real = store.partition_state
        store.partition_state = lambda t, i: moved if (t, i) == (OFFSETS_TOPIC, p) else real(t, i)
        rm.apply_partition_state(OFFSETS_TOPIC, p, moved)
        assert not rm.get_partition(OFFSETS_TOPIC, p).is_leader
        assert (await asyncio.wait_for(parked, 5)).error == E.NOT_COORDINATOR
        assert gid not in c.groups and p not in c.owned
        assert c.check_group(gid) == E.NOT_COORDINATOR
        assert c.fetch_offsets(gid, None)[0] == E.NOT_COORDINATOR
        other = next(g for g in (f"x{i}" for i in range(100)) if c.partition_for(g) != p)
        assert c.check_group(other) == E.NONE  # other partitions are unaffected
        # ... and back here (epoch 2): the groups are loaded again from the log
        back = PartitionState(0, 2, (0, 7), (0, 7), 2)
        store.partition_state = lambda t, i: back if (t, i) == (OFFSETS_TOPIC, p) else real(t, i)
        rm.apply_partition_state(OFFSETS_TOPIC, p, back)
        assert p in c.owned
        await until(lambda: c.check_group(gid) == E.NONE)
        err, topics = c.fetch_offsets(gid, [("t", [0])])
        assert err == E.NONE and topics[0][1][0][1].offset == 17
        assert h.group(gid).generation_id == 1
        # writes for a partition this broker does not lead are refused by the replica manager
        store.partition_state = lambda t, i: moved if (t, i) == (OFFSETS_TOPIC, p) else real(t, i)
        rm.apply_partition_state(OFFSETS_TOPIC, p, PartitionState(7, 3, (7,), (0, 7), 3))
        res = (await rm.append_records([(OFFSETS_TOPIC, p, b"")], internal=True))[0]
        assert res.error == E.NOT_LEADER_OR_FOLLOWER and res.current_leader == (7, 1)
        await h.close()

    run(main())


def test_a_load_finishing_after_a_resignation_installs_nothing(tmp_path):
    async def main():
        h = await H(tmp_path).start()
        c = h.coord
        gid = "g"
        p = c.partition_for(gid)
        err, _ = await c.commit_offsets(gid, -1, "", None, {("t", 0): OffsetAndMetadata(3)}, 8)
        assert err == E.NONE
        c.on_resign(p)
        c.on_become_leader(p)  # a load starts ...
        assert p in c.loading and c.check_group(gid) == E.COORDINATOR_LOAD_IN_PROGRESS
        c.on_resign(p)  # ... and the partition is lost before it ends
        await until(lambda: not c.runtime.background_tasks)  # the load ran to its end
        assert gid not in c.groups and p not in c.loading
        await h.close()

    run(main())
