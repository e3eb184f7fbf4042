"""One connection's SASL authentication as Kafka's SaslServerAuthenticator runs it, without I/O.

States: HANDSHAKE (only ApiVersions and SaslHandshake are accepted) -> AUTHENTICATE (SaslAuthenticate requests, v1
handshake) or RAW (v0 handshake: the client's tokens come as bare size-prefixed frames, KIP-43's legacy flow) ->
COMPLETE (every API; a v1+ client may re-authenticate, KIP-368) or FAILED (the response is sent, then the
connection is closed). The network layer feeds it requests and frames; the mechanisms (`plain`, `scram`,
`oauthbearer`) do the cryptography. Nothing here logs or returns a secret.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from strata.protocol.errors import ErrorCode

from ..request_context import KafkaPrincipal
from .oauthbearer import OAuthBearerError, OAuthBearerServerExchange, TokenValidator
from .plain import PasswordCheck, PlainAuthenticationError, authenticate_plain
from .scram import ScramAuthenticationError, ScramCredential, ScramMechanism, ScramServerExchange

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class SaslState(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    RAW = "raw"
    COMPLETE = "complete"
    FAILED = "failed"


class _Exchange(Protocol):
    @property
    def complete(self) -> bool: ...

    def evaluate(self, token: bytes) -> bytes: ...


class _PlainExchange:
    def __init__(self, check: PasswordCheck) -> None:
        self.check = check
        self.username: str | None = None

    @property
    def complete(self) -> bool:
        return self.username is not None

    def evaluate(self, token: bytes) -> bytes:
        self.username = authenticate_plain(token, self.check)
        return b""


@dataclass
class SaslServerConfig:
    """A listener's SASL settings: `sasl.enabled.mechanisms` and what each mechanism needs."""

    enabled_mechanisms: tuple[str, ...]
    plain_check: PasswordCheck | None = None
    scram_lookup: Callable[[ScramMechanism, str], ScramCredential | None] | None = None
    oauth_validator: TokenValidator | None = None
    max_reauth_ms: int = 0  # connections.max.reauth.ms; 0: sessions do not expire

    def __post_init__(self) -> None:
        unknown = [m for m in self.enabled_mechanisms if m not in SUPPORTED_MECHANISMS]
        if unknown:
            raise ValueError(f"sasl.enabled.mechanisms: unsupported mechanism(s) {', '.join(unknown)}")


@dataclass
class AuthStep:
    """What to answer a SaslAuthenticate (or a raw token): bytes for the client, an error, the session lifetime."""

    auth_bytes: bytes = b""
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    session_lifetime_ms: int = 0
    failure_detail: str | None = None  # for the broker's log only


@dataclass
class SaslAuthenticator:
    config: SaslServerConfig
    clock_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    state: SaslState = SaslState.HANDSHAKE
    mechanism: str | None = None
    principal: KafkaPrincipal | None = None
    session_expires_ms: int | None = None  # None: never (KIP-368 off)
    reauthenticating: bool = False
    _exchange: _Exchange | None = None

    # -- what the connection may send ---------------------------------------------------------------------------
    def allows(self, api_key: int) -> bool:
        """May a request with this api key be handled now? (Kafka closes the connection otherwise.)"""
        if self.state == SaslState.COMPLETE:
            return True
        if self.state == SaslState.HANDSHAKE:
            return api_key in (API_VERSIONS, SASL_HANDSHAKE)
        if self.state == SaslState.AUTHENTICATE:
            return api_key == SASL_AUTHENTICATE
        return False

    @property
    def expects_raw_token(self) -> bool:
        return self.state == SaslState.RAW

    def session_expired(self) -> bool:
        return self.session_expires_ms is not None and self.clock_ms() >= self.session_expires_ms

    # -- SaslHandshake ----------------------------------------------------------------------------------------------
    def handshake(self, mechanism: str, version: int) -> int:
        """The error code of the SaslHandshake response (its mechanisms are `config.enabled_mechanisms`)."""
        if self.state == SaslState.COMPLETE and version >= 1:
            self.reauthenticating = True  # KIP-368: a v1+ client re-authenticates on the same connection
        elif self.state != SaslState.HANDSHAKE:
            self.state = SaslState.FAILED
            return ErrorCode.ILLEGAL_SASL_STATE
        if mechanism not in self.config.enabled_mechanisms:
            self.state = SaslState.FAILED
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        if self.reauthenticating and mechanism != self.mechanism:
            self.state = SaslState.FAILED
            return ErrorCode.ILLEGAL_SASL_STATE
        self.mechanism = mechanism
        self._exchange = self._new_exchange(mechanism)
        self.state = SaslState.RAW if version == 0 else SaslState.AUTHENTICATE
        return ErrorCode.NONE

    def _new_exchange(self, mechanism: str) -> _Exchange:
        cfg = self.config
        if mechanism == "PLAIN" and cfg.plain_check is not None:
            return _PlainExchange(cfg.plain_check)
        if mechanism.startswith("SCRAM-") and cfg.scram_lookup is not None:
            mech = ScramMechanism.from_name(mechanism)
            lookup = cfg.scram_lookup
            return ScramServerExchange(mech, lambda user: lookup(mech, user))
        if mechanism == "OAUTHBEARER" and cfg.oauth_validator is not None:
            return OAuthBearerServerExchange(cfg.oauth_validator, self.clock_ms)
        raise ValueError(f"SASL mechanism {mechanism} is enabled but not configured")

    # -- SaslAuthenticate / raw tokens ------------------------------------------------------------------------------
    def authenticate(self, token: bytes) -> AuthStep:
        if self.state not in (SaslState.AUTHENTICATE, SaslState.RAW) or self._exchange is None:
            self.state = SaslState.FAILED
            return AuthStep(error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message="Unexpected SASL token")
        try:
            reply = self._exchange.evaluate(token)
        except (PlainAuthenticationError, ScramAuthenticationError, OAuthBearerError) as e:
            self.state = SaslState.FAILED
            return AuthStep(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(e))
        if not self._exchange.complete:
            detail = getattr(self._exchange, "failure", None)
            return AuthStep(auth_bytes=reply, failure_detail=detail)
        principal, expires = self._outcome()
        if self.reauthenticating and principal != self.principal:
            self.state = SaslState.FAILED
            return AuthStep(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                error_message=f"Cannot change principals during re-authentication from {self.principal}: {principal}",
            )
        self.principal = principal
        self.state = SaslState.COMPLETE
        self.reauthenticating = False
        now = self.clock_ms()
        lifetime = 0
        if self.config.max_reauth_ms > 0:
            end = now + self.config.max_reauth_ms
            if expires is not None:
                end = min(end, expires)
            lifetime = max(end - now, 0)
            self.session_expires_ms = end
        return AuthStep(auth_bytes=reply, session_lifetime_ms=lifetime)

    def _outcome(self) -> tuple[KafkaPrincipal, int | None]:
        ex = self._exchange
        if isinstance(ex, OAuthBearerServerExchange):
            assert ex.token is not None
            return KafkaPrincipal("User", ex.token.principal), ex.token.lifetime_ms
        name = getattr(ex, "username", None)
        assert isinstance(name, str)
        return KafkaPrincipal("User", name), None


__all__ = [
    "SUPPORTED_MECHANISMS",
    "AuthStep",
    "SaslAuthenticator",
    "SaslServerConfig",
    "SaslState",
]
