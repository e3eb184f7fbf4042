"""Client quotas (issue 18): the rate a producer over its `producer_byte_rate`, and a consumer over its
`consumer_byte_rate`, actually get, against the quota (aim: within 10 %).

One Strata broker of its own (tests/support/broker_proc.py, default quota windows: 11 x 1 s), a 1-partition topic.
The quotas are set with AlterClientQuotas on the client ids `bench-quota-producer` and `bench-quota-consumer`
(`--mib-per-s` each, default 4 MiB/s). The producer (confluent-kafka, 16 KiB random values, linger.ms=5, acks=1)
keeps its queue full for `--seconds`; the achieved rate is the acknowledged value bytes per second from the end of
the first second (the first window's worth may pass at once) to the last acknowledgement. Then an unthrottled client
tops the topic up and the consumer (`assign()` from offset 0) reads for `--seconds`; its rate is the value bytes
received per second, also from the end of its first second. Both report librdkafka's throttle events (the broker's
throttle_time_ms). Value bytes are slightly less than what the quota counts (request or response bytes): about 1 %
with 16 KiB records.

Standalone: ``python -m bench.quota_bench [--seconds S] [--mib-per-s Q]``; ``make bench`` runs it as the "quotas"
group.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

TOPIC = "quota-bench"
VALUE = 16 << 10
PRODUCER, CONSUMER, FILLER = "bench-quota-producer", "bench-quota-consumer", "bench-quota-filler"
SKIP_S = 1.0  # the first window: an idle client may send one window's worth at once
AIM = 0.10


def _set_quotas(bootstrap: str, rate: float) -> None:
    from strata.cli.admin_client import AdminClient
    from strata.cli.quotas import alter_client_quotas

    with AdminClient(bootstrap) as a:
        res = alter_client_quotas(
            a,
            [
                ([("client-id", PRODUCER)], [("producer_byte_rate", rate)]),
                ([("client-id", CONSUMER)], [("consumer_byte_rate", rate)]),
            ],
        )
    if any(code for _, code, _ in res):
        raise RuntimeError(f"AlterClientQuotas failed: {res}")


def _steady_rate(events: list[tuple[float, int]], start: float) -> tuple[float, float]:
    """(bytes per second after the first SKIP_S, seconds measured) of (time, bytes) events."""
    after = [(t, n) for t, n in events if t >= start + SKIP_S]
    if len(after) < 2:
        return 0.0, 0.0
    span = after[-1][0] - (start + SKIP_S)
    return sum(n for _, n in after) / span if span > 0 else 0.0, span


def produce(bootstrap: str, client_id: str, seconds: float, total: int | None = None) -> dict[str, Any]:
    """Keep a producer's queue full for `seconds` (or until `total` bytes are acknowledged)."""
    from confluent_kafka import Producer

    acked: list[tuple[float, int]] = []
    throttles: list[float] = []
    lock = threading.Lock()

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            with lock:
                acked.append((time.monotonic(), len(msg.value())))

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 16 << 10,
            "throttle_cb": lambda ev: throttles.append(ev.throttle_time),
            "log_level": 3,
        }
    )
    value = os.urandom(VALUE)
    p.list_topics(TOPIC, timeout=30)
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < seconds and (total is None or sent < total):
        try:
            p.produce(TOPIC, value, on_delivery=delivered)
            sent += VALUE
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    end = time.monotonic()
    p.purge()  # what is still queued is not part of the measurement
    p.flush(30)
    with lock:
        measured = [(t, n) for t, n in acked if t <= end]
    return _result(measured, start, throttles)


def _result(samples: list[tuple[float, int]], start: float, throttles: list[float]) -> dict[str, Any]:
    """A side's report: bytes, the steady rate and the span it was measured over, librdkafka's throttle events."""
    rate, span = _steady_rate(samples, start)
    return {
        "bytes": sum(n for _, n in samples),
        "rate": rate,
        "measured_s": span,
        "throttle_events": len(throttles),
        "max_throttle_s": max(throttles, default=0.0),
    }


