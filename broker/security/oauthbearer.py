"""SASL/OAUTHBEARER (RFC 7628, KIP-255/KIP-768) on the server: the client's initial response, and two validators.

- Unsecured JWS (Kafka's OAuthBearerUnsecuredValidatorCallbackHandler, for development only): `alg` must be `none`,
  the principal claim (`sub` by default) and `exp` are required; options `unsecuredValidatorPrincipalClaimName`,
  `unsecuredValidatorScopeClaimName`, `unsecuredValidatorRequiredScope`, `unsecuredValidatorAllowableClockSkewMs`.
- JWT (Kafka's OAuthBearerValidatorCallbackHandler): signature checked against a JWKS (a `file:` path, re-read when
  it changes, or an https URL, cached) with PyJWT; `exp` required, `iss` / `aud` checked when configured
  (`sasl.oauthbearer.expected.issuer`, `sasl.oauthbearer.expected.audience`), `sasl.oauthbearer.sub.claim.name`,
  `sasl.oauthbearer.scope.claim.name`, `sasl.oauthbearer.clock.skew.seconds`.

A token that does not validate is answered, as Kafka does, with a JSON challenge (`{"status":"invalid_token"}`);
the client acknowledges it with a lone 0x01 and the authentication then fails with that message. A URL JWKS does
network I/O: callers run `evaluate` off the event loop.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

SEPARATOR = "\x01"
_SASLNAME = r"(?:[\x01-\x7F](?<![=,])|=2C|=3D)+"
_KVPAIRS = rf"(?:[A-Za-z]+=[\x21-\x7E \t\r\n]+{SEPARATOR})*"
_INITIAL = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,{SEPARATOR}(?P<kvpairs>{_KVPAIRS}){SEPARATOR}")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)")


class OAuthBearerError(Exception):
    """The exchange failed; the message is what the client is told."""


class TokenValidationError(Exception):
    """A token that does not validate: `status` (and `scope`) go into the JSON challenge; `reason` only to the log."""

    def __init__(self, reason: str, status: str = "invalid_token", scope: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.scope = scope


@dataclass(frozen=True)
class OAuthBearerToken:
    principal: str
    lifetime_ms: int  # when the token expires (ms since the epoch): bounds the session (KIP-368)
    scope: frozenset[str]


class TokenValidator(Protocol):
    def validate(self, token: str, now_ms: int) -> OAuthBearerToken: ...


@dataclass(frozen=True)
class InitialResponse:
    authzid: str
    token: str
    extensions: dict[str, str]


def parse_initial_response(data: bytes) -> InitialResponse:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message") from None
    m = _INITIAL.fullmatch(text)
    if m is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message")
    pairs = dict(kv.split("=", 1) for kv in m.group("kvpairs").split(SEPARATOR) if kv)
    auth = pairs.pop("auth", None)
    if auth is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message: 'auth' not specified")
    a = _AUTH.fullmatch(auth)
    if a is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
    if a.group("scheme").lower() != "bearer":
        raise OAuthBearerError(f"Invalid scheme in OAUTHBEARER client first message: {a.group('scheme')}")
    return InitialResponse(m.group("authzid") or "", a.group("token"), pairs)


def _b64url_json(part: str) -> dict[str, Any]:
    try:
        value = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise TokenValidationError("not base64url-encoded JSON") from None
    if not isinstance(value, dict):
        raise TokenValidationError("not a JSON object")
    return value


def _scope(claims: Mapping[str, Any], name: str) -> frozenset[str]:
    value = claims.get(name)
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    raise TokenValidationError(f"scope claim {name!r} is neither a string nor a list of strings")


def _principal(claims: Mapping[str, Any], name: str) -> str:
    value = claims.get(name)
    if not isinstance(value, str) or not value.strip():
        raise TokenValidationError(f"required principal claim {name!r} missing or empty")
    return value


def _seconds_ms(claims: Mapping[str, Any], name: str, required: bool) -> int | None:
    value = claims.get(name)
    if value is None:
        if required:
            raise TokenValidationError(f"required claim {name!r} missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenValidationError(f"claim {name!r} is not a number")
    return int(value * 1000)


class UnsecuredJwsValidator:
    def __init__(self, options: Mapping[str, str]) -> None:
        self.principal_claim = options.get("unsecuredValidatorPrincipalClaimName", "sub")
        self.scope_claim = options.get("unsecuredValidatorScopeClaimName", "scope")
        self.required_scope = frozenset(options.get("unsecuredValidatorRequiredScope", "").replace(",", " ").split())
        self.skew_ms = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0"))
        if self.skew_ms < 0:
            raise ValueError("unsecuredValidatorAllowableClockSkewMs must not be negative")

    def validate(self, token: str, now_ms: int) -> OAuthBearerToken:
        parts = token.split(".")
        if len(parts) != 3 or parts[2]:
            raise TokenValidationError("an unsecured JWS has three parts and an empty signature")
        if _b64url_json(parts[0]).get("alg") != "none":
            raise TokenValidationError("unsecured JWS header must say alg none")
        claims = _b64url_json(parts[1])
        principal = _principal(claims, self.principal_claim)
        exp = _seconds_ms(claims, "exp", required=True)
        assert exp is not None
        if now_ms - self.skew_ms >= exp:
            raise TokenValidationError("the token has expired")
        iat = _seconds_ms(claims, "iat", required=False)
        if iat is not None and iat > now_ms + self.skew_ms:
            raise TokenValidationError("the token was issued in the future")
        scope = _scope(claims, self.scope_claim)
        missing = self.required_scope - scope
        if missing:
            raise TokenValidationError(
                "the token lacks a required scope", "insufficient_scope", " ".join(sorted(self.required_scope))
            )
        return OAuthBearerToken(principal, exp, scope)


class JwksSource:
    """Signing keys by key id from a JWKS file (re-read when its mtime changes) or URL (PyJWT's cached client)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self._file = Path(location[len("file:") :].removeprefix("//")) if location.startswith("file:") else None
        self._mtime: float | None = None
        self._keys: dict[str | None, Any] = {}
        self._client: Any = None
        if self._file is None:
            import jwt

            self._client = jwt.PyJWKClient(location, cache_keys=True, lifespan=3600)

    def key_for(self, token: str) -> Any:
        import jwt

        if self._client is not None:
            try:
                return self._client.get_signing_key_from_jwt(token)
            except jwt.PyJWKClientError as e:
                raise TokenValidationError(f"no signing key: {e}") from None
        assert self._file is not None
        mtime = self._file.stat().st_mtime
        if mtime != self._mtime:
            keyset = jwt.PyJWKSet.from_json(self._file.read_text())
            self._keys = {k.key_id: k for k in keyset.keys}
            self._mtime = mtime
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.PyJWTError as e:
            raise TokenValidationError(f"malformed token header: {e}") from None
        key = self._keys.get(kid) or (next(iter(self._keys.values())) if kid is None and len(self._keys) == 1 else None)
        if key is None:
            raise TokenValidationError("no JWKS key matches the token's key id")
        return key


class JwtValidator:
    def __init__(
        self,
        jwks: JwksSource,
        *,
        issuer: str | None = None,
        audience: list[str] | None = None,
        sub_claim: str = "sub",
        scope_claim: str = "scope",
        clock_skew_s: int = 30,
    ) -> None:
        self.jwks, self.issuer, self.audience = jwks, issuer, audience or None
        self.sub_claim, self.scope_claim, self.clock_skew_s = sub_claim, scope_claim, clock_skew_s

    def validate(self, token: str, now_ms: int) -> OAuthBearerToken:
        import jwt

        key = self.jwks.key_for(token)
        try:
            claims = jwt.decode(
                token,
                key=key.key,
                algorithms=[key.algorithm_name] if getattr(key, "algorithm_name", None) else None,
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.clock_skew_s,
                options={"require": ["exp"], "verify_aud": self.audience is not None},
            )
        except jwt.PyJWTError as e:
            raise TokenValidationError(str(e)) from None
        exp = _seconds_ms(claims, "exp", required=True)
        assert exp is not None
        return OAuthBearerToken(_principal(claims, self.sub_claim), exp, _scope(claims, self.scope_claim))


class OAuthBearerServerExchange:
    def __init__(self, validator: TokenValidator, clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)):
        self.validator = validator
        self.clock_ms = clock_ms
        self.token: OAuthBearerToken | None = None
        self.failure: str | None = None  # why the last token was refused (for the log, never sent)
        self._challenge: str | None = None

    @property
    def complete(self) -> bool:
        return self.token is not None

    def evaluate(self, data: bytes) -> bytes:
        if self._challenge is not None and data == SEPARATOR.encode():
            raise OAuthBearerError(self._challenge)
        if self.complete:
            raise OAuthBearerError("Authentication exchange has already completed")
        self._challenge = None
        initial = parse_initial_response(data)
        try:
            token = self.validator.validate(initial.token, self.clock_ms())
        except TokenValidationError as e:
            self.failure = str(e)
            body: dict[str, str] = {"status": e.status}
            if e.scope:
                body["scope"] = e.scope
            self._challenge = json.dumps(body, separators=(",", ":"))
            return self._challenge.encode()
        if initial.authzid and initial.authzid != token.principal:
            raise OAuthBearerError(
                f"Authentication failed: Client requested an authorization id ({initial.authzid}) that is "
                f"different from the token's principal name ({token.principal})"
            )
        self.token = token
        return b""


def unsecured_token(claims: Mapping[str, Any]) -> str:
    """An unsecured JWS (alg none) for the given claims: what Kafka's unsecured login module sends."""

    def enc(obj: Mapping[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{enc({'alg': 'none'})}.{enc(claims)}."


__all__ = [
    "InitialResponse",
    "JwksSource",
    "JwtValidator",
    "OAuthBearerError",
    "OAuthBearerServerExchange",
    "OAuthBearerToken",
    "TokenValidationError",
    "TokenValidator",
    "UnsecuredJwsValidator",
    "parse_initial_response",
    "unsecured_token",
]
