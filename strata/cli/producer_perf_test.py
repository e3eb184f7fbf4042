"""``strata producer-perf-test``: produce N records as fast as asked and print Kafka's summary lines, like
kafka-producer-perf-test.sh: every 5 s ``N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max
latency.``, and at the end the same totals plus the 50th/95th/99th/99.9th latency percentiles. Latency is from send
to acknowledgement, per record. The producer is kafka-python's (so expect Python client rates, not Java's)."""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from typing import Any

from .clients import ClientConfigError, bootstrap_list, client_config
from .command_config import read_properties
from .common import SubParsers, add_client_config_options, error, key_value

NAME = "producer-perf-test"
PROG = "strata producer-perf-test"
REPORT_MS = 5000


def register(sub: SubParsers) -> None:
    p = sub.add_parser(NAME, help="producer throughput and latency (kafka-producer-perf-test.sh)")
    p.add_argument("--topic", required=True)
    p.add_argument("--num-records", type=int, required=True)
    payload = p.add_mutually_exclusive_group(required=True)
    payload.add_argument("--record-size", type=int, help="bytes per record (random uppercase letters)")
    payload.add_argument("--payload-file", metavar="FILE", help="payloads to pick from at random")
    p.add_argument("--payload-delimiter", default="\\n", help="separates the payloads of --payload-file")
    p.add_argument("--throughput", type=float, required=True, help="records/sec at most; -1: no limit")
    p.add_argument(
        "--producer-props",
        "--command-property",
        dest="producer_props",
        nargs="+",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="bootstrap.servers=HOST:PORT and any producer property",
    )
    add_client_config_options(p, "producer")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="same as --producer-props bootstrap.servers=...")
    p.add_argument("--print-metrics", action="store_true", help="print the producer's metrics at the end")
    p.set_defaults(func=run)


class Stats:
    """Kafka's ProducerPerformance.Stats: totals, a reporting window, and a sample of latencies."""

    def __init__(self, num_records: int, out: Any = None) -> None:
        self.out = out or sys.stdout
        self.start = self.window_start = time.monotonic()
        self.sampling = max(1, num_records // min(max(num_records, 1), 500_000))
        self.latencies: list[int] = []
        self.iteration = 0
        self.count = self.bytes = self.total_latency = self.max_latency = 0
        self.w_count = self.w_bytes = self.w_total_latency = self.w_max_latency = 0
        self.lock = threading.Lock()

    def record(self, latency_ms: int, size: int) -> None:
        with self.lock:
            self.count += 1
            self.bytes += size
            self.total_latency += latency_ms
            self.max_latency = max(self.max_latency, latency_ms)
            self.w_count += 1
            self.w_bytes += size
            self.w_total_latency += latency_ms
            self.w_max_latency = max(self.w_max_latency, latency_ms)
            if self.iteration % self.sampling == 0:
                self.latencies.append(latency_ms)
            self.iteration += 1
            if (time.monotonic() - self.window_start) * 1000 >= REPORT_MS:
                self._print_window()

    def _print_window(self) -> None:
        elapsed = max(time.monotonic() - self.window_start, 1e-9)
        print(
            f"{self.w_count} records sent, {self.w_count / elapsed:.1f} records/sec "
            f"({self.w_bytes / elapsed / 1024 / 1024:.2f} MB/sec), "
            f"{self.w_total_latency / max(self.w_count, 1):.1f} ms avg latency, {float(self.w_max_latency):.1f} ms max "
            "latency.",
            file=self.out,
            flush=True,
        )
        self.window_start = time.monotonic()
        self.w_count = self.w_bytes = self.w_total_latency = self.w_max_latency = 0

    def total_line(self) -> str:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        lat = sorted(self.latencies)

        def pct(p: float) -> int:
            return lat[min(int(p * len(lat)), len(lat) - 1)] if lat else 0

        return (
            f"{self.count} records sent, {self.count / elapsed:.1f} records/sec "
            f"({self.bytes / elapsed / 1024 / 1024:.2f} MB/sec), {self.total_latency / max(self.count, 1):.2f} ms avg "
            f"latency, {float(self.max_latency):.2f} ms max latency, {pct(0.5)} ms 50th, {pct(0.95)} ms 95th, "
            f"{pct(0.99)} ms 99th, {pct(0.999)} ms 99.9th."
        )


class Throttler:
    """Kafka's ThroughputThrottler: sleep whenever the records sent so far run ahead of the target rate."""

    def __init__(self, per_sec: float) -> None:
        self.per_sec = per_sec
        self.start = time.monotonic()

    def pace(self, sent: int) -> None:
        if self.per_sec <= 0:
            return
        ahead = sent / self.per_sec - (time.monotonic() - self.start)
        if ahead > 0:
            time.sleep(ahead)  # rate limiting, not synchronisation


def _payloads(args: argparse.Namespace) -> list[bytes] | None:
    if args.payload_file is None:
        return None
    delimiter = args.payload_delimiter.encode().decode("unicode_escape")
    try:
        with open(args.payload_file, encoding="utf-8") as f:
            items = [x.encode() for x in f.read().split(delimiter) if x]
    except OSError as e:
        raise ClientConfigError(f"cannot read {args.payload_file}: {e.strerror or e}") from None
    if not items:
        raise ClientConfigError(f"File is empty: {args.payload_file}")
    print(f"Number of messages read: {len(items)}")
    return items


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    from kafka import KafkaProducer

    props = read_properties(args.producer_config) if args.producer_config else []
    props += args.producer_props
    if args.bootstrap_server:
        props.append(("bootstrap.servers", args.bootstrap_server))
    settings = client_config(KafkaProducer.DEFAULT_CONFIG, props)
    if "bootstrap_servers" not in settings:
        raise ClientConfigError("give --bootstrap-server or --producer-props bootstrap.servers=HOST:PORT")
    settings["bootstrap_servers"] = bootstrap_list(settings["bootstrap_servers"])
    settings.setdefault("client_id", "perf-producer-client")
    return settings


def _acked(stats: Stats, sent_at: float, size: int, _metadata: Any) -> None:
    stats.record(int((time.monotonic() - sent_at) * 1000), size)


def run(args: argparse.Namespace) -> int:
    try:
        if args.num_records <= 0 or (args.record_size is not None and args.record_size < 0):
            raise ClientConfigError("--num-records must be positive and --record-size not negative")
        payloads = _payloads(args)
        settings = _settings(args)
    except ClientConfigError as e:
        error(PROG, str(e))
        return 2
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    try:
        producer = KafkaProducer(**settings)
    except KafkaError as e:
        error(PROG, f"cannot connect: {e}")
        return 1
    stats = Stats(args.num_records)
    failures: list[BaseException] = []
    rng = random.Random(0)
    fixed = bytes(rng.randrange(65, 91) for _ in range(args.record_size or 0))
    throttle = Throttler(args.throughput)
    try:
        for i in range(args.num_records):
            value = rng.choice(payloads) if payloads is not None else fixed
            sent_at = time.monotonic()
            future = producer.send(args.topic, value=value)
            future.add_callback(_acked, stats, sent_at, len(value))
            future.add_errback(failures.append)
            throttle.pace(i + 1)
        producer.flush()
    except KafkaError as e:
        failures.append(e)
    finally:
        metrics = producer.metrics() if args.print_metrics else None
        producer.close(timeout=10)
    print(stats.total_line())
    if metrics:
        for group, values in sorted(metrics.items()):
            for name, value in sorted(values.items()):
                print(f"{group}:{name} : {value}")
    if failures:
        error(PROG, f"{len(failures)} record(s) failed, the first with: {failures[0]}")
        return 1
    return 0
