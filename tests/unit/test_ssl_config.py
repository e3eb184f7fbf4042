"""TLS settings under Kafka's property names, over real TLS handshakes on loopback (certificates made with trustme):
PEM and PKCS12 keystores, PEM-in-config, mTLS, protocol and cipher limits, and certificate reload on file change."""

from __future__ import annotations

import asyncio
import os
import ssl
from pathlib import Path

import pytest
import trustme

from strata.broker.security.ssl_config import (
    ReloadingServerContext,
    SslConfigError,
    SslSettings,
    build_server_context,
    openssl_cipher_names,
)
from strata.broker.security.ssl_principal import SslPrincipalMapper, certificate_dn


def client_ctx(ca: trustme.CA, cert: trustme.LeafCert | None = None, max_tls12: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    if cert is not None:
        cert.configure_cert(ctx)
    if max_tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    return ctx


async def handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> str | None:
    """The client certificate's DN the server saw ('' if none); raises on a failed handshake."""
    seen: list[str] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        seen.append(certificate_dn(der) if der else "")
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server)
    port = srv.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost"), 10
        )
        data = await asyncio.wait_for(reader.read(2), 10)
        writer.close()
        if data != b"ok":
            raise ConnectionError("the server closed the connection")
        return seen[0]
    finally:
        srv.close()


def pem_keystore(tmp: Path, cert: trustme.LeafCert, name: str = "server.pem") -> Path:
    path = tmp / name
    cert.private_key_and_cert_chain_pem.write_to_path(str(path))
    return path


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


def test_pem_keystore_and_plain_tls(tmp_path: Path, ca: trustme.CA) -> None:
    ks = pem_keystore(tmp_path, ca.issue_cert("localhost"))
    ctx = build_server_context(SslSettings({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(ks)}))
    assert asyncio.run(handshake(ctx, client_ctx(ca))) == ""
    with pytest.raises(ssl.SSLError):
        asyncio.run(handshake(ctx, client_ctx(trustme.CA())))  # a client that does not trust our CA


def test_mtls_required_and_principal_mapping(tmp_path: Path, ca: trustme.CA) -> None:
    ks = pem_keystore(tmp_path, ca.issue_cert("localhost"))
    trust = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(trust))
    settings = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(ks),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(trust),
        "ssl.client.auth": "required",
    }
    ctx = build_server_context(SslSettings(settings))
    client_cert = ca.issue_cert("alice@example.com", common_name="alice")
    dn = asyncio.run(handshake(ctx, client_ctx(ca, client_cert)))
    assert dn is not None and dn.startswith("CN=alice")
    assert SslPrincipalMapper("RULE:^CN=([^,]*).*$/$1/").name(dn) == "alice"
    with pytest.raises((ssl.SSLError, ConnectionError)):
        asyncio.run(handshake(ctx, client_ctx(ca)))  # no client certificate
    requested = build_server_context(SslSettings({**settings, "ssl.client.auth": "requested"}))
    assert asyncio.run(handshake(requested, client_ctx(ca))) == ""


def test_pem_in_config_and_pkcs12(tmp_path: Path, ca: trustme.CA) -> None:
    cert = ca.issue_cert("localhost")
    inline = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.key": cert.private_key_pem.bytes().decode(),
        "ssl.keystore.certificate.chain": "".join(b.bytes().decode() for b in cert.cert_chain_pems),
    }
    assert asyncio.run(handshake(build_server_context(SslSettings(inline)), client_ctx(ca))) == ""

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12

    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    leaf = x509.load_pem_x509_certificate(cert.cert_chain_pems[0].bytes())
    p12 = tmp_path / "server.p12"
    p12.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"server",
            key,
            leaf,
            None,
            serialization.BestAvailableEncryption(b"changeit"),
        )
    )
    settings = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(p12), "ssl.keystore.password": "changeit"}
    assert asyncio.run(handshake(build_server_context(SslSettings(settings)), client_ctx(ca))) == ""
    with pytest.raises(SslConfigError, match="cannot read PKCS12") as e:
        build_server_context(SslSettings({**settings, "ssl.keystore.password": "wrong-secret"}))
    assert "wrong-secret" not in str(e.value)


def test_protocol_and_cipher_limits(tmp_path: Path, ca: trustme.CA) -> None:
    ks = pem_keystore(tmp_path, ca.issue_cert("localhost"))
    base = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(ks)}
    only13 = build_server_context(SslSettings({**base, "ssl.enabled.protocols": "TLSv1.3"}))
    with pytest.raises((ssl.SSLError, ConnectionError)):  # refused by the server: an alert or a reset
        asyncio.run(handshake(only13, client_ctx(ca, max_tls12=True)))
    assert openssl_cipher_names(["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"]) == (
        ["ECDHE-RSA-AES128-GCM-SHA256"],
        ["TLS_AES_128_GCM_SHA256"],
    )
    one = build_server_context(
        SslSettings(
            {**base, "ssl.enabled.protocols": "TLSv1.2", "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}
        )
    )
    assert asyncio.run(handshake(one, client_ctx(ca))) == ""
    with pytest.raises(SslConfigError, match="TLS_NOPE"):
        build_server_context(SslSettings({**base, "ssl.cipher.suites": "TLS_NOPE"}))


@pytest.mark.parametrize(
    "settings, message",
    [
        ({}, "ssl.keystore.location"),
        ({"ssl.keystore.location": "/x.jks"}, "JKS is not supported"),
        ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/nonexistent.pem"}, "cannot read"),
        ({"ssl.keystore.type": "PEM", "ssl.keystore.key": "x"}, "must be set together"),
        ({"ssl.enabled.protocols": "SSLv3"}, "ssl.enabled.protocols"),
        ({"ssl.client.auth": "always"}, "ssl.client.auth"),
    ],
)
def test_bad_settings_name_the_setting(settings: dict[str, str], message: str) -> None:
    with pytest.raises(SslConfigError, match=message):
        build_server_context(SslSettings(settings))


def test_keystore_reload_without_restart(tmp_path: Path, ca: trustme.CA) -> None:
    ks = pem_keystore(tmp_path, ca.issue_cert("localhost"))
    reloads: list[bool] = []
    ctx = ReloadingServerContext(
        SslSettings({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(ks)}), on_reload=reloads.append
    )
    assert asyncio.run(handshake(ctx.context, client_ctx(ca))) == ""
    new_ca = trustme.CA()
    pem_keystore(tmp_path, new_ca.issue_cert("localhost"))
    st = ks.stat()
    os.utime(ks, (st.st_atime + 5, st.st_mtime + 5))
    assert asyncio.run(handshake(ctx.context, client_ctx(new_ca))) == ""  # the same server object, new certificate
    with pytest.raises(ssl.SSLError):
        asyncio.run(handshake(ctx.context, client_ctx(ca)))
    assert reloads == [True]
    ks.write_text("not a key")  # a broken file keeps the previous certificate
    os.utime(ks, (st.st_atime + 10, st.st_mtime + 10))
    assert asyncio.run(handshake(ctx.context, client_ctx(new_ca))) == ""
    assert reloads == [True, False]
