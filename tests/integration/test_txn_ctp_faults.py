"""Exactly-once consume-transform-produce under kill -9 (issue 19): a transactional confluent-kafka application
(tests/support/ctp_app.py, its own process) copies an input topic to an output topic, committing its consumed
offsets with each transaction (send_offsets_to_transaction). Each seed kills it with SIGKILL at seeded points -- in
transaction k, after begin / produce / flush / send_offsets, while commit_transaction runs, or after the commit --
and starts it again with the same transactional id, until one run reaches the end of the input; some seeds also
kill the broker (kill -9, restart on the same data) while the application is mid-transaction. The checker then
demands that the output topic, read READ_COMMITTED, holds each input record's result exactly once, in input order,
and that the group's committed offsets are at the end of the input.

One broker for the module; 20 seeds.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic

from tests.support import ck
from tests.support.broker_proc import REPO_ROOT, StrataBroker
from tests.support.ctp_app import PHASES, FaultPoint
from tests.support.records import Rec
from tests.support.txn_checker import check_transform
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PARTITIONS = 2
PER_PARTITION = 30  # killed runs transform at most 3 x 3 transactions of BATCH: the last one has work left
BATCH = 4
SEEDS = list(range(20))
BROKER_KILL_SEEDS = {3, 8, 13, 18}
RUN_TIMEOUT = 60.0


@dataclass
class Plan:
    """Where the application dies in each run (phase, transaction of that run, ms into the commit) and, for some
    seeds, the event of the last run after which the broker is killed."""

    app_kills: list[FaultPoint] = field(default_factory=list)
    broker_kill: FaultPoint | None = None

    def describe(self) -> str:
        text = f"app kill -9 at [{', '.join(map(_point, self.app_kills))}]"
        if self.broker_kill is not None:
            text += f"; broker kill -9 at {_point(self.broker_kill)} of the last run"
        return text


def _point(f: FaultPoint) -> str:
    return f"{f.phase}@txn{f.txn}" + (f"+{f.delay_ms}ms" if f.phase == "commit" else "")


def _arg(f: FaultPoint) -> str:
    return f"{f.phase}:{f.txn}:{f.delay_ms}"


def plan_for(seed: int) -> Plan:
    rnd = random.Random(seed)
    kills = []
    for i in range(rnd.randint(1, 3)):
        phase = PHASES[seed % len(PHASES)] if i == 0 else rnd.choice(PHASES)  # the seeds cover every phase
        kills.append(FaultPoint(phase, rnd.randint(0, 2), rnd.randint(0, 40)))
    broker = None
    if seed in BROKER_KILL_SEEDS:
        broker = FaultPoint(rnd.choice(PHASES), rnd.randint(0, 2), rnd.randint(0, 40))
    return Plan(kills, broker)


def test_seeds_cover_every_phase() -> None:
    phases = {f.phase for s in SEEDS for f in plan_for(s).app_kills}
    assert phases == set(PHASES)
    assert all(plan_for(s).broker_kill for s in BROKER_KILL_SEEDS)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StrataBroker]:
    b = StrataBroker(
        tmp_path_factory.mktemp("txn-ctp-faults"),
        {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3},
        name="txn-ctp-faults",
    ).start()
    try:
        yield b
    finally:
        b.stop()


def _events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _start_app(
    broker: StrataBroker, seed: int, events: Path, die: FaultPoint | None, kill_broker: FaultPoint | None = None
) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "tests.support.ctp_app",
        "--bootstrap",
        broker.bootstrap,
        "--input",
        f"ctp-in-{seed}",
        "--output",
        f"ctp-out-{seed}",
        "--partitions",
        str(PARTITIONS),
        "--group",
        f"ctp-{seed}",
        "--tid",
        f"ctp-{seed}",
        "--events",
        str(events),
        "--batch",
        str(BATCH),
    ]
    if die is not None:
        cmd += ["--die", _arg(die)]
    if kill_broker is not None:
        cmd += ["--kill-broker", f"{broker.pid}:{_arg(kill_broker)}"]
    with open(events.with_suffix(".err"), "ab") as err:  # librdkafka's log lines, for a failure's report
        return subprocess.Popen(cmd, cwd=str(REPO_ROOT), stdout=subprocess.DEVNULL, stderr=err)


def _finish(proc: subprocess.Popen, events: Path, timeout: float = RUN_TIMEOUT) -> int:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"application still running after {timeout}s:\n{_tail(events)}") from None
    if proc.returncode not in (0, -9, 3):
        raise AssertionError(f"application exited {proc.returncode}:\n{_tail(events)}")
    return proc.returncode


def _tail(events: Path, lines: int = 30) -> str:
    text = [*events.read_text().splitlines()[-lines:], *events.with_suffix(".err").read_text().splitlines()[-lines:]]
    return "\n".join(text)


def _read_back(broker: StrataBroker, seed: int) -> tuple[dict[int, list[bytes]], list[int]]:
    """The output topic read READ_COMMITTED up to its HW (no transaction may be left open), and the group's
    committed offsets on the input topic."""
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"ctp-{seed}",  # only to read its offsets: this consumer assigns and never commits
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
            **ck.QUIET,
        }
    )
    try:
        outs = [TopicPartition(f"ctp-out-{seed}", p) for p in range(PARTITIONS)]
        ends = [c.get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in outs]
        c.assign([TopicPartition(tp.topic, tp.partition, 0) for tp in outs])
        values: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}

        def caught_up() -> bool:
            for m in c.consume(100, 0.1):
                if m.error() is None:
                    values[m.partition() or 0].append(m.value() or b"")
            return all(pos.offset >= end for pos, end in zip(c.position(outs), ends))

        wait_until(caught_up, 30, message=lambda: f"READ_COMMITTED positions {c.position(outs)} below HWs {ends}")
        committed = c.committed([TopicPartition(f"ctp-in-{seed}", p) for p in range(PARTITIONS)], timeout=30)
        return values, [tp.offset for tp in committed]
    finally:
        c.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_consume_transform_produce_survives_kill9(broker: StrataBroker, tmp_path: Path, seed: int) -> None:
    plan = plan_for(seed)
    src = f"ctp-in-{seed}"
    fs = (admin := ck.admin(broker.bootstrap)).create_topics(
        [NewTopic(t, PARTITIONS, 1) for t in (src, f"ctp-out-{seed}")], operation_timeout=30
    )
    for f in fs.values():
        f.result(30)
    del admin
    inputs = {p: [f"s{seed}-p{p}-{i}".encode() for i in range(PER_PARTITION)] for p in range(PARTITIONS)}
    ck.produce_all(broker.bootstrap, src, [Rec(p, None, v) for p, vals in inputs.items() for v in vals])
    events = tmp_path / "events.jsonl"

    runs: list[str] = []
    for die in [*plan.app_kills, None]:
        proc = _start_app(broker, seed, events, die, plan.broker_kill if die is None else None)
        if die is None and plan.broker_kill is not None:

            def broker_killed(pid: int = proc.pid) -> bool:
                return any(e["pid"] == pid and e["event"] == "broker-killed" for e in _events(events))

            def ended_or_killed(p: subprocess.Popen = proc) -> bool:
                return p.poll() is not None or broker_killed()

            wait_until(ended_or_killed, RUN_TIMEOUT)
            assert broker_killed(), f"the application ended before {_point(plan.broker_kill)}: {_tail(events)}"
            broker.kill9()  # reaps it
            broker.start()
        rc = _finish(proc, events)
        runs.append(f"{_point(die) if die else 'last'}->{rc}")
        if die is None:
            assert rc == 0, f"{plan.describe()}: runs {runs}\n{_tail(events)}"

    outputs, committed = _read_back(broker, seed)
    verdict = check_transform(inputs, outputs, b">out")
    line = f"seed {seed}: {plan.describe()}; runs {runs}: {verdict.summary()}"
    print(line)
    assert verdict.ok, f"{line}\n{verdict.report()}"
    assert committed == [PER_PARTITION] * PARTITIONS, line
