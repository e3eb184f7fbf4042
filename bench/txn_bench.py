"""Transactions (issue 19): transactional produce throughput, with transactions of 100 and of 10,000 records, against
idempotent produce in the same run (aim: >= 0.8 at 10,000 records per transaction), and READ_COMMITTED against
READ_UNCOMMITTED consume of the same transactional data (aim: >= 0.9).

One Strata broker of its own (tests/support/broker_proc.py), 1-partition topics. Each produce run is one
confluent-kafka producer (acks=all, idempotence on, linger.ms=5, 512-byte random values) writing `records` records
to a fresh topic: idempotent = produce all then flush; transactional = begin, produce N, commit, repeated
(commit_transaction flushes, so its wait is part of the time). The three modes run in interleaved rounds (the order
rotated each round, so a slow moment of the shared machine hits each mode alike); the rate is records per second
from the first produce to the last acknowledgement or commit, and each ratio is of the medians.

Consume: the topic written in transactions of 100 records (markers every 101 offsets, all committed) is read from
offset 0 to its end, 3 times after an untimed first pass, by a confluent-kafka consumer (assign(),
fetch.wait.max.ms=50) with isolation.level read_committed and read_uncommitted, in interleaved rounds (at least 7);
records per second, ratio of the medians.

Standalone: ``python -m bench.txn_bench [--quick] [--rounds N] [--records N]``; ``make bench`` runs it as the
"transactions" group.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

VALUE = 512
MODES: tuple[tuple[str, int], ...] = (("idempotent", 0), ("txn-100", 100), ("txn-10000", 10_000))
PRODUCE_AIM = 0.8  # txn-10000 / idempotent
CONSUME_AIM = 0.9  # read_committed / read_uncommitted
CONSUME_ROUNDS = 7  # at least: a pass takes well under a second, so a busy machine shows in fewer rounds
QUIET = {"log_level": 3}


def produce(bootstrap: str, topic: str, records: int, per_txn: int) -> float:
    """Records per second of one producer writing `records` records (in transactions of `per_txn`, 0: none)."""
    from confluent_kafka import KafkaException, Producer

    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.size": 1 << 20,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1 << 20,
        **QUIET,
    }
    if per_txn:
        conf["transactional.id"] = f"bench-{topic}"
    p = Producer(conf)
    p.list_topics(topic, timeout=30)
    if per_txn:
        p.init_transactions(60)
    value = os.urandom(VALUE)
    start = time.monotonic()
    sent = 0
    while sent < records:
        n = min(per_txn or records, records - sent)
        if per_txn:
            p.begin_transaction()
        for _ in range(n):
            while True:
                try:
                    p.produce(topic, value)
                    break
                except BufferError:
                    p.poll(0.005)
        sent += n
        if per_txn:
            p.commit_transaction(60)
    if p.flush(60):
        raise KafkaException(f"{topic}: records left unacknowledged")
    return records / (time.monotonic() - start)


def consume(bootstrap: str, topic: str, isolation: str, end: int, passes: int = 3) -> tuple[float, float]:
    """(records per second, client CPU seconds per million records) of one consumer reading the partition from
    offset 0 until its position reaches `end`, `passes` times after an untimed first pass (connection, metadata and
    page cache warm). The CPU is this process's (librdkafka's threads and the Python loop): where READ_COMMITTED
    costs the client more than the broker."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 50,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
            **QUIET,
        }
    )
    deadline = time.monotonic() + 300

    def one_pass() -> int:
        c.assign([TopicPartition(topic, 0, 0)])
        got = 0
        while time.monotonic() < deadline:
            got += sum(1 for m in c.consume(10_000, timeout=0.2) if m.error() is None)
            if c.position([TopicPartition(topic, 0)])[0].offset >= end:
                return got
        raise TimeoutError(f"{isolation}: position did not reach {end}")

    try:
        one_pass()
        start, cpu = time.monotonic(), time.process_time()
        got = sum(one_pass() for _ in range(passes))
        elapsed, cpu = time.monotonic() - start, time.process_time() - cpu
    finally:
        c.close()
    return got / elapsed, cpu / got * 1e6


