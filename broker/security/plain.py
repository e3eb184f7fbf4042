"""SASL/PLAIN (RFC 4616) on the server, as Kafka's PlainServerCallbackHandler does it: the users and passwords are
the `user_<name>="<password>"` options of the listener's PlainLoginModule JAAS entry, or a pluggable callback.

The client's one message is `authzid NUL authcid NUL password`; an authzid other than empty or the username is
refused, as in Kafka. Passwords are compared in constant time and never logged or echoed.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping

from .jaas import LoginModule

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"

PasswordCheck = Callable[[str, bytes], bool]  # (username, password) -> authenticated?


class PlainAuthenticationError(Exception):
    pass


def jaas_users(module: LoginModule) -> dict[str, bytes]:
    return {k[len("user_") :]: v.encode() for k, v in module.options.items() if k.startswith("user_")}


def password_check_from_users(users: Mapping[str, bytes]) -> PasswordCheck:
    def check(username: str, password: bytes) -> bool:
        expected = users.get(username)
        # compare against something even for an unknown user, so timing does not tell which users exist
        ok = hmac.compare_digest(expected if expected is not None else b"\0" * 32, password)
        return expected is not None and ok

    return check


def authenticate_plain(token: bytes, check: PasswordCheck) -> str:
    """The authenticated username, or PlainAuthenticationError with Kafka's message."""
    parts = token.split(b"\0")
    if len(parts) != 3:
        raise PlainAuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens, got " + str(len(parts)))
    authzid, authcid, password = parts
    try:
        username, requested = authcid.decode("utf-8"), authzid.decode("utf-8")
    except UnicodeDecodeError:
        raise PlainAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
    if not username:
        raise PlainAuthenticationError("Authentication failed: username not specified")
    if not password:
        raise PlainAuthenticationError("Authentication failed: password not specified")
    if not check(username, password):
        raise PlainAuthenticationError("Authentication failed: Invalid username or password")
    if requested and requested != username:
        raise PlainAuthenticationError(
            "Authentication failed: Client requested an authorization id that is different from username"
        )
    return username


__all__ = [
    "PLAIN_LOGIN_MODULE",
    "PasswordCheck",
    "PlainAuthenticationError",
    "authenticate_plain",
    "jaas_users",
    "password_check_from_users",
]
