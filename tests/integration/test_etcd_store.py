"""EtcdMetadataStore and the controller against a real etcd process (Debian's etcd-server), in one event loop:
several stores play several brokers. Crashes are simulated by dropping a store without revoking its lease.

Covers: cluster id creation/adoption, registration and lease expiry, re-registration after a lost lease, the
watch-driven image (and its full re-read after etcd restarts), compare-and-set conflicts, topic creation beyond
one transaction's op limit, controller election, failover and fencing, leader election on broker loss, controlled
shutdown, reassignment, preferred election, producer-id blocks, and ACLs written by any store.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from strata.broker.cluster.controller import (
    ELECTION_PREFERRED,
    ELECTION_UNCLEAN,
    Controller,
    alter_reassignment,
    elect_leaders,
    list_reassignments,
)
from strata.broker.cluster.etcd_store import EtcdMetadataStore, IneligibleReplicaError, parse_connect
from strata.broker.cluster.model import BrokerInfo, StaleStateError
from strata.config import BrokerConfig
from strata.protocol.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strata.protocol.errors import ErrorCode, KafkaApiError
from tests.support.etcd_proc import EtcdProcess, etcd_fixture

pytestmark = pytest.mark.integration
etcd = etcd_fixture  # a fresh etcd per test

SESSION_MS = 2000  # short for fast tests, long enough for keep-alives on a loaded machine


def run(coro, timeout: float = 90):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def until(pred, timeout: float = 10.0, what: str = "condition"):
    """Bounded wait on a condition over several stores' images."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        v = pred()
        if v:
            return v
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        await asyncio.sleep(0.02)


class Node:
    """One 'broker': a store (+ optionally its controller)."""

    def __init__(
        self,
        e: EtcdProcess,
        broker_id: int,
        rack: str | None = None,
        cluster_id: str | None = None,
        controller: bool = True,
        **cfg,
    ):
        self.store = EtcdMetadataStore(
            parse_connect(e.connect),
            broker_id=broker_id,
            cluster_id=cluster_id,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=300,
            request_timeout_s=3.0,
        )
        self.info = BrokerInfo(broker_id, {"PLAINTEXT": ("127.0.0.1", 9000 + broker_id)}, rack, uuid.uuid4().hex)
        self.config = BrokerConfig.from_dict({"broker.id": broker_id, **cfg})
        self.controller = Controller(self.store, self.config) if controller else None
        self.events: list[tuple[str, object]] = []
        self.store.add_listener(lambda k, key: self.events.append((k, key)))

    async def start(self) -> Node:
        await self.store.start()
        await self.store.register(self.info)
        if self.controller is not None:
            self.controller.start()
        return self

    async def crash(self) -> None:
        """Like kill -9: stop keep-alives and the controller without revoking the lease."""
        if self.controller is not None and self.controller._task is not None:
            self.controller._stopping = True
            self.controller._task.cancel()
            await asyncio.wait([self.controller._task], timeout=5)
        self.store.lease_id = 0  # close() must not revoke it
        await self.store.close()

    async def stop(self) -> None:
        if self.controller is not None:
            await self.controller.stop()
        await self.store.close()


async def cluster(e, n=3, racks=True, **cfg) -> list[Node]:
    nodes = [await Node(e, i, f"r{i}" if racks else None, **cfg).start() for i in range(1, n + 1)]
    await until(lambda: all(len(x.store.brokers()) == n for x in nodes), what="all brokers registered")
    await until(lambda: all(x.store.controller_id > 0 for x in nodes), what="a controller")
    return nodes


async def close_all(nodes):
    for x in nodes:
        try:
            await x.stop()
        except Exception:  # noqa: BLE001, S110 - teardown: stop the others whatever this one raised
            pass


