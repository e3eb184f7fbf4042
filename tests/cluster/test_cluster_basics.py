"""The three-broker topology of docker-compose.yml / `make cluster`, as processes: registration, racks, replica
placement, failover of a killed broker's partitions, and the metrics the Grafana dashboard queries."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from prometheus_client.parser import text_string_to_metric_families

from strata.broker.cluster.forwarding import FORWARDED_PREFIX
from strata.broker.handlers.metadata import DEPARTED_BROKER_GRACE_S
from strata.cli.admin_client import AdminClient
from strata.protocol.errors import ErrorCode
from tests.support.cluster_proc import FAST_FAILOVER, StrataCluster
from tests.support.kafka_wire import WireClient
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StrataCluster]:
    """The compose topology for the read-only tests of this module: 3 brokers on 3 racks, tiered storage enabled
    (LocalTieredStorage: the remote metrics exist only on brokers with tiered storage, as in docker-compose.yml)."""
    c = StrataCluster(tmp_path_factory.mktemp("topology"), 3, overrides={"remote.log.storage.system.enable": True})
    c.start()
    yield c
    c.close()


def test_brokers_register_with_their_racks_and_replicas_spread_over_them(topology: StrataCluster) -> None:
    c = topology
    for via in c.ids:
        md = c.metadata([], via=via)
        assert {(b.node_id, b.rack) for b in md.brokers} == {(1, "rack-a"), (2, "rack-b"), (3, "rack-c")}
        assert {(b.node_id, b.host, b.port) for b in md.brokers} == {
            (i, c.broker(i).host, c.broker(i).port) for i in c.ids
        }
        assert md.controller_id in c.ids
    c.create_topic("spread", 6, 3)
    leaders: Counter[int] = Counter()
    for p in range(6):
        meta = c.partition_meta("spread", p)
        assert sorted(meta.replicas) == [1, 2, 3] and set(meta.isr) == {1, 2, 3} and meta.offline == ()
        assert meta.leader == meta.replicas[0], meta  # the preferred (first) replica leads a new partition
        leaders[meta.leader] += 1
    assert sorted(leaders.values()) == [2, 2, 2], leaders  # round-robin leadership


def test_replicas_of_a_partition_are_on_distinct_racks(cluster_factory) -> None:
    racks = {1: "rack-a", 2: "rack-a", 3: "rack-b", 4: "rack-b"}
    c = cluster_factory(4, racks=False, broker_overrides={i: {"broker.rack": r} for i, r in racks.items()})
    c.create_topic("racked", 8, 2)
    for p in range(8):
        replicas = c.replicas_of("racked", p)
        assert len(replicas) == 2 and {racks[i] for i in replicas} == {"rack-a", "rack-b"}, (p, replicas)
    assert {c.leader_of("racked", p) for p in range(8)} == {1, 2, 3, 4}


def test_a_killed_broker_is_deregistered_and_its_partitions_fail_over_within_the_session(cluster_factory) -> None:
    c = cluster_factory(3)
    c.create_topic("fo", 3, 3)
    victim = c.leader_of("fo", 0)
    led = [p for p in range(3) if c.leader_of("fo", p) == victim]
    t0 = time.monotonic()
    c.kill9(victim)
    for p in led:
        c.wait_leader("fo", p, not_in=[victim])
    took = time.monotonic() - t0
    # The response naming the new leaders still lists the dead broker (DEPARTED_BROKER_GRACE_S): librdkafka undoes a
    # leader migration when the same response also drops the old leader's broker.
    survivor = next(i for i in c.live_ids() if i != victim)
    assert victim in {b.node_id for b in c.metadata([], via=survivor).brokers}
    c.wait_registered(timeout=DEPARTED_BROKER_GRACE_S + 10)
    session_ms = FAST_FAILOVER["broker.session.timeout.ms"]
    assert isinstance(session_ms, int)
    session = session_ms / 1000
    assert took < session + 3.0, f"failover took {took:.1f}s with a {session:.0f}s session"
    for p in range(3):
        meta = c.partition_meta("fo", p)
        assert victim in meta.replicas and victim not in meta.isr and victim in meta.offline, meta
    c.start(victim)
    c.wait_full_isr("fo", 3)
    assert all(victim not in c.partition_meta("fo", p).offline for p in range(3))


@pytest.mark.parametrize("victim_role", ["controller", "another broker"])
def test_a_killed_broker_is_found_gone_long_before_its_lease_expires(cluster_factory, victim_role: str) -> None:
    """liveness.py: the controller watches every broker and the others watch the controller; a closed connection
    plus a refusing listener revokes the dead broker's lease, so its partitions move within a second or so even
    with a 60 s session (and a killed controller is replaced as quickly)."""
    c = cluster_factory(3, overrides={"broker.session.timeout.ms": 60000})
    c.create_topic("gone", 3, 3)
    controller = c.metadata([]).controller_id
    victim = controller if victim_role == "controller" else next(i for i in c.ids if i != controller)
    watched = {i: 2 if i == controller else 1 for i in c.ids}
    wait_until(
        lambda: all(_counter(c, i, "strata_cluster_peer_brokers_watched") == n for i, n in watched.items()),
        timeout=10,
        message="liveness connections: the controller to each broker, each broker to it",
    )
    led = [p for p in range(3) if c.leader_of("gone", p) == victim]
    assert led, "round-robin placement gives every broker a leadership"
    t0 = time.monotonic()
    c.kill9(victim)
    for p in led:
        c.wait_leader("gone", p, not_in=[victim], timeout=30)
    took = time.monotonic() - t0
    assert took < 10, f"failover took {took:.1f}s: the 60 s lease ran out instead"
    survivors = [i for i in c.ids if i != victim]
    wait_until(
        lambda: sum(_counter(c, i, "strata_cluster_peer_brokers_gone_total") for i in survivors) >= 1,
        timeout=5,
        message="no survivor counted the killed broker's lease as revoked",
    )
    new_controller = wait_until(lambda: (cid := c.metadata([]).controller_id) in survivors and cid, timeout=10)
    assert new_controller != victim
    c.start(victim)  # the restarted broker registers again and rejoins
    c.wait_full_isr("gone", 3)


def _dashboard_metrics() -> set[str]:
    dash = json.loads((REPO / "deploy/grafana/dashboards/strata.json").read_text())
    names: set[str] = set()
    for panel in dash["panels"]:
        for target in panel.get("targets", ()):
            names |= set(re.findall(r"\bstrata_[a-z0-9_]+", target["expr"]))
    return names


def test_every_metric_of_the_grafana_dashboard_is_exported_by_a_cluster_broker(topology: StrataCluster) -> None:
    c = topology
    text = wait_until(lambda: urllib.request.urlopen(c.broker(1).metrics_url, timeout=5).read().decode(), timeout=10)
    families = set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))
    wanted = _dashboard_metrics()
    assert wanted, "no metric in the dashboard"

    def exported(name: str) -> bool:
        return any(name == f or name in (f + "_total", f + "_bucket", f + "_count", f + "_sum") for f in families)

    missing = sorted(n for n in wanted if not exported(n))
    assert not missing, f"dashboard queries metrics no broker exports: {missing}"


def test_strata_cli_describes_a_replicated_topic_through_any_broker(topology: StrataCluster) -> None:
    """`strata topics describe` (what `make cluster` suggests) against one broker: partitions it does not lead
    included (their offsets come from their leaders)."""
    c = topology
    c.create_topic("cli", 3, 3)
    for via in c.ids:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "strata",
                "topics",
                "--bootstrap-server",
                c.broker(via).bootstrap,
                "describe",
                "--topic",
                "cli",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            check=False,
        )
        assert r.returncode == 0, f"via broker {via}: {r.stderr}"
        rows = [ln for ln in r.stdout.splitlines() if "\tPartition: " in ln]
        assert len(rows) == 3, r.stdout
        for p, row in enumerate(rows):
            meta = c.partition_meta("cli", p)
            assert f"Leader: {meta.leader}\t" in row and f"Replicas: {','.join(map(str, meta.replicas))}\t" in row
            assert "EndOffset: 0" in row and "Error" not in row, row


def _counter(c: StrataCluster, broker: int, name: str, api: str | None = None) -> float:
    text = urllib.request.urlopen(c.broker(broker).metrics_url, timeout=5).read().decode()
    return sum(
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name and s.labels.get("api") == api
    )


def test_admin_requests_reaching_another_broker_are_carried_out_by_the_controller(topology: StrataCluster) -> None:
    """KIP-590 forwarding: CreateTopics, CreatePartitions, IncrementalAlterConfigs and
    DeleteTopics sent to a broker that is not the controller reach the controller, which alone writes topics; the
    receiving broker's own Metadata shows the change as soon as it answers."""
    c = topology
    ctl = c.metadata([]).controller_id
    other = next(i for i in c.ids if i != ctl)
    b = c.broker(other)
    sent_before = _counter(c, other, "strata_forwarding_requests_total", "CreateTopics")
    got_before = _counter(c, ctl, "strata_network_requests_total", "CreateTopics")
    with WireClient(b.host, b.port) as w:
        res = w.create_topic("forwarded", partitions=2, version=7).topics[0]
        assert res.error_code == 0, res
        assert _counter(c, other, "strata_forwarding_requests_total", "CreateTopics") == sent_before + 1
        # the controller handled a CreateTopics that no client sent to it
        assert _counter(c, ctl, "strata_network_requests_total", "CreateTopics") == got_before + 1
        md = w.metadata(["forwarded"], version=10).topics[0]  # no wait: read back before the answer
        assert md.error_code == 0 and md.topic_id == res.topic_id and len(md.partitions) == 2, md

        r = w.request(
            CreatePartitionsRequest[3](
                topics=[CreatePartitionsRequest.CreatePartitionsTopic(name="forwarded", count=3, assignments=None)],
                timeout_ms=10000,
                validate_only=False,
            )
        )
        assert r.results[0].error_code == 0, r
        assert len(w.metadata(["forwarded"]).topics[0].partitions) == 3

        R = IncrementalAlterConfigsRequest
        r = w.request(
            R[1](
                resources=[
                    R.AlterConfigsResource(
                        resource_type=2,
                        resource_name="forwarded",
                        configs=[
                            R.AlterConfigsResource.AlterableConfig(
                                name="retention.ms", config_operation=0, value="60000"
                            )
                        ],
                    )
                ],
                validate_only=False,
            )
        )
        assert r.responses[0].error_code == 0, r
        D = DescribeConfigsRequest
        r = w.request(
            D[4](
                resources=[
                    D.DescribeConfigsResource(
                        resource_type=2, resource_name="forwarded", configuration_keys=["retention.ms"]
                    )
                ],
                include_synonyms=False,
                include_documentation=False,
            )
        )
        assert [(e.name, e.value) for e in r.results[0].configs] == [("retention.ms", "60000")], r

        r = w.request(
            DeleteTopicsRequest[6](
                topics=[DeleteTopicsRequest.DeleteTopicState(name="forwarded", topic_id=None)], timeout_ms=10000
            )
        )
        assert r.responses[0].error_code == 0, r
        assert w.metadata(["forwarded"]).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert _counter(c, other, "strata_forwarding_requests_total", "DeleteTopics") >= 1

    # A forwarded request that reaches a broker which is not the controller is refused, not forwarded again.
    with WireClient(b.host, b.port, client_id=f"{FORWARDED_PREFIX}{ctl}:test") as w:
        res = w.create_topic("not-forwarded-twice", version=7).topics[0]
        assert res.error_code == ErrorCode.NOT_CONTROLLER, res
    assert c.metadata(["not-forwarded-twice"], via=ctl).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_metadata_auto_creation_on_another_broker_goes_through_the_controller(cluster_factory) -> None:
    c = cluster_factory(2, overrides={"auto.create.topics.enable": True, "default.replication.factor": 2})
    ctl = c.metadata([]).controller_id
    other = next(i for i in c.ids if i != ctl)
    b = c.broker(other)
    with WireClient(b.host, b.port) as w:
        md = w.metadata(["auto-forwarded"], allow_auto_create=True).topics[0]
        assert md.error_code == 0 and len(md.partitions) == 1, md
    assert _counter(c, other, "strata_forwarding_requests_total", "CreateTopics") == 1
    assert _counter(c, ctl, "strata_network_requests_total", "CreateTopics") == 1


def test_admin_requests_sent_as_the_controller_dies_are_answered_by_its_successor(cluster_factory) -> None:
    # The survivors learn the new controller from etcd, possibly before the new controller itself has taken the
    # office up: a request forwarded to it then must wait for that, not come back NOT_CONTROLLER to the client.
    c = cluster_factory(3)
    for round_ in range(2):  # the second round's controller is the first round's successor (or the restarted one)
        controller = c.metadata([]).controller_id
        survivor = next(i for i in c.live_ids() if i != controller)
        c.kill9(controller)
        with AdminClient(c.broker(survivor).bootstrap, timeout=30) as admin:
            admin.create_topic(f"after-controller-kill-{round_}", 1, 2)
            admin.delete_topic(f"after-controller-kill-{round_}")
        c.start(controller)
        c.wait_registered()