def consume(bootstrap: str, seconds: float) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    throttles: list[float] = []
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": CONSUMER,
            "group.id": "quota-bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
            "throttle_cb": lambda ev: throttles.append(ev.throttle_time),
            "log_level": 3,
        }
    )
    c.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[tuple[float, int]] = []
    start = time.monotonic()
    try:
        while time.monotonic() - start < seconds:
            for m in c.consume(1000, timeout=0.2):
                if m.error() is None:
                    got.append((time.monotonic(), len(m.value() or b"")))
    finally:
        c.close()
    return _result(got, start, throttles)


def measure(seconds: float, mib_per_s: float) -> dict[str, Any]:
    from tests.support import ck
    from tests.support.broker_proc import StrataBroker

    quota = mib_per_s * (1 << 20)
    with tempfile.TemporaryDirectory(prefix="strata-quota-bench-") as tmp:
        b = StrataBroker(Path(tmp), name="quota-bench")
        b.start()
        try:
            ck.create_topic(b.bootstrap, TOPIC, 1)
            _set_quotas(b.bootstrap, quota)
            producer = produce(b.bootstrap, PRODUCER, seconds)
            # enough left for the consumer to stay over its quota the whole time
            need = int(quota * seconds * 1.5) - producer["bytes"]
            if need > 0:
                produce(b.bootstrap, FILLER, seconds * 10, total=need)
            consumer = consume(b.bootstrap, seconds)
        finally:
            b.stop()
    for side in (producer, consumer):
        side["ratio"] = side["rate"] / quota
        side["within_aim"] = abs(side["ratio"] - 1) <= AIM
    return {"quota_bytes_per_s": quota, "seconds": seconds, "producer": producer, "consumer": consumer}


def table(r: dict[str, Any]) -> str:
    q = r["quota_bytes_per_s"] / (1 << 20)
    lines = [
        f"Quota {q:.1f} MiB/s on each client id, {r['seconds']:.0f} s each; achieved = value bytes per second after "
        f"the first second. Aim: within {AIM:.0%} of the quota.",
        "",
        "| client | achieved (MiB/s) | achieved / quota | measured (s) | throttle events | max throttle (s) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for side, what in (("producer", "producer (producer_byte_rate)"), ("consumer", "consumer (consumer_byte_rate)")):
        s = r[side]
        mark = "" if s["within_aim"] else " (outside the aim)"
        lines.append(
            f"| {what} | {s['rate'] / (1 << 20):.2f} | {s['ratio']:.3f}{mark} | {s['measured_s']:.1f} | "
            f"{s['throttle_events']} | {s['max_throttle_s']:.2f} |"
        )
    return "\n".join(lines)


def run(results: dict, seconds: float | None = None) -> None:
    """`make bench` group: appends the section (20 s per client, 12 s in quick mode: shorter runs are dominated by
    the first throttle's wait and come out below the quota)."""
    quick = bool(results.get("bench", {}).get("quick"))
    r = measure(seconds or (12.0 if quick else 20.0), 4.0)
    results["quotas"] = r
    results["sections"].append(
        {
            "name": "quotas",
            "title": "Client quotas: achieved rate under a byte-rate quota (bench/quota_bench.py)",
            "markdown": table(r),
            "raw": r,
        }
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="how long each client runs (default 20)")
    ap.add_argument("--mib-per-s", type=float, default=4.0, help="the quota of each client id (default 4 MiB/s)")
    ap.add_argument("--out", type=Path, help="also write quotas.json and quotas.md there")
    args = ap.parse_args(argv)
    r = measure(args.seconds, args.mib_per_s)
    print(table(r))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "quotas.json").write_text(json.dumps(r, indent=2))
        (args.out / "quotas.md").write_text(table(r) + "\n")
    return 0 if r["producer"]["within_aim"] and r["consumer"]["within_aim"] else 1


if __name__ == "__main__":
    sys.exit(main())
