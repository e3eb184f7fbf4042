"""S3 outage plus one broker fault (issue 21, measured; docs/tiered-storage.md, "A follower behind the leader's
local log start during an outage").

A follower that comes back while remote storage is down, with its log end below the leader's local log start, needs
the remote leader-epoch checkpoint and producer snapshot to rebuild its auxiliary state (Kafka's
BuildingRemoteLogAuxState) before it can fetch again. Until S3 returns it cannot rejoin the ISR, so a second fault
leaves the ISR below min.insync.replicas and acks=all producers get no acknowledgement until S3 is back.

The scenario: 3 brokers, RF 3, min.insync.replicas=2, local.retention.bytes=1, an acks=all idempotent producer.
Follower 3 is killed; the leader tiers and trims its local log past 3's log end; S3 goes down (connections
refused); 3 restarts and tries to rebuild (and fails); follower 2 is killed: the ISR is {1}. S3 comes back after a
while. Measured: the longest time without an acknowledgement, and how long after S3's return acknowledgements
resume. Asserted: the stall lasts as long as the outage after the second fault (the limitation, documented), it
ends once S3 is back, and no acknowledged record is lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from strata.cli.admin_client import AdminClient
from tests.cluster.checker import check
from tests.cluster.tiered_support import TIERED_CLUSTER, aux_state_builds, replicate_metadata_topic
from tests.cluster.workload import ContinuousProducer, read_all
from tests.support.cluster_proc import FAST_FAILOVER, StrataCluster
from tests.support.s3_servers import MotoServer
from tests.support.waiting import wait_until
from tests.tiered_s3.s3_faults import ProxyThread

TOPIC = "outage-follower"
EARLIEST_LOCAL = -4
OUTAGE_AFTER_SECOND_FAULT_S = 8.0
LEADER, SECOND, RESTARTED = 1, 2, 3


class AckGaps:
    """Samples a producer's acknowledgement count; the longest interval without a new acknowledgement."""

    def __init__(self, prod: ContinuousProducer) -> None:
        self.prod = prod
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ack-gaps", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):  # a sampling period, not a synchronisation
            self.samples.append((time.monotonic(), self.prod.acked_count))

    @contextmanager
    def running(self) -> Iterator[AckGaps]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(5)

    def longest(self, since: float = 0.0) -> tuple[float, float]:
        """(length, start) of the longest interval after `since` with no new acknowledgement."""
        best, best_at = 0.0, since
        last_t, last_n = None, None
        for t, n in self.samples:
            if t < since:
                continue
            if last_n is None or n != last_n:
                last_t, last_n = t, n
            elif last_t is not None and t - last_t > best:
                best, best_at = t - last_t, last_t
        return best, best_at


def _local_start(c: StrataCluster, via: int) -> int:
    with AdminClient(f"{c.broker(via).host}:{c.broker(via).port}", timeout=10) as admin:
        return admin.list_offsets(TOPIC, [0], EARLIEST_LOCAL)[0]


def _log_end(c: StrataCluster, i: int) -> int:
    batches = c.log_batches(i, TOPIC, 0)
    return batches[-1].last_offset + 1 if batches else 0


def test_follower_restarted_during_an_outage_below_the_local_log_start_stalls_acks_after_a_second_fault(
    cluster_factory: Callable[..., StrataCluster], moto: MotoServer
) -> None:
    with ProxyThread(moto.port) as s3:
        cfg = moto.rsm_config(**{"s3.endpoint.url": s3.endpoint, "key.prefix": f"of-{time.time_ns()}/"})
        cfg.update({"s3.retry.backoff.ms": 50, "s3.api.call.timeout.ms": 3000, "s3.api.call.attempt.timeout.ms": 1000})
        overrides = {
            **FAST_FAILOVER,
            **TIERED_CLUSTER,
            "remote.log.storage.manager.class.name": "s3",
            "remote.log.manager.task.retry.backoff.max.ms": 1000,
            **{f"rsm.config.{k}": v for k, v in cfg.items()},
        }
        c = cluster_factory(3, overrides=overrides)
        replicate_metadata_topic(c)
        c.create_topic(
            TOPIC,
            replica_assignment=[[LEADER, SECOND, RESTARTED]],
            config={
                "remote.storage.enable": True,
                "segment.bytes": 16 * 1024,
                "local.retention.bytes": 1,
                "min.insync.replicas": 2,
            },
        )
        c.wait_isr(TOPIC, 0, {LEADER, SECOND, RESTARTED})
        prod = ContinuousProducer(c.bootstrap, TOPIC, 1, name="of", rate=300, conf={"batch.size": 4096}).start()
        gaps = AckGaps(prod)
        try:
            with gaps.running():
                prod.wait_acked(300)
                c.kill9(RESTARTED)
                end = _log_end(c, RESTARTED)
                wait_until(
                    lambda: _local_start(c, LEADER) > end,
                    timeout=60,
                    interval=0.2,
                    message=lambda: f"leader's local log start {_local_start(c, LEADER)} <= follower's end {end}",
                )
                s3.set_mode("refuse")
                c.start(RESTARTED)
                wait_until(
                    lambda: aux_state_builds(c, RESTARTED, TOPIC) > 0,
                    timeout=30,
                    message="the restarted follower tries to rebuild its aux state from remote storage",
                )
                c.kill9(SECOND)
                second_fault = time.monotonic()
                # the ISR is {leader}: acks=all gets no acknowledgement while S3 stays down
                wait_until(lambda: time.monotonic() - second_fault > OUTAGE_AFTER_SECOND_FAULT_S, timeout=60)
                assert RESTARTED not in c.isr_of(TOPIC, 0, via=LEADER)
                s3.set_mode("pass")
                back = time.monotonic()
                prod.wait_acked(100, timeout=90)
                resumed_after = time.monotonic() - back
                c.wait_isr(TOPIC, 0, {LEADER, RESTARTED}, timeout=60)
            stall, stall_at = gaps.longest(since=second_fault - 1)
            print(
                f"S3 outage + second fault: longest time without an acknowledgement {stall:.1f} s "
                f"(from {stall_at - second_fault:+.1f} s after the second fault); acknowledgements resumed "
                f"{resumed_after:.1f} s after S3 came back"
            )
            # the limitation as it stands: no acknowledgement for the whole outage after the second fault
            assert stall >= OUTAGE_AFTER_SECOND_FAULT_S - 1.0, (stall, stall_at - second_fault)
            c.start(SECOND)
            c.wait_isr(TOPIC, 0, {LEADER, SECOND, RESTARTED}, timeout=60)
            prod.wait_acked(100)
        finally:
            prod.stop()
        verdict = check(prod.history, read_all(c.bootstrap, TOPIC, 1, history=prod.history))
        assert verdict.ok, verdict.report()
