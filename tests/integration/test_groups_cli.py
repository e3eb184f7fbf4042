"""`strata groups` (like kafka-consumer-groups.sh) as a user runs it, plus the consumer-group admin APIs of
confluent-kafka's and kafka-python's admin clients, against a live broker with a real consumer group."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support import ck
from tests.support.broker_proc import REPO_ROOT
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC = "cli-grp"
PER_PARTITION = 10


def strata(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strata", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False
    )


_capture: pytest.CaptureFixture[str] | None = None


@pytest.fixture(autouse=True)
def _cli_capture(capsys):
    global _capture
    _capture = capsys
    yield
    _capture = None


def groups(bs: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`strata groups ...` in-process (the CLI is plain argparse + sockets); the result looks like a subprocess's."""
    from strata.cli.main import main

    assert _capture is not None
    _capture.readouterr()
    argv = ["groups", "--bootstrap-server", bs, *args]
    rc = main(argv)
    out = _capture.readouterr()
    return subprocess.CompletedProcess(argv, rc, out.out, out.err)


def ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    return r.stdout


def fails(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 1, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    err = r.stderr.strip()
    assert err.startswith("strata groups: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def table(out: str) -> list[list[str]]:
    lines = [line for line in out.splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["GROUP", "TOPIC"])
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith(("State:", "(")):
            break
        rows.append(line.split())
    return rows


@pytest.fixture(scope="module")
def bs(module_broker):
    b = module_broker.bootstrap
    ck.create_topic(b, TOPIC, 2)
    p = ck.producer(b)
    for i in range(2 * PER_PARTITION):
        p.produce(TOPIC, value=b"v%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    return b


def consumer(bs: str, group: str, client_id: str = "cli-consumer") -> Consumer:
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": group,
            "client.id": client_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "log_level": 3,
        }
    )
    c.subscribe([TOPIC])
    return c


def consume_n(c: Consumer, n: int) -> None:
    got = 0

    def step():
        nonlocal got
        msgs = [m for m in c.consume(100, 0.2) if m.error() is None]
        got += len(msgs)
        return got >= n

    wait_until(step, timeout=30)


def test_list_describe_reset_delete(bs):
    group = "cli-g1"
    c = consumer(bs, group)
    consume_n(c, 2 * PER_PARTITION)
    c.commit(offsets=[TopicPartition(TOPIC, 0, 7), TopicPartition(TOPIC, 1, 10)], asynchronous=False)

    assert group in ok(groups(bs, "list")).split()
    stable = ok(groups(bs, "list", "--state", "Stable"))
    assert any(line.split() == [group, "Stable"] for line in stable.splitlines())
    # --type/--state without a value add the column (kafka-consumer-groups.sh --list --type --state)
    listed = ok(groups(bs, "list", "--type", "--state")).splitlines()
    assert listed[0].split() == ["GROUP", "TYPE", "STATE"] and [group, "Classic", "Stable"] in [
        r.split() for r in listed
    ]
    assert [group, "Classic"] in [r.split() for r in ok(groups(bs, "list", "--type", "classic")).splitlines()]
    assert group not in ok(groups(bs, "list", "--type", "consumer"))
    assert group not in ok(groups(bs, "list", "--state", "empty,dead"))
    assert "Invalid type list 'simple'" in fails(groups(bs, "list", "--type", "simple"))

    # --members --verbose and --state of a classic group: no epochs, no target assignment
    members = ok(groups(bs, "describe", "--group", group, "--members", "--verbose")).split("\n")[2:]
    assert members[0].split()[:1] + members[0].split()[2:] == [group, "/127.0.0.1", "cli-consumer", "2", "-"] + [
        f"{TOPIC}:0,1",
        "-",
        "-",
    ]
    state = ok(groups(bs, "describe", "--group", group, "--state")).splitlines()[-1].split()
    assert state[0] == group and state[3:] == ["range", "Stable", "1"]

    # describe with an active member: per partition current offset, log end offset, lag, owner
    out = ok(groups(bs, "describe", "--group", group))
    rows = table(out)
    assert [r[:6] for r in rows] == [[group, TOPIC, "0", "7", "10", "3"], [group, TOPIC, "1", "10", "10", "0"]]
    assert all(r[6].startswith("cli-consumer-") and r[7] == "/127.0.0.1" and r[8] == "cli-consumer" for r in rows)
    assert "State: Stable  Members: 1" in out

    # offsets cannot be reset or the group deleted while it has members
    assert "inactive" in fails(groups(bs, "reset-offsets", "--group", group, "--topic", TOPIC, "--to-earliest"))
    assert "NON_EMPTY_GROUP" in fails(groups(bs, "delete", "--group", group))

    c.close()  # LeaveGroup: the group becomes Empty
    out = ok(groups(bs, "describe", "--group", group))
    assert "has no active members" in out and "State: Empty  Members: 0" in out
    assert [r[:9] for r in table(out)] == [
        [group, TOPIC, "0", "7", "10", "3", "-", "-", "-"],
        [group, TOPIC, "1", "10", "10", "0", "-", "-", "-"],
    ]

    # reset: dry run changes nothing, --execute commits (clamped into the log for --to-offset)
    out = ok(groups(bs, "reset-offsets", "--group", group, "--topic", TOPIC, "--to-earliest"))
    assert list(table(out)) == [[group, TOPIC, "0", "0"], [group, TOPIC, "1", "0"]] and "dry run" in out
    assert [r[3] for r in table(ok(groups(bs, "describe", "--group", group)))] == ["7", "10"]
    ok(groups(bs, "reset-offsets", "--group", group, "--topic", TOPIC, "--to-earliest", "--execute"))
    assert [r[3:6] for r in table(ok(groups(bs, "describe", "--group", group)))] == [["0", "10", "10"]] * 2
    ok(groups(bs, "reset-offsets", "--group", group, "--topic", f"{TOPIC}:1", "--to-offset", "99", "--execute"))
    ok(groups(bs, "reset-offsets", "--group", group, "--topic", f"{TOPIC}:0", "--to-offset", "4", "--execute"))
    assert [r[3] for r in table(ok(groups(bs, "describe", "--group", group)))] == ["4", "10"]
    ok(groups(bs, "reset-offsets", "--group", group, "--topic", TOPIC, "--to-latest", "--execute"))
    assert [r[3] for r in table(ok(groups(bs, "describe", "--group", group)))] == ["10", "10"]

    # a new member resumes from the reset offsets
    ok(groups(bs, "reset-offsets", "--group", group, "--topic", f"{TOPIC}:0", "--to-offset", "8", "--execute"))
    c = consumer(bs, group)
    got = []
    wait_until(
        lambda: got.extend(m.offset() for m in c.consume(100, 0.2) if m.error() is None) or len(got) >= 2, timeout=30
    )
    assert sorted(got) == [8, 9]
    c.close()

    out = ok(groups(bs, "delete", "--group", group))
    assert f"Deletion of requested consumer groups ('{group}') was successful." in out
    assert group not in ok(groups(bs, "list")).split()
    assert "does not exist" in fails(groups(bs, "describe", "--group", group))
    assert "GROUP_ID_NOT_FOUND" in fails(groups(bs, "delete", "--group", group))


def test_consumer_protocol_group(bs):
    """A KIP-848 group (confluent-kafka, group.protocol=consumer): `list` shows its TYPE, `describe --members
    --verbose` its member epoch with the current and target assignment (ConsumerGroupDescribe), `--state --verbose`
    the group and target assignment epochs; the default view adds the members table to the offsets."""
    group = "cli-kip848"
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": group,
            "group.protocol": "consumer",
            "client.id": "cli-848",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    c.subscribe([TOPIC])
    try:
        consume_n(c, 2 * PER_PARTITION)
        c.commit(asynchronous=False)
        rows = [r.split() for r in ok(groups(bs, "list", "--type", "--state")).splitlines()]
        assert [group, "Consumer", "Stable"] in rows
        assert group in ok(groups(bs, "list", "--type", "consumer")).split()
        assert group not in ok(groups(bs, "list", "--type", "classic")).split()

        header, row = (
            r.split() for r in ok(groups(bs, "describe", "--group", group, "--members", "--verbose")).splitlines()[-2:]
        )
        assert header == [
            "GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
            "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT",
        ]  # fmt: skip
        assert row[0] == group and row[2:5] == ["/127.0.0.1", "cli-848", "2"]
        assert row[6] == row[8] == f"{TOPIC}:0,1"
        assert int(row[5]) == int(row[7]) >= 1  # reconciled: the member is at the target assignment's epoch
        state = ok(groups(bs, "describe", "--group", group, "--state", "--verbose")).splitlines()[-1].split()
        assert state[0] == group and state[3:5] == ["uniform", "Stable"] and state[7] == "1"
        assert int(state[5]) >= int(state[6]) == int(row[7])  # group epoch >= target assignment epoch

        out = ok(groups(bs, "describe", "--group", group))
        assert [r[:6] for r in table(out) if r[1:2] == [TOPIC]] == [
            [group, TOPIC, "0", "10", "10", "0"],
            [group, TOPIC, "1", "10", "10", "0"],
        ]
        assert "TARGET-ASSIGNMENT" in out and "State: Stable  Members: 1" in out
    finally:
        c.close()


def test_confluent_admin_group_apis(bs):
    group = "ck-admin"
    c = consumer(bs, group, "ck-admin-consumer")
    consume_n(c, 2 * PER_PARTITION)
    c.commit(asynchronous=False)
    a = AdminClient({"bootstrap.servers": bs, "log_level": 3})
    listed = a.list_consumer_groups(request_timeout=10).result(timeout=15)
    mine = {g.group_id: g for g in listed.valid}
    assert mine[group].state == ConsumerGroupState.STABLE and not mine[group].is_simple_consumer_group
    desc = a.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    assert desc.state == ConsumerGroupState.STABLE and desc.partition_assignor == "range"
    assert [(m.client_id, sorted(tp.partition for tp in m.assignment.topic_partitions)) for m in desc.members] == [
        ("ck-admin-consumer", [0, 1])
    ]
    from confluent_kafka import ConsumerGroupTopicPartitions

    offs = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=15)
    assert sorted((tp.partition, tp.offset) for tp in offs.topic_partitions) == [(0, 10), (1, 10)]
    c.close()
    wait_until(
        lambda: a.describe_consumer_groups([group])[group].result(timeout=15).state == ConsumerGroupState.EMPTY,
        timeout=15,
    )
    res = a.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(TOPIC, 0, 3)])])
    res[group].result(timeout=15)
    offs = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=15)
    assert sorted((tp.partition, tp.offset) for tp in offs.topic_partitions) == [(0, 3), (1, 10)]
    a.delete_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    assert group not in {g.group_id for g in a.list_consumer_groups().result(timeout=15).valid}


