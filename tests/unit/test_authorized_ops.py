"""Authorization beyond single decisions: Kafka's authorizeByResourceType (InitProducerId's KIP-679 rule) against
Kafka's cases, the cluster's authorized operations, quiet checks; and the forwarded-request marker that carries the
client's principal to the controller (broker.apis.act_for_forwarded_client trusts it only from a broker)."""

from __future__ import annotations

from typing import Any

import pytest

from strata.broker.apis import act_for_forwarded_client
from strata.broker.authorization import authorize_by_resource_type
from strata.broker.authorized_ops import allowed_quietly, cluster_operations
from strata.broker.cluster.forwarding import forwarded_client_id, forwarded_identity, forwarding_broker_id
from strata.broker.metrics import BrokerMetrics
from strata.broker.request_context import KafkaPrincipal, RequestContext
from strata.broker.security.authorizer import StandardAuthorizer
from strata.protocol.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

Op, RT, PT = AclOperation, ResourceType, PatternType
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def ctx(authorizer: StandardAuthorizer | None, who: str = "alice", client_id: str = "c", addr: str = "10.0.0.1:5000"):
    return RequestContext(
        0, 9, 1, client_id, 0.0, "SASL_PLAINTEXT", addr, KafkaPrincipal("User", who), authorizer, None, BrokerMetrics()
    )


def acl(
    name: str,
    pattern: PatternType = PT.LITERAL,
    permission: AclPermissionType = ALLOW,
    op: AclOperation = Op.WRITE,
    principal: str = "User:alice",
    host: str = "*",
    rtype: ResourceType = RT.TOPIC,
) -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, host, op, permission))


def authorizer(*bindings: AclBinding, **kw: Any) -> StandardAuthorizer:
    a = StandardAuthorizer(**kw)
    a.replace_acls(bindings)
    return a


# Kafka's AuthorizerInterfaceDefaultTest / BaseAuthorizerTest cases for authorizeByResourceType (WRITE on TOPIC).
BY_TYPE_CASES = [
    ("no ACL at all", [], False),
    ("a literal ALLOW", [acl("t")], True),
    ("a prefixed ALLOW", [acl("t-", PT.PREFIXED)], True),
    ("ALL allows WRITE", [acl("t", op=Op.ALL)], True),
    ("READ does not imply WRITE", [acl("t", op=Op.READ)], False),
    ("another principal's ALLOW", [acl("t", principal="User:bob")], False),
    ("User:* ALLOW", [acl("t", principal="User:*")], True),
    ("another host's ALLOW", [acl("t", host="10.9.9.9")], False),
    ("this host's ALLOW", [acl("t", host="10.0.0.1")], True),
    ("literal DENY of the same name", [acl("t"), acl("t", permission=DENY)], False),
    ("literal DENY of another name", [acl("t"), acl("u", permission=DENY)], True),
    ("prefixed DENY covering a literal ALLOW", [acl("t-1"), acl("t-", PT.PREFIXED, DENY)], False),
    ("prefixed DENY covering a prefixed ALLOW", [acl("t-1", PT.PREFIXED), acl("t", PT.PREFIXED, DENY)], False),
    ("prefixed DENY narrower than the prefixed ALLOW", [acl("t", PT.PREFIXED), acl("t-1", PT.PREFIXED, DENY)], True),
    ("literal DENY does not cover a prefixed ALLOW", [acl("t", PT.PREFIXED), acl("t", permission=DENY)], True),
    ("wildcard DENY", [acl("t"), acl("*", permission=DENY)], False),
    ("wildcard ALLOW", [acl("*")], True),
    ("wildcard ALLOW, then a wildcard DENY", [acl("*"), acl("*", permission=DENY)], False),
    ("wildcard DENY, then a wildcard ALLOW", [acl("*", permission=DENY), acl("*")], False),
    ("one ALLOW of two survives the DENY", [acl("a"), acl("b"), acl("a", permission=DENY)], True),
    ("a GROUP ALLOW is another type", [acl("t", rtype=RT.GROUP)], False),
]


