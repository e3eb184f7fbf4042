"""StandardAuthorizer semantics (Kafka's): pattern matching, implied operations, DENY over ALLOW, hosts, super users,
the no-ACL default; and the DescribeAcls/DeleteAcls filters."""

from __future__ import annotations

import pytest

from strata.broker.request_context import KafkaPrincipal
from strata.broker.security.authorizer import StandardAuthorizer, parse_super_users
from strata.protocol.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

Op, Perm, PT, RT = AclOperation, AclPermissionType, PatternType, ResourceType
ALICE, BOB = KafkaPrincipal("User", "alice"), KafkaPrincipal("User", "bob")
HOST = "10.0.0.1"


def acl(
    name: str,
    op: AclOperation,
    perm: AclPermissionType = Perm.ALLOW,
    *,
    principal: str = "User:alice",
    host: str = "*",
    pattern: PatternType = PT.LITERAL,
    rtype: ResourceType = RT.TOPIC,
) -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, host, op, perm))


def authz(*bindings: AclBinding, allow_if_none: bool = False, supers: str = "") -> StandardAuthorizer:
    a = StandardAuthorizer(parse_super_users(supers), allow_if_none)
    a.replace_acls(bindings)
    return a


def may(a: StandardAuthorizer, op: AclOperation, name: str = "orders", who: KafkaPrincipal = ALICE) -> bool:
    return a.authorize(who, HOST, op, RT.TOPIC, name)


def test_no_acls_uses_the_default() -> None:
    assert not may(authz(), Op.READ)
    assert may(authz(allow_if_none=True), Op.READ)


def test_a_resource_with_acls_for_someone_else_is_denied_even_with_allow_everyone() -> None:
    a = authz(acl("orders", Op.READ, principal="User:bob"), allow_if_none=True)
    assert not may(a, Op.READ)
    assert may(a, Op.READ, who=BOB)
    assert may(a, Op.READ, name="other")  # no ACL on that topic: the default


def test_literal_prefixed_and_wildcard_patterns() -> None:
    a = authz(
        acl("orders", Op.READ),
        acl("pay", Op.WRITE, pattern=PT.PREFIXED),
        acl("*", Op.CREATE),
    )
    assert may(a, Op.READ, "orders")
    assert not may(a, Op.READ, "orders2")  # a literal name is not a prefix
    assert may(a, Op.WRITE, "payments") and may(a, Op.WRITE, "pay")
    assert not may(a, Op.WRITE, "pa")
    assert may(a, Op.CREATE, "anything")
    assert not may(a, Op.DELETE, "orders")


def test_deny_wins_wherever_it_comes_from() -> None:
    a = authz(
        acl("pay", Op.WRITE, pattern=PT.PREFIXED),
        acl("payments-eu", Op.WRITE, Perm.DENY),
        acl("*", Op.READ, Perm.DENY, principal="User:*"),
        acl("payments", Op.READ),
    )
    assert may(a, Op.WRITE, "payments")
    assert not may(a, Op.WRITE, "payments-eu")
    assert not may(a, Op.READ, "payments")  # the wildcard DENY for everyone beats the literal ALLOW


def test_implied_operations_apply_to_allow_only() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert may(authz(acl("t", op)), Op.DESCRIBE, "t"), op
    assert not may(authz(acl("t", Op.CREATE)), Op.DESCRIBE, "t")
    assert may(authz(acl("t", Op.ALTER_CONFIGS)), Op.DESCRIBE_CONFIGS, "t")
    assert not may(authz(acl("t", Op.DESCRIBE)), Op.READ, "t")
    # DENY READ does not deny DESCRIBE; DENY ALL denies everything
    a = authz(acl("t", Op.DESCRIBE), acl("t", Op.READ, Perm.DENY))
    assert may(a, Op.DESCRIBE, "t") and not may(a, Op.READ, "t")
    a = authz(acl("t", Op.DESCRIBE), acl("t", Op.ALL, Perm.DENY))
    assert not may(a, Op.DESCRIBE, "t")
    assert may(authz(acl("t", Op.ALL)), Op.ALTER_CONFIGS, "t")


def test_hosts_and_principals() -> None:
    a = authz(acl("t", Op.READ, host=HOST), acl("u", Op.READ, host="10.9.9.9"), acl("v", Op.READ, principal="User:*"))
    assert may(a, Op.READ, "t")
    assert not may(a, Op.READ, "u")
    assert may(a, Op.READ, "v", who=BOB)
    assert not may(a, Op.READ, "t", who=KafkaPrincipal("Group", "alice"))


def test_super_users_may_do_anything() -> None:
    a = authz(acl("t", Op.ALL, Perm.DENY, principal="User:*"), supers="User:admin; User:broker")
    assert a.authorize(KafkaPrincipal("User", "broker"), HOST, Op.WRITE, RT.TOPIC, "t")
    assert not may(a, Op.WRITE, "t")


def test_resource_types_are_separate() -> None:
    a = authz(acl("g", Op.READ, rtype=RT.GROUP))
    assert a.authorize(ALICE, HOST, Op.READ, RT.GROUP, "g")
    assert not may(a, Op.READ, "g")


