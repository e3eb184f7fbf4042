"""SCRAM-SHA-256/512 (RFC 5802, KIP-84) credentials and the server side of one exchange, over `scramp`.

A credential is what Kafka stores (UserScramCredentialRecord): salt, StoredKey, ServerKey and the iteration count,
never the password. AlterUserScramCredentials (KIP-554) carries the client-computed SaltedPassword, from which the
keys are derived here; `strata users scram add` derives it from a password. The exchange never logs or returns a
secret: a failure is one message, Kafka's, whatever went wrong.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strata.protocol.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramMechanism, salted_password


class CredentialError(ValueError):
    """An upsertion Kafka refuses (UNACCEPTABLE_CREDENTIAL with this message)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: ScramMechanism
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_json(self) -> dict[str, Any]:
        enc = base64.b64encode
        return {
            "mechanism": int(self.mechanism),
            "salt": enc(self.salt).decode(),
            "stored_key": enc(self.stored_key).decode(),
            "server_key": enc(self.server_key).decode(),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ScramCredential:
        dec = base64.b64decode
        return cls(
            ScramMechanism(d["mechanism"]),
            dec(d["salt"]),
            dec(d["stored_key"]),
            dec(d["server_key"]),
            int(d["iterations"]),
        )


def check_iterations(iterations: int) -> None:
    if iterations < MIN_ITERATIONS:
        raise CredentialError(f"Too few iterations: {iterations} (minimum {MIN_ITERATIONS})")
    if iterations > MAX_ITERATIONS:
        raise CredentialError(f"Too many iterations: {iterations} (maximum {MAX_ITERATIONS})")


def credential_from_salted_password(
    mechanism: ScramMechanism, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key")."""
    check_iterations(iterations)
    if not salt or not salted_password:
        raise CredentialError("Salt and salted password must not be empty")
    h = mechanism.hash_name
    client_key = hmac.digest(salted_password, b"Client Key", h)
    return ScramCredential(
        mechanism,
        salt,
        hashlib.new(h, client_key).digest(),
        hmac.digest(salted_password, b"Server Key", h),
        iterations,
    )


def credential_from_password(
    mechanism: ScramMechanism, password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    salt = salt if salt is not None else secrets.token_bytes(32)
    return credential_from_salted_password(
        mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations
    )


AUTH_FAILED = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"


class ScramAuthenticationError(Exception):
    """The exchange failed; the message is Kafka's and names no user or secret."""


class ScramServerExchange:
    """One SCRAM exchange: client-first -> server-first, client-final -> server-final; `username` once done."""

    def __init__(self, mechanism: ScramMechanism, lookup: Callable[[str], ScramCredential | None]) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._server: Any = None
        self.username: str | None = None
        self.complete = False

    def _fail(self) -> ScramAuthenticationError:
        return ScramAuthenticationError(AUTH_FAILED.format(self.mechanism.mechanism_name))

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        self.username = username.replace("=2C", ",").replace("=3D", "=")  # RFC 5802 saslname
        cred = self._lookup(self.username)
        if cred is None or cred.mechanism != self.mechanism:
            raise self._fail()
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    def evaluate(self, token: bytes) -> bytes:
        """The next server message for the client's `token`; raises ScramAuthenticationError on any failure."""
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail() from None
        try:
            if self._server is None:
                import scramp  # loaded at the first SCRAM exchange, not at every broker start

                m = scramp.ScramMechanism(self.mechanism.mechanism_name)
                self._server = m.make_server(self._auth_info)
                self._server.set_client_first(text)
                return str(self._server.get_server_first()).encode()
            if self.complete:
                raise self._fail()
            # Kafka's ScramSaslServer accepts a final nonce that ends with the server-first nonce (librdkafka 2.0.2,
            # Debian's kcat 1.7.1, repeats its client nonce in front of it); scramp wants the nonce itself
            nonce = self._server.nonce  # a str, or scramp's Nonce (1.5)
            if (final_nonce := _final_nonce(text, str(nonce))) != str(nonce):
                self._server.nonce = type(nonce)(final_nonce)
            self._server.set_client_final(text)
            final = str(self._server.get_server_final()).encode()
            self.complete = True
            return final
        except ScramAuthenticationError:
            raise
        except Exception:  # noqa: BLE001 - scramp raises its own and others on malformed input; all are a failure
            raise self._fail() from None


def _final_nonce(client_final: str, server_nonce: str) -> str:
    """The client-final message's nonce when it ends with the server-first nonce (Kafka's rule), else the latter;
    the proof is still checked over the message as sent."""
    for attr in client_final.split(","):
        if attr.startswith("r="):
            return attr[2:] if attr[2:].endswith(server_nonce) else server_nonce
    return server_nonce


__all__ = [
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "CredentialError",
    "ScramAuthenticationError",
    "ScramCredential",
    "ScramMechanism",
    "ScramServerExchange",
    "credential_from_password",
    "credential_from_salted_password",
    "salted_password",
]
