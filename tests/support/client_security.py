"""Client credentials of secured test brokers, looked up by address, so that a test written against a PLAINTEXT
cluster runs unchanged against a SASL_SSL one (`tests/cluster/conftest.py`'s `cluster_profile` marker).

A secured cluster registers each client address (`host:port`) with its `ClientSecurity`; the helpers that build a
client from a bootstrap string add what is registered: `librdkafka(bootstrap)` for confluent-kafka configs
(StrataCluster.create_topic, tests/cluster/workload.py), `secure(sock, address)` for `WireClient`'s raw sockets
(TLS, then SASL/PLAIN with a v1 SaslHandshake and a v1 SaslAuthenticate, as Kafka's clients do). Unregistered
addresses are left as they are.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_SASL_HANDSHAKE, _SASL_AUTHENTICATE = 17, 36


@dataclass(frozen=True)
class ClientSecurity:
    """SASL_SSL with PLAIN: the CA that signed the brokers' certificates and one user's credentials."""

    ca: Path
    username: str
    password: str
    mechanism: str = "PLAIN"

    def librdkafka(self) -> dict[str, str]:
        return {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.ca),
            "sasl.mechanism": self.mechanism,
            "sasl.username": self.username,
            "sasl.password": self.password,
        }


_BY_ADDRESS: dict[str, ClientSecurity] = {}


def register(address: str, security: ClientSecurity) -> None:
    _BY_ADDRESS[address] = security


def unregister(addresses: Iterable[str]) -> None:
    for a in addresses:
        _BY_ADDRESS.pop(a, None)


def lookup(bootstrap: str) -> ClientSecurity | None:
    """The settings of the first registered address of a bootstrap list."""
    return next((_BY_ADDRESS[a] for a in bootstrap.split(",") if a in _BY_ADDRESS), None)


def librdkafka(bootstrap: str) -> dict[str, str]:
    """librdkafka properties for `bootstrap`: empty unless it is a registered secured address."""
    sec = lookup(bootstrap)
    return sec.librdkafka() if sec is not None else {}


def secure(sock: socket.socket, address: str) -> socket.socket:
    """`sock`, connected to `address`, wrapped in TLS and authenticated when the address is registered."""
    sec = _BY_ADDRESS.get(address)
    if sec is None:
        return sock
    if sec.mechanism != "PLAIN":
        raise ValueError(f"raw test clients speak SASL/PLAIN only, not {sec.mechanism}")
    try:
        ctx = ssl.create_default_context(cafile=str(sec.ca))
        tls = ctx.wrap_socket(sock, server_hostname=address.rsplit(":", 1)[0])
    except BaseException:
        sock.close()
        raise
    try:
        mech = sec.mechanism.encode()
        _exchange(tls, _SASL_HANDSHAKE, struct.pack(">h", len(mech)) + mech)
        token = b"\0" + sec.username.encode() + b"\0" + sec.password.encode()
        _exchange(tls, _SASL_AUTHENTICATE, struct.pack(">i", len(token)) + token)
    except BaseException:
        tls.close()
        raise
    return tls


def _exchange(sock: ssl.SSLSocket, api_key: int, body: bytes) -> None:
    """One v1 request (header v1: no tagged fields) whose answer starts with an error code that must be 0."""
    client_id = b"strata-it-raw"
    msg = struct.pack(">hhih", api_key, 1, api_key, len(client_id)) + client_id + body
    sock.sendall(struct.pack(">i", len(msg)) + msg)
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    answer = recv_exact(sock, size)
    (error,) = struct.unpack_from(">h", answer, 4)
    if error:
        raise ConnectionError(f"SASL request {api_key} failed with error {error}")


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly n bytes from a blocking socket (plain or TLS); ConnectionError if it closes first."""
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


__all__ = ["ClientSecurity", "librdkafka", "lookup", "recv_exact", "register", "secure", "unregister"]