def test_cluster_id_created_once_and_adopted(etcd):
    async def main():
        a = EtcdMetadataStore(parse_connect(etcd.connect), broker_id=1)
        b = EtcdMetadataStore(parse_connect(etcd.connect), broker_id=2)
        await a.start()
        await b.start()
        assert len(a.cluster_id) == 22 and b.cluster_id == a.cluster_id
        c = EtcdMetadataStore(parse_connect(etcd.connect), broker_id=3, cluster_id="otherClusterIdAAAAAAAA")
        await c.start()
        assert c.cluster_id == "otherClusterIdAAAAAAAA"  # a configured id keeps its own key space
        await c.create_topic("only-in-c", 1, {}, replication_factor=1, assignments=[[3]])
        assert await until(lambda: "only-in-c" in c.topics())
        assert "only-in-c" not in a.topics()
        d = EtcdMetadataStore(parse_connect(etcd.connect), broker_id=4)
        await d.start()
        assert d.cluster_id == a.cluster_id  # the default pointer did not move
        for s in (a, b, c, d):
            await s.close()

    run(main())


def test_registration_lease_expiry_and_reregistration(etcd):
    async def main():
        n1 = await Node(etcd, 1, controller=False).start()
        n2 = await Node(etcd, 2, controller=False).start()
        await until(lambda: set(n2.store.brokers()) == {1, 2}, what="both registered")
        assert n2.store.brokers()[1].endpoints == {"PLAINTEXT": ("127.0.0.1", 9001)}
        # Lost lease (revoked behind the broker's back): the broker registers again on a new lease.
        old_lease = n1.store.lease_id
        await n2.store.client.revoke_lease(old_lease)
        await until(lambda: n1.store.registrations >= 2 and n1.store.lease_id != old_lease, what="re-registered")
        await until(lambda: 1 in n2.store.brokers(), what="n2 sees n1 again")
        # Crash: no keep-alives, the lease expires after the session timeout and the key goes.
        n2.events.clear()
        await n1.crash()
        await until(lambda: 1 not in n2.store.brokers(), timeout=SESSION_MS / 1000 + 5, what="n1 expired")
        assert ("broker", 1) in n2.events
        # Clean stop revokes at once.
        n3 = await Node(etcd, 3, controller=False).start()
        await until(lambda: 3 in n2.store.brokers())
        await n3.stop()
        await until(lambda: 3 not in n2.store.brokers(), timeout=2, what="n3 deregistered by revoke")
        await n2.stop()

    run(main())


def test_isr_changes_asked_together_are_written_in_few_transactions(etcd):
    """Leaders change many ISRs at once (AlterPartitionManager's batching): 150 changes take two transactions, and
    one stale change among them fails alone."""

    async def main():
        a = await Node(etcd, 1, controller=False).start()
        b = await Node(etcd, 2, controller=False).start()
        await until(lambda: len(a.store.brokers()) == 2)
        await a.store.create_topic("batch", 150, {}, replication_factor=2, assignments=[[1, 2]] * 150)
        states = [a.store.partition_state("batch", i) for i in range(150)]
        stale = states[7].with_changes(isr=(1,)).with_changes(isr=(1,))  # partition epoch + 2: not a successor
        before = a.store.alter_batcher.transactions
        results = await asyncio.gather(
            *(
                a.store.alter_partition("batch", i, stale if i == 7 else s.with_changes(isr=(1,)))
                for i, s in enumerate(states)
            ),
            return_exceptions=True,
        )
        assert isinstance(results[7], StaleStateError)
        assert all(r.isr == (1,) for i, r in enumerate(results) if i != 7), results
        assert a.store.alter_batcher.transactions - before == 2
        await until(lambda: all(b.store.partition_state("batch", i).isr == (1,) for i in range(150) if i != 7))
        assert b.store.partition_state("batch", 7).isr == (1, 2)
        await a.stop()
        await b.stop()

    run(main())


def test_a_broker_whose_event_loop_is_held_keeps_its_registration(etcd):
    """Keep-alives go from their own thread (lease_keeper.py): a loop held longer than the session (a burst of
    thousands of partitions, say) does not get a live broker deregistered."""

    async def main():
        n1 = await Node(etcd, 1, controller=False).start()
        n2 = await Node(etcd, 2, controller=False).start()
        await until(lambda: set(n2.store.brokers()) == {1, 2})
        present: list[bool] = []  # broker 1 registered, at each change of its key that n2 sees
        n2.store.add_listener(
            lambda k, key: present.append(1 in n2.store.brokers()) if (k, key) == ("broker", 1) else None
        )
        time.sleep(2.5 * SESSION_MS / 1000)  # noqa: ASYNC251 - the fault injected: the loop is held, as by a burst
        await n1.store.create_topic("after-the-stall", 1, {}, replication_factor=1, assignments=[[1]])
        await until(lambda: "after-the-stall" in n2.store.topics(), what="n2's watch past the stall")
        assert False not in present, present
        assert n1.store.registrations == 1
        await n1.stop()
        await n2.stop()

    run(main())


