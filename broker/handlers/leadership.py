"""Helpers for NOT_LEADER_OR_FOLLOWER answers that name the current leader (KIP-951): Produce v10+ and Fetch v12+
carry `current_leader` per partition, and Produce v10+ / Fetch v16+ the leaders' `node_endpoints`, so clients go to
the new leader without a Metadata round trip."""

from __future__ import annotations

from collections.abc import Iterable

from ..services import BrokerServices


def leader_endpoints(
    services: BrokerServices, listener: str, leader_ids: Iterable[int]
) -> list[tuple[int, str, int, str | None]]:
    """(id, host, port, rack) of each known leader on the request's listener, sorted by id."""
    out = []
    brokers = services.store.brokers()
    for b in sorted(set(leader_ids)):
        if b < 0:
            continue
        if b == services.broker_id:
            host, port = services.endpoints.advertised_endpoint(listener)
            out.append((b, host, port, services.config["broker.rack"] or None))
            continue
        info = brokers.get(b)
        if info is None:
            continue
        ep = info.endpoint(listener)
        if ep is not None:
            out.append((b, ep[0], ep[1], info.rack))
    return out
