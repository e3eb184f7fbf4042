"""Replication between in-process ReplicaManagers (tests/support/replication_fakes.py): real logs, real handlers and
codec on the follower requests, a fake metadata store (etcd + controller) and a fake clock for the lag arithmetic.

Waits are on conditions (bounded), never fixed sleeps; time-based ISR shrinks are driven by advancing the clock.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from strata.broker.cluster.model import PartitionState
from strata.broker.replica_manager import FetchResult, FetchSpec
from strata.protocol.errors import ErrorCode as E
from strata.protocol.records import build_batch, iter_batches
from strata.protocol.registry import ApiKey
from tests.support.replication_fakes import FakeClock, FakeCluster, install_transport

T = "t"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def until(cond, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what} not met in time"
        await asyncio.sleep(0.002)


def batches(ulog) -> list[tuple[int, int, int, int]]:
    data = ulog.read(ulog.log_start_offset, 1 << 24, None, True).records
    return [(h.base_offset, h.last_offset, h.partition_leader_epoch, h.crc) for _, h in iter_batches(data)]


def recs(*values: bytes) -> bytes:
    return build_batch(list(values))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def make_cluster(tmp_path, monkeypatch, clock, ids=(1, 2, 3), min_isr=2, **overrides) -> FakeCluster:
    c = FakeCluster(tmp_path, list(ids), overrides).start()
    install_transport(monkeypatch, c, clock)
    await c.store.create_topic(T, 1, {"min.insync.replicas": str(min_isr)}, replication_factor=len(ids))
    return c


def test_acks_all_completes_when_the_isr_has_the_records_and_replicas_are_identical(tmp_path, monkeypatch, clock):
    async def main():
        c = await make_cluster(tmp_path, monkeypatch, clock)
        leader = c[1].rm
        res = await leader.append_records([(T, 0, recs(b"a", b"b"))], required_acks=-1, timeout_ms=10_000)
        assert res[0].error == E.NONE and res[0].base_offset == 0
        # acknowledged => every ISR member has it and the leader's HW covers it
        assert c[1].log(T).high_watermark >= 2
        assert all(c[i].log(T).log_end_offset >= 2 for i in (2, 3))
        for i in range(5):
            r = await leader.append_records([(T, 0, recs(b"x%d" % i))], required_acks=-1, timeout_ms=10_000)
            assert r[0].error == E.NONE and r[0].base_offset == 2 + i
        await until(lambda: all(c[i].log(T).high_watermark == 7 for i in (1, 2, 3)), what="followers' HW")
        assert batches(c[1].log(T)) == batches(c[2].log(T)) == batches(c[3].log(T))
        assert {e for _, _, e, _ in batches(c[2].log(T))} == {0}
        assert c[2].log(T).leader_epoch_cache.entries == c[1].log(T).leader_epoch_cache.entries
        assert c[1].rm.under_replicated_count == 0 and c[1].rm.leader_count == 1 and c[2].rm.leader_count == 0
        await c.close()

    run(main())


def test_produce_to_a_follower_names_the_leader(tmp_path, monkeypatch, clock):
    async def main():
        c = await make_cluster(tmp_path, monkeypatch, clock)
        r = (await c[2].rm.append_records([(T, 0, recs(b"a"))]))[0]
        assert (r.error, r.current_leader) == (E.NOT_LEADER_OR_FOLLOWER, (1, 0))
        await c.close()

    run(main())


def test_not_enough_replicas_before_append_and_after_append(tmp_path, monkeypatch, clock):
    async def main():
        c = await make_cluster(tmp_path, monkeypatch, clock)
        leader = c[1].rm
        await leader.append_records([(T, 0, recs(b"a"))], required_acks=-1, timeout_ms=10_000)
        # followers 2 and 3 die; a parked acks=-1 produce gets NOT_ENOUGH_REPLICAS_AFTER_APPEND once the ISR shrinks
        for i in (2, 3):
            c[i].down = True
            await c[i].rm.fetcher_manager.shutdown()
        parked = asyncio.ensure_future(leader.append_records([(T, 0, recs(b"b"))], required_acks=-1, timeout_ms=30_000))
        await until(lambda: leader.produce_purgatory.size == 1, what="produce parked")
        clock.advance(c[1].config["replica.lag.time.max.ms"] + 1)
        leader.maybe_shrink_isr()
        await until(lambda: c.store.partition_state(T, 0).isr == (1,), what="ISR shrunk to the leader")
        r = (await parked)[0]
        assert r.error == E.NOT_ENOUGH_REPLICAS_AFTER_APPEND and r.base_offset == 1
        # below min.insync.replicas: acks=-1 is refused before the append, acks=1 is written
        before = c[1].log(T).log_end_offset
        r = (await leader.append_records([(T, 0, recs(b"c"))], required_acks=-1, timeout_ms=1000))[0]
        assert r.error == E.NOT_ENOUGH_REPLICAS and c[1].log(T).log_end_offset == before
        r = (await leader.append_records([(T, 0, recs(b"d"))], required_acks=1))[0]
        assert r.error == E.NONE and c[1].log(T).log_end_offset == before + 1
        assert c[1].metrics.isr_shrinks._value.get() == 1
        assert leader.under_replicated_count == 1
        await c.close()

    run(main())


def test_a_stalled_follower_in_the_isr_times_the_produce_out(tmp_path, monkeypatch, clock):
    async def main():
        c = await make_cluster(tmp_path, monkeypatch, clock, min_isr=1)
        c[3].down = True
        await c[3].rm.fetcher_manager.shutdown()
        started = time.monotonic()
        r = (await c[1].rm.append_records([(T, 0, recs(b"a"))], required_acks=-1, timeout_ms=300))[0]
        assert r.error == E.REQUEST_TIMED_OUT and r.base_offset == 0
        assert time.monotonic() - started >= 0.29
        assert c[2].log(T).log_end_offset == 1  # written and replicated to 2, but 3 is still in the ISR
        await c.close()

    run(main())


def test_follower_leaves_the_isr_after_the_lag_and_rejoins_when_caught_up(tmp_path, monkeypatch, clock):
    async def main():
        c = await make_cluster(tmp_path, monkeypatch, clock)
        leader = c[1].rm
        await leader.append_records([(T, 0, recs(b"a"))], required_acks=-1, timeout_ms=10_000)
        await c[3].rm.fetcher_manager.shutdown()  # 3 stops fetching (its broker hangs)
        for i in range(3):
            r = (await leader.append_records([(T, 0, recs(b"b%d" % i))], required_acks=1))[0]
            assert r.error == E.NONE
        leader.maybe_shrink_isr()
        assert c.store.partition_state(T, 0).isr == (1, 2, 3)  # not lagging long enough yet
        await until(lambda: c[1].partition(T).followers[2].log_end_offset == 4, what="2 caught up")
        clock.advance(c[1].config["replica.lag.time.max.ms"] + 1)
        leader.maybe_shrink_isr()
        await until(lambda: c.store.partition_state(T, 0).isr == (1, 2), what="3 out of the ISR")
        assert c[1].partition(T).isr == (1, 2)
        await until(lambda: c[1].log(T).high_watermark == 4, what="HW without 3")
        # 3 comes back: it fetches, catches up to the HW and is added back by a compare-and-set
        c[3].rm.fetcher_manager.start()
        c[3].rm.fetcher_manager.add_partition(c[3].partition(T))
        await until(lambda: c.store.partition_state(T, 0).isr == (1, 2, 3), what="3 back in the ISR")
        assert [a[2].isr for a in c.store.alters] == [(1, 2), (1, 2, 3)], c.store.alters
        assert c[1].metrics.isr_expands._value.get() == 1 and c[1].metrics.isr_shrinks._value.get() == 1
        assert batches(c[3].log(T)) == batches(c[1].log(T))
        await c.close()

    run(main())


def test_a_lost_compare_and_set_re_reads_the_state(tmp_path, monkeypatch, clock):
    async def main():
        c = await make_cluster(tmp_path, monkeypatch, clock)
        leader = c[1].rm
        await leader.append_records([(T, 0, recs(b"a"))], required_acks=-1, timeout_ms=10_000)
        await c[3].rm.fetcher_manager.shutdown()
        await leader.append_records([(T, 0, recs(b"b"))], required_acks=1)  # 3 falls behind
        await until(lambda: c[1].partition(T).followers[2].log_end_offset == 2, what="2 caught up")
        clock.advance(c[1].config["replica.lag.time.max.ms"] + 1)
        c.store.conflict_next_alter = True
        leader.maybe_shrink_isr()
        # the conflicting write bumped the partition epoch; the leader re-applied it and shrinks on the next check
        await until(
            lambda: c[1].partition(T).partition_epoch == 1 and c[1].partition(T).pending_isr is None,
            what="re-read after the conflict",
        )
        assert c.store.partition_state(T, 0).isr == (1, 2, 3) and not c.store.alters
        leader.maybe_shrink_isr()
        await until(lambda: c.store.partition_state(T, 0).isr == (1, 2), what="shrink after the conflict")
        assert c.store.partition_state(T, 0).partition_epoch == 2
        await c.close()

    run(main())


def test_new_leader_old_leader_truncates_its_divergent_tail(tmp_path, monkeypatch, clock):
    """KIP-101 scenario 2 in miniature: the old leader appended records no follower got (acks=1), a follower is
    elected and takes different records at the same offsets; the old leader comes back as follower, truncates to the
    end of the common epoch and ends with the new leader's log."""

    async def main():
        c = await make_cluster(tmp_path, monkeypatch, clock, min_isr=1)
        leader = c[1].rm
        await leader.append_records([(T, 0, recs(b"a", b"b"))], required_acks=-1, timeout_ms=10_000)
        # 1 is cut off from its followers: it keeps taking acks=1 writes nobody replicates
        for i in (2, 3):
            await c[i].rm.fetcher_manager.shutdown()
        c[1].down = True
        for v in (b"lost1", b"lost2", b"lost3"):
            assert (await leader.append_records([(T, 0, recs(v))], required_acks=1))[0].error == E.NONE
        assert c[1].log(T).log_end_offset == 5
        # the controller elects 2 (epoch 1) with ISR {2, 3}; 1 has not heard yet
        c[1].stopped = True
        c.store.elect(T, 0, leader=2, isr=(2, 3))
        c[3].rm.fetcher_manager.start()
        c[3].rm.fetcher_manager.add_partition(c[3].partition(T))
        r = (await c[2].rm.append_records([(T, 0, recs(b"new1", b"new2"))], required_acks=-1, timeout_ms=10_000))[0]
        assert (r.error, r.base_offset) == (E.NONE, 2)
        # 1 hears about it and becomes follower: OffsetForLeaderEpoch(0) -> (0, 2): its 2..4 go
        c[1].stopped = False
        c[1].down = False
        c[1].rm.start()
        c[1].rm.apply_partition_state(T, 0, c.store.partition_state(T, 0))
        assert not c[1].partition(T).is_leader
        await until(lambda: batches(c[1].log(T)) == batches(c[2].log(T)), what="old leader converged")
        assert [e for _, _, e, _ in batches(c[1].log(T))] == [0, 1]
        assert c[1].log(T).leader_epoch_cache.entries == c[2].log(T).leader_epoch_cache.entries
        await c.close()

    run(main())


