"""Transactions under broker faults in a 3-broker cluster (issue 19): RF 3, min.insync.replicas 2, a transactional
producer committing and aborting in a loop (tests/cluster/txn_workload.py) while the transaction coordinator's broker
(one seed) or a partition leader that is not the coordinator (the other) is killed with SIGKILL and restarted. The
checker (tests/support/txn_checker.py) then reads every partition READ_COMMITTED and demands: every committed record
exactly once, no aborted record, each transaction of unknown outcome all or nothing, commit order kept."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.cluster.txn_workload import TxnLoop, read_committed
from tests.support.broker_proc import REPO_ROOT
from tests.support.ck import QUIET
from tests.support.txn_checker import check_transactions, check_transform
from tests.support.txn_log import read_confluent
from tests.support.waiting import wait_until

PARTITIONS = 3  # led by all three brokers: one is led away from the coordinator
OFFSETS_TOPIC = "__consumer_offsets"
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


def _ends(bootstrap: str, topic: str, partitions: int) -> tuple[list[int], list[int]]:
    """(LSOs, HWs): the latest offsets ListOffsets answers READ_COMMITTED and READ_UNCOMMITTED."""
    out = []
    for isolation in ("read_committed", "read_uncommitted"):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", "isolation.level": isolation, **QUIET})
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            out.append([c.get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in tps])
        finally:
            c.close()
    return out[0], out[1]


def _wait_settled(bootstrap: str, topic: str, end: list[int]) -> None:
    """Until every partition's LSO and HW are at `end`."""

    def settled() -> bool:
        lso, hw = _ends(bootstrap, topic, len(end))
        return lso == hw == end

    wait_until(settled, 60, message=lambda: f"(LSOs, HWs) {_ends(bootstrap, topic, len(end))}, expected {end}")


def test_partition_leader_fails_over_between_produce_and_marker(cluster_factory) -> None:
    """The records of an open transaction are replicated; their leader dies before EndTxn. The new leader holds the
    LSO at the transaction's first offset (its producer state came from replication), and the coordinator's markers
    reach it: commit in one transaction, abort in the next, both after a leader change."""
    c = cluster_factory(3, overrides=OVERRIDES)
    topic = "txm"
    c.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": 2})
    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "txm", "acks": "all", **QUIET})
    p.init_transactions(60)
    coordinator = c.leader_of("__transaction_state", 0)
    dead: list[int] = []
    for n, commit in enumerate((True, False)):
        p.begin_transaction()
        for part in range(PARTITIONS):
            p.produce(topic, f"{n}-{part}".encode(), partition=part)
        p.flush(60)
        victim_p = next(q for q in range(PARTITIONS) if c.leader_of(topic, q) not in (coordinator, *dead))
        victim = c.leader_of(topic, victim_p)
        c.kill9(victim)
        dead.append(victim)
        c.wait_leader(topic, victim_p, not_in=[victim])
        # a new leader answers OFFSET_NOT_AVAILABLE (retriable, KIP-207) until its HW has caught up
        lso, hw = wait_until(lambda: _ends(c.bootstrap, topic, PARTITIONS), 60, message="ListOffsets at the new leader")
        assert lso[victim_p] == 2 * n < hw[victim_p], (lso, hw)  # the open transaction holds the new leader's LSO
        if commit:
            p.commit_transaction(60)
        else:
            p.abort_transaction(60)
        _wait_settled(c.bootstrap, topic, [2 * (n + 1)] * PARTITIONS)  # a record and a marker per transaction
        c.start(victim)
    for part in range(PARTITIONS):
        got = read_confluent(c.bootstrap, topic, "read_committed", stop=4, partition=part)
        assert got == [f"0-{part}".encode()], (part, got)


