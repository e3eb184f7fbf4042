"""Kafka's StandardAuthorizer semantics over an in-memory ACL set.

A decision is a pure function of (principal, host, operation, resource) and the current bindings:

- a principal listed in `super.users` may do everything;
- the bindings that apply to a resource are its LITERAL ones, the LITERAL wildcard `*` of its type, and every
  PREFIXED one whose name is a prefix of the resource name;
- a binding matches a request when its principal is the request's or `User:*`, its host is the client's address or
  `*`, and its operation is the one asked, ALL, or (ALLOW only) one that implies it: READ, WRITE, DELETE and ALTER
  imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS;
- any matching DENY wins; otherwise any matching ALLOW allows; otherwise, if the resource has bindings at all (for
  anyone), the request is denied, and if it has none, `allow.everyone.if.no.acl.found` decides.

The set is replaced whole from the metadata store whenever its watch reports a change (`replace_acls`), so every
broker decides from the same bindings; lookups are dictionary probes (one per prefix of the resource name).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import structlog

from strata.protocol.acl import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
)

from ..request_context import KafkaPrincipal

if TYPE_CHECKING:
    from ..metadata_store import MetadataStore

log = structlog.get_logger("strata.authorizer")

_IMPLIES_DESCRIBE = frozenset(
    {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


def parse_super_users(value: str) -> frozenset[str]:
    """`super.users`: principals separated by semicolons, e.g. `User:admin;User:broker`."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


def _operation_matches(entry: AccessControlEntry, operation: int) -> bool:
    if entry.operation == AclOperation.ALL or entry.operation == operation:
        return True
    if entry.permission_type != AclPermissionType.ALLOW:
        return False  # a DENY of READ does not deny DESCRIBE
    if operation == AclOperation.DESCRIBE:
        return entry.operation in _IMPLIES_DESCRIBE
    if operation == AclOperation.DESCRIBE_CONFIGS:
        return entry.operation in _IMPLIES_DESCRIBE_CONFIGS
    return False