def measure(rounds: int, records: int) -> dict[str, Any]:
    from tests.support import ck
    from tests.support.broker_proc import StrataBroker

    rates: dict[str, list[float]] = {m: [] for m, _ in MODES}
    reads: dict[str, list[float]] = {"read_committed": [], "read_uncommitted": []}
    cpu: dict[str, list[float]] = {"read_committed": [], "read_uncommitted": []}
    with tempfile.TemporaryDirectory(prefix="strata-txn-bench-") as tmp:
        b = StrataBroker(Path(tmp), name="txn-bench")
        b.start()
        try:
            source = None
            for r in range(rounds):
                order = MODES[r % len(MODES) :] + MODES[: r % len(MODES)]
                for mode, per_txn in order:
                    topic = f"txn-bench-{mode}-{r}"
                    ck.create_topic(b.bootstrap, topic, 1)
                    rates[mode].append(produce(b.bootstrap, topic, records, per_txn))
                    if mode == "txn-100" and source is None:
                        source = topic
            assert source is not None
            end = records + records // 100  # a commit marker after every 100 records
            for r in range(max(rounds, CONSUME_ROUNDS)):
                for iso in ("read_committed", "read_uncommitted")[:: 1 if r % 2 == 0 else -1]:
                    rate, cpu_s = consume(b.bootstrap, source, iso, end)
                    reads[iso].append(rate)
                    cpu[iso].append(cpu_s)
        finally:
            b.stop()
    med = {k: statistics.median(v) for k, v in {**rates, **reads}.items()}
    produce_ratio = {m: med[m] / med["idempotent"] for m, _ in MODES if m != "idempotent"}
    consume_ratio = med["read_committed"] / med["read_uncommitted"]
    return {
        "rounds": rounds,
        "records": records,
        "value_bytes": VALUE,
        "produce_rates": rates,
        "consume_rates": reads,
        "consume_client_cpu_s_per_million": {k: statistics.median(v) for k, v in cpu.items()},
        "medians": med,
        "produce_ratio": produce_ratio,
        "consume_ratio": consume_ratio,
        "produce_within_aim": produce_ratio["txn-10000"] >= PRODUCE_AIM,
        "consume_within_aim": consume_ratio >= CONSUME_AIM,
    }


def table(r: dict[str, Any]) -> str:
    med, cpu_m = r["medians"], r["consume_client_cpu_s_per_million"]
    lines = [
        f"{r['records']:,} records of {r['value_bytes']} B per run, {r['rounds']} interleaved rounds, medians "
        "(records/s); one broker, 1 partition, confluent-kafka acks=all. Aims: transactions of 10,000 >= "
        f"{PRODUCE_AIM} x idempotent; READ_COMMITTED >= {CONSUME_AIM} x READ_UNCOMMITTED.",
        "",
        "| produce | records/s | vs idempotent |",
        "|---|---:|---:|",
        f"| idempotent | {med['idempotent']:,.0f} | 1.000 |",
    ]
    for mode, per_txn in MODES[1:]:
        ratio = r["produce_ratio"][mode]
        mark = " (below the aim)" if mode == "txn-10000" and ratio < PRODUCE_AIM else ""
        lines.append(f"| transactions of {per_txn:,} | {med[mode]:,.0f} | {ratio:.3f}{mark} |")
    mark = "" if r["consume_within_aim"] else " (below the aim)"
    lines += [
        "",
        "| consume (transactions of 100, all committed) | records/s | vs READ_UNCOMMITTED | client CPU s / M records |",
        "|---|---:|---:|---:|",
        f"| READ_UNCOMMITTED | {med['read_uncommitted']:,.0f} | 1.000 | {cpu_m['read_uncommitted']:.2f} |",
        f"| READ_COMMITTED | {med['read_committed']:,.0f} | {r['consume_ratio']:.3f}{mark} | "
        f"{cpu_m['read_committed']:.2f} |",
    ]
    return "\n".join(lines)


def run(results: dict) -> None:
    """`make bench` group: 5 rounds of 200,000 records (3 of 60,000 in quick mode)."""
    quick = bool(results.get("bench", {}).get("quick"))
    r = measure(3 if quick else 5, 60_000 if quick else 200_000)
    results["transactions"] = r
    results["sections"].append(
        {
            "name": "transactions",
            "title": "Transactions: transactional vs idempotent produce, READ_COMMITTED vs READ_UNCOMMITTED consume "
            "(bench/txn_bench.py)",
            "markdown": table(r),
            "raw": r,
        }
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 rounds of 60,000 records")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 5, 3 with --quick)")
    ap.add_argument("--records", type=int, help="records per run (default 200,000, 60,000 with --quick)")
    ap.add_argument("--out", type=Path, help="also write transactions.json and transactions.md there")
    args = ap.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 5)
    records = args.records or (60_000 if args.quick else 200_000)
    if records % 10_000:
        ap.error("--records must be a multiple of 10,000 (whole transactions)")
    r = measure(rounds, records)
    print(table(r))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "transactions.json").write_text(json.dumps(r, indent=2))
        (args.out / "transactions.md").write_text(table(r) + "\n")
    return 0 if r["produce_within_aim"] and r["consume_within_aim"] else 1


if __name__ == "__main__":
    sys.exit(main())
