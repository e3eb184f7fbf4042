"""Transactional offsets (TxnOffsetCommit) against the markers that complete them, in the orders a busy broker can
produce:

* a marker that reaches a `__consumer_offsets` partition while the group coordinator is still loading it (a restart,
  or a new leader, with the transaction coordinator completing a transaction at the same time): the marker writer
  answers NOT_LEADER_OR_FOLLOWER (the transaction coordinator retries) until the load is done, so the marker is never
  appended behind the load's back and then missed by both the replay and the live state;
* an abort marker that lands after a TxnOffsetCommit's record and completes before its write is answered: the
  offsets are pending from before the append, so the marker drops them.
"""

from __future__ import annotations

import asyncio

from strata.broker.txn.markers import TxnMarker, append_markers
from strata.protocol.errors import ErrorCode as E
from tests.unit.test_group_coordinator import H, make_server, om, run

OFFSETS = "__consumer_offsets"
SLOW_LOAD = {"offsets.topic.num.partitions": 1, "offsets.load.buffer.size": 1}  # one batch per read: many yields


def test_a_commit_marker_during_the_offsets_load_commits_the_pending_offsets(tmp_path):
    async def main():
        h = await H(tmp_path, **SLOW_LOAD).start()
        for i in range(300):  # a partition whose load takes many reads
            assert (await h.coord.commit_offsets("filler", -1, "", None, {("t", 0): om(i)}, 8))[0] == E.NONE
        err, res = await h.coord.commit_transactional_offsets("g", (7, 0), -1, "", None, {("t", 0): om(5)})
        assert (err, res) == (E.NONE, {("t", 0): E.NONE})
        await h.close()

        server = make_server(tmp_path, **SLOW_LOAD)  # the broker restarts
        coord = server.group_coordinator
        await coord.startup()
        for _ in range(3):
            await asyncio.sleep(0)  # the load has started reading
        assert coord.runtime.loading, "the load ended before the marker came: nothing tested"
        marker = TxnMarker(7, 0, True, 0)
        answers = []
        while True:  # as the transaction coordinator does: retry until the leader has the marker
            r = (await append_markers(server.replica_manager, coord, marker, [(OFFSETS, 0)]))[(OFFSETS, 0)]
            answers.append(r)
            if r == E.NONE:
                break
            await asyncio.sleep(0.01)
        await asyncio.wait_for(coord.loaded.wait(), 10)
        err, topics = coord.fetch_offsets("g", None)
        assert err == E.NONE
        assert [(t, [(p, o.offset if o else None) for p, o in ps]) for t, ps in topics] == [("t", [(0, 5)])], answers
        assert not coord.has_pending_txn_offset("g", ("t", 0))
        await coord.shutdown()
        server.log_manager.shutdown()

    run(main())


def test_an_abort_marker_racing_a_txn_offset_commit_leaves_nothing_pending(tmp_path):
    """The coordinator aborts a transaction (timeout, or a new producer fencing it) while its TxnOffsetCommit is being
    written: the abort marker lands after the offsets' record and completes before the commit's write is answered.
    The offsets must be dropped, not left pending (Kafka records them as pending before the append)."""

    async def main():
        h = await H(tmp_path, **{"offsets.topic.num.partitions": 1}).start()
        coord = h.coord
        log = h.server.replica_manager.get_partition(OFFSETS, 0).log
        leo = log.log_end_offset
        task = asyncio.create_task(coord.commit_transactional_offsets("g", (9, 0), -1, "", None, {("t", 0): om(5)}))
        for _ in range(1000):
            await asyncio.sleep(0)
            if log.log_end_offset > leo:
                break
        assert log.log_end_offset > leo and not task.done(), "no moment between the append and the answer"
        coord.complete_transaction(0, 9, False)  # the abort marker's completion
        assert (await task)[0] == E.NONE
        assert not coord.has_pending_txn_offset("g", ("t", 0))
        assert coord.fetch_offsets("g", None) == (E.NONE, [])
        await h.close()

    run(main())
