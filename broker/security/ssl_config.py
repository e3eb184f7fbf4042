"""TLS for a listener from Kafka's `ssl.*` properties, with certificate reload on file change.

Supported (Kafka's names and defaults):
- keystore: `ssl.keystore.type` PEM (`ssl.keystore.location`: a file holding the private key and its certificate
  chain, `ssl.key.password` for an encrypted key) or PKCS12 (`ssl.keystore.password`), or the PEM-in-config keys
  `ssl.keystore.key` + `ssl.keystore.certificate.chain`; JKS cannot be read here and is refused with a clear error;
- truststore: `ssl.truststore.type` PEM or PKCS12 at `ssl.truststore.location`, or `ssl.truststore.certificates`;
- `ssl.client.auth` none | requested | required (mTLS), `ssl.enabled.protocols` (TLSv1.2, TLSv1.3),
  `ssl.cipher.suites` (Kafka's IANA names such as TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, or OpenSSL names; TLS 1.3
  suites cannot be restricted by Python's ssl module and are always enabled with TLSv1.3).

Reload: `ReloadingServerContext` serves every handshake from the newest context (OpenSSL's servername callback is
called for every ClientHello and may swap the context), rebuilt when a keystore or truststore file's mtime changes
— Kafka's dynamic keystore/truststore update without a restart. A new file that does not load keeps the old one.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger("strata.security.ssl")

_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class SslConfigError(ValueError):
    """A bad `ssl.*` setting; the message names the setting, never a password or key."""


def _iana_name(c: dict[str, object]) -> str | None:
    """Kafka (Java) uses IANA suite names; OpenSSL its own. Derived from the fields OpenSSL reports."""
    name = str(c["name"])
    if c.get("protocol") == "TLSv1.3":
        return name
    kx = {"kx-ecdhe": "ECDHE", "kx-dhe": "DHE", "kx-rsa": "RSA"}.get(str(c.get("kea")))
    auth = {"auth-rsa": "RSA", "auth-ecdsa": "ECDSA"}.get(str(c.get("auth")))
    sym = str(c.get("symmetric") or "").upper().replace("-", "_")
    if kx is None or auth is None or not sym:
        return None
    kx_auth = "RSA" if kx == "RSA" else f"{kx}_{auth}"
    last = name.rsplit("-", 1)[-1]
    mac = last if last.startswith("SHA") else "SHA256" if "POLY1305" in sym else None
    return f"TLS_{kx_auth}_WITH_{sym}_{mac}" if mac else None


def openssl_cipher_names(suites: list[str]) -> tuple[list[str], list[str]]:
    """(OpenSSL names of the TLS 1.2 suites, TLS 1.3 suites) for Kafka's `ssl.cipher.suites`."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    probe.set_ciphers("ALL:@SECLEVEL=0")
    table: dict[str, str] = {}
    tls13: set[str] = set()
    for c in probe.get_ciphers():
        iana = _iana_name(c)  # type: ignore[arg-type]
        if c.get("protocol") == "TLSv1.3":
            tls13.add(str(c["name"]))
        elif iana:
            table[iana] = str(c["name"])
        table.setdefault(str(c["name"]), str(c["name"]))
    tls12, v13 = [], []
    for s in suites:
        if s in tls13:
            v13.append(s)
        elif s in table:
            tls12.append(table[s])
        else:
            raise SslConfigError(f"ssl.cipher.suites: unknown or unsupported cipher suite {s}")
    return tls12, v13


@dataclass(frozen=True)
class SslSettings:
    """One listener's `ssl.*` values (already resolved with `listener.name.<l>.` overrides)."""

    props: Mapping[str, str]

    def get(self, key: str, default: str = "") -> str:
        v = self.props.get(key)
        return default if v is None else str(v).strip()

    def watched_files(self) -> list[Path]:
        return [Path(p) for p in (self.get("ssl.keystore.location"), self.get("ssl.truststore.location")) if p]


def _write_private(dir_: str, name: str, data: bytes) -> str:
    path = os.path.join(dir_, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def _pkcs12_to_pem(path: str, password: str, setting: str) -> tuple[bytes, bytes, list[bytes]]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        key, cert, extra = pkcs12.load_key_and_certificates(Path(path).read_bytes(), password.encode() or None)
    except (ValueError, OSError) as e:
        raise SslConfigError(f"{setting}: cannot read PKCS12 file {path}: {type(e).__name__}") from None
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()) if key else b""
    chain = ([cert.public_bytes(pem)] if cert else []) + [c.public_bytes(pem) for c in extra]
    return key_pem, b"".join(chain), [c.public_bytes(pem) for c in extra]


def _load_keystore(ctx: ssl.SSLContext, s: SslSettings, tmp: str) -> None:
    kind = s.get("ssl.keystore.type", "JKS").upper()
    location, key_password = s.get("ssl.keystore.location"), s.get("ssl.key.password") or None
    inline_key, inline_chain = s.get("ssl.keystore.key"), s.get("ssl.keystore.certificate.chain")
    try:
        if inline_key or inline_chain:
            if not (inline_key and inline_chain):
                raise SslConfigError("ssl.keystore.key and ssl.keystore.certificate.chain must be set together")
            path = _write_private(tmp, "keystore.pem", inline_key.encode() + b"\n" + inline_chain.encode() + b"\n")
            ctx.load_cert_chain(path, password=key_password)
        elif not location:
            raise SslConfigError("ssl.keystore.location (or ssl.keystore.key) is required for an SSL listener")
        elif kind == "PEM":
            ctx.load_cert_chain(location, password=key_password)
        elif kind == "PKCS12":
            key, chain, _ = _pkcs12_to_pem(location, s.get("ssl.keystore.password"), "ssl.keystore.location")
            ctx.load_cert_chain(_write_private(tmp, "keystore.pem", key + chain))
        else:
            raise SslConfigError(f"ssl.keystore.type {kind} is not supported (use PEM or PKCS12)")
    except ssl.SSLError as e:
        raise SslConfigError(f"ssl.keystore: cannot load the key and certificate: {e.reason or e}") from None
    except OSError as e:
        raise SslConfigError(f"ssl.keystore.location: cannot read {location}: {e.strerror}") from None


