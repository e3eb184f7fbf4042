"""KIP-405 topic deletion in a cluster: DELETE_PARTITION_MARKED is recorded by the broker that deletes the topic (as
Kafka's controller does) and the RemotePartitionRemover on the leader of each partition's `__remote_log_metadata`
partition deletes the remote data -- so it goes even when every replica of the topic is down, and a metadata
partition that fails over meanwhile is finished by its new leader."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strata.cli.admin_client import AdminClient
from strata.cli.remote_log_metadata import remote_log_state
from tests.cluster.checker import encode_value
from tests.cluster.tiered_support import (
    TIERED_CLUSTER,
    replicate_metadata_topic,
    s3_overrides,
    wait_tiered_everywhere,
)
from tests.support.ck import produce_all
from tests.support.cluster_proc import StrataCluster
from tests.support.records import Rec
from tests.support.s3_servers import MotoServer
from tests.support.waiting import wait_until

TOPIC = "tiered-deleted"
PARTITIONS = 6
DOWN = 3  # the broker holding every replica of the topic


def test_remote_data_of_a_topic_whose_replicas_are_all_down_is_deleted_by_the_metadata_leaders(
    cluster_factory: Callable[..., StrataCluster], moto: MotoServer
) -> None:
    s3 = s3_overrides(moto)
    prefix = str(s3["rsm.config.key.prefix"])
    c = cluster_factory(3, overrides={**TIERED_CLUSTER, **s3, "remote.partition.remover.task.interval.ms": 60000})
    replicate_metadata_topic(c)
    c.create_topic(
        TOPIC, replica_assignment=[[DOWN]] * PARTITIONS, config={"remote.storage.enable": True, "segment.bytes": 4096}
    )
    conf: dict[str, Any] = {"linger.ms": 5, "batch.size": 2048}
    produce_all(
        c.bootstrap,
        TOPIC,
        [Rec(p, None, encode_value(f"p{p}", i, 200)) for p in range(PARTITIONS) for i in range(60)],
        **conf,
    )

    wait_tiered_everywhere(c, TOPIC, PARTITIONS)
    topic_prefix = f"{prefix}{TOPIC}-"
    assert moto.keys(topic_prefix)

    c.kill9(DOWN)  # every replica down; some metadata partitions fail over too
    with AdminClient(c.bootstrap, timeout=30) as admin:
        admin.delete_topic(TOPIC)

    def deleted() -> dict[int, list[str]] | None:
        st = remote_log_state(c.bootstrap)
        states = {p: hist for (t, p, _), hist in st.partition_deletes.items() if t == TOPIC}
        done = len(states) == PARTITIONS and all(h[-1] == "DELETE_PARTITION_FINISHED" for h in states.values())
        return states if done and not moto.keys(topic_prefix) else None

    states = wait_until(
        deleted,
        timeout=60,
        interval=0.5,
        message=lambda: (
            f"partition delete states {remote_log_state(c.bootstrap).partition_deletes}, "
            f"objects left {len(moto.keys(topic_prefix))}"
        ),
    )
    assert states is not None  # wait_until returns only a truthy value
    for hist in states.values():
        assert hist[0] == "DELETE_PARTITION_MARKED" and "DELETE_PARTITION_STARTED" in hist, hist
    st = remote_log_state(c.bootstrap)
    assert all(s.state == "DELETE_SEGMENT_FINISHED" for p in range(PARTITIONS) for s in st.for_partition(TOPIC, p))


def test_a_tiered_topic_deleted_while_its_replicas_were_down_is_removed_when_one_returns(
    cluster_factory: Callable[..., StrataCluster], moto: MotoServer
) -> None:
    """The broker that deletes a topic retries DELETE_PARTITION_MARKED until it is recorded -- but it may die first.
    Here the marks cannot be written at all (the topic's data and its remote log metadata live on broker 3 alone,
    which is down), then every other broker dies too: broker 3, finding the logs of a tiered topic deleted while it
    was down, marks them itself, and the remote data goes."""
    topic = "tiered-deleted-while-down"
    s3 = s3_overrides(moto)
    topic_prefix = f"{s3['rsm.config.key.prefix']}{topic}-"
    c = cluster_factory(3, overrides={**TIERED_CLUSTER, **s3})
    replicate_metadata_topic(c, [DOWN])
    c.create_topic(
        topic, replica_assignment=[[DOWN]] * 2, config={"remote.storage.enable": True, "segment.bytes": 4096}
    )
    conf: dict[str, Any] = {"linger.ms": 5, "batch.size": 2048}
    produce_all(
        c.bootstrap,
        topic,
        [Rec(p, None, encode_value(f"p{p}", i, 200)) for p in range(2) for i in range(60)],
        **conf,
    )
    wait_tiered_everywhere(c, topic, 2)
    assert moto.keys(topic_prefix)

    c.kill9(DOWN)
    with AdminClient(c.bootstrap, timeout=30) as admin:
        admin.delete_topic(topic)  # answered, though no metadata partition has a leader to take the marks
    for i in c.live_ids():
        c.kill9(i)  # the deleter dies with its retries
    c.start(DOWN)
    wait_until(
        lambda: not moto.keys(topic_prefix),
        timeout=60,
        interval=0.5,
        message=lambda: f"objects left {len(moto.keys(topic_prefix))}",
    )
    st = remote_log_state(c.broker(DOWN).bootstrap)
    states = {p: hist for (t, p, _), hist in st.partition_deletes.items() if t == topic}
    assert sorted(states) == [0, 1] and all(h[-1] == "DELETE_PARTITION_FINISHED" for h in states.values()), states