def test_diverging_epoch_on_fetch_truncates_too(tmp_path, monkeypatch, clock):
    """KIP-320: a follower already Fetching (its truncation done) whose log then diverges is told so by the Fetch
    response (diverging_epoch) and truncates without another OffsetForLeaderEpoch round."""

    async def main():
        c = await make_cluster(tmp_path, monkeypatch, clock, ids=(1, 2), min_isr=1)
        sent = install_transport(monkeypatch, c, clock)
        await c[1].rm.append_records([(T, 0, recs(b"a"))], required_acks=-1, timeout_ms=10_000)
        # 2 gets records in an epoch the leader never had (as if it had led epoch 5 alone)
        await c[2].rm.fetcher_manager.shutdown()
        f_log = c[2].log(T)
        f_log.append_as_follower(build_batch([b"ghost"], base_offset=1, partition_leader_epoch=5))
        assert f_log.log_end_offset == 2 and f_log.latest_epoch == 5
        c.store.set_state(T, 0, c.store.partition_state(T, 0).with_changes(leader_epoch=6))  # 1 re-elected, epoch 6
        await c[1].rm.append_records([(T, 0, recs(b"b", b"c"))], required_acks=1)
        fs = c[2].rm.fetcher_manager
        fs.start()
        f = fs.fetchers[1]
        st = f.partitions[(T, 0)]
        st.state = "Fetching"  # skip the OffsetForLeaderEpoch round
        await until(lambda: batches(f_log) == batches(c[1].log(T)), what="follower converged")
        assert not any(k == ApiKey.OFFSET_FOR_LEADER_EPOCH for _, k, _ in sent)
        await c.close()

    run(main())


