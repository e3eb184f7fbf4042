"""Transactions through the ReplicaManager between in-process brokers (tests/support/replication_fakes.py): a
READ_COMMITTED fetch parked in the Fetch purgatory wakes when a marker moves the LSO, markers appended with Kafka's
AppendOrigin COORDINATOR (`from_client=False`, what WriteTxnMarkers will call), followers rebuild the same
`.txnindex`, and fetches answer the aborted transactions of what they return."""

from __future__ import annotations

import asyncio
import time

from strata.broker.replica_manager import READ_COMMITTED, FetchSpec
from strata.protocol.errors import ErrorCode as E
from strata.protocol.records import build_batch, iter_batches
from strata.protocol.txn_markers import build_end_txn_marker
from strata.storage.txn_index import AbortedTxn
from tests.support.replication_fakes import FakeCluster, install_transport

T = "t"


def _txn(pid: int, *values: bytes) -> bytes:
    return build_batch(list(values), producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True)


async def _until(cond, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what} not met in time"
        await asyncio.sleep(0.002)


def test_markers_move_the_lso_wake_read_committed_fetchers_and_replicate(tmp_path, monkeypatch):
    async def main():
        c = FakeCluster(tmp_path, [1, 2]).start()
        install_transport(monkeypatch, c)
        try:
            await c.store.create_topic(T, 1, {"min.insync.replicas": "2"}, replication_factor=2)
            await _until(lambda: (T, 0) in c[1].rm.partitions and c[1].partition(T).is_leader, what="leader")
            leader = c[1].rm
            # a client's transactional batch is refused unless the coordinator verified its producer
            [r] = await leader.append_records([(T, 0, _txn(7, b"a7"))], required_acks=-1, timeout_ms=10_000)
            assert r.error == E.INVALID_TXN_STATE
            for pid in (7, 8):
                [r] = await leader.append_records(
                    [(T, 0, _txn(pid, b"v%d" % pid))], required_acks=-1, timeout_ms=10_000, verified_producers={pid}
                )
                assert r.error == E.NONE
            p = c[1].partition(T)
            assert (p.last_stable_offset, p.high_watermark) == (0, 2)

            spec = FetchSpec(T, 0, 0, 1 << 20, -1)
            parked = asyncio.ensure_future(
                leader.fetch([spec], max_bytes=1 << 20, min_bytes=1, max_wait_ms=20_000, isolation=READ_COMMITTED)
            )
            await asyncio.sleep(0.05)
            assert not parked.done()  # nothing below the LSO yet: parked in the Fetch purgatory

            # a client may not write markers; the coordinator (from_client=False) may
            [r] = await leader.append_records([(T, 0, build_end_txn_marker(7, 0, commit=False, coordinator_epoch=0))])
            assert r.error == E.INVALID_RECORD
            started = time.monotonic()
            abort7 = build_end_txn_marker(7, 0, commit=False, coordinator_epoch=0)
            [r] = await leader.append_records([(T, 0, abort7)], internal=True, from_client=False)
            assert r.error == E.NONE and r.base_offset == 2
            [res] = await asyncio.wait_for(parked, 10)
            assert time.monotonic() - started < 5  # woken by the LSO move, not by max.wait.ms
            # producer 8's transaction is still open at 1: only producer 7's aborted data is readable
            assert res.last_stable_offset == 1
            assert [h.base_offset for _, h in iter_batches(res.records)] == [0]
            assert res.aborted_transactions == [AbortedTxn(7, 0, 2, 1)]

            commit8 = build_end_txn_marker(8, 0, commit=True, coordinator_epoch=0)
            await leader.append_records([(T, 0, commit8)], internal=True, from_client=False)
            assert p.last_stable_offset == p.high_watermark == 4
            follower = c[2].partition(T).log
            await _until(lambda: follower.log_end_offset == 4, what="follower caught up")
            assert follower.collect_aborted_transactions(0, 4) == [AbortedTxn(7, 0, 2, 1)]
            follower.update_high_watermark(4)
            assert follower.last_stable_offset == 4 and not follower.producer_state.ongoing_txns
        finally:
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 60))