def test_replacing_the_set_applies_at_once() -> None:
    a = authz(acl("t", Op.READ))
    assert may(a, Op.READ, "t")
    a.replace_acls([acl("t", Op.READ, Perm.DENY)])
    assert not may(a, Op.READ, "t")
    a.replace_acls([acl("t", Op.READ), acl("t", Op.READ)])
    assert len(a.acls()) == 1


def test_filters() -> None:
    bindings = [
        acl("orders", Op.READ),
        acl("ord", Op.WRITE, pattern=PT.PREFIXED),
        acl("*", Op.DESCRIBE),
        acl("g", Op.READ, rtype=RT.GROUP, principal="User:bob"),
    ]
    a = authz(*bindings)
    assert a.acls(AclBindingFilter()) == bindings
    match = AclBindingFilter(RT.TOPIC, "orders", PT.MATCH)
    assert a.acls(match) == bindings[:3]
    assert a.acls(AclBindingFilter(RT.TOPIC, "orders", PT.ANY)) == bindings[:1]
    assert a.acls(AclBindingFilter(RT.TOPIC, "ord", PT.PREFIXED)) == bindings[1:2]
    assert a.acls(AclBindingFilter(principal="User:bob")) == bindings[3:]
    assert a.acls(AclBindingFilter(operation=Op.WRITE, permission_type=Perm.ALLOW)) == bindings[1:2]


@pytest.mark.parametrize(
    "binding, message",
    [
        (acl("t", Op.READ, pattern=PT.MATCH), "^Invalid patternType MATCH$"),
        (acl("t", Op.ANY), "^Invalid operation ANY$"),
        (acl("t", Op.READ, Perm.ANY), "^Invalid permissionType ANY$"),
        (acl("t", Op.READ, rtype=RT.ANY), "^Invalid resourceType ANY$"),
        (
            acl("my-cluster", Op.ALTER, rtype=RT.CLUSTER),
            "^The only valid name for the CLUSTER resource is kafka-cluster$",
        ),
        (acl("", Op.READ), "^Invalid empty resource name$"),
        (acl("", Op.ANY, rtype=RT.ANY), "^Invalid empty resource name$"),  # Kafka's order: the broker checks first
    ],
)
def test_invalid_bindings_are_refused(binding: AclBinding, message: str) -> None:
    with pytest.raises(AclError, match=message):
        binding.validate()
    acl("kafka-cluster", Op.ALTER, rtype=RT.CLUSTER).validate()


def test_delete_filters_with_unknown_values_are_refused() -> None:
    AclBindingFilter().validate_for_delete()
    for bad in (
        AclBindingFilter(resource_type=RT.UNKNOWN),
        AclBindingFilter(pattern_type=PT.UNKNOWN),
        AclBindingFilter(operation=Op.UNKNOWN),
        AclBindingFilter(permission_type=Perm.UNKNOWN),
    ):
        with pytest.raises(AclError, match=r"^Unknown (pattern|entry)Filter\.$"):
            bad.validate_for_delete()


def by_type(a: StandardAuthorizer, op: AclOperation = Op.WRITE, who: KafkaPrincipal = ALICE, host: str = HOST) -> bool:
    return a.authorize_by_resource_type(who, host, op, RT.TOPIC)


def test_authorize_by_resource_type() -> None:
    """Kafka's authorizeByResourceType: any resource of the type, only the operation itself or ALL, DENYs that
    dominate an ALLOW (same literal name, a prefix of it), a literal * DENY denying all."""
    assert not by_type(authz())
    assert by_type(authz(allow_if_none=True))  # as for a resource without ACLs
    assert by_type(authz(supers="User:alice"))
    assert by_type(authz(acl("t1", Op.WRITE)))
    assert by_type(authz(acl("t1", Op.ALL)))
    assert not by_type(authz(acl("t1", Op.WRITE)), Op.DESCRIBE)  # nothing implied here
    assert not by_type(authz(acl("t1", Op.WRITE), acl("t1", Op.WRITE, Perm.DENY)))
    assert not by_type(authz(acl("t1", Op.WRITE), acl("t", Op.ALL, Perm.DENY, pattern=PT.PREFIXED)))
    assert by_type(authz(acl("t1", Op.WRITE), acl("t2", Op.WRITE, Perm.DENY)))
    prefixed = acl("abc", Op.WRITE, pattern=PT.PREFIXED)
    assert by_type(authz(prefixed, acl("abc", Op.WRITE, Perm.DENY)))  # a literal DENY does not cover a prefix
    assert not by_type(authz(prefixed, acl("ab", Op.WRITE, Perm.DENY, pattern=PT.PREFIXED)))
    assert by_type(authz(prefixed, acl("ab", Op.WRITE, Perm.DENY, pattern=PT.PREFIXED), acl("x", Op.WRITE)))
    assert not by_type(authz(acl("t1", Op.WRITE), acl("*", Op.WRITE, Perm.DENY)))
    assert by_type(authz(acl("*", Op.WRITE), acl("t1", Op.WRITE, Perm.DENY)))
    assert not by_type(authz(acl("t1", Op.WRITE, principal="User:bob")))
    assert by_type(authz(acl("t1", Op.WRITE, principal="User:*")))
    assert not by_type(authz(acl("t1", Op.WRITE, host="10.9.9.9")))
    assert not by_type(authz(acl("g", Op.WRITE, rtype=RT.GROUP)))
