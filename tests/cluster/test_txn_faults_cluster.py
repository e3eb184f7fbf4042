"""Transactions under broker faults in a 3-broker cluster (issue 19): RF 3, min.insync.replicas 2, a transactional
producer committing and aborting in a loop (tests/cluster/txn_workload.py) while the transaction coordinator's broker
(one seed) or a partition leader that is not the coordinator (the other) is killed with SIGKILL and restarted. The
checker (tests/support/txn_checker.py) then reads every partition READ_COMMITTED and demands: every committed record
exactly once, no aborted record, each transaction of unknown outcome all or nothing, commit order kept."""

from __future__ import annotations

import pytest

from tests.cluster.txn_workload import TxnLoop, read_committed
from tests.support.txn_checker import check_transactions

PARTITIONS = 3  # led by all three brokers: one is led away from the coordinator
OVERRIDES = {"transaction.state.log.num.partitions": 1, "offsets.topic.num.partitions": 1}


@pytest.mark.parametrize("victim", ["coordinator", "leader"])
def test_kill9_during_commits_loses_and_duplicates_nothing(cluster_factory, queue_report, victim: str) -> None:
    c = cluster_factory(3, overrides=OVERRIDES)
    topic = f"txk-{victim}"
    c.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": 2})
    loop = TxnLoop(c.bootstrap, topic, PARTITIONS, f"txk-{victim}", seed=len(victim)).start()
    try:
        loop.wait_ended(5)
        coordinator = c.leader_of("__transaction_state", 0)
        if victim == "coordinator":
            dead = coordinator
        else:  # the leader of a partition, on a broker that does not coordinate the transaction
            dead = next(c.leader_of(topic, p) for p in range(PARTITIONS) if c.leader_of(topic, p) != coordinator)
        c.kill9(dead)
        c.wait_leader("__transaction_state", 0, not_in=[dead])
        for p in range(PARTITIONS):
            c.wait_leader(topic, p, not_in=[dead])
        loop.wait_ended(5)
        c.start(dead)
        c.wait_full_isr(topic, PARTITIONS)
        loop.wait_ended(5)
    finally:
        loop.stop()
    reads = read_committed(c.bootstrap, topic, PARTITIONS)
    verdict = check_transactions(loop.history, reads)
    line = f"txn {victim} kill -9 (broker {dead}): {verdict.summary()}; producer restarts {loop.restarts}"
    queue_report(line)
    assert verdict.ok, f"{line}\n{verdict.report()}\nerrors: {loop.errors[:10]}"
    assert verdict.counts["committed"] >= 10, line
