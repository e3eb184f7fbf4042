"""Rebalances (issue 20): how long a group of 6 consumers takes to absorb a 7th, and the longest pause in the record
streams of the 6 that were there, for classic eager (`partition.assignment.strategy=range`), classic
cooperative-sticky and the KIP-848 consumer protocol (`group.protocol=consumer`) in the same run; aim: the consumer
protocol's longest pause <= 0.1 of the eager one. Also the server-side assignors' time on 1,000 members x 10,000
partitions.

One Strata broker of its own (tests/support/broker_proc.py), a 42-partition topic (7 each for 6 members, 6 each for
7) and a confluent-kafka producer writing 100-byte records at 2,100 records/s across all partitions for the whole run.
Per protocol: 6 confluent-kafka consumers (threads of this process, librdkafka's defaults otherwise: heartbeats every
3 s for the classic protocol, the broker's `group.consumer.heartbeat.interval.ms` for the consumer protocol) join a
fresh group, `auto.offset.reset=latest`; once their assignments are disjoint, cover the topic and all of them
receive records, a 3 s steady window gives the baseline gap, then the 7th subscribes. Absorbed = the members'
own rebalance callbacks show a disjoint, complete assignment of 6 partitions each. A member's pause is the longest
gap between two records of the partitions it keeps (owned before the 7th subscribed and after the group absorbed it)
from 1 s before the 7th subscribed to 2 s after the group absorbed it (a member in an eager rebalance stops for the
whole rebalance; a cooperative or consumer-protocol member keeps consuming what it keeps). Reported per protocol:
absorb time, the 7th member's first record, the longest and median pause of the 6, and the steady-state longest gap
(any partition: what the machine's noise alone gives).

Assignors (no broker): `uniform` and `range` on 1,000 members subscribed to 10 topics of 1,000 partitions, a fresh
group, then a 1,001st member joining (the sticky path), and with heterogeneous subscriptions (5 topics of 10 each)
and racks; best of 3, seconds.

Standalone: ``python -m bench.rebalance_bench [--assignors-only]``; ``make bench`` runs it as the "rebalance" group.
Until the broker advertises ConsumerGroupHeartbeat (api 68), the consumer-protocol row says "not advertised".
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

TOPIC = "rebalance-bench"
PARTITIONS = 42
MEMBERS = 6
RATE = 2100  # records/s over all partitions: ~350/s per member, a record every ~3 ms
VALUE = 100
STEADY_S = 3.0
PAUSE_AIM = 0.1  # consumer protocol / classic eager, longest pause
CONSUMER_GROUP_HEARTBEAT = 68
QUIET = {"log_level": 3}
MODES: tuple[tuple[str, dict[str, str]], ...] = (
    ("classic eager (range)", {"partition.assignment.strategy": "range"}),
    ("classic cooperative-sticky", {"partition.assignment.strategy": "cooperative-sticky"}),
    ("consumer protocol", {"group.protocol": "consumer"}),
)

TP = tuple[str, int]


class Member(threading.Thread):
    """One consumer polling in its own thread; it records when each record arrived and what it owns (from its
    rebalance callbacks: the whole assignment under an eager strategy, increments otherwise)."""

    def __init__(self, bootstrap: str, group: str, conf: dict[str, str], name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.conf = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "auto.offset.reset": "latest",
            **conf,
            **QUIET,
        }
        self.eager = conf.get("partition.assignment.strategy") in ("range", "roundrobin")
        self.records: list[tuple[float, int]] = []  # (arrival, partition) of every record
        self.owned: set[TP] = set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.error: str | None = None

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        tps = {(p.topic, p.partition) for p in partitions}
        with self.lock:
            self.owned = tps if self.eager else self.owned | tps

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        tps = {(p.topic, p.partition) for p in partitions}
        with self.lock:
            self.owned = set() if self.eager else self.owned - tps

    def run(self) -> None:
        from confluent_kafka import Consumer

        c = Consumer(self.conf)
        try:
            c.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke)
            while not self.stopping.is_set():
                got = [m.partition() or 0 for m in c.consume(500, 0.05) if m.error() is None]
                if got:
                    now = time.monotonic()
                    with self.lock:
                        self.records.extend((now, p) for p in got)
        except Exception as e:  # noqa: BLE001 - reported in the row, the other protocols still run
            self.error = f"{type(e).__name__}: {e}"
        finally:
            c.close()

    def snapshot(self) -> tuple[set[TP], float | None]:
        with self.lock:
            return set(self.owned), self.records[-1][0] if self.records else None

    def arrivals(self, partitions: set[int] | None = None) -> list[float]:
        """When records arrived (of these partitions only, if given)."""
        with self.lock:
            return [t for t, p in self.records if partitions is None or p in partitions]

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


def _balanced(members: list[Member], per_member: int, since: float) -> bool:
    """Disjoint assignments covering the topic, `per_member` each, and every member received a record after `since`."""
    seen: set[TP] = set()
    for m in members:
        owned, last = m.snapshot()
        if len(owned) != per_member or owned & seen or last is None or last < since:
            return False
        seen |= owned
    return len(seen) == PARTITIONS


def _wait(cond: Callable[[], bool], timeout: float, what: str, members: list[Member]) -> float:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            now = time.monotonic()
            state = [
                (len(owned), round(now - last, 1) if last else None) for owned, last in map(Member.snapshot, members)
            ]
            raise TimeoutError(f"{what} not within {timeout:.0f} s (partitions, s since last record: {state})")
        time.sleep(0.02)
    return time.monotonic()


def _longest_gap(times: list[float], start: float, end: float) -> float:
    """Longest interval without a record within [start, end] (the window's edges count as boundaries)."""
    inside = [start] + [t for t in times if start < t < end] + [end]
    return max(b - a for a, b in itertools.pairwise(inside))


class Producer(threading.Thread):
    """Writes RATE records/s round robin over the partitions until stopped."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True, name="producer")
        self.bootstrap = bootstrap
        self.stopping = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Producer as CkProducer

        p = CkProducer({"bootstrap.servers": self.bootstrap, "linger.ms": 1, "acks": 1, **QUIET})
        value = b"x" * VALUE
        start, sent = time.monotonic(), 0
        while not self.stopping.is_set():
            due = int((time.monotonic() - start) * RATE)
            while sent < due:
                p.produce(TOPIC, value, partition=sent % PARTITIONS)
                sent += 1
            p.poll(0.005)
        p.flush(10)


def measure_mode(bootstrap: str, name: str, conf: dict[str, str]) -> dict[str, Any]:
    group = f"rebalance-bench-{uuid.uuid4().hex[:8]}"
    six = [Member(bootstrap, group, conf, f"member-{i}") for i in range(MEMBERS)]
    seventh = Member(bootstrap, group, conf, "member-7th")
    try:
        formed_from = time.monotonic()
        for m in six:
            m.start()
        formed = _wait(lambda: _balanced(six, PARTITIONS // MEMBERS, time.monotonic() - 1.0), 120, "6 members", six)
        time.sleep(STEADY_S)  # the baseline window: nothing changes in the group
        joined = time.monotonic()
        before = [m.snapshot()[0] for m in six]
        seventh.start()
        seven = [*six, seventh]
        absorbed = _wait(lambda: _balanced(seven, PARTITIONS // (MEMBERS + 1), joined), 120, "the 7th", seven)
        kept = [{p for _, p in owned & m.snapshot()[0]} for owned, m in zip(before, six, strict=True)]
        time.sleep(2.0)
        end = time.monotonic()
    finally:
        for m in [*six, seventh]:
            if m.is_alive():
                m.stop()
    errors = [m.error for m in [*six, seventh] if m.error]
    if errors:
        raise RuntimeError("; ".join(errors))
    # the stream of the partitions each member had before and still has after: what a rebalance should not stop
    pauses = [_longest_gap(m.arrivals(k), joined - 1.0, absorbed + 2.0) for m, k in zip(six, kept, strict=True)]
    steady = [_longest_gap(m.arrivals(), joined - STEADY_S, joined) for m in six]
    return {
        "protocol": name,
        "config": conf,
        "form_s": formed - formed_from,
        "absorb_s": absorbed - joined,
        "seventh_first_record_s": min((t for t in seventh.arrivals() if t >= joined), default=end) - joined,
        "kept_partitions": sorted(len(k) for k in kept),
        "longest_pause_s": max(pauses),
        "median_pause_s": statistics.median(pauses),
        "steady_longest_gap_s": max(steady),
    }


def _consumer_protocol_advertised(bootstrap: str) -> bool:
    from strata.cli.admin_client import AdminClient

    with AdminClient(bootstrap) as a:
        return CONSUMER_GROUP_HEARTBEAT in a.versions


def measure_rebalances() -> dict[str, Any]:
    from tests.support import ck
    from tests.support.broker_proc import StrataBroker

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="strata-rebalance-bench-") as tmp:
        b = StrataBroker(Path(tmp), name="rebalance-bench")
        b.start()
        producer = Producer(b.bootstrap)
        try:
            ck.create_topic(b.bootstrap, TOPIC, PARTITIONS)
            producer.start()
            consumer_protocol = _consumer_protocol_advertised(b.bootstrap)
            for name, conf in MODES:
                if "group.protocol" in conf and not consumer_protocol:
                    rows.append({"protocol": name, "config": conf, "skipped": "consumer protocol: not advertised"})
                    continue
                try:
                    rows.append(measure_mode(b.bootstrap, name, conf))
                except (TimeoutError, RuntimeError) as e:
                    rows.append({"protocol": name, "config": conf, "error": str(e)})
        finally:
            producer.stopping.set()
            producer.join(30)
            b.stop()
    by_name = {r["protocol"]: r for r in rows}
    eager, consumer = by_name.get(MODES[0][0], {}), by_name.get(MODES[2][0], {})
    ratio = None
    if "longest_pause_s" in eager and "longest_pause_s" in consumer and eager["longest_pause_s"] > 0:
        ratio = consumer["longest_pause_s"] / eager["longest_pause_s"]
    return {"partitions": PARTITIONS, "rate": RATE, "rows": rows, "pause_ratio": ratio}


# -- the server-side assignors -------------------------------------------------------------------------------------
def measure_assignors(members: int = 1000, partitions: int = 10_000, topics: int = 10) -> list[dict[str, Any]]:
    from strata.broker.group.assignors import ASSIGNOR_NAMES, MemberSubscriptionSpec, TopicSpec, assignor_by_name

    racks = ("a", "b", "c")
    ids = [uuid.UUID(int=i + 1) for i in range(topics)]
    per_topic = partitions // topics
    out = []
    for case, hetero, with_racks in (("homogeneous", False, False), ("heterogeneous, racks", True, True)):
        rng = random.Random(7)
        described = {
            t: TopicSpec(t, f"t{i}", per_topic, {p: frozenset({racks[p % 3]}) for p in range(per_topic)})
            if with_racks
            else TopicSpec(t, f"t{i}", per_topic, {})
            for i, t in enumerate(ids)
        }
        group = {
            f"m{i:05d}": MemberSubscriptionSpec(
                f"m{i:05d}",
                racks[i % 3] if with_racks else None,
                frozenset(rng.sample(ids, topics // 2)) if hetero else frozenset(ids),
                {},
            )
            for i in range(members)
        }
        for name in ASSIGNOR_NAMES:
            assignor = assignor_by_name(name)
            assert assignor is not None
            fresh, result = _best_of(3, functools.partial(assignor.assign, group, described))
            grown = {
                m: MemberSubscriptionSpec(s.member_id, s.rack, s.subscribed_topic_ids, result[m])
                for m, s in group.items()
            }
            grown["joining"] = MemberSubscriptionSpec("joining", None, frozenset(ids), {})
            join, _ = _best_of(3, functools.partial(assignor.assign, grown, described))
            out.append({"assignor": name, "case": case, "fresh_s": fresh, "member_joins_s": join})
    return out


def _best_of(n: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(n):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


# -- report --------------------------------------------------------------------------------------------------------
def table(r: dict[str, Any]) -> str:
    lines = []
    reb = r.get("rebalances")
    if reb is not None:
        lines += [
            f"A group of {MEMBERS} confluent-kafka consumers on a {reb['partitions']}-partition topic "
            f"({reb['rate']:,} records/s) absorbs a 7th. Pause = longest gap in a member's record stream, over the "
            f"{MEMBERS} that were there. Aim: consumer protocol <= {PAUSE_AIM} of classic eager.",
            "",
            "| protocol | absorb (s) | 7th's first record (s) | longest pause (s) | median pause (s) | steady gap (s)"
            " |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for row in reb["rows"]:
            if "skipped" in row or "error" in row:
                lines.append(f"| {row['protocol']} | {row.get('skipped') or 'failed: ' + row['error']} | | | | |")
                continue
            lines.append(
                f"| {row['protocol']} | {row['absorb_s']:.2f} | {row['seventh_first_record_s']:.2f} | "
                f"{row['longest_pause_s']:.3f} | {row['median_pause_s']:.3f} | {row['steady_longest_gap_s']:.3f} |"
            )
        ratio = reb["pause_ratio"]
        if ratio is not None:
            verdict = "within" if ratio <= PAUSE_AIM else "outside"
            lines += ["", f"Longest pause, consumer protocol / classic eager: {ratio:.3f} ({verdict} the aim)."]
        lines.append("")
    lines += [
        "Server-side assignors, 1,000 members x 10,000 partitions (10 topics; heterogeneous: 5 topics each, "
        "3 racks), best of 3:",
        "",
        "| assignor | subscriptions | fresh group (s) | a member joins (s) |",
        "|---|---|---:|---:|",
    ]
    for a in r["assignors"]:
        lines.append(f"| {a['assignor']} | {a['case']} | {a['fresh_s']:.3f} | {a['member_joins_s']:.3f} |")
    return "\n".join(lines)


def measure(assignors_only: bool = False) -> dict[str, Any]:
    r: dict[str, Any] = {"assignors": measure_assignors()}
    if not assignors_only:
        r["rebalances"] = measure_rebalances()
    return r


def run(results: dict) -> None:
    """`make bench` group: the three protocols on one broker, then the assignors (about a minute in all)."""
    r = measure()
    results["rebalance"] = r
    results["sections"].append(
        {
            "name": "rebalance",
            "title": "Rebalance: a 7th member joins 6, classic vs consumer protocol (bench/rebalance_bench.py)",
            "markdown": table(r),
            "raw": r,
        }
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--assignors-only", action="store_true", help="only the assignor timings (no broker)")
    ap.add_argument("--out", type=Path, help="also write rebalance.json and rebalance.md there")
    args = ap.parse_args(argv)
    r = measure(args.assignors_only)
    print(table(r))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "rebalance.json").write_text(json.dumps(r, indent=2))
        (args.out / "rebalance.md").write_text(table(r) + "\n")
    ratio = r.get("rebalances", {}).get("pause_ratio")
    return 1 if ratio is not None and ratio > PAUSE_AIM else 0


if __name__ == "__main__":
    sys.exit(main())
