"""SASL/OAUTHBEARER's server side: the client's initial response as Kafka's clients build it, unsecured JWS
validation as Kafka's development validator does it, and JWT validation against a JWKS file (EC keys made here)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from strata.broker.security.oauthbearer import (
    JwksSource,
    JwtValidator,
    OAuthBearerError,
    OAuthBearerServerExchange,
    UnsecuredJwsValidator,
    parse_initial_response,
    unsecured_token,
)

NOW_MS = 1_800_000_000_000
NOW_S = NOW_MS // 1000


def initial(token: str, authzid: str = "", **ext: str) -> bytes:
    exts = "".join(f"{k}={v}\x01" for k, v in ext.items())
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01{exts}\x01".encode()


def test_initial_response_parsing() -> None:
    r = parse_initial_response(initial("abc.def.", "alice", traceId="42"))
    assert (r.authzid, r.token, r.extensions) == ("alice", "abc.def.", {"traceId": "42"})
    for bad in (b"", b"n,,\x01auth=Bearer x\x01", b"n,,\x01\x01", b"n,,\x01auth=Basic x\x01\x01", b"\xff"):
        with pytest.raises(OAuthBearerError):
            parse_initial_response(bad)


def exchange(
    validator: UnsecuredJwsValidator | JwtValidator, token: str, authzid: str = ""
) -> OAuthBearerServerExchange:
    ex = OAuthBearerServerExchange(validator, clock_ms=lambda: NOW_MS)
    assert ex.evaluate(initial(token, authzid)) == b""
    assert ex.complete and ex.token is not None
    return ex


def refused(validator: UnsecuredJwsValidator | JwtValidator, token: str) -> dict[str, str]:
    """Kafka's two steps: a JSON challenge, then the client's 0x01, then the failure carrying the challenge."""
    ex = OAuthBearerServerExchange(validator, clock_ms=lambda: NOW_MS)
    challenge = ex.evaluate(initial(token))
    body = json.loads(challenge)
    assert not ex.complete and ex.failure
    with pytest.raises(OAuthBearerError) as e:
        ex.evaluate(b"\x01")
    assert json.loads(str(e.value)) == body
    return body


def test_unsecured_jws() -> None:
    v = UnsecuredJwsValidator({"unsecuredValidatorRequiredScope": "kafka"})
    ok = unsecured_token({"sub": "alice", "exp": NOW_S + 60, "iat": NOW_S, "scope": "kafka other"})
    ex = exchange(v, ok, authzid="alice")
    assert ex.token is not None
    assert (ex.token.principal, ex.token.lifetime_ms, ex.token.scope) == (
        "alice",
        NOW_MS + 60_000,
        frozenset({"kafka", "other"}),
    )
    assert refused(v, unsecured_token({"sub": "alice", "exp": NOW_S - 1, "scope": "kafka"})) == {
        "status": "invalid_token"
    }
    assert refused(v, unsecured_token({"exp": NOW_S + 60, "scope": "kafka"}))["status"] == "invalid_token"
    assert refused(v, unsecured_token({"sub": "a", "scope": "kafka"}))["status"] == "invalid_token"  # no exp
    assert refused(v, unsecured_token({"sub": "a", "exp": NOW_S + 60, "scope": "x"})) == {
        "status": "insufficient_scope",
        "scope": "kafka",
    }
    assert refused(v, ok[:-1] + "x")["status"] == "invalid_token"  # a signature: not unsecured
    skewed = UnsecuredJwsValidator({"unsecuredValidatorAllowableClockSkewMs": "5000"})
    exchange(skewed, unsecured_token({"sub": "a", "exp": NOW_S - 2}))
    with pytest.raises(OAuthBearerError, match="different from the token's principal"):
        OAuthBearerServerExchange(v, clock_ms=lambda: NOW_MS).evaluate(initial(ok, authzid="bob"))


@pytest.fixture(scope="module")
def keys() -> tuple[ec.EllipticCurvePrivateKey, ec.EllipticCurvePrivateKey]:
    return ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())


def jwks_file(tmp_path: Path, key: ec.EllipticCurvePrivateKey, kid: str) -> Path:
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [{**jwk, "kid": kid, "alg": "ES256", "use": "sig"}]}))
    return path


def signed(key: ec.EllipticCurvePrivateKey, kid: str, **claims: object) -> str:
    return jwt.encode(claims, key, algorithm="ES256", headers={"kid": kid})


def test_jwt_against_a_jwks_file(
    tmp_path: Path, keys: tuple[ec.EllipticCurvePrivateKey, ec.EllipticCurvePrivateKey]
) -> None:
    good, other = keys
    path = jwks_file(tmp_path, good, "k1")
    v = JwtValidator(JwksSource(f"file://{path}"), issuer="https://idp", audience=["kafka"], clock_skew_s=0)
    now = int(time.time())
    claims = {"sub": "svc", "iss": "https://idp", "aud": "kafka", "exp": now + 300, "scope": "a b"}
    ex = OAuthBearerServerExchange(v)
    assert ex.evaluate(initial(signed(good, "k1", **claims))) == b""
    assert ex.token is not None and ex.token.principal == "svc"

    def bad(token: str) -> None:
        ex = OAuthBearerServerExchange(v)
        assert json.loads(ex.evaluate(initial(token))) == {"status": "invalid_token"}

    bad(signed(other, "k1", **claims))  # wrong signature
    bad(signed(good, "k2", **claims))  # unknown key id
    bad(signed(good, "k1", **{**claims, "iss": "https://evil"}))
    bad(signed(good, "k1", **{**claims, "aud": "other"}))
    bad(signed(good, "k1", **{**claims, "exp": now - 100}))
    bad(signed(good, "k1", **{k: v for k, v in claims.items() if k != "exp"}))
    bad(unsecured_token(claims))  # alg none is never accepted here

    # key rotation: the file is re-read when it changes
    jwks_file(tmp_path, other, "k2")
    os.utime(path, (now + 10, now + 10))
    ex = OAuthBearerServerExchange(v)
    assert ex.evaluate(initial(signed(other, "k2", **claims))) == b""