def test_restarted_broker_replaces_its_previous_incarnation_at_once(etcd):
    async def main():
        watcher = await Node(etcd, 9, controller=False).start()
        n1 = await Node(etcd, 1, controller=False).start()
        old_lease = n1.store.lease_id
        await n1.crash()
        again = await Node(etcd, 1, controller=False).start()  # new incarnation, same id
        await until(lambda: watcher.store.brokers().get(1) == again.info, what="new incarnation visible")
        # The old lease was revoked (not left to expire), and the registration lives on the new one.
        info = await watcher.store.client.get_lease_info(old_lease, keys=False)
        assert info.TTL == -1
        kv = await watcher.store.client.get(watcher.store.key("brokers/1"))
        assert kv.lease == again.store.lease_id != old_lease
        await again.stop()
        await watcher.stop()

    run(main())


def test_watch_drives_the_image_and_topic_lifecycle(etcd):
    async def main():
        a, b = await Node(etcd, 1, controller=False).start(), await Node(etcd, 2, controller=False).start()
        await until(lambda: len(b.store.brokers()) == 2 and len(a.store.brokers()) == 2)
        info = await a.store.create_topic("t1", 3, {"retention.ms": "1000"}, replication_factor=2)
        assert all(len(x) == 2 for x in info.assignments)
        await until(
            lambda: "t1" in b.store.topics() and all(b.store.partition_state("t1", p) for p in range(3)),
            what="b sees t1",
        )
        tb = b.store.topic("t1")
        assert tb.topic_id == info.topic_id and tb.configs == {"retention.ms": "1000"}
        assert b.store.topic_by_id(info.topic_id).name == "t1"
        for p in range(3):
            s = b.store.partition_state("t1", p)
            assert s.replicas == tuple(info.assignments[p]) and s.leader == info.assignments[p][0]
            assert s.isr == s.replicas and s.leader_epoch == 0 and s.partition_epoch == 0
        assert ("topic", "t1") in b.events and ("partition", ("t1", 2)) in b.events
        with pytest.raises(KafkaApiError) as ex:
            await b.store.create_topic("t1", 1, {}, replication_factor=1)
        assert ex.value.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
        with pytest.raises(KafkaApiError) as ex:
            await b.store.create_topic("t3", 1, {}, replication_factor=3)
        assert ex.value.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
        await b.store.set_topic_configs("t1", {"retention.ms": "5"})
        await until(lambda: a.store.topic("t1").configs == {"retention.ms": "5"})
        grown = await a.store.set_partition_count("t1", 5)
        assert grown.partitions == 5 and len(grown.assignments) == 5
        await until(lambda: b.store.partition_state("t1", 4) is not None and b.store.topic("t1").partitions == 5)
        b.events.clear()
        await a.store.delete_topic("t1")
        await until(lambda: "t1" not in b.store.topics() and b.store.partition_state("t1", 0) is None)
        assert ("topic", "t1") in b.events
        assert b.store.deleted_topic("t1").topic_id == info.topic_id
        # Beyond etcd's 128-operation transaction limit.
        big = await a.store.create_topic("big", 250, {}, replication_factor=1)
        assert big.partitions == 250
        await until(
            lambda: b.store.topic("big") is not None and all(b.store.partition_state("big", p) for p in range(250)),
            what="big topic seen",
        )
        await a.stop()
        await b.stop()

    run(main())


