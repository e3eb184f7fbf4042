"""`strata transactions` (like kafka-transactions.sh) as an operator runs it, against a live broker with a real
confluent-kafka transactional producer whose transaction is left open: list, describe, describe-producers,
find-hanging, and abort by start offset (DescribeProducers + WriteTxnMarkers), after which the LSO moves and a
READ_COMMITTED consumer reads past the aborted records."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support import ck
from tests.support.broker_proc import StrataBroker
from tests.support.txn_log import read_confluent
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
