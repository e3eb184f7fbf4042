"""The per-connection SASL state machine: what may be sent when, handshake errors, PLAIN/SCRAM/OAUTHBEARER to a
principal, failures, the legacy v0 raw flow, KIP-368 session lifetime and re-authentication."""

from __future__ import annotations

import scramp

from strata.broker.request_context import KafkaPrincipal
from strata.broker.security.oauthbearer import UnsecuredJwsValidator, unsecured_token
from strata.broker.security.plain import password_check_from_users
from strata.broker.security.sasl import (
    API_VERSIONS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SaslAuthenticator,
    SaslServerConfig,
    SaslState,
)
from strata.broker.security.scram import ScramCredential, ScramMechanism, credential_from_password
from strata.protocol.errors import ErrorCode

NOW = 1_800_000_000_000
METADATA = 3
CREDS = {
    (ScramMechanism.SCRAM_SHA_256, "alice"): credential_from_password(ScramMechanism.SCRAM_SHA_256, "pw-256"),
    (ScramMechanism.SCRAM_SHA_512, "alice"): credential_from_password(ScramMechanism.SCRAM_SHA_512, "pw-512"),
}


def lookup(mech: ScramMechanism, user: str) -> ScramCredential | None:
    return CREDS.get((mech, user))


def config(max_reauth_ms: int = 0) -> SaslServerConfig:
    return SaslServerConfig(
        ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
        plain_check=password_check_from_users({"alice": b"secret"}),
        scram_lookup=lookup,
        oauth_validator=UnsecuredJwsValidator({}),
        max_reauth_ms=max_reauth_ms,
    )


def auth(max_reauth_ms: int = 0) -> SaslAuthenticator:
    return SaslAuthenticator(config(max_reauth_ms), clock_ms=lambda: NOW)


def test_only_handshake_and_api_versions_before_authentication() -> None:
    a = auth()
    assert a.allows(API_VERSIONS) and a.allows(SASL_HANDSHAKE)
    assert not a.allows(METADATA) and not a.allows(SASL_AUTHENTICATE)
    assert a.handshake("PLAIN", 1) == ErrorCode.NONE
    assert a.allows(SASL_AUTHENTICATE) and not a.allows(METADATA) and not a.allows(API_VERSIONS)


def test_unknown_mechanism_fails_the_connection() -> None:
    a = auth()
    assert a.handshake("GSSAPI", 1) == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert a.state == SaslState.FAILED and not a.allows(API_VERSIONS)


def test_plain_success_and_failure() -> None:
    a = auth()
    a.handshake("PLAIN", 1)
    step = a.authenticate(b"\0alice\0secret")
    assert step.error_code == ErrorCode.NONE and step.session_lifetime_ms == 0
    assert a.state == SaslState.COMPLETE and a.principal == KafkaPrincipal("User", "alice")
    assert a.allows(METADATA) and not a.session_expired()

    b = auth()
    b.handshake("PLAIN", 1)
    step = b.authenticate(b"\0alice\0nope")
    assert step.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert step.error_message == "Authentication failed: Invalid username or password"
    assert b.state == SaslState.FAILED and b.principal is None


def test_scram_both_mechanisms() -> None:
    for mech, pw in (("SCRAM-SHA-256", "pw-256"), ("SCRAM-SHA-512", "pw-512")):
        a = auth()
        a.handshake(mech, 1)
        client = scramp.ScramClient([mech], "alice", pw)
        first = a.authenticate(client.get_client_first().encode())
        assert first.error_code == ErrorCode.NONE and a.state == SaslState.AUTHENTICATE
        client.set_server_first(first.auth_bytes.decode())
        final = a.authenticate(client.get_client_final().encode())
        client.set_server_final(final.auth_bytes.decode())
        assert a.principal == KafkaPrincipal("User", "alice")


def test_legacy_v0_handshake_expects_raw_tokens() -> None:
    a = auth()
    a.handshake("PLAIN", 0)
    assert a.expects_raw_token and not a.allows(SASL_AUTHENTICATE)
    assert a.authenticate(b"\0alice\0secret").error_code == ErrorCode.NONE
    assert not a.expects_raw_token and a.allows(METADATA)


def test_oauthbearer_session_lifetime_is_bounded_by_the_token() -> None:
    a = auth(max_reauth_ms=3_600_000)
    a.handshake("OAUTHBEARER", 1)
    token = unsecured_token({"sub": "svc", "exp": NOW // 1000 + 60})
    step = a.authenticate(f"n,,\x01auth=Bearer {token}\x01\x01".encode())
    assert step.error_code == ErrorCode.NONE and step.session_lifetime_ms == 60_000
    assert a.principal == KafkaPrincipal("User", "svc")


def test_reauthentication_keeps_the_principal() -> None:
    clock = [NOW]
    a = SaslAuthenticator(config(max_reauth_ms=1000), clock_ms=lambda: clock[0])
    a.handshake("PLAIN", 1)
    assert a.authenticate(b"\0alice\0secret").session_lifetime_ms == 1000
    clock[0] += 1000
    assert a.session_expired()
    assert a.handshake("PLAIN", 1) == ErrorCode.NONE  # KIP-368 re-authentication on the same connection
    assert a.authenticate(b"\0alice\0secret").error_code == ErrorCode.NONE
    assert not a.session_expired() and a.state == SaslState.COMPLETE

    b = SaslAuthenticator(
        SaslServerConfig(("PLAIN",), plain_check=password_check_from_users({"alice": b"a", "bob": b"b"})),
        clock_ms=lambda: NOW,
    )
    b.handshake("PLAIN", 1)
    b.authenticate(b"\0alice\0a")
    b.handshake("PLAIN", 1)
    step = b.authenticate(b"\0bob\0b")
    assert step.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and "Cannot change principals" in str(
        step.error_message
    )


def test_tokens_out_of_turn_are_illegal_state() -> None:
    a = auth()
    assert a.authenticate(b"x").error_code == ErrorCode.ILLEGAL_SASL_STATE
    b = auth()
    b.handshake("PLAIN", 1)
    assert b.handshake("PLAIN", 1) == ErrorCode.ILLEGAL_SASL_STATE
