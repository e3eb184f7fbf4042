"""The ``strata`` CLI as a user runs it (``python -m strata ...`` subprocesses) against a live broker: topics
create/list/describe/alter/alter-config/delete, readable one-line errors with exit code 1, connection refused, and
``dump-log`` on a segment written by a real producer."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from confluent_kafka import Producer

from tests.support import ck
from tests.support.broker_proc import REPO_ROOT, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def strata(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strata", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def topics(broker, *args: str) -> subprocess.CompletedProcess[str]:
    return strata("topics", "--bootstrap-server", broker.bootstrap, *args)


def ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    return r.stdout


def fails(r: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert r.returncode == code, f"exit {r.returncode}, expected {code}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    err = r.stderr.strip()
    assert err and "\n" not in err and "Traceback" not in err, f"not a one-line error: {r.stderr!r}"
    return err


def _describe_lines(out: str) -> tuple[str, list[str]]:
    lines = out.strip().splitlines()
    return lines[0], [line.strip() for line in lines[1:]]


def test_topic_lifecycle(module_broker):
    b = module_broker
    out = ok(
        topics(
            b,
            "create",
            "--topic",
            "cli-a",
            "--partitions",
            "3",
            "--replication-factor",
            "1",
            "--config",
            "retention.ms=60000",
            "--config",
            "cleanup.policy=compact",
        )
    )
    assert "Created topic cli-a" in out
    assert "cli-a" in ok(topics(b, "list")).split()

    header, parts = _describe_lines(ok(topics(b, "describe", "--topic", "cli-a")))
    assert header.startswith("Topic: cli-a\tTopicId: ")
    assert "PartitionCount: 3\tReplicationFactor: 1" in header
    configs = header.split("Configs: ", 1)[1].split(",")
    assert sorted(configs) == ["cleanup.policy=compact", "retention.ms=60000"]
    assert len(parts) == 3
    for i, line in enumerate(parts):
        assert line == (
            f"Topic: cli-a\tPartition: {i}\tLeader: 0\tReplicas: 0\tIsr: 0\tLogStartOffset: 0\tEndOffset: 0"
        )

    ok(topics(b, "alter-config", "--topic", "cli-a", "--set", "segment.ms=3600000", "--delete", "retention.ms"))
    header, _ = _describe_lines(ok(topics(b, "describe", "--topic", "cli-a")))
    assert sorted(header.split("Configs: ", 1)[1].split(",")) == ["cleanup.policy=compact", "segment.ms=3600000"]

    ok(topics(b, "alter", "--topic", "cli-a", "--partitions", "4"))
    _, parts = _describe_lines(ok(topics(b, "describe", "--topic", "cli-a")))
    assert len(parts) == 4

    assert "Deleted topic cli-a" in ok(topics(b, "delete", "--topic", "cli-a"))
    assert "cli-a" not in ok(topics(b, "list")).split()


def test_describe_shows_offsets_after_produce_and_delete_records(module_broker):
    b = module_broker
    ok(topics(b, "create", "--topic", "cli-off", "--partitions", "1"))
    p = Producer({"bootstrap.servers": b.bootstrap, **ck.QUIET})
    for i in range(5):
        p.produce("cli-off", value=f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0
    _, parts = _describe_lines(ok(topics(b, "describe", "--topic", "cli-off")))
    assert parts[0].endswith("LogStartOffset: 0\tEndOffset: 5")

    from strata.cli.admin_client import AdminClient

    with AdminClient(b.bootstrap) as a:
        assert a.delete_records("cli-off", {0: 3}) == {0: 3}
    _, parts = _describe_lines(ok(topics(b, "describe", "--topic", "cli-off")))
    assert parts[0].endswith("LogStartOffset: 3\tEndOffset: 5")


def test_errors_are_one_line_with_exit_1(module_broker):
    b = module_broker
    ok(topics(b, "create", "--topic", "cli-err"))
    assert "TOPIC_ALREADY_EXISTS" in fails(topics(b, "create", "--topic", "cli-err"))
    ok(topics(b, "create", "--topic", "cli-err", "--if-not-exists"))
    err = fails(topics(b, "alter-config", "--topic", "cli-err", "--set", "retention.ms=soon"))
    assert "INVALID_CONFIG" in err and "retention.ms" in err and "soon" in err
    assert "Unknown topic config name: nope" in fails(topics(b, "create", "--topic", "cli-err2", "--config", "nope=1"))
    assert "INVALID_TOPIC_EXCEPTION" in fails(topics(b, "create", "--topic", "bad/name"))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in fails(topics(b, "describe", "--topic", "cli-missing"))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in fails(topics(b, "delete", "--topic", "cli-missing"))
    ok(topics(b, "delete", "--topic", "cli-missing", "--if-exists"))
    assert "INVALID_PARTITIONS" in fails(topics(b, "alter", "--topic", "cli-err", "--partitions", "1"))
    assert "--set" in fails(topics(b, "alter-config", "--topic", "cli-err"))
    # argparse usage errors keep argparse's exit code 2
    assert topics(b, "create", "--topic", "x", "--config", "novalue").returncode == 2


def test_connection_refused_is_reported():
    port = free_port()  # nothing listens there
    err = fails(strata("topics", "--bootstrap-server", f"127.0.0.1:{port}", "list"))
    assert f"connection refused by 127.0.0.1:{port}" in err


def test_a_dead_bootstrap_server_is_skipped(module_broker):
    """As with Kafka's tools, the first server of the list that answers is used; none answering names them all."""
    dead, dead2 = free_port(), free_port()
    ok(
        strata(
            "topics",
            "--bootstrap-server",
            f"127.0.0.1:{dead},{module_broker.bootstrap}",
            "create",
            "--topic",
            "cli-second-server",
        )
    )
    assert "cli-second-server" in ok(topics(module_broker, "list")).split()
    err = fails(strata("topics", "--bootstrap-server", f"127.0.0.1:{dead},127.0.0.1:{dead2}", "list"))
    assert f"connection refused by 127.0.0.1:{dead}" in err and f"connection refused by 127.0.0.1:{dead2}" in err


