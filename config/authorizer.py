"""Authorizer settings under Kafka's names: `authorizer.class.name`, `super.users`, `allow.everyone.if.no.acl.found`.

Strata has one authorizer, with the semantics of Kafka's StandardAuthorizer (broker/security/authorizer.py); the
class names of Kafka's two authorizers select it, so a Kafka server.properties carries over. An empty name means no
authorizer: every request is allowed, as in Kafka. Any other name fails the configuration at load (exit code 2).
"""

from __future__ import annotations

from typing import Any

from .defs import ConfigDef, ConfigError
from .defs import ConfigType as T

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"  # Kafka's ZooKeeper-era name: the same semantics here
AUTHORIZER_CLASSES = (STANDARD_AUTHORIZER, ACL_AUTHORIZER)


def _check_authorizer_class(value: Any) -> None:
    if value and value not in AUTHORIZER_CLASSES:
        raise ConfigError(
            f"Class {value} cannot be found: Strata's authorizer is {STANDARD_AUTHORIZER} (also accepted as "
            f"{ACL_AUTHORIZER}); leave it empty for none"
        )


AUTHORIZER_DEFS: list[ConfigDef] = [
    ConfigDef(
        "authorizer.class.name",
        T.CLASS,
        "",
        "the authorizer (ACLs); empty: none, every operation is allowed",
        _check_authorizer_class,
    ),
    ConfigDef("super.users", T.STRING, "", "principals allowed everything, separated by ';' (User:admin;User:broker)"),
    ConfigDef(
        "allow.everyone.if.no.acl.found",
        T.BOOLEAN,
        False,
        "allow an operation on a resource that has no ACL at all (false: deny it)",
    ),
]


__all__ = ["ACL_AUTHORIZER", "AUTHORIZER_CLASSES", "AUTHORIZER_DEFS", "STANDARD_AUTHORIZER"]