def test_kafka_python_admin_group_apis(bs):
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTP

    group = "kp-admin"
    c = consumer(bs, group, "kp-admin-consumer")
    consume_n(c, 2 * PER_PARTITION)
    c.commit(offsets=[TopicPartition(TOPIC, 0, 5), TopicPartition(TOPIC, 1, 6)], asynchronous=False)
    a = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=10000)
    try:
        listed = {g["group_id"]: g for g in a.list_groups()}
        assert (listed[group]["group_state"], listed[group]["group_type"]) == ("Stable", "classic")
        d = a.describe_groups([group])[group]
        assert (d["group_state"], d["protocol_data"], d["error"]) == ("Stable", "range", None)
        assert [(m["client_id"], m["member_assignment"]["assigned_partitions"]) for m in d["members"]] == [
            ("kp-admin-consumer", [{"topic": TOPIC, "partitions": [0, 1]}])
        ]
        # Kafka 4.x's group operations (group configs, KIP-848, made DESCRIBE_CONFIGS and ALTER_CONFIGS two of them)
        assert sorted(d["authorized_operations"]) == ["ALTER_CONFIGS", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "READ"]
        offs = a.list_group_offsets({group: None})[group]
        assert {tp.partition: om.offset for tp, om in offs.items()} == {0: 5, 1: 6}
        c.close()
        wait_until(lambda: a.describe_groups([group])[group]["group_state"] == "Empty", timeout=15)
        a.alter_group_offsets(group, {KTP(TOPIC, 1): OffsetAndMetadata(3, "", -1)})
        a.delete_group_offsets(group, [KTP(TOPIC, 0)])
        offs = a.list_group_offsets({group: None})[group]
        assert {tp.partition: om.offset for tp, om in offs.items()} == {1: 3}
        assert a.delete_groups([group, "kp-ghost"]) == {group: "OK", "kp-ghost": "GroupIdNotFoundError"}
        assert group not in {g["group_id"] for g in a.list_groups()}
    finally:
        a.close()


def test_cli_as_a_subprocess(bs):
    """One real `python -m strata groups` run: entry point wiring and exit codes."""
    r = strata("groups", "--bootstrap-server", bs, "describe", "--group", "nobody-here")
    assert (
        r.returncode == 1 and r.stderr.strip() == "strata groups: error: Consumer group 'nobody-here' does not exist."
    )
    r = strata("groups", "--bootstrap-server", bs, "list")
    assert r.returncode == 0, r.stderr
