"""What a handler knows about the request it answers besides its body: the API and version, the connection's
listener and client address, the authenticated principal, and the authorizer that will decide what it may do.

The principal is User:ANONYMOUS on a PLAINTEXT listener, the mapped certificate DN with TLS client auth, the
SASL user once authenticated. The authorizer is the one `authorizer.class.name` configures (None: everything is
allowed); handlers ask it through broker/authorization.py, which counts denials in `metrics`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .metrics import BrokerMetrics
    from .security.sasl import SaslAuthenticator


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """Kafka's KafkaPrincipal: a type ("User") and a name; printed as Kafka prints it, `User:alice`."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")  # a PLAINTEXT connection's principal, as in Kafka


class Authorizer(Protocol):
    """Kafka's Authorizer, reduced to one decision: may `principal` connecting from `host` perform `operation`
    (an AclOperation code) on the resource (a ResourceType code and a name)?"""

    def authorize(
        self, principal: KafkaPrincipal, host: str, operation: int, resource_type: int, resource_name: str
    ) -> bool: ...

    def authorize_by_resource_type(
        self, principal: KafkaPrincipal, host: str, operation: int, resource_type: int
    ) -> bool:
        """May it perform `operation` on at least one resource of the type (Kafka's authorizeByResourceType)?"""
        ...


@dataclass(slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    received: float  # time.perf_counter() when the frame was read
    listener: str  # the name of the listener the connection came in on
    client_address: str  # the client's "host:port"
    principal: KafkaPrincipal = ANONYMOUS
    authorizer: Authorizer | None = None  # None: no authorizer configured, every operation is allowed
    sasl: SaslAuthenticator | None = (
        None  # the connection's SASL state on a SASL listener (SaslHandshake/-Authenticate)
    )
    metrics: BrokerMetrics | None = None  # where broker.authorization counts denials
    # set by a Fetch in a session (broker/fetch_session.py): the quota code calls it when it empties the response
    on_fetch_throttled: Callable[[], None] | None = None
    zero_copy: bool = False  # Fetch may answer local records as FileRegions (plaintext listener, the switch on)


__all__ = ["ANONYMOUS", "Authorizer", "KafkaPrincipal", "RequestContext"]
