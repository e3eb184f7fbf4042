"""Where brokers are reached: this broker's advertised endpoint per listener (what it bound, for ephemeral
ports) and other brokers' inter-broker endpoints as they registered them."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from strata.config import BrokerConfig

from .metadata_store import MetadataStore


class BrokerEndpoints:
    def __init__(
        self, config: BrokerConfig, store: MetadataStore, bound: Callable[[], Mapping[str, tuple[str, int]]]
    ) -> None:
        """`bound`: the (host, port) each listener is bound to once the socket server listens (else empty)."""
        self.config = config
        self.store = store
        self._bound = bound

    def inter_broker_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """Where another broker of the cluster takes inter-broker requests (None: not registered)."""
        b = self.store.brokers().get(broker_id)
        return b.endpoint(self.config.inter_broker_listener_name) if b is not None else None

    def advertised_endpoint(self, listener_name: str) -> tuple[str, int]:
        adv = self.config.advertised_listeners
        chosen = next((a for a in adv if a.name == listener_name), adv[0])
        host, port = chosen.host, chosen.port
        if port == 0:  # ephemeral port: advertise what we bound
            port = self._bound().get(chosen.name, (host, port))[1]
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        return host, port


__all__ = ["BrokerEndpoints"]