class StandardAuthorizer:
    """Implements the `Authorizer` protocol of `broker.request_context`."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._bindings: tuple[AclBinding, ...] = ()
        self._literal: dict[tuple[int, str], list[AccessControlEntry]] = {}
        self._prefixed: dict[int, dict[str, list[AccessControlEntry]]] = {}

    def replace_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Install the whole current ACL set (built aside, then swapped: a decision never sees half of it)."""
        literal: defaultdict[tuple[int, str], list[AccessControlEntry]] = defaultdict(list)
        prefixed: defaultdict[int, defaultdict[str, list[AccessControlEntry]]] = defaultdict(lambda: defaultdict(list))
        kept = tuple(dict.fromkeys(bindings))  # a binding created twice counts once, as in Kafka
        for b in kept:
            p = b.pattern
            if p.pattern_type == PatternType.LITERAL:
                literal[(p.resource_type, p.name)].append(b.entry)
            elif p.pattern_type == PatternType.PREFIXED:
                prefixed[p.resource_type][p.name].append(b.entry)
        self._bindings = kept
        self._literal = dict(literal)
        self._prefixed = {t: dict(names) for t, names in prefixed.items()}

    def acl_count(self) -> int:
        """Kafka's Authorizer.aclCount (the acls-total-count metric)."""
        return len(self._bindings)

    def acls(self, filt: AclBindingFilter | None = None) -> list[AclBinding]:
        return [b for b in self._bindings if filt is None or filt.matches(b)]

    def _applicable(self, resource_type: int, name: str) -> Iterable[list[AccessControlEntry]]:
        for key in ((resource_type, name), (resource_type, WILDCARD)):
            entries = self._literal.get(key)
            if entries:
                yield entries
        by_prefix = self._prefixed.get(resource_type)
        if by_prefix:
            for i in range(1, len(name) + 1):
                entries = by_prefix.get(name[:i])
                if entries:
                    yield entries

    def authorize(
        self, principal: KafkaPrincipal, host: str, operation: int, resource_type: int, resource_name: str
    ) -> bool:
        who = str(principal)
        if who in self.super_users:
            return True
        has_resource_acls = allowed = False
        for entries in self._applicable(resource_type, resource_name):
            has_resource_acls = True
            for e in entries:
                if e.principal not in (who, WILDCARD_PRINCIPAL) or e.host not in (WILDCARD, host):
                    continue
                if not _operation_matches(e, operation):
                    continue
                if e.permission_type == AclPermissionType.DENY:
                    return False
                allowed = True
        if allowed:
            return True
        return not has_resource_acls and self.allow_everyone_if_no_acl_found

    def authorize_by_resource_type(
        self, principal: KafkaPrincipal, host: str, operation: int, resource_type: int
    ) -> bool:
        """May the principal perform `operation` on at least one resource of the type (Kafka's
        Authorizer.authorizeByResourceType, e.g. an idempotent producer without IDEMPOTENT_WRITE but with WRITE on
        some topic)? Only the operation itself or ALL counts here (no implied operations), as in Kafka: allowed if a
        resource named "hardcode" would be (super users, allow.everyone.if.no.acl.found), else if an ALLOW of the
        principal (or User:*) from the host (or *) is not dominated by a DENY: a literal `*` DENY denies everything;
        a literal ALLOW is dominated by a DENY of the same name or of a prefix of it, a prefixed one by a prefixed
        DENY of a prefix of it."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        who = str(principal)
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allows: list[ResourcePattern] = []
        for b in self._bindings:
            p, e = b.pattern, b.entry
            if p.resource_type != resource_type or e.host not in (WILDCARD, host):
                continue
            if e.principal not in (who, WILDCARD_PRINCIPAL) or e.operation not in (operation, AclOperation.ALL):
                continue
            if e.permission_type == AclPermissionType.DENY:
                if p.pattern_type == PatternType.LITERAL:
                    if p.name == WILDCARD:
                        return False
                    deny_literal.add(p.name)
                elif p.pattern_type == PatternType.PREFIXED:
                    deny_prefixed.add(p.name)
            elif e.permission_type == AclPermissionType.ALLOW:
                if p.pattern_type == PatternType.LITERAL and p.name == WILDCARD:
                    return True
                allows.append(p)
        for p in allows:
            if p.pattern_type == PatternType.LITERAL and p.name in deny_literal:
                continue
            if not any(p.name[:i] in deny_prefixed for i in range(1, len(p.name) + 1)):
                return True
        return False


def build_authorizer(values: Mapping[str, Any]) -> StandardAuthorizer | None:
    """The authorizer `authorizer.class.name` names (config/authorizer.py checked the name), None if empty."""
    if not values.get("authorizer.class.name"):
        return None
    return StandardAuthorizer(
        parse_super_users(str(values.get("super.users") or "")),
        bool(values.get("allow.everyone.if.no.acl.found")),
    )


class AclSync:
    """Keeps an authorizer's bindings equal to the metadata store's: `load()` once the store's image is complete,
    then every 'acl' change the store reports (its own writes, another broker's through the etcd watch) schedules
    one rebuild for the current loop turn, so a request that creates a thousand ACLs rebuilds the set once."""

    def __init__(self, authorizer: StandardAuthorizer, store: MetadataStore) -> None:
        self.authorizer = authorizer
        self.store = store
        self._pending = False
        store.add_listener(self._on_change)

    def load(self) -> None:
        self._pending = False
        bindings = self.store.acls()
        self.authorizer.replace_acls(bindings)
        log.debug("ACLs installed", acls=len(self.authorizer.acls()))

    def _on_change(self, kind: str, key: object) -> None:
        if kind != "acl" or self._pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a store changed outside the event loop (tests): at once
            self.load()
            return
        self._pending = True
        loop.call_soon(self.load)


__all__ = ["AclSync", "StandardAuthorizer", "build_authorizer", "parse_super_users"]