def test_listeners_see_a_new_partition_with_its_topic(etcd):
    """Listeners told of a new partition (CreatePartitions) find it in the topic already, on the broker that wrote
    it (applied at once) as on the others (the watch): a replica manager ignores a partition beyond the topic's
    count, and that broker then missed its new replica until the next state change."""

    async def main():
        a, b = await Node(etcd, 1, controller=False).start(), await Node(etcd, 2, controller=False).start()
        await until(lambda: len(b.store.brokers()) == 2 and len(a.store.brokers()) == 2)
        seen: dict[int, list[tuple[int, bool]]] = {1: [], 2: []}
        for x in (a, b):
            x.store.add_listener(
                lambda kind, key, x=x: (
                    seen[x.store.broker_id].append((key[1], x.store.topic(key[0]).partitions > key[1]))
                    if kind == "partition" and key[0] == "grow"
                    else None
                )
            )
        await a.store.create_topic("grow", 1, {}, replication_factor=2)
        await until(lambda: a.store.partition_state("grow", 0) and b.store.partition_state("grow", 0))
        # the writer's watch lags behind its transaction's reply, as on a loaded broker: it learns of the new
        # partitions only from applying its own write
        watch = next(t for t in a.store._tasks if t.get_name() == "etcd-watch")
        watch.cancel()
        await asyncio.wait([watch], timeout=5)
        await a.store.set_partition_count("grow", 3)
        await until(lambda: b.store.partition_state("grow", 2) is not None, what="b sees the new partitions")
        for broker_id in (1, 2):
            assert sorted(seen[broker_id]) == [(0, True), (1, True), (2, True)], (broker_id, seen[broker_id])
        await a.stop()
        await b.stop()

    run(main())


def test_partition_state_compare_and_set(etcd):
    async def main():
        a, b = await Node(etcd, 1, controller=False).start(), await Node(etcd, 2, controller=False).start()
        await until(lambda: len(a.store.brokers()) == 2)
        await a.store.create_topic("cas", 1, {}, replication_factor=2, assignments=[[1, 2]])
        await until(lambda: b.store.partition_state("cas", 0) is not None)
        base = a.store.partition_state("cas", 0)
        assert base == b.store.partition_state("cas", 0)
        mine = base.with_changes(isr=(1,))
        theirs = base.with_changes(isr=(2,), leader=2)
        results = await asyncio.gather(
            a.store.alter_partition("cas", 0, mine), b.store.alter_partition("cas", 0, theirs), return_exceptions=True
        )
        wins = [r for r in results if not isinstance(r, Exception)]
        losses = [r for r in results if isinstance(r, StaleStateError)]
        assert len(wins) == 1 and len(losses) == 1, results
        winner = wins[0]
        # Both images converge on the winner (the loser's from its failed transaction's read).
        await until(lambda: a.store.partition_state("cas", 0) == winner == b.store.partition_state("cas", 0))
        # A successor must carry partition_epoch + 1.
        with pytest.raises(StaleStateError):
            await a.store.alter_partition("cas", 0, winner.with_changes(isr=(1, 2)).with_changes(isr=(1, 2)))
        nxt = await a.store.alter_partition("cas", 0, winner.with_changes(isr=(1, 2)))
        assert nxt.partition_epoch == base.partition_epoch + 2
        await a.stop()
        await b.stop()

    run(main())


def test_isr_expansion_to_a_shutting_down_or_dead_broker_is_refused(etcd):
    async def main():
        a, b = await Node(etcd, 1, controller=False).start(), await Node(etcd, 2, controller=False).start()
        await until(lambda: len(a.store.brokers()) == 2)
        await a.store.create_topic("ie", 1, {}, replication_factor=2, assignments=[[1, 2]])
        s = a.store.partition_state("ie", 0)
        s = await a.store.alter_partition("ie", 0, s.with_changes(isr=(1,)))
        assert not await b.store.controlled_shutdown(0.2)  # no controller here: never marked done
        await until(lambda: 2 in a.store.shutting_down())
        with pytest.raises(IneligibleReplicaError):
            await a.store.alter_partition("ie", 0, s.with_changes(isr=(1, 2)))
        await b.stop()
        await until(lambda: 2 not in a.store.brokers() and 2 not in a.store.shutting_down())
        with pytest.raises(IneligibleReplicaError):
            await a.store.alter_partition("ie", 0, s.with_changes(isr=(1, 2)))
        assert a.store.partition_state("ie", 0) == s  # nothing was written
        await a.stop()

    run(main())