@pytest.mark.parametrize(("case", "bindings", "expected"), BY_TYPE_CASES, ids=[c[0] for c in BY_TYPE_CASES])
def test_authorize_by_resource_type(case: str, bindings: list[AclBinding], expected: bool) -> None:
    assert authorize_by_resource_type(ctx(authorizer(*bindings)), Op.WRITE, RT.TOPIC) is expected, case


def test_authorize_by_resource_type_super_user_and_no_acl_found() -> None:
    denied_everywhere = authorizer(acl("*", permission=DENY), super_users={"User:alice"})
    assert authorize_by_resource_type(ctx(denied_everywhere), Op.WRITE, RT.TOPIC)
    assert authorize_by_resource_type(ctx(authorizer(allow_everyone_if_no_acl_found=True)), Op.WRITE, RT.TOPIC)
    assert authorize_by_resource_type(ctx(None), Op.WRITE, RT.TOPIC)


def test_cluster_operations_need_describe() -> None:
    assert cluster_operations(ctx(None), False) is None
    create_only = authorizer(acl(CLUSTER_NAME, op=Op.CREATE, rtype=RT.CLUSTER))
    assert cluster_operations(ctx(create_only), True) == set()  # Kafka: 0 without DESCRIBE, whatever else
    with_describe = authorizer(
        acl(CLUSTER_NAME, op=Op.CREATE, rtype=RT.CLUSTER), acl(CLUSTER_NAME, op=Op.DESCRIBE, rtype=RT.CLUSTER)
    )
    assert cluster_operations(ctx(with_describe), True) == {int(Op.CREATE), int(Op.DESCRIBE)}


def test_quiet_checks_are_not_counted() -> None:
    c = ctx(authorizer(acl("t")))
    assert not allowed_quietly(c, Op.READ, RT.TOPIC, "t")
    assert allowed_quietly(c, Op.WRITE, RT.TOPIC, "t")
    assert c.metrics.registry.get_sample_value(
        "strata_authorizer_denials_total", {"listener": "SASL_PLAINTEXT", "operation": "READ", "resource_type": "TOPIC"}
    ) in (None, 0.0)


@pytest.mark.parametrize(
    ("principal", "address", "client_id"),
    [
        ("User:alice", "10.1.2.3:51000", "rdkafka"),
        ("User:CN=a/b:c,O=x", "[::1]:4000", "id:with:colons/and/slashes"),
        ("User:%41", "127.0.0.1:1", None),
    ],
)
def test_forwarded_marker_round_trip(principal: str, address: str, client_id: str | None) -> None:
    marker = forwarded_client_id(3, client_id, principal, address)
    assert forwarding_broker_id(marker) == 3
    assert forwarded_identity(marker) == (principal, address)
    assert marker.endswith(":" + (client_id or ""))


def test_markers_without_identity() -> None:
    assert forwarded_identity("rdkafka") is None
    assert forwarded_identity(None) is None
    assert forwarded_identity("strata-forwarded-by-2:old-style") is None
    assert forwarding_broker_id("strata-forwarded-by-2:old-style") == 2


def test_forwarded_principal_believed_only_from_a_broker() -> None:
    a = authorizer(acl(CLUSTER_NAME, op=Op.CLUSTER_ACTION, principal="User:broker", rtype=RT.CLUSTER))
    marker = forwarded_client_id(2, "cli", "User:bob", "10.7.7.7:6000")

    from_broker = ctx(a, who="broker", client_id=marker)
    act_for_forwarded_client(from_broker)
    assert (str(from_broker.principal), from_broker.client_address) == ("User:bob", "10.7.7.7:6000")

    forged = ctx(a, who="mallory", client_id=marker)
    act_for_forwarded_client(forged)
    assert (str(forged.principal), forged.client_address) == ("User:mallory", "10.0.0.1:5000")

    plain = ctx(a, who="broker", client_id="cli")
    act_for_forwarded_client(plain)
    assert str(plain.principal) == "User:broker"

    malformed = ctx(a, who="broker", client_id=forwarded_client_id(2, "cli", "nocolon", "10.7.7.7:6000"))
    act_for_forwarded_client(malformed)
    assert str(malformed.principal) == "User:broker"