def _load_truststore(ctx: ssl.SSLContext, s: SslSettings, tmp: str) -> bool:
    kind = s.get("ssl.truststore.type", "JKS").upper()
    location, inline = s.get("ssl.truststore.location"), s.get("ssl.truststore.certificates")
    try:
        if inline:
            ctx.load_verify_locations(cadata=inline)
        elif not location:
            return False
        elif kind == "PEM":
            ctx.load_verify_locations(cafile=location)
        elif kind == "PKCS12":
            _, chain, extra = _pkcs12_to_pem(location, s.get("ssl.truststore.password"), "ssl.truststore.location")
            ctx.load_verify_locations(cadata=(b"".join(extra) or chain).decode())
        else:
            raise SslConfigError(f"ssl.truststore.type {kind} is not supported (use PEM or PKCS12)")
    except ssl.SSLError as e:
        raise SslConfigError(f"ssl.truststore: cannot load the certificates: {e.reason or e}") from None
    except OSError as e:
        raise SslConfigError(f"ssl.truststore.location: cannot read {location}: {e.strerror}") from None
    return True


def _protocols(ctx: ssl.SSLContext, s: SslSettings) -> None:
    names = [p.strip() for p in s.get("ssl.enabled.protocols", "TLSv1.2,TLSv1.3").split(",") if p.strip()]
    unknown = [p for p in names if p not in _PROTOCOLS]
    if unknown or not names:
        raise SslConfigError(f"ssl.enabled.protocols: unsupported protocol(s) {', '.join(unknown) or '(none)'}")
    versions = sorted(_PROTOCOLS[p] for p in names)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]


def build_server_context(s: SslSettings) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols(ctx, s)
    suites = [c.strip() for c in s.get("ssl.cipher.suites").split(",") if c.strip()]
    if suites:
        tls12, _ = openssl_cipher_names(suites)
        if tls12:
            ctx.set_ciphers(":".join(tls12))
    auth = s.get("ssl.client.auth", "none").lower()
    if auth not in _CLIENT_AUTH:
        raise SslConfigError(f"ssl.client.auth: {auth!r} is not one of none, requested, required")
    with tempfile.TemporaryDirectory(prefix="strata-ssl-") as tmp:
        _load_keystore(ctx, s, tmp)
        has_trust = _load_truststore(ctx, s, tmp)
    if auth != "none" and not has_trust:
        raise SslConfigError("ssl.client.auth requires a truststore (ssl.truststore.location)")
    ctx.verify_mode = _CLIENT_AUTH[auth]
    return ctx


def build_client_context(s: SslSettings) -> ssl.SSLContext:
    """For inter-broker connections: verify the peer against the truststore; present our keystore if any."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _protocols(ctx, s)
    ctx.check_hostname = s.get("ssl.endpoint.identification.algorithm", "https").lower() == "https"
    with tempfile.TemporaryDirectory(prefix="strata-ssl-") as tmp:
        if s.get("ssl.keystore.location") or s.get("ssl.keystore.key"):
            _load_keystore(ctx, s, tmp)
        if not _load_truststore(ctx, s, tmp):
            ctx.load_default_certs()
    return ctx


class ReloadingServerContext:
    """The context to give `asyncio.start_server`: each handshake is served by the newest build (see module doc)."""

    def __init__(self, settings: SslSettings, on_reload: Callable[[bool], None] | None = None) -> None:
        self.settings = settings
        self.on_reload = on_reload
        self.current = build_server_context(settings)
        self._stamp = self._mtimes()
        self.context = build_server_context(settings)  # the one the server holds; it only dispatches
        self.context.sni_callback = self._select

    def _mtimes(self) -> tuple[float, ...]:
        out = []
        for p in self.settings.watched_files():
            try:
                out.append(p.stat().st_mtime)
            except OSError:
                out.append(-1.0)
        return tuple(out)

    def maybe_reload(self) -> bool:
        stamp = self._mtimes()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            self.current = build_server_context(self.settings)
        except SslConfigError as e:
            log.error("keeping the previous TLS certificates: the changed files do not load", error=str(e))
            if self.on_reload:
                self.on_reload(False)
            return False
        log.info("TLS keystore/truststore reloaded", files=[str(p) for p in self.settings.watched_files()])
        if self.on_reload:
            self.on_reload(True)
        return True

    def _select(self, sslobj: ssl.SSLObject, server_name: str | None, ctx: ssl.SSLContext) -> None:
        self.maybe_reload()
        sslobj.context = self.current


__all__ = [
    "ReloadingServerContext",
    "SslConfigError",
    "SslSettings",
    "build_client_context",
    "build_server_context",
    "openssl_cipher_names",
]