def test_controller_failover_and_fencing(etcd):
    async def main():
        nodes = await cluster(etcd, 3)
        ctl = nodes[0].store.controller_id
        first = next(x for x in nodes if x.store.broker_id == ctl)
        epoch = first.controller.epoch
        assert first.controller.active and sum(x.controller.active for x in nodes) == 1
        await first.store.create_topic("f", 1, {}, replication_factor=3)
        rest = [x for x in nodes if x is not first]
        await first.crash()
        await until(
            lambda: rest[0].store.controller_id not in (-1, ctl), timeout=SESSION_MS / 1000 + 5, what="a new controller"
        )
        new = next(x for x in rest if x.store.broker_id == rest[0].store.controller_id)
        assert new.controller.epoch > epoch
        # The deposed controller's epoch no longer writes.
        s = new.store.partition_state("f", 0)
        await until(
            lambda: new.store.partition_state("f", 0) and ctl not in new.store.partition_state("f", 0).isr,
            what="dead controller removed from the ISR",
        )
        s = new.store.partition_state("f", 0)
        with pytest.raises(StaleStateError):
            await new.store.write_partitions([("f", 0, s.with_changes(isr=s.isr[:1]))], controller_epoch=epoch)
        await close_all(rest)

    run(main())


def test_leader_election_on_broker_loss_clean_and_unclean(etcd):
    async def main():
        nodes = await cluster(etcd, 3)
        by_id = {x.store.broker_id: x for x in nodes}
        await nodes[0].store.create_topic("e", 1, {}, replication_factor=3, assignments=[[1, 2, 3]])
        await nodes[0].store.create_topic(
            "u", 1, {"unclean.leader.election.enable": "true"}, replication_factor=2, assignments=[[1, 2]]
        )
        await nodes[0].store.create_topic("c", 1, {}, replication_factor=2, assignments=[[1, 2]])
        obs = by_id[3].store
        await until(lambda: all(obs.partition_state(t, 0) for t in "euc"))
        # Shrink the ISRs of u and c to {1}, as leader 1 would when 2 falls behind.
        for t in "uc":
            s = obs.partition_state(t, 0)
            await by_id[1].store.alter_partition(t, 0, s.with_changes(isr=(1,)))
        await by_id[1].crash()
        await until(
            lambda: obs.partition_state("e", 0).leader == 2, timeout=SESSION_MS / 1000 + 5, what="clean election of 2"
        )
        e = obs.partition_state("e", 0)
        assert e.isr == (2, 3) and e.leader_epoch == 1
        await until(lambda: obs.partition_state("u", 0).leader == 2, what="unclean election on u")
        assert obs.partition_state("u", 0).isr == (2,)
        await until(lambda: obs.partition_state("c", 0).leader == -1, what="c offline")
        assert obs.partition_state("c", 0).isr == (1,)
        # ElectLeaders UNCLEAN on c brings it back with data loss accepted by the operator.
        res = await elect_leaders(obs, ELECTION_UNCLEAN, [("c", 0), ("e", 0), ("nope", 0)])
        assert res[("c", 0)][0] == ErrorCode.NONE and res[("e", 0)][0] == ErrorCode.ELECTION_NOT_NEEDED
        assert res[("nope", 0)][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        await until(lambda: obs.partition_state("c", 0).leader == 2)
        await close_all([by_id[2], by_id[3]])

    run(main())


def test_restarted_broker_loses_leadership_before_its_lease_expires(etcd):
    async def main():
        nodes = await cluster(etcd, 3)
        by_id = {x.store.broker_id: x for x in nodes}
        obs = by_id[3].store
        await obs.create_topic("r", 1, {}, replication_factor=3, assignments=[[1, 2, 3]])
        await until(lambda: obs.partition_state("r", 0) is not None)
        victim = by_id[1] if obs.controller_id != 1 else by_id[2]
        vid = victim.store.broker_id
        if vid == 2:
            s = obs.partition_state("r", 0)
            await obs.alter_partition("r", 0, s.with_changes(leader=2))
        await until(lambda: obs.partition_state("r", 0).leader == vid)
        before = obs.partition_state("r", 0).leader_epoch
        await victim.crash()
        back = await Node(etcd, vid, f"r{vid}").start()  # restart well within the session timeout
        # The restart revokes the old lease: no wait for its expiry (which the bound below would not reach).
        await until(
            lambda: obs.partition_state("r", 0).leader not in (vid, -1),
            timeout=SESSION_MS / 1000,
            what="leadership moved off the restarted broker",
        )
        s = obs.partition_state("r", 0)
        assert vid not in s.isr and s.leader_epoch > before
        await close_all([x for x in nodes if x is not victim] + [back])

    run(main())


def test_controlled_shutdown_moves_leadership_then_completes(etcd):
    async def main():
        nodes = await cluster(etcd, 3)
        by_id = {x.store.broker_id: x for x in nodes}
        s3 = by_id[3].store
        await s3.create_topic("cs", 3, {}, replication_factor=2, assignments=[[1, 2], [2, 1], [1, 3]])
        await s3.create_topic("solo", 1, {}, replication_factor=1, assignments=[[1]])
        await until(lambda: all(s3.partition_state("cs", p) for p in range(3)) and s3.partition_state("solo", 0))
        ok = await by_id[1].store.controlled_shutdown(10)
        assert ok
        for p in range(3):
            s = (
                s3.partition_state("cs", p)
                if by_id[1].store.controller_id != 3
                else by_id[3].store.partition_state("cs", p)
            )
            assert s.leader != 1 and 1 not in s.isr
        solo = by_id[1].store.partition_state("solo", 0)
        assert solo.leader == -1 and solo.isr == (1,)  # nowhere to go: offline until 1 returns
        assert 1 in by_id[2].store.shutting_down()
        await by_id[1].stop()
        await until(lambda: 1 not in s3.brokers() and 1 not in s3.shutting_down())
        await close_all([by_id[2], by_id[3]])

    run(main())


def test_reassignment_and_preferred_election(etcd):
    async def main():
        nodes = await cluster(etcd, 4)
        by_id = {x.store.broker_id: x for x in nodes}
        s = by_id[4].store
        await s.create_topic("ra", 1, {}, replication_factor=2, assignments=[[1, 2]])
        await until(lambda: s.partition_state("ra", 0) is not None)
        assert await alter_reassignment(s, "ra", 0, [3, 4]) == (ErrorCode.NONE, None)
        await until(lambda: s.partition_state("ra", 0).adding == (3, 4))
        st = s.partition_state("ra", 0)
        assert st.replicas == (3, 4, 1, 2) and st.removing == (1, 2)
        assert list_reassignments(s, None) == {"ra": [(0, st)]}
        assert (await alter_reassignment(s, "ra", 0, [3, 9]))[0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        # The leader adds 3 and 4 to the ISR once they caught up; the controller completes the move.
        await by_id[4].store.alter_partition("ra", 0, st.with_changes(isr=st.isr + (3, 4)))
        await until(lambda: s.partition_state("ra", 0).replicas == (3, 4), what="reassignment completed")
        done = s.partition_state("ra", 0)
        assert done.leader == 3 and done.isr == (3, 4) and done.adding == () and done.removing == ()
        await until(lambda: s.topic("ra").assignments == [[3, 4]], what="topic assignment rewritten")
        assert list_reassignments(s, None) == {}
        assert (await alter_reassignment(s, "ra", 0, None))[0] == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
        # Preferred election: move the leader off the preferred replica, then elect it back.
        await s.alter_partition("ra", 0, done.with_changes(leader=4))
        await until(lambda: s.partition_state("ra", 0).leader == 4)
        res = await elect_leaders(s, ELECTION_PREFERRED, [("ra", 0)])
        assert res == {("ra", 0): (ErrorCode.NONE, None)}
        await until(lambda: s.partition_state("ra", 0).leader == 3)
        res = await elect_leaders(s, ELECTION_PREFERRED, None)
        assert ("ra", 0) not in res  # not needed any more: all-partitions answers leave it out
        await close_all(nodes)

    run(main())


def test_auto_leader_rebalance(etcd):
    async def main():
        nodes = await cluster(etcd, 2, **{"leader.imbalance.check.interval.seconds": 1})
        s = nodes[0].store
        await s.create_topic("bal", 2, {}, replication_factor=2, assignments=[[1, 2], [1, 2]])
        await until(lambda: all(s.partition_state("bal", p) for p in range(2)))
        for p in range(2):
            st = s.partition_state("bal", p)
            await s.alter_partition("bal", p, st.with_changes(leader=2))
        await until(
            lambda: all(s.partition_state("bal", p).leader == 1 for p in range(2)),
            timeout=10,
            what="preferred leaders restored by the controller",
        )
        await close_all(nodes)

    run(main())


def test_watch_recovers_after_etcd_restart(etcd):
    async def main():
        a, b = await Node(etcd, 1, controller=False).start(), await Node(etcd, 2, controller=False).start()
        await until(lambda: len(b.store.brokers()) == 2)
        etcd.stop()
        etcd.restart()
        # Changes made while b's watch is broken and after: b catches up by a full re-read + new watch.
        info = await a.store.create_topic("after", 2, {}, replication_factor=2)
        await until(
            lambda: b.store.topic("after") is not None and b.store.partition_state("after", 1),
            timeout=15,
            what="b caught up after the restart",
        )
        assert b.store.topic("after").topic_id == info.topic_id
        await a.stop()
        await b.stop()

    run(main())


def test_producer_id_blocks_never_overlap(etcd):
    async def main():
        a, b = await Node(etcd, 1, controller=False).start(), await Node(etcd, 2, controller=False).start()
        starts = await asyncio.gather(*[x.store.allocate_producer_id_block(1000) for x in (a, b) for _ in range(5)])
        assert sorted(starts) == [i * 1000 for i in range(10)]
        await a.stop()
        await b.stop()

    run(main())


def test_acls_written_by_one_store_are_seen_and_deleted_by_another(etcd):
    """ACLs are keys named by their digest: any broker writes them (no controller), more than one transaction's
    ops in batches; the other's watch brings them within a second; a delete judges etcd's current set (fresh read),
    also what its own image has not seen yet; a new store reads them at start."""

    def acl(name: str, principal: str = "User:alice") -> AclBinding:
        pattern = ResourcePattern(ResourceType.TOPIC, name, PatternType.LITERAL)
        return AclBinding(pattern, AccessControlEntry(principal, "*", AclOperation.READ, AclPermissionType.ALLOW))

    async def main():
        a = EtcdMetadataStore(parse_connect(etcd.connect), broker_id=1)
        b = EtcdMetadataStore(parse_connect(etcd.connect), broker_id=2)
        await a.start()
        await b.start()
        heard: list[tuple[str, object]] = []
        b.add_listener(lambda kind, key: heard.append((kind, key)) if kind == "acl" else None)
        many = [acl(f"t{i}") for i in range(150)]
        await a.create_acls([*many, many[0]])
        assert len(a.acls()) == 150  # applied to the writer's image at once
        t0 = asyncio.get_running_loop().time()
        await until(lambda: len(b.acls()) == 150, what="the other store's watch")
        assert asyncio.get_running_loop().time() - t0 < 1.0
        assert len(heard) == 150
        await b.create_acls([many[0]])  # the same binding from another broker: still one
        await until(lambda: len(a.acls()) == 150 and a.image.revision >= b.image.revision, what="a caught up")

        # written by a, deleted at once through b, whose image may not have it yet: b reads etcd first
        await a.create_acls([acl("fresh", "User:bob")])
        [found] = await b.delete_acls([AclBindingFilter(principal="User:bob")])
        assert found == [acl("fresh", "User:bob")]
        matched = await b.delete_acls([AclBindingFilter(ResourceType.TOPIC, "t1", PatternType.MATCH)])
        assert matched == [[acl("t1")]]
        await until(lambda: len(a.acls()) == 149, what="deletions seen by a")
        c = EtcdMetadataStore(parse_connect(etcd.connect), broker_id=3)
        await c.start()
        assert sorted(x.pattern.name for x in c.acls()) == sorted(
            x.pattern.name for x in many if x.pattern.name != "t1"
        )
        for s in (a, b, c):
            await s.close()

    run(main())
