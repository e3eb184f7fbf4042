"""KIP-405 across replicas on a real 2-broker cluster (etcd, broker processes, S3 on a moto server): a follower whose
fetch offset lies below the leader's local log start gets error 109 and rebuilds its aux state (leader-epoch cache,
producer state, log start) from remote storage instead of copying what the leader has tiered
(broker/cluster/replica_fetcher_tier_state.py). Each case is a `ClusterScenario` (tests/cluster/scenario.py).

1. A brand-new follower (its partition directory wiped) rejoins after the leader tiered and locally deleted the old
   segments: it starts at the leader's earliest local offset, enters the ISR, and its leader-epoch checkpoint equals
   the leader's.
2. An out-of-sync follower (stopped while the leader tiered and deleted locally) whose data is older than the leader's
   local start truncates fully and rebuilds the same way.

3. KIP-1023 (`follower.fetch.last.tiered.offset.enable`): a brand-new follower starts just past the last tiered
   offset (ListOffsets -5), above the leader's earliest local offset, with the same rebuild.

In all, consumers read every record from offset 0 after failing over to the rebuilt follower (remote reads through its
RLMM subscription and its highest offset in remote storage).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tests.cluster.scenario import ClusterScenario, Memory
from tests.cluster.tiered_support import TIERED_CLUSTER, aux_state_builds, copied_segments, s3_overrides
from tests.support.cluster_proc import StrataCluster
from tests.support.s3_servers import MotoServer
from tests.support.waiting import wait_until

TOPIC = "tiered-rf2"
BEFORE = 60  # records both replicas have before the follower stops
MIN_TOTAL = 400
VALUE = b"x" * 200

TIERED = {**TIERED_CLUSTER, "offsets.topic.replication.factor": 2, "default.replication.factor": 2}


def _produce(c: StrataCluster, start: int, end: int, acks: str) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": c.bootstrap, "acks": acks, "linger.ms": 0, "log_level": 3})
    errors: list[object] = []
    for i in range(start, end):
        p.produce(
            TOPIC,
            key=str(i).encode(),
            value=b"%06d" % i + VALUE,
            partition=0,
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
        if i % 10 == 9:
            p.flush(30)
    assert p.flush(30) == 0
    assert not errors, errors


def _consume_all(c: StrataCluster, n: int) -> list[bytes | None]:
    from confluent_kafka import Consumer, TopicPartition

    cons = Consumer(
        {"bootstrap.servers": c.bootstrap, "group.id": "g-tiered-rf2", "enable.auto.commit": False, "log_level": 3}
    )
    try:
        cons.assign([TopicPartition(TOPIC, 0, 0)])
        out: list[bytes | None] = []

        def more() -> bool:
            m = cons.poll(1.0)
            if m is not None and m.error() is None:
                out.append(m.value())
            return len(out) >= n

        wait_until(more, timeout=90, interval=0)
        return out
    finally:
        cons.close()


def _local_bases(c: StrataCluster, i: int) -> list[int]:
    d = c.partition_dir(i, TOPIC, 0)
    return sorted(int(p.name[:-4]) for p in d.glob("*.log") if re.fullmatch(r"\d{20}\.log", p.name))


def _tiered_bases(c: StrataCluster) -> list[int]:
    """Base offsets of the topic's segments copied to remote storage (COPY_SEGMENT_FINISHED in the RLMM)."""
    return sorted(s.start_offset for s in copied_segments(c, TOPIC))


def _checkpoint(c: StrataCluster, i: int) -> str:
    return (c.partition_dir(i, TOPIC, 0) / "leader-epoch-checkpoint").read_text()


