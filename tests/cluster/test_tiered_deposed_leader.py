"""A tiered leader frozen (SIGSTOP) past its lease and resumed after a new leader took over deletes nothing in remote
storage (issue 21: such a leader went on running its expiration pass for 12 s and deleted the new leader's segments).

The records carry timestamps that make their segments expire under retention.ms while the old leader is frozen: the
new leader deletes them, as it should. The old leader resumes with a stale view (it still believes it leads and its
metadata cache still lists the expired segments as copied), and its overdue expiration timer fires at once: before
every deletion it must confirm its leadership with the cluster, find that it is deposed, and delete nothing, then or
later. RemoteDeleteRequestsPerSec of each broker tells who deleted.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

from strata.cli.remote_log_metadata import RemoteSegment, remote_log_state
from tests.cluster.tiered_support import (
    TIERED_CLUSTER,
    copied_segments,
    remote_deletes,
    replicate_metadata_topic,
    s3_overrides,
    values,
)
from tests.support.ck import produce_all
from tests.support.cluster_proc import FAST_FAILOVER, StrataCluster
from tests.support.records import Rec
from tests.support.s3_servers import MotoServer
from tests.support.waiting import wait_until

TOPIC = "deposed-leader"
RETENTION_MS = 10 * 60 * 1000
EXPIRES_IN_S = 20.0  # after the produce: enough to tier the segments and freeze the leader first
OLD, NEW = 1, 2
PRODUCER: dict[str, Any] = {"linger.ms": 0, "batch.num.messages": 1, "enable.idempotence": True}


def _bootstrap(c: StrataCluster, i: int) -> str:
    return f"{c.broker(i).host}:{c.broker(i).port}"


def test_leader_frozen_past_its_lease_deletes_nothing_after_it_resumes(
    cluster_factory: Callable[..., StrataCluster], moto: MotoServer
) -> None:
    c = cluster_factory(3, overrides={**FAST_FAILOVER, **TIERED_CLUSTER, **s3_overrides(moto)})
    replicate_metadata_topic(c)
    c.create_topic(
        TOPIC,
        replica_assignment=[[OLD, NEW, 3]],
        config={"remote.storage.enable": True, "segment.bytes": 4096, "retention.ms": RETENTION_MS},
    )
    c.wait_isr(TOPIC, 0, {OLD, NEW, 3})
    ts = int(time.time() * 1000) - RETENTION_MS + int(EXPIRES_IN_S * 1000)
    expires_at = time.monotonic() + EXPIRES_IN_S
    produce_all(
        c.bootstrap,
        TOPIC,
        [Rec(0, None, v, timestamp=ts) for v in values("old", 60)],
        **PRODUCER,
    )
    wait_until(lambda: len(copied_segments(c, TOPIC)) >= 3, timeout=30, message="segments tiered by the first leader")
    tiered = {s.segment_id for s in copied_segments(c, TOPIC)}
    assert remote_deletes(c, OLD, TOPIC) == 0
    assert time.monotonic() < expires_at - 3, "tiering took too long to freeze the leader before expiry"

    pid = c.broker(OLD).pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        # past its lease: broker 2 (a preferred successor is not guaranteed; any live one will do) leads
        new_leader = c.wait_leader(TOPIC, 0, not_in=[OLD], via=NEW, timeout=30)
        wait_until(
            lambda: not tiered & {s.segment_id for s in copied_segments_via(c, new_leader)},
            timeout=EXPIRES_IN_S + 60,
            interval=0.5,
            message="the new leader deletes the expired segments",
        )
        assert remote_deletes(c, new_leader, TOPIC) >= len(tiered)
    finally:
        os.kill(pid, signal.SIGCONT)

    # resumed: its overdue expiration pass runs at once on its stale view; it must stop before every deletion
    wait_until(
        lambda: c.leader_of(TOPIC, 0, via=OLD) == new_leader, timeout=30, message="the old leader learns it is deposed"
    )
    # the new leader goes on tiering fresh records; the resumed broker's RLM (now a follower's) leaves them alone
    produce_all(
        _bootstrap(c, new_leader),
        TOPIC,
        [Rec(0, None, v) for v in values("new", 60)],
        **PRODUCER,
    )
    wait_until(
        lambda: len(copied_segments_via(c, new_leader)) >= 3,
        timeout=30,
        message="segments tiered by the new leader",
    )
    c.wait_isr(TOPIC, 0, {OLD, NEW, 3}, timeout=30)
    fresh = {s.segment_id for s in copied_segments_via(c, new_leader)}
    assert remote_deletes(c, OLD, TOPIC) == 0, c.broker(OLD).tail(40)
    assert fresh <= {s.segment_id for s in copied_segments_via(c, new_leader)}


def copied_segments_via(c: StrataCluster, i: int) -> list[RemoteSegment]:
    """COPY_SEGMENT_FINISHED segments of partition 0 as broker i's metadata records say (never through the frozen
    broker, which would hold a client until its timeout)."""
    st = remote_log_state(_bootstrap(c, i))
    return [s for s in st.for_partition(TOPIC, 0) if s.state == "COPY_SEGMENT_FINISHED"]
