"""Topic recovery (issue 24) on one broker: a topic whose broker lost its disk is recreated from the bucket with
`strata topics create --topic T --config remote.recovery=true` on a fresh broker sharing only the bucket (S3, moto).

Topic shape as in test_bucket_manifests: segment j = offsets [10j, 10j + 9], `local.retention.bytes=1`.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition

from strata.cli.admin_client import RESOURCE_TOPIC, AdminError
from strata.cli.main import main as cli_main
from strata.remote.bucket_manifest_reader import PartitionPlan, RestorePlan
from tests.support import ck
from tests.support.ck import QUIET, producer
from tests.support.records import Rec
from tests.tiered.harness import Harness, Scenario
from tests.tiered.test_bucket_manifests import commit_offset, partition_plan, restore_plan

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

FAST_MANIFESTS = {"remote.manifest.upload.interval.ms": 200, "remote.cluster.manifest.interval.ms": 300}


def read_all(bootstrap: str, topic: str, partition: int, end: int) -> list[Rec]:
    """Every record of the partition from offset 0 up to `end` (exclusive)."""
    return ck.read_range(bootstrap, topic, partition, 0, end, timeout=300)


def wait_manifest(h: Harness, topic: str, partition: int, next_offset: int) -> None:
    def ok(plan: PartitionPlan | None) -> bool:
        return plan is not None and plan.next_offset == next_offset

    h.wait(f"manifest of {topic}-{partition} up to {next_offset}", lambda: partition_plan(h, topic, partition), ok)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """A `strata` command in this process (its output)."""
    capsys.readouterr()
    assert cli_main(list(argv)) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("backend_name", ["s3"])
def test_topic_recovered_on_a_fresh_broker_reads_back_and_continues(
    make_harness: Callable[..., Harness], capsys: pytest.CaptureFixture[str]
) -> None:
    old = make_harness(**FAST_MANIFESTS)
    (
        Scenario("old broker")
        .create_topic("t", partitions=2, configs={"local.retention.bytes": "1", "retention.ms": "604800000"})
        .produce("t", 0, 45)
        .produce("t", 1, 25)
        .wait_for_offload("t", 0, up_to_offset=39)
        .wait_for_offload("t", 1, up_to_offset=19)
        .run(old)
    )
    old_id = old.topic("t").topic_id
    for p, end in ((0, 40), (1, 20)):  # the manifests have caught up with the copies (the active tails are lost)
        wait_manifest(old, "t", p, end)
    before = {0: read_all(old.broker.bootstrap, "t", 0, 40), 1: read_all(old.broker.bootstrap, "t", 1, 20)}
    assert [r.offset for r in before[0]] == list(range(40))
    old.broker.kill9()

    new = make_harness(backend=old.backend, **FAST_MANIFESTS)
    boot = new.broker.bootstrap
    with new.admin() as a, pytest.raises(AdminError, match=r"INVALID_CONFIG.*no topic manifest"):
        a.create_topic("absent", configs={"remote.recovery": "true"})
    created = run_cli(
        capsys, "topics", "--bootstrap-server", boot, "create", "--topic", "t", "--config", "remote.recovery=true"
    )
    assert "Created topic t (2 partitions)." in created
    with new.admin() as a:
        [desc] = a.describe_topics(["t"])
        assert desc.topic_id == old_id
        configs = {c.name: c.value for c in a.describe_configs(RESOURCE_TOPIC, "t")}
        assert configs["retention.ms"] == "604800000" and configs["local.retention.bytes"] == "1"
        assert "remote.recovery" not in configs
        with pytest.raises(AdminError, match="TOPIC_ALREADY_EXISTS"):
            a.create_topic("t", configs={"remote.recovery": "true"})
    for p, end in ((0, 40), (1, 20)):
        assert new.list_offset("t", p, -2)[:2] == (0, 0)
        assert new.list_offset("t", p, -1)[:2] == (0, end)
        assert read_all(boot, "t", p, end) == before[p]  # byte for byte, from remote storage
    # a producer continues after the recovered offsets, in a new leader epoch; its data tiers beside the old
    prod = producer(boot)
    for i in range(30):
        prod.produce("t", key=b"k%d" % i, value=b"after-%d" % i, partition=0)
    assert prod.flush(30) == 0
    after = read_all(boot, "t", 0, 70)
    assert [r.offset for r in after] == list(range(70))
    assert after[:40] == before[0] and after[40].value == b"after-0"
    status = run_cli(capsys, "recovery", "--bootstrap-server", boot, "status")
    assert f"Topic: t\tTopicId: {old_id}\t" in status
    assert "Partition: 0\tRecoveredSegments: 4\tRecoveredBytes: 5408\tRecoveredFrom: 0\tRecoveredUpTo: 39\t" in status
    assert "LogStartOffset: 0\tEndOffset: 70\tState: ACTIVE" in status
    assert "Partition: 1\tRecoveredSegments: 2\t" in status and "EndOffset: 20\tState: RECOVERED" in status
    describe = run_cli(capsys, "topics", "--bootstrap-server", boot, "describe", "--topic", "t")
    assert "Recovery: RECOVERED" in describe and "RecoveredUpTo: 19" in describe

    # whole-cluster restore on a single broker: the third broker, started with the restore flag on an empty disk,
    # recreates the topic and the group's offsets from the bucket
    commit_offset(new, "g", "t", 1, 7)

    def group_in_bucket(plan: RestorePlan) -> bool:
        return plan.group_offsets.get("g", {}).get("t", {}).get(1, {}).get("offset") == 7

    new.wait("group offsets in the bucket", lambda: restore_plan(new), group_in_bucket)
    new.broker.kill9()
    final_p0 = restore_plan(new).topics["t"].partitions[0].next_offset  # what the new broker had tiered
    assert final_p0 >= 40
    third = make_harness(backend=old.backend, **FAST_MANIFESTS, **{"cluster.restore.enable": True})
    third.wait("the topic restored", lambda: third.list_offset("t", 1, -1), lambda r: r[:2] == (0, 20))
    assert third.list_offset("t", 0, -1)[:2] == (0, final_p0)
    assert read_all(third.broker.bootstrap, "t", 1, 20) == before[1]
    c = Consumer({"bootstrap.servers": third.broker.bootstrap, "group.id": "g", **QUIET})
    try:
        got = third.wait(
            "the group's offset", lambda: c.committed([TopicPartition("t", 1)], timeout=5), lambda r: r[0].offset >= 0
        )
        assert got[0].offset == 7
    finally:
        c.close()
