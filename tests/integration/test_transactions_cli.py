"""`strata transactions` (like kafka-transactions.sh) as an operator runs it, against a live broker with a real
confluent-kafka transactional producer whose transaction is left open: list, describe, describe-producers,
find-hanging (a transaction no coordinator knows, written while the broker was down), and abort (by start offset:
DescribeProducers + WriteTxnMarkers; or by producer id and epochs), after which the LSO moves and a READ_COMMITTED
consumer reads past the aborted records; and the transaction metrics (docs/metrics.md) count what producers did.

One broker for the module; the find-hanging test restarts it and runs last."""

from __future__ import annotations

import subprocess
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from tests.support import ck
from tests.support.broker_proc import StrataBroker
from tests.support.txn_log import TxnWriter, read_confluent, write_partition
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StrataBroker]:
    b = StrataBroker(
        tmp_path_factory.mktemp("transactions-cli"),
        {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3},
        name="transactions-cli",
    ).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def cli(broker, capsys):
    """`strata transactions ...` in-process (argparse + sockets); the result looks like a subprocess's."""
    from strata.cli.main import main

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        capsys.readouterr()
        argv = ["transactions", "--bootstrap-server", broker.bootstrap, *args]
        rc = main(argv)
        out = capsys.readouterr()
        return subprocess.CompletedProcess(argv, rc, out.out, out.err)

    return run


def ok(r: subprocess.CompletedProcess[str]) -> list[list[str]]:
    """The table's rows split into cells (kafka-transactions.sh ends every cell with a tab)."""
    assert r.returncode == 0, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    lines = r.stdout.splitlines()
    assert all(line.endswith("\t") for line in lines), lines
    return [[c.strip() for c in line.split("\t")[:-1]] for line in lines]


def fails(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 1, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    err = r.stderr.strip()
    assert err.startswith("strata transactions: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def _lso(broker: StrataBroker, topic: str) -> int:
    c = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "probe", "isolation.level": "read_committed", **ck.QUIET}
    )
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1])
    finally:
        c.close()


def test_list_describe_and_abort_an_open_transaction(broker, cli):
    topic = f"txcli-{uuid.uuid4().hex[:8]}"
    ck.create_topic(broker.bootstrap, topic, 1)
    tid = f"tx-{topic}"
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid, **ck.QUIET})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"committed")
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"left-open-0")
    p.produce(topic, b"left-open-1")
    p.flush(30)  # offsets 0 (record), 1 (commit marker), 2-3 the open transaction

    rows = ok(cli("list"))
    assert rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    mine = [r for r in rows[1:] if r[0] == tid]
    assert len(mine) == 1 and mine[0][1] == "0" and mine[0][3] == "Ongoing", rows
    pid = mine[0][2]

    rows = ok(cli("describe", "--transactional-id", tid))
    assert rows[0] == [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
    ]
    d = dict(zip(rows[0], rows[1]))
    assert (d["CoordinatorId"], d["ProducerId"], d["TransactionState"]) == ("0", pid, "Ongoing")
    assert d["TopicPartitions"] == f"{topic}-0" and int(d["TransactionDurationMs"]) >= 0
    err = fails(cli("describe", "--transactional-id", "no-such-id"))
    assert "Failed to describe transaction state of transactional-id `no-such-id`" in err
    assert "TRANSACTIONAL_ID_NOT_FOUND" in err

    rows = ok(cli("describe-producers", "--topic", topic, "--partition", "0"))
    assert rows[0][-1] == "CurrentTransactionStartOffset"
    assert [(r[0], r[-1]) for r in rows[1:]] == [(pid, "2")]

    # the transaction is not hanging: its coordinator still has the partition in it
    rows = ok(cli("find-hanging", "--topic", topic, "--max-transaction-timeout", "0"))
    assert rows == [
        ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp"]
        + ["Duration(min)"]
    ]
    fails(cli("find-hanging"))  # needs --topic or --broker-id

    assert _lso(broker, topic) == 2  # the open transaction holds the LSO
    err = fails(cli("abort", "--topic", topic, "--partition", "0", "--start-offset", "3"))
    assert f"Could not find any open transactions starting at offset 3 on partition {topic}-0" in err
    ok(cli("abort", "--topic", topic, "--partition", "0", "--start-offset", "2"))
    wait_until(lambda: _lso(broker, topic) == 5, 30)  # the abort marker at 4 closed it
    assert read_confluent(broker.bootstrap, topic, "read_committed", stop=5) == [b"committed"]
    rows = ok(cli("describe-producers", "--topic", topic, "--partition", "0"))
    assert [(r[0], r[-1]) for r in rows[1:]] == [(pid, "None")]
    p.abort_transaction(30)  # the producer ends its transaction at the coordinator; the marker is harmless