def _scenario(
    cluster_factory: Callable[..., StrataCluster], moto: MotoServer, wipe: bool, kip1023: bool = False
) -> None:
    overrides = {**TIERED, **s3_overrides(moto), "follower.fetch.last.tiered.offset.enable": kip1023}
    c = cluster_factory(size=2, overrides=overrides)
    # With KIP-1023 the leader keeps several already-tiered segments locally, so "last tiered offset + 1" and the
    # leader's earliest local offset differ.
    local_bytes = 4 * 4096 if kip1023 else 1
    follower_leo = 0 if wipe else BEFORE

    def tier_past_follower(c: StrataCluster, m: Memory) -> None:
        """Produce until the leader has tiered and deleted locally well past what the follower has (the leader's HW
        moves past the stopped follower's LEO once that follower is no longer caught up)."""
        m["total"] = BEFORE

        def past() -> bool:
            b = _local_bases(c, 1)
            if b and b[0] > follower_leo + 100 and m["total"] >= MIN_TOTAL:
                return True
            _produce(c, m["total"], m["total"] + 20, "1")
            m["total"] += 20
            return False

        wait_until(past, timeout=90, interval=0, message=lambda: f"leader's local segments {_local_bases(c, 1)}")

    def settle(c: StrataCluster, m: Memory) -> None:
        """Nothing more to copy or delete locally: the leader's earliest local offset stays put during the rebuild."""

        def settled() -> bool:
            bases = _local_bases(c, 1)
            tiered = _tiered_bases(c)
            d = c.partition_dir(1, TOPIC, 0)
            sizes = [(d / f"{b:020d}.log").stat().st_size for b in bases]
            return len(bases) >= 3 and bool(tiered) and max(tiered) == bases[-2] and sum(sizes[1:]) <= local_bytes

        wait_until(settled, timeout=60, message=lambda: f"leader's local segments {_local_bases(c, 1)}")
        m["settled_local"] = _local_bases(c, 1)

    def rebuilt_not_copied(c: StrataCluster, m: Memory) -> None:
        assert aux_state_builds(c, 2, TOPIC) >= 1
        follower_bases = _local_bases(c, 2)
        # The follower copied none of what the leader had tiered: its log starts at (or past) the leader's local
        # start as of the rebuild, never at the old data.
        assert follower_bases and follower_bases[0] > follower_leo + 100, follower_bases
        assert c.log_batches(2, TOPIC, 0)[0].base_offset > follower_leo, "follower kept or copied tiered data"
        assert _local_bases(c, 1)[0] > 0
        if kip1023:
            # The empty follower started just past the last tiered offset (the leader's active segment), above the
            # leader's earliest local offset.
            settled = m["settled_local"]
            assert _local_bases(c, 1) == settled
            assert follower_bases[0] == settled[-1] > settled[0], (follower_bases, settled)

    def same_checkpoint(c: StrataCluster, m: Memory) -> None:
        wait_until(lambda: _checkpoint(c, 2) == _checkpoint(c, 1), timeout=30)
        assert _checkpoint(c, 2).splitlines()[1] != "0", "rebuilt epoch cache is empty"

    def everything_from_0(c: StrataCluster, m: Memory) -> None:
        n = m["total"]
        assert _consume_all(c, n)[:n] == [b"%06d" % i + VALUE for i in range(n)]

    sc = (
        ClusterScenario("brand-new follower" if wipe else "out-of-sync follower", TOPIC)
        .replicate_metadata_topic()
        .create_topic(
            [1, 2], **{"remote.storage.enable": True, "local.retention.bytes": local_bytes, "segment.bytes": 4096}
        )
        .do(f"produce {BEFORE} records with acks=all", lambda c, m: _produce(c, 0, BEFORE, "all"))
        .expect_isr({1, 2})
        .expect_leader(1)
        .stop(2)
    )
    if wipe:
        sc.wipe(2)  # a brand-new, empty replica
    sc.expect_isr({1}, timeout=30).do("produce until the leader tiered past the follower", tier_past_follower)
    if kip1023:
        sc.do("let the leader settle", settle)
    (
        sc.start(2)
        .expect_isr({1, 2})
        .expect("the follower rebuilt from remote storage instead of copying tiered data", rebuilt_not_copied)
        .expect("its leader-epoch checkpoint equals the leader's", same_checkpoint)
        # Fail over to the rebuilt follower: everything, tiered or not, is still readable from offset 0.
        .kill(1)
        .expect_leader(2)
        .expect("every record reads back from offset 0", everything_from_0)
        .run(c)
    )


def test_brand_new_follower_rebuilds_aux_state_from_remote_and_serves_after_failover(
    cluster_factory: Callable[..., StrataCluster], moto: MotoServer
) -> None:
    _scenario(cluster_factory, moto, wipe=True)


def test_out_of_sync_follower_truncates_fully_and_rebuilds_from_remote(
    cluster_factory: Callable[..., StrataCluster], moto: MotoServer
) -> None:
    _scenario(cluster_factory, moto, wipe=False)


def test_kip1023_empty_follower_starts_past_the_last_tiered_offset(
    cluster_factory: Callable[..., StrataCluster], moto: MotoServer
) -> None:
    _scenario(cluster_factory, moto, wipe=True, kip1023=True)
