"""SaslHandshake (17) and SaslAuthenticate (36): the wire side of the connection's `SaslAuthenticator`.

On a listener without SASL both answer ILLEGAL_SASL_STATE, as Kafka does. A failed exchange answers its error
(UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED with Kafka's message); the network layer
then closes the connection once the response is sent.
"""

from __future__ import annotations

from typing import Any

from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey, response_class

from ..request_context import RequestContext
from ..security.sasl_session import authenticate_step, failed
from ..services import BrokerServices


async def sasl_handshake(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.SASL_HANDSHAKE)
    auth = ctx.sasl
    if auth is None:
        return Resp(version=ctx.api_version, error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    reauth = auth.principal is not None
    code = auth.handshake(str(req.mechanism), ctx.api_version)
    if code != ErrorCode.NONE:
        # a metric label: only a mechanism this listener enables, never what the client wrote
        enabled = auth.config.enabled_mechanisms
        mechanism = str(req.mechanism) if str(req.mechanism) in enabled else "UNSUPPORTED"
        why = "unsupported SASL mechanism" if code == ErrorCode.UNSUPPORTED_SASL_MECHANISM else "unexpected handshake"
        failed(services.metrics, ctx.listener, ctx.client_address, mechanism, why, reauth)
    return Resp(version=ctx.api_version, error_code=code, mechanisms=list(auth.config.enabled_mechanisms))


async def sasl_authenticate(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.SASL_AUTHENTICATE)
    auth = ctx.sasl
    if auth is None:
        return Resp(
            version=ctx.api_version,
            error_code=ErrorCode.ILLEGAL_SASL_STATE,
            error_message="SaslAuthenticate request received after successful authentication",
            auth_bytes=b"",
            session_lifetime_ms=0,
        )
    step = await authenticate_step(auth, bytes(req.auth_bytes), services.metrics, ctx.listener, ctx.client_address)
    return Resp(
        version=ctx.api_version,
        error_code=step.error_code,
        error_message=step.error_message,
        auth_bytes=step.auth_bytes,
        session_lifetime_ms=step.session_lifetime_ms,
    )
