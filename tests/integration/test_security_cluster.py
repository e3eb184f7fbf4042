"""A 3-broker cluster whose brokers talk to each other over SASL_SSL (TLS + PLAIN, Kafka's client-side JAAS
`username`/`password`): followers fetch, so an acks=all produce to a topic with min.insync.replicas=3 completes only
if every follower authenticated to the leader."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.certs import make_pki
from tests.support.cluster_proc import StrataCluster
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

INTERNAL_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
    'password="broker-secret-4d1e" user_broker="broker-secret-4d1e";'
)


def test_sasl_ssl_between_brokers_replicates(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    overrides = {
        "listener.security.protocol.map": "INTERNAL:SASL_SSL,EXTERNAL:PLAINTEXT",
        "listener.name.internal.ssl.keystore.type": "PEM",
        "listener.name.internal.ssl.keystore.location": str(pki.dir / "broker.pem"),
        "listener.name.internal.ssl.truststore.type": "PEM",
        "listener.name.internal.ssl.truststore.location": str(pki.ca_pem),
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": INTERNAL_JAAS,
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
    }
    with StrataCluster(tmp_path / "cluster", size=3, overrides=overrides, split_listeners=True) as cluster:
        cluster.wait_registered()
        bs = cluster.bootstrap
        _create(bs)
        wait_until(lambda: cluster.isr_of("replicated", 0) == {1, 2, 3}, 60)
        p = Producer({"bootstrap.servers": bs, "acks": "all", "log_level": 0})
        failed: list[str] = []
        for i in range(200):
            p.produce(
                "replicated", value=f"r{i}".encode(), on_delivery=lambda e, m: failed.append(str(e)) if e else None
            )
        assert p.flush(60) == 0
        assert failed == [], failed[:3]
        assert cluster.isr_of("replicated", 0) == {1, 2, 3}
        for b in cluster.brokers.values():
            log = b.tail()
            assert "Failed authentication" not in log, log
            assert "broker-secret-4d1e" not in log.split("===== start")[-1].split("\n", 1)[-1]


def _create(bs: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient({"bootstrap.servers": bs})
    fs = a.create_topics([NewTopic("replicated", 1, 3, config={"min.insync.replicas": "3"})], operation_timeout=30)
    fs["replicated"].result(timeout=30)
