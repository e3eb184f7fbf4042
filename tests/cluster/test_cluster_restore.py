"""Whole-cluster restore and topic recovery on 3-broker clusters (issue 24), tiering to S3 (moto).

The old cluster tiers two topics and a group commits offsets; then every broker and etcd are killed (-9) and a new
cluster (fresh etcd, empty data dirs, the same bucket prefix) starts with `cluster.restore.enable=true`: the records
up to the last uploaded segment of every partition read back byte for byte, the group's offsets resume, producers
continue past the restored offsets and their segments tier beside the old ones. The topic the restore was told to
leave (`cluster.restore.exclude.topics`) is then recovered with `strata topics create --config
remote.recovery=true` while a producer keeps writing to the restored topic.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from strata.cli.main import main as cli_main
from strata.remote.bucket_manifest_reader import BucketManifestReader, RestorePlan
from strata.remote.bucket_store import S3ManifestStore
from strata.remote.s3 import S3RemoteStorageManager
from tests.cluster.tiered_support import TIERED_CLUSTER, s3_overrides
from tests.support.ck import QUIET
from tests.support.cluster_proc import StrataCluster
from tests.support.s3_servers import MotoServer
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

T = TypeVar("T")
FAST = {"remote.manifest.upload.interval.ms": 200, "remote.cluster.manifest.interval.ms": 300}
TIERED_TOPIC = {"remote.storage.enable": "true", "segment.bytes": "2048", "local.retention.bytes": "1"}
ORDERS, AUDIT, GROUP = "orders", "audit", "billing"
Record = tuple[int | None, bytes | None, bytes | None, int, Any]


def read_bucket(s3: dict[str, object], fn: Callable[[BucketManifestReader], Any]) -> Any:
    cfg = {k.removeprefix("rsm.config."): str(v) for k, v in s3.items() if k.startswith("rsm.config.")}

    async def run() -> Any:
        rsm = S3RemoteStorageManager.from_config(cfg)
        try:
            return await fn(BucketManifestReader(S3ManifestStore(rsm)))
        finally:
            await rsm.close()

    return asyncio.run(run())


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str) -> None:
    # one record per batch: 2 KiB segments of ~8 records, so all but the last few records of a partition tier
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "batch.size": 200, **QUIET})
    for i in range(per_partition):
        for part in range(partitions):
            p.produce(
                topic,
                key=f"{tag}-{part}-{i}".encode(),
                value=(f"{tag}:{part}:{i}:" + "v" * 120).encode(),
                partition=part,
                headers=[("h", f"{i}".encode())],
            )
    assert p.flush(60) == 0


def read(bootstrap: str, topic: str, partition: int, start: int, end: int) -> list[Record]:
    """Records [start, end) of the partition (offset, key, value, timestamp, headers)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "restore-reader", "enable.auto.commit": False, **QUIET})
    c.assign([TopicPartition(topic, partition, start)])
    out: list[Record] = []
    try:
        for _ in range(400):
            if len(out) >= end - start:
                break
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                out.append((m.offset(), m.key(), m.value(), m.timestamp()[1], m.headers()))
    finally:
        c.close()
    return out


def bucket_caught_up(s3: dict[str, object], ends: dict[tuple[str, int], int], seen: list[str]) -> RestorePlan | None:
    """The plan once every partition's manifest reaches at least its expected end and the group is in it."""
    plan: RestorePlan = read_bucket(s3, lambda r: r.restore_plan())
    seen[:] = [f"{t}-{p}: {pp.next_offset}" for t, tp in plan.topics.items() for p, pp in tp.partitions.items()] + [
        f"groups: {sorted(plan.group_offsets)}"
    ]
    for (topic, p), end in ends.items():
        t = plan.topics.get(topic)
        if t is None or t.partitions[p].next_offset < end:
            return None
    cm = plan.cluster
    if GROUP not in plan.group_offsets or cm is None or "alice" not in cm.scram_credentials or not cm.client_quotas:
        return None
    return plan


def metric_sum(c: StrataCluster, name: str) -> float:
    """`name` summed over every broker's Prometheus endpoint."""
    total = 0.0
    for b in c.brokers.values():
        text = urllib.request.urlopen(b.metrics_url, timeout=10).read().decode()
        total += sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))
    return total


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert cli_main(list(argv)) == 0
    return capsys.readouterr().out