def _scrape(broker: StrataBroker) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_metrics_count_transactions_and_the_lso_lag(broker):
    topic = f"txmet-{uuid.uuid4().hex[:8]}"
    ck.create_topic(broker.bootstrap, topic, 1)

    # what other tests' transactions still complete (markers after EndTxn's answer) is counted before this one starts
    def quiet() -> dict | None:
        m = _scrape(broker)
        return m if m.get(("strata_txn_coordinator_markers_pending", ())) == 0 else None

    before = wait_until(quiet, 30, message="earlier transactions completed")
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{topic}", **ck.QUIET})
    p.init_transactions(30)
    for commit in (True, False):
        p.begin_transaction()
        p.produce(topic, b"x")
        p.flush(30)
        p.commit_transaction(30) if commit else p.abort_transaction(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, b"open-%d" % i)
    p.flush(30)

    def delta(m: dict, name: str, *labels: tuple[str, str]) -> float:
        return m.get((name, labels), 0.0) - before.get((name, labels), 0.0)

    part = (("partition", "0"), ("topic", topic))
    done = "strata_txn_coordinator_transactions_completed_total"

    def settled() -> dict | None:
        m = _scrape(broker)
        return m if delta(m, done, ("result", "abort")) == 1 and m.get(("strata_log_lso_lag", part)) == 3 else None

    m = wait_until(settled, 30, message="abort counted and the LSO lag of the open transaction")
    assert delta(m, done, ("result", "commit")) == 1
    assert delta(m, "strata_txn_coordinator_marker_latency_seconds_count") == 2
    assert m[("strata_log_last_stable_offset", part)] == 4  # x, commit marker, x, abort marker; then 3 open records
    assert m[("strata_log_high_watermark", part)] == 7
    assert m[("strata_txn_coordinator_transactions", (("state", "Ongoing"),))] >= 1
    assert m[("strata_txn_coordinator_partitions", (("state", "loaded"),))] == 3  # every __transaction_state partition
    assert m[("strata_txn_coordinator_partitions", (("state", "loading"),))] == 0
    p.commit_transaction(30)
    wait_until(lambda: _scrape(broker).get(("strata_log_lso_lag", part)) == 0, 30)
    wait_until(lambda: _scrape(broker)[("strata_txn_coordinator_markers_pending", ())] == 0, 30)


def test_abort_by_producer_id_epoch_and_coordinator_epoch(broker, cli):
    """The form kafka-transactions.sh keeps for brokers older than 3.0: the caller names the producer itself."""
    topic = f"txcli-{uuid.uuid4().hex[:8]}"
    ck.create_topic(broker.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{topic}", **ck.QUIET})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"open")
    p.flush(30)
    rows = ok(cli("describe-producers", "--topic", topic, "--partition", "0"))
    d = dict(zip(rows[0], rows[1]))
    assert d["CurrentTransactionStartOffset"] == "0"
    base = ["abort", "--topic", topic, "--partition", "0", "--producer-id", d["ProducerId"]]
    assert "Missing required argument --producer-epoch" in fails(cli(*base))
    assert "must be identified either with --start-offset" in fails(cli("abort", "--topic", topic, "--partition", "0"))
    assert _lso(broker, topic) == 0
    ok(cli(*base, "--producer-epoch", d["ProducerEpoch"], "--coordinator-epoch", d["LatestCoordinatorEpoch"]))
    wait_until(lambda: _lso(broker, topic) == 2, 30)
    assert read_confluent(broker.bootstrap, topic, "read_committed", stop=2) == []
    p.abort_transaction(30)


def test_find_hanging_and_abort_a_transaction_no_coordinator_knows(broker, cli):
    """A hanging transaction: data of a producer whose coordinator has no transaction (written into the partition
    while the broker is down, as a lost marker would leave it). find-hanging lists it, abort by start offset ends it.
    Restarts the module's broker: runs last."""
    topic = f"txhang-{uuid.uuid4().hex[:8]}"
    ck.create_topic(broker.bootstrap, topic, 1)
    pid = 900_000  # above any producer id block the broker handed out in this module

    def build(w: TxnWriter) -> None:
        w.plain(b"before")
        w.txn(pid, b"hanging-0", b"hanging-1")

    broker.stop()
    write_partition(broker.partition_dir(topic, 0), build)
    broker.start()
    assert _lso(broker, topic) == 1

    headers = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp"]
    headers.append("Duration(min)")
    rows = wait_until(lambda: ok(cli("find-hanging", "--topic", topic, "--max-transaction-timeout", "0"))[1:], 30)
    assert [r[:6] for r in rows] == [[topic, "0", str(pid), "0", "-1", "1"]]
    assert ok(cli("find-hanging", "--broker-id", "0", "--max-transaction-timeout", "0"))[0] == headers
    assert ok(cli("find-hanging", "--topic", topic))[1:] == []  # younger than the default 15 minutes
    ok(cli("abort", "--topic", topic, "--partition", "0", "--start-offset", "1"))
    wait_until(lambda: _lso(broker, topic) == 4, 30)  # the abort marker at 3 closed it
    assert read_confluent(broker.bootstrap, topic, "read_committed", stop=4) == [b"before"]
    assert ok(cli("find-hanging", "--topic", topic, "--max-transaction-timeout", "0")) == [headers]
