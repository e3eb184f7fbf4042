"""Kafka's ACL vocabulary: resource types, pattern types, operations, permission types, and the bindings and
filters that CreateAcls / DescribeAcls / DeleteAcls carry.

Codes are Kafka's wire codes (`org.apache.kafka.common.acl` and `.resource`), so a binding read from the wire or from
the metadata store compares directly. Sans-IO: the broker's authorizer and the CLI both use this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

WILDCARD = "*"  # a resource name or host matching any (LITERAL pattern only for names)
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the cluster resource's name in Kafka's ACLs


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters: any pattern type, the name taken literally
    MATCH = 2  # filters: every binding that would match a resource of that name (literal, wildcard, prefixes)
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


class AclError(ValueError):
    """A binding or filter Kafka refuses (CreateAcls/DeleteAcls answer INVALID_REQUEST with this message)."""


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str  # "User:alice", or WILDCARD_PRINCIPAL
    host: str  # an address or WILDCARD
    operation: AclOperation
    permission_type: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def validate(self) -> None:
        """Kafka's checks on a binding to create: concrete types only, a principal of the form `Type:name`."""
        p, e = self.pattern, self.entry
        if p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise AclError(f"Invalid resource type {p.resource_type.name} in ACL binding")
        if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError(f"Invalid pattern type {p.pattern_type.name} in ACL binding")
        if not p.name:
            raise AclError("Resource name must not be empty")
        cluster = p.resource_type == ResourceType.CLUSTER
        if cluster and (p.name != CLUSTER_NAME or p.pattern_type != PatternType.LITERAL):
            raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        if e.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise AclError(f"Invalid operation {e.operation.name} in ACL binding")
        if e.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise AclError(f"Invalid permission type {e.permission_type.name} in ACL binding")
        if not e.host:
            raise AclError("Host must not be empty")
        parse_principal(e.principal)


def parse_principal(text: str) -> tuple[str, str]:
    """`Type:name` -> (type, name); Kafka's SecurityUtils.parseKafkaPrincipal rules."""
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise AclError(f"expected a string in format principalType:principalName but got {text}")
    return kind, name


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A DescribeAcls/DeleteAcls filter: None for a string field and ANY for an enum field match everything."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, binding: AclBinding) -> bool:
        return self._matches_pattern(binding.pattern) and self._matches_entry(binding.entry)

    def _matches_pattern(self, p: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != p.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != p.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type != PatternType.MATCH:
            return self.name == p.name
        # MATCH: the bindings that apply to a resource named `name` (Kafka's ResourcePatternFilter.matches)
        if p.pattern_type == PatternType.LITERAL:
            return p.name in (self.name, WILDCARD)
        return p.pattern_type == PatternType.PREFIXED and self.name.startswith(p.name)

    def _matches_entry(self, e: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == e.principal)
            and (self.host is None or self.host == e.host)
            and (self.operation == AclOperation.ANY or self.operation == e.operation)
            and (self.permission_type == AclPermissionType.ANY or self.permission_type == e.permission_type)
        )

    def validate_for_delete(self) -> None:
        """DeleteAcls refuses filters with UNKNOWN values (Kafka: "... field contains an unknown value")."""
        unknown = (ResourceType.UNKNOWN, PatternType.UNKNOWN, AclOperation.UNKNOWN, AclPermissionType.UNKNOWN)
        fields = (self.resource_type, self.pattern_type, self.operation, self.permission_type)
        if any(f == u for f, u in zip(fields, unknown, strict=True)):
            raise AclError("Filter contains UNKNOWN elements")


__all__ = [
    "CLUSTER_NAME",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AccessControlEntry",
    "AclBinding",
    "AclBindingFilter",
    "AclError",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourcePattern",
    "ResourceType",
    "parse_principal",
]
