"""Authorized operations (KIP-430): without an authorizer, Kafka answers every operation a resource type supports
when the client asks, and INT32_MIN when it does not. librdkafka's test 0081 expects 8 topic and 7 cluster
operations; confluent-kafka reads them from Metadata (describe_topics) and DescribeCluster (describe_cluster)."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AclOperation

from strata.protocol.registry import REQUEST_CLASSES, RESPONSE_CLASSES, ApiKey
from tests.support import ck
from tests.support.kafka_wire import WireClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC_OPS = {
    AclOperation.READ,
    AclOperation.WRITE,
    AclOperation.CREATE,
    AclOperation.DESCRIBE,
    AclOperation.DELETE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
}
CLUSTER_OPS = {
    AclOperation.CREATE,
    AclOperation.CLUSTER_ACTION,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
}


def _codes(ops) -> set[int]:
    return {op.value for op in ops}


def _call(bootstrap: str, api_key: int, version: int, **fields):
    with WireClient.connect(bootstrap) as c:
        corr = c.send(REQUEST_CLASSES[api_key][version](**fields))
        return c.recv(RESPONSE_CLASSES[api_key], version, corr)


def test_confluent_describe_topics_and_cluster(broker):
    ck.create_topic(broker.bootstrap, "authz-t", 2)
    adm = ck.admin(broker.bootstrap)
    fs = adm.describe_topics(TopicCollection(["authz-t"]), include_authorized_operations=True, request_timeout=30)
    desc = fs["authz-t"].result(timeout=30)
    assert desc.authorized_operations is not None and len(desc.authorized_operations) == 8
    assert set(desc.authorized_operations) == TOPIC_OPS

    cluster = adm.describe_cluster(include_authorized_operations=True, request_timeout=30).result(timeout=30)
    assert cluster.authorized_operations is not None and len(cluster.authorized_operations) == 7
    assert set(cluster.authorized_operations) == CLUSTER_OPS

    plain = adm.describe_cluster(request_timeout=30).result(timeout=30)
    assert not plain.authorized_operations  # not asked: INT32_MIN, which librdkafka reports as none


@pytest.mark.parametrize("version", [8, 10, 11, 12, 13])
def test_metadata_fields_by_version(broker, version):
    ck.create_topic(broker.bootstrap, "authz-md", 1)
    Req = REQUEST_CLASSES[ApiKey.METADATA][version]
    for asked in (False, True):
        fields = {
            "topics": [Req.MetadataRequestTopic(name="authz-md", **({"topic_id": None} if version >= 10 else {}))],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": asked,
        }
        if version <= 10:
            fields["include_cluster_authorized_operations"] = asked
        md = _call(broker.bootstrap, ApiKey.METADATA, version, **fields)
        (t,) = md.topics
        if asked:
            assert t.authorized_operations == _codes(TOPIC_OPS)
        else:
            assert t.authorized_operations is None  # INT32_MIN on the wire
        if version <= 10:
            assert md.authorized_operations == (_codes(CLUSTER_OPS) if asked else None)


def test_describe_cluster_raw_not_requested_is_int32_min(broker):
    r = _call(broker.bootstrap, ApiKey.DESCRIBE_CLUSTER, 0, include_cluster_authorized_operations=False)
    assert r.authorized_operations is None
    r = _call(broker.bootstrap, ApiKey.DESCRIBE_CLUSTER, 0, include_cluster_authorized_operations=True)
    assert r.authorized_operations == _codes(CLUSTER_OPS)