def test_paused_zombie_is_aborted_by_timeout_and_fenced(cluster_factory, tmp_path) -> None:
    """A producer process stopped (SIGSTOP, as a network partition or a long GC pause) mid-transaction: after
    transaction.timeout.ms the coordinator aborts its transaction, the LSO moves and a READ_COMMITTED consumer goes
    on; a new producer with the same transactional id commits; the resumed zombie cannot write (fenced)."""
    c = cluster_factory(3, overrides={**OVERRIDES, "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})
    topic = "txz"
    c.create_topic(topic, 1, 3, {"min.insync.replicas": 2})
    cmd = [sys.executable, "-m", "tests.support.txn_zombie", "--bootstrap", c.bootstrap, "--topic", topic]
    zombie = subprocess.Popen(
        [*cmd, "--tid", "txz", "--txn-timeout-ms", "3000"],
        cwd=str(REPO_ROOT),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert zombie.stdout is not None and zombie.stdin is not None
        assert zombie.stdout.readline().strip() == "ready"
        os.kill(zombie.pid, signal.SIGSTOP)
        assert _ends(c.bootstrap, topic, 1) == ([0], [1])
        # the coordinator aborts the transaction past its timeout: the marker moves the LSO to the HW
        wait_until(lambda: _ends(c.bootstrap, topic, 1) == ([2], [2]), 60, message="the LSO did not move")

        fresh = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "txz", **QUIET})
        fresh.init_transactions(60)
        fresh.begin_transaction()
        fresh.produce(topic, b"fresh", partition=0)
        fresh.commit_transaction(60)

        os.kill(zombie.pid, signal.SIGCONT)
        zombie.stdin.write("go\n")
        zombie.stdin.flush()
        result = json.loads(zombie.stdout.readline())
        assert zombie.wait(60) == 0
    finally:
        if zombie.poll() is None:
            os.kill(zombie.pid, signal.SIGCONT)
            zombie.kill()
            zombie.wait()
    assert result["error"] in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"), result
    wait_until(lambda: _ends(c.bootstrap, topic, 1)[0] == _ends(c.bootstrap, topic, 1)[1], 30)
    end = _ends(c.bootstrap, topic, 1)[1][0]
    assert read_confluent(c.bootstrap, topic, "read_committed", stop=end) == [b"fresh"]


def test_consume_transform_produce_across_a_group_coordinator_kill(cluster_factory, tmp_path) -> None:
    """The consume-transform-produce application (tests/support/ctp_app.py) runs while the broker leading
    `__consumer_offsets` (its group coordinator, where its transactional offsets wait for their markers) is killed
    with SIGKILL and restarted: each input's result is read exactly once and the offsets reach the input's end."""
    c = cluster_factory(3, overrides=OVERRIDES)
    n = 80
    c.create_topic("ctp-in", 2, 3, {"min.insync.replicas": 2})
    c.create_topic("ctp-out", 2, 3, {"min.insync.replicas": 2})
    inputs = {p: [f"p{p}-{i}".encode() for i in range(n)] for p in range(2)}
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", **QUIET})
    for p, values in inputs.items():
        for v in values:
            producer.produce("ctp-in", v, partition=p)
    assert producer.flush(60) == 0
    events = tmp_path / "events.jsonl"
    cmd = [sys.executable, "-m", "tests.support.ctp_app", "--bootstrap", c.bootstrap, "--input", "ctp-in"]
    cmd += ["--output", "ctp-out", "--partitions", "2", "--group", "ctp", "--tid", "ctp", "--events", str(events)]
    with open(tmp_path / "app.err", "wb") as err:
        app = subprocess.Popen(cmd, cwd=str(REPO_ROOT), stdout=subprocess.DEVNULL, stderr=err)
    try:

        def committed(k: int) -> bool:
            lines = events.read_text().splitlines() if events.exists() else []
            return sum(json.loads(x)["event"] == "committed" for x in lines) >= k

        wait_until(lambda: committed(3), 60)
        victim = c.leader_of(OFFSETS_TOPIC, 0)
        c.kill9(victim)
        c.wait_leader(OFFSETS_TOPIC, 0, not_in=[victim])
        c.start(victim)
        assert app.wait(120) == 0, events.read_text()[-3000:]
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
    reads = read_committed(c.bootstrap, "ctp-out", 2)
    verdict = check_transform(inputs, reads, b">out")
    assert verdict.ok, verdict.report()
    probe = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "ctp", **QUIET})
    try:
        got = probe.committed([TopicPartition("ctp-in", p) for p in range(2)], timeout=30)
        assert [tp.offset for tp in got] == [n, n]
    finally:
        probe.close()
