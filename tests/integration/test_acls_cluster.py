"""ACLs in a 3-broker etcd cluster with an authorizer: brokers talk to each other on a SASL_PLAINTEXT listener as
User:broker (a super user, as Kafka requires of the inter-broker principal), clients come in on PLAINTEXT as
User:ANONYMOUS. An ACL created through one broker decides on the other two within a second; deleted through another,
it stops deciding everywhere within a second; replication (followers' fetches as User:broker) is unaffected."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from strata.cli.admin_client import AdminClient as StrataAdmin
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey
from tests.support.cluster_proc import StrataCluster
from tests.support.etcd_proc import etcd_binary
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

INTERNAL_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
    'password="broker-pw-51c" user_broker="broker-pw-51c" user_admin="admin-pw-0d4";'
)
OVERRIDES = {
    "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,EXTERNAL:PLAINTEXT",
    "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
    "listener.name.internal.plain.sasl.jaas.config": INTERNAL_JAAS,
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:broker;User:admin",
}


def _admin_conf(port: int | None) -> dict[str, str | int | float | bool]:
    return {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "admin",
        "sasl.password": "admin-pw-0d4",
        "log_level": 0,
    }


def _anonymous_may_describe_acls(probe: StrataAdmin) -> bool:
    _, resp = probe.call(
        ApiKey.DESCRIBE_ACLS,
        resource_type_filter=1,
        resource_name_filter=None,
        pattern_type_filter=1,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )
    assert resp.error_code in (0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED), resp
    return resp.error_code == 0


def test_an_acl_created_on_one_broker_decides_on_the_others_within_a_second(tmp_path: Path) -> None:
    if etcd_binary() is None:
        pytest.skip("etcd not installed")
    with StrataCluster(tmp_path / "cluster", size=3, overrides=OVERRIDES, split_listeners=True) as cluster:
        cluster.wait_registered()
        first, second, third = (cluster.brokers[i] for i in cluster.ids)
        probes = {i: StrataAdmin(cluster.brokers[i].bootstrap) for i in cluster.ids}  # User:ANONYMOUS
        try:
            assert not any(_anonymous_may_describe_acls(p) for p in probes.values())
            admin = AdminClient(_admin_conf(first.internal_port))
            allow = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:ANONYMOUS",
                               "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW)  # fmt: skip
            for fut in admin.create_acls([allow], request_timeout=30).values():
                fut.result(30)
            t0 = time.monotonic()
            wait_until(lambda: all(_anonymous_may_describe_acls(p) for p in probes.values()), 5, message="allowed")
            assert time.monotonic() - t0 < 1.0

            other = AdminClient(_admin_conf(second.internal_port))
            any_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
                                          AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
            [fut] = other.delete_acls([any_filter], request_timeout=30).values()
            assert [b.principal for b in fut.result(30)] == ["User:ANONYMOUS"]
            t0 = time.monotonic()
            wait_until(lambda: not any(_anonymous_may_describe_acls(p) for p in probes.values()), 5, message="denied")
            assert time.monotonic() - t0 < 1.0

            # the brokers replicate as User:broker (super user) over SASL: an acks=all produce needs all three
            fs = admin.create_topics(
                [NewTopic("acl-replicated", 1, 3, config={"min.insync.replicas": "3"})], operation_timeout=30
            )
            fs["acl-replicated"].result(30)
            wait_until(lambda: cluster.isr_of("acl-replicated", 0) == {1, 2, 3}, 60, message="full ISR")
            producer = Producer({**_admin_conf(third.internal_port), "acks": "all"})
            failed: list[str] = []

            def delivered(err: object, msg: object) -> None:
                if err is not None:
                    failed.append(str(err))

            for i in range(20):
                producer.produce("acl-replicated", f"r{i}".encode(), on_delivery=delivered)
            assert producer.flush(60) == 0 and failed == []
        finally:
            for p in probes.values():
                p.close()
        for b in cluster.brokers.values():
            assert "Failed authentication" not in b.tail(200)