def test_cluster_restore_then_topic_recovery(
    cluster_factory: Callable[..., StrataCluster], moto: MotoServer, capsys: pytest.CaptureFixture[str]
) -> None:
    s3 = s3_overrides(moto)
    old = cluster_factory(3, overrides={**TIERED_CLUSTER, **s3, **FAST})
    old.create_topic(ORDERS, 3, 2, config=TIERED_TOPIC)
    old.create_topic(AUDIT, 1, 2, config=TIERED_TOPIC)
    produce(old.bootstrap, ORDERS, 3, 60, "old")
    produce(old.bootstrap, AUDIT, 1, 40, "old")
    committed = {0: 17, 1: 23, 2: 31}
    c = Consumer({"bootstrap.servers": old.bootstrap, "group.id": GROUP, **QUIET})
    c.commit(offsets=[TopicPartition(ORDERS, p, o) for p, o in committed.items()], asynchronous=False)
    c.close()
    pw = old.tmp_dir.parent / "alice.pw"
    pw.write_text("alice-pw-restore\n")
    boot = ["--bootstrap-server", old.bootstrap]
    run_cli(
        capsys,
        "users",
        "scram",
        *boot,
        "add",
        "--user",
        "alice",
        "--mechanism",
        "SCRAM-SHA-256",
        "--password-file",
        str(pw),
    )
    run_cli(capsys, "quotas", *boot, "set", "--user", "alice", "--add-config", "producer_byte_rate=1048576")
    # everything but each partition's active segment tiers; wait until the manifests list at least 40 offsets
    ends = {(ORDERS, p): 40 for p in range(3)} | {(AUDIT, 0): 20}
    seen: list[str] = []
    plan = wait_until(lambda: bucket_caught_up(s3, ends, seen), timeout=60, interval=0.5, message=lambda: str(seen))
    assert plan is not None
    produced = {(ORDERS, p): 60 for p in range(3)} | {(AUDIT, 0): 40}
    everything = {tp: read(old.bootstrap, tp[0], tp[1], 0, n) for tp, n in produced.items()}

    # disaster: every broker and etcd killed, every disk gone; the bucket is what the manifests say now
    old.close()
    shutil.rmtree(old.tmp_dir)
    plan = read_bucket(s3, lambda r: r.restore_plan())
    tiered = {(t, p): pp.next_offset for t, tp in plan.topics.items() for p, pp in tp.partitions.items()}
    assert all(tiered[tp] >= n for tp, n in ends.items()) and all(tiered[tp] < produced[tp] for tp in tiered)
    old_segments = {s.segment_id for tp in plan.topics.values() for pp in tp.partitions.values() for s in pp.segments}
    expected = {tp: everything[tp][:end] for tp, end in tiered.items()}
    assert all([r[0] for r in v] == list(range(tiered[k])) for k, v in expected.items())
    old_id = {t: str(tp.topic_id) for t, tp in plan.topics.items()}
    new = cluster_factory(
        3,
        overrides={
            **TIERED_CLUSTER,
            **s3,
            **FAST,
            "cluster.restore.enable": True,
            "cluster.restore.exclude.topics": AUDIT,
        },
    )
    for p in range(3):
        new.wait_leader(ORDERS, p, timeout=60)
    assert new.metadata([AUDIT]).topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION: left in the bucket
    for (topic, p), end in tiered.items():
        if topic == ORDERS:
            assert read(new.bootstrap, topic, p, 0, end) == expected[(topic, p)], f"{topic}-{p}"
    # the group resumes where it committed
    c = Consumer({"bootstrap.servers": new.bootstrap, "group.id": GROUP, **QUIET})
    got = wait_until(
        lambda: {
            t.partition: t.offset
            for t in c.committed([TopicPartition(ORDERS, p) for p in range(3)], timeout=5)
            if t.offset >= 0
        },
        timeout=60,
        interval=0.5,
    )
    c.close()
    assert got == committed
    # the SCRAM user (its salted, hashed credential) and the quota came back with the cluster manifest
    users = run_cli(capsys, "users", "scram", "--bootstrap-server", new.bootstrap, "list")
    assert "alice" in users and "SCRAM-SHA-256" in users
    quotas = run_cli(capsys, "quotas", "--bootstrap-server", new.bootstrap, "describe", "--user", "alice")
    assert "producer_byte_rate=1048576" in quotas
    assert metric_sum(new, "strata_restore_topics_total") == 1  # orders; audit was excluded
    assert metric_sum(new, "strata_restore_group_offsets_total") == 3
    assert metric_sum(new, "strata_restore_pending_topics") == 0

    # topic recovery into the running cluster while a producer writes to the restored topic
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            produce(new.bootstrap, ORDERS, 3, 20, "new")

    writer = threading.Thread(target=traffic, daemon=True)
    writer.start()
    try:
        out = run_cli(
            capsys,
            "topics",
            "--bootstrap-server",
            new.bootstrap,
            "create",
            "--topic",
            AUDIT,
            "--config",
            "remote.recovery=true",
        )
        assert f"Created topic {AUDIT} (1 partitions)." in out
        new.wait_leader(AUDIT, 0, timeout=60)
        assert read(new.bootstrap, AUDIT, 0, 0, tiered[(AUDIT, 0)]) == expected[(AUDIT, 0)]
    finally:
        stop.set()
        writer.join(60)
    status = run_cli(capsys, "recovery", "--bootstrap-server", new.bootstrap, "status")
    for (topic, p), end in tiered.items():
        assert f"Topic: {topic}\tPartition: {p}\t" in status and f"RecoveredUpTo: {end - 1}\t" in status
    assert f"Topic: {ORDERS}\tPartition: 0\t" in status and "State: ACTIVE" in status

    # producers continued after the restored offsets, and the new segments tier beside the old objects
    for p in range(3):
        new_records = read(new.bootstrap, ORDERS, p, tiered[(ORDERS, p)], tiered[(ORDERS, p)] + 20)
        assert new_records[0][0] == tiered[(ORDERS, p)] and new_records[0][1] == f"new-{p}-0".encode()

    def moved_on() -> RestorePlan | None:
        plan = read_bucket(s3, lambda r: r.restore_plan())
        parts = plan.topics[ORDERS].partitions
        return plan if all(parts[p].next_offset > tiered[(ORDERS, p)] for p in range(3)) else None

    after = wait_until(moved_on, timeout=60, interval=0.5)
    assert after is not None
    assert {t: str(tp.topic_id) for t, tp in after.topics.items()} == old_id
    for p, pp in after.topics[ORDERS].partitions.items():
        assert pp.manifest is not None and not pp.problems
        old_part = [s for s in pp.segments if s.start_offset < tiered[(ORDERS, p)]]
        new_part = [s for s in pp.segments if s.start_offset >= tiered[(ORDERS, p)]]
        assert {s.segment_id for s in old_part} <= old_segments
        assert new_part and not {s.segment_id for s in new_part} & old_segments
        assert pp.manifest.leader_epoch > max(e for s in old_part for e in s.segment_leader_epochs)