def test_stop_replica_when_reassigned_away_and_on_topic_deletion(tmp_path, monkeypatch, clock):
    async def main():
        c = await make_cluster(tmp_path, monkeypatch, clock)
        await c[1].rm.append_records([(T, 0, recs(b"a"))], required_acks=-1, timeout_ms=10_000)
        d3 = c[3].log(T).dir
        cur = c.store.partition_state(T, 0)
        c.store.set_state(T, 0, cur.with_changes(replicas=(1, 2), isr=(1, 2)))
        assert (T, 0) not in c[3].rm.partitions and not d3.exists()
        assert (T, 0) not in c[3].rm.fetcher_manager._source_of
        assert set(c[1].partition(T).followers) == {2}
        dirs = [c[i].log(T).dir for i in (1, 2)]
        info = await c.store.delete_topic(T)
        for i in (1, 2):
            c[i].rm.remove_topic(info)  # what KafkaServer.on_metadata_change does on a deletion
            c[i].rm.remove_topic(info)  # idempotent
        assert all((T, 0) not in c[i].rm.partitions for i in (1, 2))
        assert not any(d.exists() for d in dirs)
        await c.close()

    run(main())


def test_offline_partition_has_no_leader_and_nobody_fetches(tmp_path, monkeypatch, clock):
    async def main():
        c = await make_cluster(tmp_path, monkeypatch, clock)
        cur = c.store.partition_state(T, 0)
        c.store.set_state(T, 0, PartitionState(-1, cur.leader_epoch + 1, (), cur.replicas, cur.partition_epoch + 1))
        for i in (1, 2, 3):
            p = c[i].partition(T)
            assert not p.is_leader and (T, 0) not in c[i].rm.fetcher_manager._source_of
        r = (await c[1].rm.append_records([(T, 0, recs(b"a"))]))[0]
        assert r.error == E.NOT_LEADER_OR_FOLLOWER and r.current_leader is None
        await c.close()

    run(main())


