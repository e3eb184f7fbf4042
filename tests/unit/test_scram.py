"""SCRAM credentials and the server side of the exchange against scramp's client (an independent implementation of
the client side of RFC 5802)."""

from __future__ import annotations

import pytest
import scramp

from strata.broker.security.scram import (
    CredentialError,
    ScramAuthenticationError,
    ScramCredential,
    ScramMechanism,
    ScramServerExchange,
    credential_from_password,
    credential_from_salted_password,
    salted_password,
)

MECHS = [ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512]


def exchange(server_cred: ScramCredential | None, mech: ScramMechanism, user: str, password: str) -> str:
    ex = ScramServerExchange(mech, lambda u: server_cred if u == "alice,x=y" else None)
    client = scramp.ScramClient([mech.mechanism_name], user, password)
    first = ex.evaluate(client.get_client_first().encode())
    client.set_server_first(first.decode())
    final = ex.evaluate(client.get_client_final().encode())
    client.set_server_final(final.decode())  # raises if the server's signature is wrong
    assert ex.complete
    assert ex.username is not None
    return ex.username


@pytest.mark.parametrize("mech", MECHS)
def test_exchange_succeeds_with_the_right_password(mech: ScramMechanism) -> None:
    cred = credential_from_password(mech, "s3cret", 4096)
    assert exchange(cred, mech, "alice,x=y", "s3cret") == "alice,x=y"  # saslname escapes undone


@pytest.mark.parametrize("mech", MECHS)
def test_failures_say_one_thing_and_no_secret(mech: ScramMechanism) -> None:
    cred = credential_from_password(mech, "s3cret", 4096)
    other = ScramMechanism.SCRAM_SHA_512 if mech == ScramMechanism.SCRAM_SHA_256 else ScramMechanism.SCRAM_SHA_256
    cases = [
        (cred, "alice,x=y", "wrong"),  # wrong password
        (cred, "bob", "s3cret"),  # unknown user
        (credential_from_password(other, "s3cret"), "alice,x=y", "s3cret"),  # a credential of the other mechanism
    ]
    for server_cred, user, password in cases:
        with pytest.raises(ScramAuthenticationError) as e:
            exchange(server_cred, mech, user, password)
        text = str(e.value)
        want = "Authentication failed during authentication due to invalid credentials with SASL mechanism"
        assert text == f"{want} {mech.mechanism_name}"
        assert "s3cret" not in text and "wrong" not in text


def test_malformed_and_extra_messages_fail() -> None:
    mech = ScramMechanism.SCRAM_SHA_256
    cred = credential_from_password(mech, "pw")
    for token in (b"", b"\xff\xfe", b"garbage", b"n,,n=alice"):
        with pytest.raises(ScramAuthenticationError):
            ScramServerExchange(mech, lambda u: cred).evaluate(token)
    ex = ScramServerExchange(mech, lambda u: cred)
    client = scramp.ScramClient([mech.mechanism_name], "alice", "pw")
    client.set_server_first(ex.evaluate(client.get_client_first().encode()).decode())
    ex.evaluate(client.get_client_final().encode())
    with pytest.raises(ScramAuthenticationError):
        ex.evaluate(b"again")


@pytest.mark.parametrize("mech", MECHS)
def test_keys_from_a_salted_password_equal_scramps(mech: ScramMechanism) -> None:
    salt = b"0123456789abcdef"
    _, stored, server, _ = scramp.ScramMechanism(mech.mechanism_name).make_auth_info("pw", 4096, salt)
    cred = credential_from_salted_password(mech, salt, salted_password(mech, "pw", salt, 4096), 4096)
    assert (cred.stored_key, cred.server_key) == (stored, server)
    assert ScramCredential.from_json(cred.to_json()) == cred


def test_iteration_bounds_and_names() -> None:
    with pytest.raises(CredentialError, match="Too few iterations"):
        credential_from_password(ScramMechanism.SCRAM_SHA_256, "pw", 4095)
    with pytest.raises(CredentialError, match="Too many iterations"):
        credential_from_password(ScramMechanism.SCRAM_SHA_256, "pw", 16385)
    assert ScramMechanism.from_name("scram-sha-512") == ScramMechanism.SCRAM_SHA_512
    with pytest.raises(ValueError, match="Unsupported SCRAM mechanism"):
        ScramMechanism.from_name("SCRAM-SHA-1")


@pytest.mark.parametrize("mech", MECHS)
def test_final_nonce_that_ends_with_the_server_nonce_is_accepted_as_kafka_does(mech: ScramMechanism) -> None:
    """librdkafka 2.0.2 (Debian's kcat) sends `r=<client nonce><client nonce + server nonce>`; Kafka's server checks
    only that the nonce ends with its own, and so must we. A nonce that does not end with it is refused."""
    import base64
    import hashlib
    import hmac

    cred = credential_from_password(mech, "pw", 4096, salt=b"salt-0123456789")
    h = mech.hash_name

    def final(ex: ScramServerExchange, prefix: str, password: str = "pw") -> bytes:
        first_bare = "n=alice,r=cnonce"
        server_first = ex.evaluate(f"n,,{first_bare}".encode()).decode()
        nonce = dict(kv.split("=", 1) for kv in server_first.split(","))["r"]
        without_proof = f"c=biws,r={prefix}{nonce}"
        auth = f"{first_bare},{server_first},{without_proof}".encode()
        client_key = hmac.digest(salted_password(mech, password, cred.salt, 4096), b"Client Key", h)
        signature = hmac.digest(hashlib.new(h, client_key).digest(), auth, h)
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
        return ex.evaluate(f"{without_proof},p={proof}".encode())

    ex = ScramServerExchange(mech, lambda u: cred)
    assert final(ex, "cnonce").startswith(b"v=") and ex.complete
    with pytest.raises(ScramAuthenticationError):
        final(ScramServerExchange(mech, lambda u: cred), "cnonce", password="wrong")
    ex = ScramServerExchange(mech, lambda u: cred)
    with pytest.raises(ScramAuthenticationError):  # the server nonce with something after it
        ex.evaluate(b"n,,n=alice,r=cnonce")
        ex.evaluate(b"c=biws,r=cnonceXYZ,p=AAAA")
