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
        """Kafka's checks of a binding to create, in its order and words (AclApis, then the controller's
        AclControlManager.validateNewAcl). The principal is not checked, as in Kafka: one without a `Type:` can
        never match a request."""
        p, e = self.pattern, self.entry
        if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
            raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        if not p.name:
            raise AclError("Invalid empty resource name")
        if p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise AclError(f"Invalid resourceType {p.resource_type.name}")
        if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError(f"Invalid patternType {p.pattern_type.name}")
        if e.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise AclError(f"Invalid operation {e.operation.name}")
        if e.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise AclError(f"Invalid permissionType {e.permission_type.name}")

    def wire_fields(self, pattern_field: str = "pattern_type") -> dict[str, str | int]:
        """The binding as the fields of a CreateAcls creation or a DeleteAcls match (codes as ints); the pattern
        type's field is `resource_pattern_type` in CreateAcls."""
        p, e = self.pattern, self.entry
        return {
            "resource_type": int(p.resource_type),
            "resource_name": p.name,
            pattern_field: int(p.pattern_type),
            "principal": e.principal,
            "host": e.host,
            "operation": int(e.operation),
            "permission_type": int(e.permission_type),
        }

    def to_json(self) -> dict[str, str]:
        """The stored form (metadata file, etcd): Kafka's enum names, readable and independent of the codes."""
        p, e = self.pattern, self.entry
        return {
            "resource_type": p.resource_type.name,
            "name": p.name,
            "pattern_type": p.pattern_type.name,
            "principal": e.principal,
            "host": e.host,
            "operation": e.operation.name,
            "permission_type": e.permission_type.name,
        }

    @classmethod
    def from_json(cls, d: dict[str, str]) -> AclBinding:
        """The inverse of to_json (KeyError or ValueError for a malformed entry)."""
        return cls(
            ResourcePattern(ResourceType[d["resource_type"]], str(d["name"]), PatternType[d["pattern_type"]]),
            AccessControlEntry(
                str(d["principal"]),
                str(d["host"]),
                AclOperation[d["operation"]],
                AclPermissionType[d["permission_type"]],
            ),
        )


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
        """DeleteAcls refuses a filter with an UNKNOWN value, in the words of Kafka's AclControlManager."""
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            raise AclError("Unknown patternFilter.")
        if self.operation == AclOperation.UNKNOWN or self.permission_type == AclPermissionType.UNKNOWN:
            raise AclError("Unknown entryFilter.")


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
