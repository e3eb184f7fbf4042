"""Cluster benchmarks on a local three-broker cluster (etcd + 3 Strata processes on loopback, started by
tests/support/cluster_proc.py as `make cluster` does, without tiered storage):

* ``cluster-rf3-produce-8p-acksall``: acks=-1 produce throughput to an RF=3, min.insync.replicas=2 topic;
* ``cluster-rf3-latency-1p-acksall-<rate>mib``: p50/p95/p99 acks=-1 produce latency at a fixed rate, 5 and
  20 MiB/s (the issue's aim: p99 under 20 ms at 20 MB/s; ``--latency-rate``);
* ``cluster-failover``: leader fail-over time, SIGKILL of the partition leader to the first acknowledged produce
  (and to the new leader showing in Metadata), against the broker lease TTL (``broker.session.timeout.ms``).

The first two run the single-broker scenarios of bench/scenarios.py against the cluster. ``bench.run`` lists these
scenarios (``cluster_scenarios()``); they run in the "strata" slot only (Tansu has no replication) and share one
cluster, started on first use and stopped by PID when the process exits. Standalone:

    python -m bench.cluster_bench [--quick] [--latency-rate MIB_S] [--kills N] [--out DIR]
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .brokers import Broker, cpu_seconds
from .scenarios import Metric, ProduceLatency, ProduceThroughput, RunContext, Scenario, Settings

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

CLUSTER_SETTINGS: dict[str, object] = {
    # Kafka's defaults where they matter (lease = broker.session.timeout.ms 9 s, replica.lag.time.max.ms 30 s),
    # RF 3 with min.insync.replicas 2 as config/cluster-node.properties
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "offsets.topic.replication.factor": 3,
    "num.partitions": 1,
    "group.initial.rebalance.delay.ms": 0,
}
TOPIC_CONFIG = {"min.insync.replicas": 2}


class ClusterTarget:
    """What the single-broker scenarios need from a `Broker`, for the whole cluster."""

    name = "strata-cluster"

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.notes: list[str] = []

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def create_topic(self, topic: str, partitions: int, timeout: float = 30.0) -> None:
        self.cluster.create_topic(topic, partitions, 3, TOPIC_CONFIG, timeout=timeout)

    def delete_topic(self, topic: str, timeout: float = 30.0) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        try:
            admin.delete_topics([topic], operation_timeout=timeout, request_timeout=timeout)[topic].result(timeout)
        except Exception as e:  # noqa: BLE001 - best effort, as Broker.delete_topic
            self.notes.append(f"DeleteTopics({topic}) failed: {e}")

    def cpu(self) -> float | None:
        """CPU seconds of all live brokers together."""
        vals = [cpu_seconds(b.pid) for b in self.cluster.brokers.values() if b.is_running()]
        return sum(v for v in vals if v is not None) if vals else None


class _Shared:
    cluster: Any = None
    tmp: tempfile.TemporaryDirectory | None = None


def shared_cluster(size: int = 3) -> Any:
    """The cluster all cluster scenarios of this process use; started on first use, stopped at exit."""
    from tests.support.cluster_proc import StrataCluster

    c = _Shared.cluster
    if c is None or (len(c.live_ids()) < size and not _restart_dead(c)):
        _Shared.tmp = tempfile.TemporaryDirectory(prefix="strata-cluster-bench-")
        c = StrataCluster(_Shared.tmp.name, size=size, defaults=CLUSTER_SETTINGS, start_timeout=90)
        c.start()
        _Shared.cluster = c
        atexit.register(stop_shared_cluster)
    return c


def _restart_dead(c: Any) -> bool:
    try:
        for i in c.ids:
            if not c.brokers[i].is_running():
                c.start(i)
        return True
    except Exception:  # noqa: BLE001 - start a fresh cluster instead
        c.close()
        return False


def stop_shared_cluster() -> None:
    if _Shared.cluster is not None:
        _Shared.cluster.close()
        _Shared.cluster = None
    if _Shared.tmp is not None:
        _Shared.tmp.cleanup()
        _Shared.tmp = None


def _skip(broker: Broker | None) -> dict | None:
    if broker is not None and broker.name != "strata":
        return {"skipped": f"cluster scenario: runs once, in the strata slot ({broker.name} has no replication)"}
    return None


class ClusterScenario(Scenario):
    """A single-broker scenario of bench/scenarios.py run against the three-broker cluster (RF 3)."""

    def __init__(self, inner: Scenario, **settings: Any) -> None:
        self.inner = inner
        self.settings = settings  # Settings fields replaced for this scenario (e.g. latency_rate_mib)
        self.name = f"cluster-rf3-{inner.name}" + "".join(
            f"-{v:g}mib" for k, v in settings.items() if k == "latency_rate_mib"
        )
        self.kind = inner.kind
        self.repeatable = inner.repeatable
        self.headline = inner.headline

    def params(self) -> dict:
        return {**self.inner.params(), "brokers": 3, "replication_factor": 3, **TOPIC_CONFIG, **self.settings}

    def metrics(self) -> list[Metric]:
        return [dataclasses.replace(m, label=f"3 brokers RF=3: {m.label}") for m in self.inner.metrics()]

    def wants_another_rep(self, reps: list[dict], ctx: RunContext) -> bool:
        return self.inner.wants_another_rep(reps, ctx)

    def run(self, broker: Broker | None, ctx: RunContext) -> dict:
        skipped = _skip(broker)
        if skipped:
            return skipped
        target = ClusterTarget(shared_cluster())
        sub = dataclasses.replace(ctx, settings=dataclasses.replace(ctx.settings, **self.settings))
        out = self.inner.run(target, sub)  # type: ignore[arg-type]
        if target.notes:
            out.setdefault("notes", []).extend(target.notes)
        return out


class LeaderFailover(Scenario):
    """SIGKILL the leader of a one-partition RF=3 topic while a producer (acks=all) writes one record at a time;
    fail-over = kill to the first acknowledged record sent after the kill (librdkafka's per-message latency gives
    the acknowledgement time); election = kill to the first Metadata answer of a survivor naming a new leader."""

    kind = "failover"
    headline = "failover_ms"

    def __init__(self, kills: int = 3) -> None:
        self.kills = kills
        self.name = "cluster-failover"

    def params(self) -> dict:
        return {"kills": self.kills, "brokers": 3, "replication_factor": 3, **TOPIC_CONFIG}

    def metrics(self) -> list[Metric]:
        return [
            Metric(
                "failover_ms", "leader fail-over: kill -9 to first acked produce, median (ms)", "ms", False, "latency"
            ),
            Metric("failover_max_ms", "leader fail-over, worst (ms)", "ms", False),
            Metric("election_ms", "kill -9 to new leader in Metadata, median (ms)", "ms", False),
            Metric("session_ms", "broker lease TTL, broker.session.timeout.ms (ms)", "ms", False),
        ]

    def run(self, broker: Broker | None, ctx: RunContext) -> dict:
        from confluent_kafka import Producer

        skipped = _skip(broker)
        if skipped:
            return skipped
        c = shared_cluster()
        target = ClusterTarget(c)
        topic = self.topic(broker, ctx)  # type: ignore[arg-type]
        target.create_topic(topic, 1, ctx.settings.topic_timeout)
        p = Producer(
            {
                "bootstrap.servers": c.bootstrap,
                "acks": "all",
                "linger.ms": 0,
                "message.timeout.ms": 60000,
                "retry.backoff.ms": 20,
                "retry.backoff.max.ms": 100,
                "reconnect.backoff.ms": 20,
                "reconnect.backoff.max.ms": 100,
                "log_level": 2,
            }
        )
        acked: list[tuple[float | None, str | None]] = []  # (latency from produce() to acknowledgement, error)

        def on_delivery(err: Any, msg: Any) -> None:
            acked.append((msg.latency(), str(err) if err else None))

        def produce_one() -> tuple[float, float | None, str | None]:
            acked.clear()
            t = time.monotonic()
            p.produce(topic, b"x" * 100, on_delivery=on_delivery)
            p.flush(90)
            if not acked:
                return t, None, "no delivery report within 90 s"
            lat, err = acked[0]
            return t, lat, err

        runs: list[dict] = []
        errors: list[str] = []
        for _ in range(self.kills):
            _, _, err = produce_one()  # warm: connections and metadata in place
            if err:
                errors.append(f"warm-up produce failed: {err}")
                break
            victim = c.leader_of(topic, 0)
            survivors = [i for i in c.ids if i != victim]
            t0 = time.monotonic()
            c.kill9(victim)
            watch = _ElectionWatch(c, topic, victim, survivors[0], t0)
            watch.start()
            sent_at, lat, err = produce_one()
            acked_s = sent_at + (lat or 0.0) - t0
            election_s = watch.result(timeout=60)
            elected = c.wait_leader(topic, 0, not_in=[victim], via=survivors[0], timeout=60)
            if election_s is None:
                err = err or "no new leader in Metadata within 60 s"
            runs.append(
                {
                    "victim": victim,
                    "new_leader": elected,
                    "failover_ms": acked_s * 1000,
                    "election_ms": (election_s or 0.0) * 1000,
                    "error": err,
                }
            )
            if err:
                errors.append(f"probe record failed after killing broker {victim}: {err}")
            c.start(victim)
            c.wait_full_isr(topic, 1, timeout=60)
        target.delete_topic(topic)
        out: dict[str, Any] = {"raw": runs, "errors": errors, "topic": topic}
        ok = [r for r in runs if not r["error"]]
        if ok:
            session = int(c.brokers[c.ids[0]].overrides.get("broker.session.timeout.ms", 9000))
            out["metrics"] = {
                "failover_ms": statistics.median(r["failover_ms"] for r in ok),
                "failover_max_ms": max(r["failover_ms"] for r in ok),
                "election_ms": statistics.median(r["election_ms"] for r in ok),
                "session_ms": session,
            }
            out["summary"] = {
                "kills": len(runs),
                "aim": f"fail-over under the lease TTL + 1 s = {session + 1000} ms",
                "aim_met": max(r["failover_ms"] for r in ok) < session + 1000,
            }
        return out


class _ElectionWatch(threading.Thread):
    """Polls a survivor's Metadata every 10 ms (a measurement, not a synchronisation) and notes when it first names
    a leader other than the killed broker."""

    def __init__(self, c: Any, topic: str, victim: int, via: int, t0: float) -> None:
        super().__init__(daemon=True)
        self.c, self.topic, self.victim, self.via, self.t0 = c, topic, victim, via, t0
        self.elected_s: float | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                if self.c.leader_of(self.topic, 0, via=self.via) not in (self.victim, -1):
                    self.elected_s = time.monotonic() - self.t0
                    return
            except Exception:  # noqa: BLE001, S110 - a survivor busy electing: poll again
                pass
            self._halt.wait(0.01)

    def result(self, timeout: float) -> float | None:
        self.join(timeout)
        self._halt.set()
        return self.elected_s


def cluster_scenarios() -> list[Scenario]:
    """The cluster scenarios, in run order, for bench.run.build_scenarios."""
    return [
        ClusterScenario(ProduceThroughput(partitions=8, acks=-1)),
        ClusterScenario(ProduceLatency(partitions=1, acks=-1), latency_rate_mib=5.0),
        ClusterScenario(ProduceLatency(partitions=1, acks=-1), latency_rate_mib=20.0),
        LeaderFailover(),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.cluster_bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--latency-rate",
        type=float,
        nargs="+",
        default=[5.0, 20.0],
        help="MiB/s of the latency scenarios (default: 5 and 20)",
    )
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "cluster")
    args = ap.parse_args(argv)
    settings = Settings.quick() if args.quick else Settings()
    ctx = RunContext(settings=settings, run_id=time.strftime("%H%M%S"))
    # cluster scenarios: their run() takes no broker (None: the cluster they start themselves)
    scenarios: list[ClusterScenario | LeaderFailover] = [
        ClusterScenario(ProduceThroughput(partitions=8, acks=-1)),
        *(ClusterScenario(ProduceLatency(partitions=1, acks=-1), latency_rate_mib=rate) for rate in args.latency_rate),
        LeaderFailover(kills=1 if args.quick else args.kills),
    ]
    results = []
    try:
        for sc in scenarios:
            t0 = time.monotonic()
            r = sc.run(None, ctx)
            r["wall_s"] = time.monotonic() - t0
            results.append(
                {
                    "name": sc.name,
                    "params": sc.params(),
                    "result": {k: v for k, v in r.items() if k != "raw"},
                    "raw": r.get("raw"),
                }
            )
            mt = ", ".join(f"{k}={v:.1f}" for k, v in (r.get("metrics") or {}).items())
            print(
                f"{sc.name}: {mt or 'no result'} ({r['wall_s']:.0f}s)"
                + (
                    f" PROBLEMS: {(r.get('errors') or [r.get('error')])[0]}"
                    if r.get("errors") or r.get("error")
                    else ""
                ),
                flush=True,
            )
    finally:
        stop_shared_cluster()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cluster_results.json").write_text(json.dumps(results, indent=2, default=str))
    print(f"wrote {args.out / 'cluster_results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
