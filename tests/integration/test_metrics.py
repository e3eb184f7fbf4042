"""The Prometheus endpoint counts what happened (docs/metrics.md): per-topic bytes and messages in and bytes out,
per-API request counts and latency histograms, per-partition log sizes equal to the segment files on disk."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from strata.protocol.records import build_batch
from tests.support.kafka_wire import WireClient


def scrape(broker) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=5).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_topic_request_and_log_metrics_count_what_happened(broker) -> None:
    batches = [build_batch([b"m%d-%d" % (i, j) for j in range(5)]) for i in range(4)]
    with WireClient.connect(broker.bootstrap) as w:
        w.create_topic("metered")
        before = scrape(broker)
        for b in batches:
            assert w.produce("metered", 0, b).responses[0].partition_responses[0].error_code == 0
        fetched = w.fetch("metered", 0, 0, version=11).responses[0].partitions[0].records
    after = scrape(broker)
    topic = (("topic", "metered"),)

    def delta(name: str, labels: tuple[tuple[str, str], ...]) -> float:
        return after.get((name, labels), 0.0) - before.get((name, labels), 0.0)

    assert delta("strata_broker_topic_bytes_in_total", topic) == sum(len(b) for b in batches)
    assert delta("strata_broker_topic_messages_in_total", topic) == 20
    assert delta("strata_broker_topic_bytes_out_total", topic) == len(fetched) == sum(len(b) for b in batches)
    produce = (("api", "Produce"),)
    assert delta("strata_network_requests_total", produce) == 4
    assert delta("strata_network_request_total_time_seconds_count", produce) == 4
    assert delta("strata_network_request_total_time_seconds_bucket", (("api", "Produce"), ("le", "+Inf"))) == 4
    part = (("partition", "0"), ("topic", "metered"))
    on_disk = sum(f.stat().st_size for f in broker.partition_dir("metered", 0).glob("*.log"))
    assert after[("strata_log_size_bytes", part)] == on_disk == sum(len(b) for b in batches)
    assert after[("strata_log_end_offset", part)] == 20
