"""KafkaApis gives every handler the broker's services and a RequestContext built from its connection."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from strata.broker.network import Connection
from strata.broker.request_context import ANONYMOUS, RequestContext
from strata.broker.server import KafkaServer
from strata.broker.services import BrokerServices
from strata.config import BrokerConfig
from strata.protocol.registry import REQUEST_CLASSES, ApiKey


def test_a_handler_gets_the_services_and_the_context_of_its_connection(tmp_path: Path) -> None:
    server = KafkaServer(
        BrokerConfig.from_dict(
            {"log.dirs": str(tmp_path / "data"), "metrics.listener": "", "listeners": "PLAINTEXT://127.0.0.1:0"}
        )
    )
    seen: list[tuple[BrokerServices, RequestContext]] = []

    async def record(services: BrokerServices, ctx: RequestContext, req: Any) -> None:
        seen.append((services, ctx))

    server.apis.handlers[ApiKey.API_VERSIONS] = record
    req = REQUEST_CLASSES[ApiKey.API_VERSIONS][3](client_software_name="t", client_software_version="1")
    req.with_header(correlation_id=7, client_id="me")
    conn = Connection(1, "10.1.2.3:5555", "PLAINTEXT", writer=None)  # type: ignore[arg-type]  # nothing sent
    assert asyncio.run(server.apis.handle(conn, bytes(req.encode(header=True, framed=False)))) is None
    [(services, ctx)] = seen
    assert services is server.services
    assert (ctx.api_key, ctx.api_version, ctx.correlation_id) == (ApiKey.API_VERSIONS, 3, 7)
    assert ctx.client_id == "me"
    assert (ctx.listener, ctx.client_address, ctx.authorizer) == ("PLAINTEXT", "10.1.2.3:5555", None)
    assert ctx.principal == ANONYMOUS and str(ctx.principal) == "User:ANONYMOUS"