async def two_partitions_fetched_by_hand(tmp_path, monkeypatch, clock, value: bytes) -> FakeCluster:
    """Brokers 1 (leader) and 2, two partitions holding one record `value` each; broker 2's fetcher is stopped, so
    the tests send its fetches themselves."""
    c = FakeCluster(tmp_path, [1, 2], {}).start()
    install_transport(monkeypatch, c, clock)
    await c.store.create_topic(T, 2, {}, replication_factor=2)
    await c[2].rm.fetcher_manager.shutdown()
    for p in (0, 1):
        await c[1].rm.append_records([(T, p, recs(value))], required_acks=1)
    return c


def test_a_follower_position_counts_even_when_the_response_has_no_room_for_its_data(tmp_path, monkeypatch, clock):
    async def main():
        c = await two_partitions_fetched_by_hand(tmp_path, monkeypatch, clock, b"x" * 500)
        leader = c[1].rm
        specs = [FetchSpec(T, p, 1, 1 << 20, 0, log_start_offset=0) for p in (0, 1)]
        res = await leader.fetch(specs, max_bytes=100, min_bytes=1, max_wait_ms=0, replica_id=2)
        assert res[0].records == b"" and res[1].records == b""  # nothing new: both at the LEO
        assert [c[1].partition(T, p).followers[2].log_end_offset for p in (0, 1)] == [1, 1]
        assert [c[1].log(T, p).high_watermark for p in (0, 1)] == [1, 1]
        for p in (0, 1):
            await leader.append_records([(T, p, recs(b"y" * 500))], required_acks=1)
        specs = [FetchSpec(T, p, 1, 1 << 20, 0, log_start_offset=0) for p in (0, 1)]
        res = await leader.fetch(specs, max_bytes=100, min_bytes=1, max_wait_ms=0, replica_id=2)
        assert len(res[0].records) > 100 and res[1].records == b""  # the first batch alone fills the response
        assert c[1].partition(T, 1).followers[2].last_fetch_leader_leo == 2  # p1's fetch was still recorded
        await c.close()

    run(main())


