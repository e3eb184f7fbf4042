"""One SASL step of a connection, shared by the SaslAuthenticate handler and the network layer's legacy v0 flow:
run the mechanism (off the event loop where it may block), then count and log the outcome.

OAUTHBEARER with a JWKS URL fetches keys over the network, so its tokens are evaluated in a worker thread; PLAIN and
SCRAM only compare digests and run inline. A failure is logged with the client address, listener and mechanism and
Kafka's message, never the token, a password or a user name the client sent.
"""

from __future__ import annotations

import asyncio

import structlog

from ..metrics import BrokerMetrics
from .sasl import AuthStep, SaslAuthenticator, SaslState

log = structlog.get_logger("strata.security.sasl")


async def authenticate_step(
    auth: SaslAuthenticator, token: bytes, metrics: BrokerMetrics, listener: str, peer: str
) -> AuthStep:
    reauth = auth.reauthenticating
    if auth.mechanism == "OAUTHBEARER":
        step = await asyncio.to_thread(auth.authenticate, token)
    else:
        step = auth.authenticate(token)
    mechanism = auth.mechanism or "NONE"
    if auth.state is SaslState.COMPLETE and not auth.reauthenticating:
        metrics.authentication(listener, mechanism, True, reauth)
    elif auth.state is SaslState.FAILED:
        failed(metrics, listener, peer, mechanism, step.error_message or "", reauth)
    elif step.failure_detail:
        log.info("SASL token refused", listener=listener, peer=peer, mechanism=mechanism, reason=step.failure_detail)
    return step


def failed(metrics: BrokerMetrics, listener: str, peer: str, mechanism: str, message: str, reauth: bool) -> None:
    metrics.authentication(listener, mechanism, False, reauth)
    log.warning(
        "Failed authentication", listener=listener, peer=peer, mechanism=mechanism, reason=message, reauth=reauth
    )


__all__ = ["authenticate_step", "failed"]
