"""`strata producer-perf-test` and `strata consumer-perf-test` (kafka-producer-/consumer-perf-test.sh) against a
live broker: Kafka's summary lines, the records really written (watermarks from confluent-kafka) and read."""

from __future__ import annotations

import re

import pytest

from tests.support import ck
from tests.support.cli_run import fails, ok, strata

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOTAL = re.compile(
    r"(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms max latency, "
    r"\d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\."
)
CONSUMER_HEADER = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
    "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)


def test_producer_then_consumer_perf(module_broker):
    b = module_broker
    ck.create_topic(b.bootstrap, "perf-a", 2)
    out = ok(
        strata(
            "producer-perf-test",
            "--topic",
            "perf-a",
            "--num-records",
            "3000",
            "--record-size",
            "100",
            "--throughput",
            "-1",
            "--producer-props",
            f"bootstrap.servers={b.bootstrap}",
            "acks=all",
            "linger.ms=5",
        )
    )
    m = TOTAL.fullmatch(out.splitlines()[-1])
    assert m and int(m.group(1)) == 3000, out
    assert sum(ck.watermarks(b.bootstrap, "perf-a", p)[1] for p in (0, 1)) == 3000

    out = ok(strata("consumer-perf-test", "--bootstrap-server", b.bootstrap, "--topic", "perf-a", "--messages", "3000"))
    header, row = out.splitlines()
    assert header == CONSUMER_HEADER
    fields = row.split(", ")
    assert len(fields) == 10 and fields[4] == "3000"
    assert float(fields[2]) == pytest.approx(3000 * 100 / 1024 / 1024, rel=1e-3)

    # fewer records than asked: Kafka's warning after --timeout of silence
    out = ok(
        strata(
            "consumer-perf-test",
            "--bootstrap-server",
            b.bootstrap,
            "--topic",
            "perf-a",
            "--messages",
            "5000",
            "--timeout",
            "1500",
            "--hide-header",
        )
    )
    assert out.splitlines()[0].startswith("WARNING: Exiting before consuming the expected number of messages")
    assert out.splitlines()[1].split(", ")[4] == "3000"


def test_perf_tests_refuse_bad_input(module_broker):
    b = module_broker
    err = fails(
        strata(
            "producer-perf-test",
            "--topic",
            "t",
            "--num-records",
            "1",
            "--record-size",
            "1",
            "--throughput",
            "-1",
            "--producer-props",
            "bogus.setting=1",
        ),
        2,
    )
    assert "unknown or unsupported client property 'bogus.setting'" in err
    err = fails(
        strata("producer-perf-test", "--topic", "t", "--num-records", "1", "--record-size", "1", "--throughput", "-1"),
        2,
    )
    assert "bootstrap.servers" in err
    err = fails(
        strata("consumer-perf-test", "--bootstrap-server", b.bootstrap, "--topic", "perf-none", "--messages", "1"), 1
    )
    assert err.endswith("topic 'perf-none' does not exist")