def test_bootstrap_server_after_the_action(module_broker):
    ok(strata("topics", "create", "--topic", "cli-order", "--bootstrap-server", module_broker.bootstrap))
    assert "cli-order" in ok(strata("topics", "list", "--bootstrap-server", module_broker.bootstrap)).split()


def test_dump_log_on_a_produced_segment(module_broker):
    b = module_broker
    ok(topics(b, "create", "--topic", "cli-dump", "--partitions", "1"))
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, **ck.QUIET})
    p.produce("cli-dump", key=b"k1", value=b"hello-strata", partition=0)
    assert p.flush(30) == 0
    p.produce("cli-dump", key=b"k2", value=b"second", partition=0)
    assert p.flush(30) == 0
    seg = b.partition_dir("cli-dump", 0) / "00000000000000000000.log"

    out = ok(strata("dump-log", str(seg)))
    lines = out.splitlines()
    assert lines[0] == f"Dumping {seg}"
    assert lines[1] == "Log starting offset: 0"
    batches = [line for line in lines if line.startswith("baseOffset:")]
    assert [re.search(r"baseOffset: (\d+) lastOffset: (\d+)", b).groups() for b in batches] == [("0", "0"), ("1", "1")]
    assert all("isvalid: true" in b for b in batches)
    assert "payload:" not in out

    data = ok(strata("dump-log", "--print-data-log", str(seg)))
    assert "key: k1 payload: hello-strata" in data
    assert "key: k2 payload: second" in data

    index = ok(strata("dump-log", "--files", f"{seg.with_suffix('.index')},{seg.with_suffix('.timeindex')}"))
    assert f"Dumping {seg.with_suffix('.index')}" in index and f"Dumping {seg.with_suffix('.timeindex')}" in index

    assert "no such file" in fails(strata("dump-log", str(seg.with_name("00000000000000000099.log"))))
