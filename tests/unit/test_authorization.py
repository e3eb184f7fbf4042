"""broker.authorization: the helper every handler asks; no authorizer allows all, a denial is counted by listener,
operation and resource type."""

from __future__ import annotations

from typing import Any

from strata.broker.authorization import authorize, authorize_by_resource_type, client_host, filter_authorized
from strata.broker.metrics import BrokerMetrics
from strata.broker.request_context import KafkaPrincipal, RequestContext
from strata.broker.security.authorizer import StandardAuthorizer
from strata.protocol.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

Op, RT = AclOperation, ResourceType


def ctx(authorizer: StandardAuthorizer | None, metrics: BrokerMetrics | None, addr: str = "10.0.0.1:5000") -> Any:
    return RequestContext(
        0, 9, 1, "c", 0.0, "SASL_PLAINTEXT", addr, KafkaPrincipal("User", "alice"), authorizer, None, metrics
    )


def allow_read(name: str, host: str = "*") -> AclBinding:
    return AclBinding(
        ResourcePattern(RT.TOPIC, name, PatternType.LITERAL),
        AccessControlEntry("User:alice", host, Op.READ, AclPermissionType.ALLOW),
    )


def denials(m: BrokerMetrics, op: str = "READ", rtype: str = "TOPIC") -> float:
    v = m.registry.get_sample_value(
        "strata_authorizer_denials_total", {"listener": "SASL_PLAINTEXT", "operation": op, "resource_type": rtype}
    )
    return v or 0.0


def test_no_authorizer_allows_everything() -> None:
    m = BrokerMetrics()
    c = ctx(None, m)
    assert authorize(c, Op.ALTER, RT.CLUSTER, "kafka-cluster")
    assert filter_authorized(c, Op.READ, RT.TOPIC, ["a", "b", "a"]) == {"a", "b"}
    assert denials(m) == 0


def test_decisions_and_denial_counts() -> None:
    a = StandardAuthorizer()
    a.replace_acls([allow_read("a"), allow_read("b", host="10.9.9.9")])
    m = BrokerMetrics()
    c = ctx(a, m)
    assert authorize(c, Op.READ, RT.TOPIC, "a")
    assert authorize(c, Op.DESCRIBE, RT.TOPIC, "a")  # READ implies DESCRIBE
    assert not authorize(c, Op.WRITE, RT.TOPIC, "a")
    assert denials(m, "WRITE") == 1
    assert filter_authorized(c, Op.READ, RT.TOPIC, ["a", "b", "c", "c"]) == {"a"}  # b: other host; c: no ACL
    assert denials(m) == 2


def test_by_resource_type() -> None:
    a = StandardAuthorizer()
    a.replace_acls([allow_read("a")])
    m = BrokerMetrics()
    assert authorize_by_resource_type(ctx(None, m), Op.WRITE, RT.TOPIC)
    assert authorize_by_resource_type(ctx(a, m), Op.READ, RT.TOPIC)
    assert not authorize_by_resource_type(ctx(a, m), Op.WRITE, RT.TOPIC)
    assert denials(m, "WRITE") == 1


def test_client_host_drops_the_port_and_ipv6_brackets() -> None:
    assert client_host(ctx(None, None, "[::1]:9092")) == "::1"
    assert client_host(ctx(None, None, "127.0.0.1:9092")) == "127.0.0.1"
