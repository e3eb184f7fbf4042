"""Metrics an operator reads first (issue 21): the remote reader pool of a fresh broker reads idle, consumer and
replica fetches are reported apart (Kafka's RequestMetrics request=FetchConsumer / FetchFollower), and the Grafana
dashboard only queries series a broker exports (controller, offline and under-min-ISR partitions, remote errors)."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from strata.protocol.records import build_batch
from tests.integration.test_metrics import scrape
from tests.support.broker_proc import REPO_ROOT, StrataBroker
from tests.support.kafka_wire import WireClient


def test_fresh_broker_reads_remote_pools_idle(broker_factory: Callable[..., StrataBroker]) -> None:
    b = broker_factory(**{"remote.log.storage.system.enable": True})
    m = scrape(b)
    assert m[("strata_remote_log_reader_avg_idle_percent", ())] == 100.0  # Kafka: 1.0 (fully idle), in percent
    assert m[("strata_remote_log_manager_tasks_avg_idle_percent", ())] == 100.0


def test_consumer_and_replica_fetches_are_separate_series(broker: StrataBroker) -> None:
    with WireClient.connect(broker.bootstrap) as w:
        w.create_topic("fetched")
        assert w.produce("fetched", 0, build_batch([b"v"])).responses[0].partition_responses[0].error_code == 0
        before = scrape(broker)
        for _ in range(3):
            assert w.fetch("fetched", 0, 0, version=11).responses[0].partitions[0].error_code == 0
        follower = w.fetch_request("fetched", 0, 0, version=11)
        follower.replica_id = 7  # a replica's fetch (broker 7 is no replica: answered with an error, still counted)
        w.request(follower)
    after = scrape(broker)

    def count(api: str) -> float:
        key = ("strata_network_request_total_time_seconds_count", (("api", api),))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert count("FetchConsumer") == 3
    assert count("FetchFollower") == 1
    assert count("Fetch") == 4  # Kafka records a Fetch under its API name too


def test_every_metric_on_the_dashboard_is_exported(broker_factory: Callable[..., StrataBroker]) -> None:
    """Each series a Grafana panel (deploy/) queries is one a broker serves: a renamed metric would leave a panel
    empty without anyone noticing."""
    b = broker_factory(**{"remote.log.storage.system.enable": True})
    text = urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=5).read().decode()
    families = list(text_string_to_metric_families(text))
    # sample names, and family names for labelled families without a child yet (a counter's family drops _total)
    exported = {s.name for fam in families for s in fam.samples} | {fam.name for fam in families}
    dashboard = json.loads((REPO_ROOT / "deploy/grafana/dashboards/strata.json").read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\bstrata_\w+", target["expr"])
    }
    titles = {p["title"] for p in dashboard["panels"]}
    assert {
        "Offline partitions (no live leader)",
        "Active controller count (must be 1)",
        "Under-min-ISR partitions",
        "Remote copy / fetch errors per second",
    } <= titles
    assert {q for q in queried if q not in exported and re.sub(r"_(total|bucket)$", "", q) not in exported} == set()
    m = scrape(b)
    assert m[("strata_controller_active_controller_count", ())] == 1.0  # a lone broker is its own controller
    assert m[("strata_controller_offline_partitions_count", ())] == 0.0
