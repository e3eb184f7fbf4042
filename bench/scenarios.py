"""Benchmark scenarios. Each scenario runs against one broker and returns metrics plus raw worker results.

To add a scenario: subclass ``Scenario``, implement ``run`` and ``metrics``, and list an instance in
``bench.run.build_scenarios``. ``metrics`` declares the table rows the scenario contributes.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from . import load
from .brokers import Broker, BrokerError

MiB = load.MiB


@dataclass
class Metric:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    plot: str | None = None  # which chart panel shows it ("throughput", "latency"), None = table only


@dataclass
class Settings:
    """Knobs shared by all scenarios (``--quick`` shrinks them)."""

    record_size: int = 1024
    produce_records: int = 200_000  # per scenario, split across producer processes
    producer_procs: int = 2
    produce_time_cap: float = 20.0
    drain_grace: float = 10.0
    consume_time_cap: float = 15.0
    consume_min_seconds: float = 4.0  # re-read the data set while a pass takes less than this
    consume_max_passes: int = 10
    max_consumer_procs: int = 1
    # A produce scenario is repeated (fresh topic each time, brokers interleaved) while its measured time summed
    # over repetitions is below repeat_min_seconds, up to max_reps; the table shows the median repetition.
    max_reps: int = 5
    repeat_min_seconds: float = 10.0
    latency_rate_mib: float = 8.0
    latency_duration: float = 10.0
    topic_timeout: float = 30.0
    group_join_timeout: float = 60.0  # subscribe -> stable group (Tansu needs ~session.timeout/2 per join)
    group_join_time_cap: float = 20.0  # join-latency runs stop starting new runs after this
    tiered_produce_reps: int = 5  # tiering on/off produce repetitions (alternating)
    tiered_read_reps: int = 3  # cold read / raw GET repetitions (interleaved, medians compared)
    tiered_offload_timeout: float = 120.0
    tiered_read_time_cap: float = 60.0

    @classmethod
    def quick(cls) -> Settings:
        return cls(
            produce_records=30_000,
            produce_time_cap=8.0,
            drain_grace=5.0,
            consume_time_cap=8.0,
            consume_min_seconds=1.0,
            latency_duration=4.0,
            max_reps=1,
            group_join_time_cap=8.0,
            tiered_produce_reps=1,
            tiered_read_reps=1,
            tiered_offload_timeout=60.0,
            tiered_read_time_cap=30.0,
        )


@dataclass
class RunContext:
    settings: Settings
    run_id: str
    # (broker name, scenario name) -> topic written by that scenario
    topics: dict[tuple[str, str], str] = field(default_factory=dict)
    # (broker name, scenario name) -> {partition: records acknowledged by the broker}
    written: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)


class Scenario:
    name: str = "scenario"
    kind: str = "generic"
    repeatable: bool = False
    headline: str = "mib_s"  # metric used to pick the median repetition

    def params(self) -> dict:
        return {}

    def metrics(self) -> list[Metric]:
        raise NotImplementedError

    def run(self, broker: Broker, ctx: RunContext) -> dict:
        """Returns {'metrics': {key: value}, 'raw': ..., 'broker_cpu_s': ..., 'errors': [...]}."""
        raise NotImplementedError

    def topic(self, broker: Broker, ctx: RunContext) -> str:
        return f"bench-{self.name}-{ctx.run_id}-{uuid.uuid4().hex[:6]}"

    def wants_another_rep(self, reps: list[dict], ctx: RunContext) -> bool:
        if not self.repeatable or len(reps) >= ctx.settings.max_reps:
            return False
        if any("metrics" not in r or r.get("errors") or r.get("error") for r in reps):
            return False
        return sum((r.get("summary") or {}).get("seconds", 0.0) for r in reps) < ctx.settings.repeat_min_seconds

    def combine(self, reps: list[dict]) -> dict:
        """One result out of several repetitions: the median one by the headline metric, with all of them kept."""
        if len(reps) == 1:
            return reps[0]
        good = [r for r in reps if "metrics" in r]
        if not good:
            return reps[-1]
        good.sort(key=lambda r: r["metrics"][self.headline])
        med = dict(good[(len(good) - 1) // 2])
        med["repetitions"] = [{k: v for k, v in r.items() if k != "raw"} for r in reps]
        med["errors"] = [e for r in reps for e in (r.get("errors") or [])]
        med["notes"] = list(dict.fromkeys(n for r in reps for n in (r.get("notes") or [])))
        return med


def _cpu_probe(broker: Broker):
    return broker.cpu


class ProduceThroughput(Scenario):
    kind = "produce"
    repeatable = True

    def __init__(self, partitions: int, acks: int):
        self.partitions = partitions
        self.acks = acks
        self.name = f"produce-{partitions}p-acks{'all' if acks == -1 else acks}"

    def params(self) -> dict:
        return {"partitions": self.partitions, "acks": self.acks}

    def metrics(self) -> list[Metric]:
        t = f"produce {self.partitions}p acks={self.acks}"
        return [
            Metric("mib_s", f"{t} (MiB/s)", "MiB/s", True, "throughput"),
            Metric("rec_s", f"{t} (rec/s)", "rec/s", True),
        ]

    def run(self, broker: Broker, ctx: RunContext) -> dict:
        s = ctx.settings
        topic = self.topic(broker, ctx)
        broker.create_topic(topic, self.partitions, s.topic_timeout)
        cfgs = [
            {
                "worker": i,
                "bootstrap": broker.bootstrap,
                "topic": topic,
                "acks": self.acks,
                "count": n,
                "record_size": s.record_size,
                "time_cap": s.produce_time_cap,
                "drain_grace": s.drain_grace,
            }
            for i, n in enumerate(load.split(s.produce_records, s.producer_procs))
        ]
        wr = load.run_workers(
            load.produce_worker, cfgs, s.produce_time_cap + s.drain_grace + 60, probe=_cpu_probe(broker)
        )
        ok = wr.ok
        out: dict[str, Any] = {"raw": wr.results, "errors": list(wr.errors), "topic": topic}
        if not ok:
            return out
        t0, t1 = load.aggregate_window(ok)
        secs = max(t1 - t0, 1e-9)
        nbytes = sum(r["bytes"] for r in ok)
        nrec = sum(r["delivered"] for r in ok)
        errs = sum(r["errors"] for r in ok)
        if errs:
            out["errors"].append(f"{errs} delivery errors, first: {next(r['first_error'] for r in ok if r['errors'])}")
        written: dict[int, int] = {}
        for r in ok:
            for part, n in r["per_partition"].items():
                written[int(part)] = written.get(int(part), 0) + n
        if (broker.name, self.name) not in ctx.written:  # consume scenarios read the first repetition's topic
            ctx.written[(broker.name, self.name)] = written
            ctx.topics[(broker.name, self.name)] = topic
        else:
            broker.delete_topic(topic)
        out["metrics"] = {"mib_s": nbytes / MiB / secs, "rec_s": nrec / secs}
        out["summary"] = {
            "seconds": secs,
            "bytes": nbytes,
            "records": nrec,
            "requested": s.produce_records,
            "capped": any(r["capped"] for r in ok),
            "delivery_errors": errs,
        }
        _add_cpu(out, wr, nbytes)
        return out


class ConsumeThroughput(Scenario):
    kind = "consume"
    repeatable = True  # re-reads the same topic

    def __init__(self, source: ProduceThroughput):
        self.source = source
        self.partitions = source.partitions
        self.name = f"consume-{source.partitions}p"

    def params(self) -> dict:
        return {"partitions": self.partitions, "reads_topic_of": self.source.name}

    def metrics(self) -> list[Metric]:
        t = f"consume {self.partitions}p"
        return [
            Metric("mib_s", f"{t} (MiB/s)", "MiB/s", True, "throughput"),
            Metric("rec_s", f"{t} (rec/s)", "rec/s", True),
        ]

    def run(self, broker: Broker, ctx: RunContext) -> dict:
        s = ctx.settings
        topic = ctx.topics.get((broker.name, self.source.name))
        written = ctx.written.get((broker.name, self.source.name))
        if topic is None or not written:
            raise BrokerError(f"no data: scenario {self.source.name} wrote nothing on {broker.name}")
        nproc = min(s.max_consumer_procs, self.partitions)
        parts = list(range(self.partitions))
        cfgs = [
            {
                "worker": i,
                "bootstrap": broker.bootstrap,
                "topic": topic,
                "targets": {p: written.get(p, 0) for p in parts[i::nproc]},
                "time_cap": s.consume_time_cap,
                "min_seconds": s.consume_min_seconds,
                "max_passes": s.consume_max_passes,
            }
            for i in range(nproc)
        ]
        wr = load.run_workers(load.consume_worker, cfgs, s.consume_time_cap + 60, probe=_cpu_probe(broker))
        ok = wr.ok
        out: dict[str, Any] = {"raw": wr.results, "errors": list(wr.errors), "topic": topic}
        if not ok:
            return out
        t0, t1 = load.aggregate_window(ok)
        secs = max(t1 - t0, 1e-9)
        nbytes = sum(r["bytes"] for r in ok)
        nrec = sum(r["records"] for r in ok)
        expected = sum(r["expected"] for r in ok)
        passes = min(r["passes"] for r in ok)
        if any(r["capped"] for r in ok) and passes == 0:
            out["errors"].append(f"read {nrec} of {expected} records before the {s.consume_time_cap}s cap")
        hw = {int(p): w for r in ok for p, w in r["watermarks"].items()}
        bad_hw = {p: (hw[p][1], written[p]) for p in hw if hw[p][1] - hw[p][0] != written.get(p, 0)}
        if bad_hw:  # a finding about the broker, not a failed measurement
            out["notes"] = [
                "check failed: ListOffsets high watermark != acknowledged records "
                "{partition: (hw, acked)}: " + str(dict(sorted(bad_hw.items())))
            ]
        out["metrics"] = {"mib_s": nbytes / MiB / secs, "rec_s": nrec / secs}
        out["summary"] = {
            "seconds": secs,
            "bytes": nbytes,
            "records": nrec,
            "records_per_pass": expected,
            "passes": passes,
            "capped": passes == 0,
        }
        _add_cpu(out, wr, nbytes)
        return out


class ProduceLatency(Scenario):
    kind = "latency"

    def __init__(self, partitions: int = 1, acks: int = -1):
        self.partitions = partitions
        self.acks = acks
        self.name = f"latency-{partitions}p-acks{'all' if acks == -1 else acks}"

    def params(self) -> dict:
        return {"partitions": self.partitions, "acks": self.acks}

    def metrics(self) -> list[Metric]:
        t = f"latency {self.partitions}p acks={self.acks}"
        return [
            Metric("p50", f"{t} p50 (ms)", "ms", False, "latency"),
            Metric("p95", f"{t} p95 (ms)", "ms", False, "latency"),
            Metric("p99", f"{t} p99 (ms)", "ms", False, "latency"),
            Metric("max", f"{t} max (ms)", "ms", False, "latency"),
            Metric("achieved_mib_s", f"{t} achieved rate (MiB/s)", "MiB/s", True),
        ]

    def run(self, broker: Broker, ctx: RunContext) -> dict:
        s = ctx.settings
        topic = self.topic(broker, ctx)
        broker.create_topic(topic, self.partitions, s.topic_timeout)
        ctx.topics[(broker.name, self.name)] = topic
        cfgs = [
            {
                "worker": 0,
                "bootstrap": broker.bootstrap,
                "topic": topic,
                "acks": self.acks,
                "record_size": s.record_size,
                "rate_bytes": s.latency_rate_mib * MiB,
                "duration": s.latency_duration,
                "drain_grace": s.drain_grace,
            }
        ]
        wr = load.run_workers(
            load.latency_worker, cfgs, s.latency_duration + s.drain_grace + 60, probe=_cpu_probe(broker)
        )
        ok = wr.ok
        out: dict[str, Any] = {"errors": list(wr.errors), "topic": topic}
        if not ok:
            out["raw"] = wr.results
            return out
        r = ok[0]
        lats = r.pop("latencies_ms")
        out["raw"] = [r]
        pct = load._percentiles(lats)
        if r["errors"] or r["undelivered"]:
            out["errors"].append(
                f"{r['errors']} delivery errors, {r['undelivered']} undelivered (first: {r['first_error']})"
            )
        out["metrics"] = {
            **{k: pct.get(k) for k in ("p50", "p95", "p99", "max")},
            "achieved_mib_s": r["delivered"] * s.record_size / MiB / max(r["produced_for"], 1e-9),
        }
        out["summary"] = {
            "target_mib_s": s.latency_rate_mib,
            "duration_s": s.latency_duration,
            "sent": r["sent"],
            "delivered": r["delivered"],
            "latency_ms": pct,
        }
        _add_cpu(out, wr, r["bytes"])
        return out


def _add_cpu(out: dict, wr: load.WorkerRun, nbytes: int) -> None:
    if wr.probe_start is not None and wr.probe_end is not None:
        cpu = wr.probe_end - wr.probe_start
        out["broker_cpu_s"] = cpu
        if nbytes:
            out["broker_cpu_s_per_gib"] = cpu / (nbytes / (1024 * MiB))


class RawFetchThroughput(Scenario):
    """Broker-side fetch throughput: processes that send raw Fetch requests and discard the records
    (bench/rawfetch.py), reading the topic of a produce scenario from offset 0, whole passes repeated."""

    kind = "fetch"
    repeatable = True

    def __init__(
        self, source: ProduceThroughput, procs: int = 3, max_bytes: int = 64 * MiB, partition_max_bytes: int = 16 * MiB
    ):
        self.source = source
        self.partitions = source.partitions
        self.procs = procs
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.name = f"fetch-raw-{source.partitions}p"

    def params(self) -> dict:
        return {
            "partitions": self.partitions,
            "reads_topic_of": self.source.name,
            "procs": self.procs,
            "max_bytes": self.max_bytes,
            "partition_max_bytes": self.partition_max_bytes,
            "fetch_version": 11,
        }

    def metrics(self) -> list[Metric]:
        t = f"raw Fetch {self.partitions}p, {self.procs} procs"
        return [
            Metric("mib_s", f"{t} (MiB/s)", "MiB/s", True, "throughput"),
            Metric("req_s", f"{t} (requests/s)", "req/s", True),
        ]

    def run(self, broker: Broker, ctx: RunContext) -> dict:
        from . import rawfetch

        s = ctx.settings
        topic = ctx.topics.get((broker.name, self.source.name))
        written = ctx.written.get((broker.name, self.source.name))
        if topic is None or not written:
            raise BrokerError(f"no data: scenario {self.source.name} wrote nothing on {broker.name}")
        cfgs = [
            {
                "worker": i,
                "bootstrap": broker.bootstrap,
                "topic": topic,
                "targets": dict(written),
                "max_bytes": self.max_bytes,
                "partition_max_bytes": self.partition_max_bytes,
                "time_cap": s.consume_time_cap,
                "min_seconds": s.consume_min_seconds,
                "max_passes": s.consume_max_passes,
            }
            for i in range(self.procs)
        ]
        wr = load.run_workers(rawfetch.raw_fetch_worker, cfgs, s.consume_time_cap + 60, probe=_cpu_probe(broker))
        ok = wr.ok
        out: dict[str, Any] = {"raw": wr.results, "errors": list(wr.errors), "topic": topic}
        if not ok:
            return out
        t0, t1 = load.aggregate_window(ok)
        secs = max(t1 - t0, 1e-9)
        nbytes = sum(r["bytes"] for r in ok)
        nreq = sum(r["requests"] for r in ok)
        passes = min(r["passes"] for r in ok)
        errs = sum(r["errors"] for r in ok)
        if errs:
            out["errors"].append(f"{errs} partition errors, first: {next(r['first_error'] for r in ok if r['errors'])}")
        out["metrics"] = {"mib_s": nbytes / MiB / secs, "req_s": nreq / secs}
        out["summary"] = {
            "seconds": secs,
            "bytes": nbytes,
            "requests": nreq,
            "passes": passes,
            "capped": passes == 0,
            "records": None,
        }
        _add_cpu(out, wr, nbytes)
        return out


def _median(xs: Sequence[float | None]) -> float | None:
    """The median of the values that are not None (None: there are none)."""
    s = sorted(x for x in xs if x is not None)
    if not s:
        return None
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2


class GroupConsumeThroughput(Scenario):
    """``members`` consumer processes in one group (confluent-kafka ``subscribe``, eager range assignment) read a
    ``partitions``-partition topic produced for the purpose. Throughput is measured once the group is stable (each
    member's partitions paused until then); the time from subscribe to a stable group is reported on its own."""

    kind = "group"

    def __init__(self, partitions: int = 6, members: int = 3):
        self.partitions = partitions
        self.members = members
        self.name = f"group-consume-{partitions}p-{members}m"

    def params(self) -> dict:
        return {"partitions": self.partitions, "members": self.members, **load.GROUP_CONSUMER_CONF}

    def metrics(self) -> list[Metric]:
        t = f"group consume {self.partitions}p, {self.members} members"
        return [
            Metric("mib_s", f"{t} (MiB/s)", "MiB/s", True, "throughput"),
            Metric("rec_s", f"{t} (rec/s)", "rec/s", True),
            Metric("join_s", f"{t}: subscribe -> group stable (s)", "s", False),
        ]

    def run(self, broker: Broker, ctx: RunContext) -> dict:
        s = ctx.settings
        topic = self.topic(broker, ctx)
        broker.create_topic(topic, self.partitions, s.topic_timeout)
        pcfgs = [
            {
                "worker": i,
                "bootstrap": broker.bootstrap,
                "topic": topic,
                "acks": 1,
                "count": n,
                "record_size": s.record_size,
                "time_cap": s.produce_time_cap,
                "drain_grace": s.drain_grace,
            }
            for i, n in enumerate(load.split(s.produce_records, s.producer_procs))
        ]
        pw = load.run_workers(load.produce_worker, pcfgs, s.produce_time_cap + s.drain_grace + 60)
        out: dict[str, Any] = {"errors": list(pw.errors), "topic": topic}
        written: dict[int, int] = {}
        for r in pw.ok:
            for part, n in r["per_partition"].items():
                written[int(part)] = written.get(int(part), 0) + n
        if not written:
            out["errors"].append("producing the group's data set failed")
            return out
        ctx.topics[(broker.name, self.name)] = topic
        ctx.written[(broker.name, self.name)] = written
        group = f"bench-group-{ctx.run_id}-{uuid.uuid4().hex[:6]}"
        cfgs = [
            {
                "worker": i,
                "bootstrap": broker.bootstrap,
                "topic": topic,
                "group": group,
                "targets": written,
                "time_cap": s.consume_time_cap,
                "min_seconds": s.consume_min_seconds,
                "max_passes": s.consume_max_passes,
            }
            for i in range(self.members)
        ]
        broker.wait_quiet()
        wr = load.run_group_workers(
            cfgs, self.partitions, s.consume_time_cap + 60, s.group_join_timeout, probe=_cpu_probe(broker)
        )
        out["errors"] += wr.errors
        out["raw"] = wr.results
        out["join"] = wr.join
        ok = wr.ok
        if not ok or len(ok) < self.members or not wr.join or wr.join.get("stable_s") is None:
            return out
        t0, t1 = load.aggregate_window(ok)
        secs = max(t1 - t0, 1e-9)
        nbytes = sum(r["bytes"] for r in ok)
        nrec = sum(r["records"] for r in ok)
        passes = min(r["passes"] for r in ok)
        if any(r["rebalances_after_go"] for r in ok):
            out["notes"] = ["a rebalance happened during the measured phase"]
        if any(r["capped"] for r in ok) and passes == 0:
            out["errors"].append(f"read {nrec} records before the {s.consume_time_cap}s cap")
        first_assign = [r["first_assign"] - r["t_subscribe"] for r in ok if r.get("first_assign")]
        out["metrics"] = {"mib_s": nbytes / MiB / secs, "rec_s": nrec / secs, "join_s": wr.join["stable_s"]}
        out["summary"] = {
            "seconds": secs,
            "bytes": nbytes,
            "records": nrec,
            "passes": passes,
            "capped": passes == 0,
            "member_first_assignment_s": first_assign,
            "assignments": {str(r["worker"]): r["assigned"] for r in ok},
            "join": wr.join,
        }
        _add_cpu(out, wr, nbytes)
        return out


class GroupJoinLatency(Scenario):
    """A new consumer in a new group subscribes to a topic with records: time from ``subscribe()`` to its first
    record (and to its first assignment), median of several runs (``group.initial.rebalance.delay.ms=0`` on
    Strata; Tansu holds the JoinGroup about session.timeout.ms/2, so it gets fewer runs within the time cap)."""

    kind = "group"

    def __init__(self, source: GroupConsumeThroughput, runs: int = 7):
        self.source = source
        self.runs = runs
        self.name = "group-join"

    def params(self) -> dict:
        return {"runs": self.runs, "reads_topic_of": self.source.name, **load.GROUP_CONSUMER_CONF}

    def metrics(self) -> list[Metric]:
        return [
            Metric("first_record_ms", "group join: subscribe -> first record, median (ms)", "ms", False),
            Metric("assign_ms", "group join: subscribe -> assignment, median (ms)", "ms", False),
            Metric("first_record_max_ms", "group join: subscribe -> first record, worst run (ms)", "ms", False),
        ]

    def run(self, broker: Broker, ctx: RunContext) -> dict:
        s = ctx.settings
        topic = ctx.topics.get((broker.name, self.source.name))
        if topic is None:
            raise BrokerError(f"no data: scenario {self.source.name} wrote nothing on {broker.name}")
        cfg = {
            "worker": 0,
            "bootstrap": broker.bootstrap,
            "topic": topic,
            "runs": self.runs,
            "group_prefix": f"bench-join-{ctx.run_id}-{uuid.uuid4().hex[:4]}",
            "run_cap": s.group_join_timeout,
            "time_cap": s.group_join_time_cap,
        }
        wr = load.run_workers(load.join_worker, [cfg], s.group_join_time_cap + s.group_join_timeout + 60)
        out: dict[str, Any] = {"errors": list(wr.errors), "raw": wr.results}
        if not wr.ok:
            return out
        runs = wr.ok[0]["runs"]
        firsts = [r["first_record_s"] for r in runs]
        if any(x is None for x in firsts):
            out["errors"].append(
                f"{sum(x is None for x in firsts)} of {len(runs)} runs got no record within {s.group_join_timeout}s"
            )
        good = [x for x in firsts if x is not None]
        if not good:
            return out
        med = _median(good)
        assert med is not None  # good is not empty
        out["metrics"] = {
            "first_record_ms": med * 1000,
            "assign_ms": (_median([r["assign_s"] for r in runs]) or 0.0) * 1000,
            "first_record_max_ms": max(good) * 1000,
        }
        out["summary"] = {"runs": len(runs), "first_record_s": firsts, "assign_s": [r["assign_s"] for r in runs]}
        return out