def test_an_idle_follower_fetch_answers_as_a_read_would_and_keeps_the_follower_in_sync(tmp_path, monkeypatch, clock):
    """A partition the follower has all of, unchanged since its last answer, is answered without a read (the leader
    of 3,000 idle partitions re-read them all every round): the answer stays what a read gives
    (HW, LSO, log start, new records, divergence), the fetch still counts for the lag, and a follower out of the ISR
    still rejoins it."""

    async def main():
        c = await two_partitions_fetched_by_hand(tmp_path, monkeypatch, clock, b"a")
        leader = c[1].rm
        for p in (0, 1):
            await leader.append_records([(T, p, recs(b"b"))], required_acks=1)

        async def fetch(offsets: dict[int, int], last_epoch: int = 0):
            specs = [
                FetchSpec(T, p, o, 1 << 20, 0, last_fetched_epoch=last_epoch, log_start_offset=0)
                for p, o in offsets.items()
            ]
            return await leader.fetch(specs, max_bytes=1 << 20, min_bytes=0, max_wait_ms=0, replica_id=2)

        def state(p: int):
            return c[1].partition(T, p).followers[2]

        first = await fetch({0: 2, 1: 2})
        assert [(r.error, r.records, r.high_watermark) for r in first] == [(E.NONE, b"", 2)] * 2
        assert state(0).idle_fetch is not None and state(1).idle_fetch is not None  # the next rounds skip the read
        again = await fetch({0: 2, 1: 2})
        assert again == first
        # a skipped read still counts as a caught-up fetch (the lag arithmetic and the ISR shrink look at these)
        clock.advance(1000)
        await fetch({0: 2, 1: 2})
        assert [(state(p).last_fetch_ms, state(p).last_caught_up_ms) for p in (0, 1)] == [(clock(), clock())] * 2
        # new records, a moved log start and a divergent last epoch are answered as a read answers them
        await leader.append_records([(T, 0, recs(b"c"))], required_acks=1)
        c[1].log(T, 1).delete_records(1)
        r0, r1 = await fetch({0: 2, 1: 2})
        assert [h.base_offset for _, h in iter_batches(r0.records)] == [2] and r0.high_watermark == 2
        assert r1.records == b"" and r1.log_start_offset == 1
        assert state(0).idle_fetch is None  # it got records
        await fetch({0: 3, 1: 2})
        assert state(0).idle_fetch is not None and state(1).idle_fetch is not None
        r0, r1 = await fetch({0: 3, 1: 2}, last_epoch=5)  # an epoch the leader never had
        assert r0.error == r1.error == E.OFFSET_OUT_OF_RANGE
        # the controller takes 2 out of the ISR (say its controlled shutdown), leader epoch unchanged; the very fetch
        # it sent while in the ISR brings it back
        await fetch({0: 3, 1: 2})
        assert state(1).idle_fetch is not None
        c.store.elect(T, 1, leader=1, isr=(1,))
        assert c[1].partition(T, 1).isr == (1,)
        await fetch({0: 3, 1: 2})
        await until(lambda: c.store.partition_state(T, 1).isr == (1, 2), what="2 back in the ISR")
        assert (await fetch({0: 3, 1: 2}))[1] == FetchResult(high_watermark=2, last_stable_offset=2, log_start_offset=1)
        await c.close()

    run(main())
