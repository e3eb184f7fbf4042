"""Client properties files (``--command-config``, ``--producer.config``, ...) and the connection security they
describe, read as Kafka's Java clients read them, for every way Strata's tools connect: the CLI's wire client (a TLS
context and a SASL exchange), kafka-python (the data-path commands) and librdkafka (the Spark pipeline).

Kafka's names: ``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config`` (PlainLoginModule /
ScramLoginModule ``username`` and ``password``; OAuthBearerLoginModule's unsecured
``unsecuredLoginStringClaim_sub``), ``ssl.truststore.*``, ``ssl.keystore.*``, ``ssl.key.password``,
``ssl.endpoint.identification.algorithm``; librdkafka's ``sasl.username``, ``sasl.password``, ``ssl.ca.location``,
``ssl.certificate.location``, ``ssl.key.location`` are taken too. Parsing lives here once; nothing here prints or
returns a secret in an error.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
OAUTH_UNSECURED_LIFETIME_S = 3600  # Kafka's unsecuredLoginLifetimeSeconds default

# Keys of the Java client (and librdkafka's spellings of the same) that this module interprets
SECURITY_KEYS = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.jaas.config",
        "sasl.username",
        "sasl.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
        "ssl.enabled.protocols",
        "ssl.protocol",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
    }
)
# Secret-bearing keys: their values are never echoed
SECRET_KEYS = frozenset(
    {
        "sasl.jaas.config",
        "sasl.password",
        "ssl.truststore.password",
        "ssl.keystore.password",
        "ssl.keystore.key",
        "ssl.key.password",
    }
)


class CommandConfigError(ValueError):
    """A client properties file or value that cannot be used; the message names the file and key, never a secret."""


# -- Java properties files ---------------------------------------------------------------------------------------
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 >= len(text):
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and i + 6 <= len(text):
            try:
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            except ValueError:
                pass
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _logical_lines(text: str) -> Iterable[str]:
    """Lines joined where one ends with an odd number of backslashes (java.util.Properties' continuation)."""
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip() if pending is not None else raw
        if pending is None and (not line.strip() or line.lstrip()[0] in "#!"):
            continue
        line = (pending or "") + line
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = line[:-1]
            continue
        pending = None
        yield line
    if pending is not None:
        yield pending


def parse_properties(text: str) -> list[tuple[str, str]]:
    """``key=value`` pairs of Java properties text: ``#``/``!`` comments, ``=``, ``:`` or blanks between key and
    value, backslash continuations and escapes."""
    out = []
    for line in _logical_lines(text):
        line = line.lstrip()
        i = 0
        while i < len(line) and line[i] not in "=: \t\f":
            i += 2 if line[i] == "\\" else 1
        key = line[:i]
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        out.append((_unescape(key), _unescape(rest).strip()))
    return out


def read_properties(path: str) -> list[tuple[str, str]]:
    """The pairs of a Java properties file (later ones win when a caller makes a dict of them)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise CommandConfigError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise CommandConfigError(f"cannot read {path}: not UTF-8 text") from None
    return parse_properties(text)


# -- what the properties describe --------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClientSecurity:
    """How a client connects: `protocol` (Kafka's security.protocol), SASL credentials and TLS settings.

    `ssl_props` keeps the Kafka-named ``ssl.*`` values (with librdkafka's file keys translated) for the TLS context;
    `oauth_claims` are the claims of an unsecured OAUTHBEARER token (Kafka's development login)."""

    protocol: str = "PLAINTEXT"
    mechanism: str = ""
    username: str = ""
    password: str = field(default="", repr=False)
    oauth_claims: dict[str, Any] = field(default_factory=dict, repr=False)
    ssl_props: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def check_hostname(self) -> bool:
        return self.ssl_props.get("ssl.endpoint.identification.algorithm", "https").strip().lower() == "https"

    def __repr__(self) -> str:  # never the credentials
        return f"ClientSecurity({self.protocol}, mechanism={self.mechanism or '-'}, user={self.username or '-'})"

    # -- the CLI's wire client -----------------------------------------------------------------------------------
    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for SSL / SASL_SSL (None otherwise): the truststore (or the system's CAs), the keystore
        for mTLS, host name checks unless ssl.endpoint.identification.algorithm is empty."""
        if not self.tls:
            return None
        from strata.broker.security.ssl_config import SslConfigError, SslSettings, build_client_context

        try:
            return build_client_context(SslSettings(self.ssl_props))
        except SslConfigError as e:
            raise CommandConfigError(str(e)) from None

    def sasl_client(self) -> SaslClient:
        return SaslClient(self)

    # -- kafka-python ------------------------------------------------------------------------------------------
    def kafka_python_config(self) -> dict[str, Any]:
        """kafka-python keyword arguments (its own TLS context built from the same settings)."""
        out: dict[str, Any] = {"security_protocol": self.protocol}
        ctx = self.ssl_context()
        if ctx is not None:
            out["ssl_context"] = ctx
            out["ssl_check_hostname"] = self.check_hostname
        if self.sasl:
            out["sasl_mechanism"] = self.mechanism
            if self.mechanism == "OAUTHBEARER":
                out["sasl_oauth_token_provider"] = _kafka_python_token_provider(self)
            else:
                out["sasl_plain_username"], out["sasl_plain_password"] = self.username, self.password
        return out

    # -- librdkafka (confluent-kafka) ----------------------------------------------------------------------------
    def librdkafka_config(self) -> dict[str, str]:
        """librdkafka properties for the same connection."""
        out = {"security.protocol": self.protocol.lower()}
        if self.tls:
            out.update(_librdkafka_ssl(self.ssl_props))
        if self.sasl:
            out["sasl.mechanism"] = self.mechanism
            if self.mechanism == "OAUTHBEARER":
                c = self.oauth_claims
                conf = f"principal={c['sub']} lifeSeconds={int(c['exp'] - c['iat'])}"
                if c.get("scope"):
                    conf += f" scope={c['scope']}"
                out["sasl.oauthbearer.config"] = conf
                out["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
            else:
                out["sasl.username"], out["sasl.password"] = self.username, self.password
        return out


def unsecured_jws(claims: Mapping[str, Any], now: float | None = None) -> str:
    """An unsecured JWS (alg none) as Kafka's OAuthBearerUnsecuredLoginCallbackHandler makes: iat/exp renewed."""
    now = time.time() if now is None else now
    life = int(claims["exp"] - claims["iat"])
    body = {**claims, "iat": int(now), "exp": int(now) + life}

    def b64(d: Mapping[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d, separators=(",", ":")).encode()).rstrip(b"=").decode()

    return f"{b64({'alg': 'none'})}.{b64(body)}."


def _kafka_python_token_provider(sec: ClientSecurity) -> Any:
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class UnsecuredTokenProvider(AbstractTokenProvider):
        def token(self) -> str:
            return unsecured_jws(sec.oauth_claims)

    return UnsecuredTokenProvider()


def _librdkafka_ssl(p: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    if not p.get("ssl.endpoint.identification.algorithm", "https").strip():
        out["ssl.endpoint.identification.algorithm"] = "none"
    else:
        out["ssl.endpoint.identification.algorithm"] = "https"
    trust_type = p.get("ssl.truststore.type", "PEM").upper()
    if p.get("ssl.truststore.certificates"):
        out["ssl.ca.pem"] = p["ssl.truststore.certificates"]
    elif p.get("ssl.truststore.location"):
        if trust_type == "PKCS12":
            out["ssl.ca.pem"] = _pkcs12_certificates(p["ssl.truststore.location"], p.get("ssl.truststore.password", ""))
        else:
            out["ssl.ca.location"] = p["ssl.truststore.location"]
    key_type = p.get("ssl.keystore.type", "PEM").upper()
    if p.get("ssl.keystore.key"):
        out["ssl.key.pem"] = p["ssl.keystore.key"]
        out["ssl.certificate.pem"] = p.get("ssl.keystore.certificate.chain", "")
    elif p.get("ssl.keystore.location"):
        if key_type == "PKCS12":
            out["ssl.keystore.location"] = p["ssl.keystore.location"]
            out["ssl.keystore.password"] = p.get("ssl.keystore.password", "")
        else:  # a PEM keystore holds the key and the chain: OpenSSL reads each from the same file
            out["ssl.certificate.location"] = out["ssl.key.location"] = p["ssl.keystore.location"]
    if p.get("ssl.key.password"):
        out["ssl.key.password"] = p["ssl.key.password"]
    return out


def _pkcs12_certificates(path: str, password: str) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        _, cert, extra = pkcs12.load_key_and_certificates(Path(path).read_bytes(), password.encode() or None)
    except (ValueError, OSError) as e:
        why = type(e).__name__
        raise CommandConfigError(f"ssl.truststore.location: cannot read PKCS12 file {path}: {why}") from None
    certs = ([cert] if cert else []) + list(extra)
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


def _jaas_options(text: str, mechanism: str) -> dict[str, str]:
    from strata.broker.security.jaas import JaasConfigError, parse_jaas_config

    try:
        modules = parse_jaas_config(text)
    except JaasConfigError as e:
        raise CommandConfigError(f"sasl.jaas.config: {e}") from None
    expected = {"PLAIN": "PlainLoginModule", "OAUTHBEARER": "OAuthBearerLoginModule"}.get(mechanism, "ScramLoginModule")
    module = modules[0]
    if module.class_name.rsplit(".", 1)[-1] != expected:
        raise CommandConfigError(
            f"sasl.jaas.config: sasl.mechanism {mechanism} needs {expected}, not {module.class_name.rsplit('.', 1)[-1]}"
        )
    return module.options


def _detect_store_type(p: dict[str, str], kind: str) -> None:
    """Kafka's default store type is JKS, which Python cannot read: a file whose type is not given is taken for PEM
    when it is PEM text, PKCS12 otherwise, and a real JKS file is refused with the way out."""
    location = p.get(f"ssl.{kind}.location")
    if not location or f"ssl.{kind}.type" in p:
        return
    try:
        head = Path(location).read_bytes()[:4096]
    except OSError as e:
        raise CommandConfigError(f"ssl.{kind}.location: cannot read {location}: {e.strerror or e}") from None
    if head[:4] == b"\xfe\xed\xfe\xed":
        raise CommandConfigError(
            f"ssl.{kind}.location: {location} is a JKS file, which cannot be read here; convert it with "
            "keytool -importkeystore -deststoretype PKCS12 and set ssl." + kind + ".type=PKCS12, or use PEM"
        )
    p[f"ssl.{kind}.type"] = "PEM" if b"-----BEGIN" in head else "PKCS12"


def client_security(props: Mapping[str, str], where: str = "client config") -> ClientSecurity:
    """The ClientSecurity of Kafka-named client properties (other keys are ignored). `where` prefixes errors."""
    try:
        return _client_security(props)
    except CommandConfigError as e:
        raise CommandConfigError(f"{where}: {e}") from None


def _client_security(props: Mapping[str, str]) -> ClientSecurity:
    p = {k: str(v).strip() for k, v in props.items() if k in SECURITY_KEYS}
    protocol = p.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise CommandConfigError(f"security.protocol: {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    # librdkafka's file names for Kafka's PEM settings
    if "ssl.ca.location" in p and "ssl.truststore.location" not in p:
        p["ssl.truststore.location"], p["ssl.truststore.type"] = p["ssl.ca.location"], "PEM"
    if "ssl.certificate.location" in p and "ssl.keystore.location" not in p:
        p["ssl.keystore.location"], p["ssl.keystore.type"] = p["ssl.certificate.location"], "PEM"
    ssl_props = {k: v for k, v in p.items() if k.startswith("ssl.")}
    if protocol in ("SSL", "SASL_SSL"):
        for kind in ("truststore", "keystore"):
            _detect_store_type(ssl_props, kind)
        if "ssl.key.location" in ssl_props:  # a separate key file: one PEM keystore for Python's ssl module
            ssl_props["ssl.keystore.key"] = _read_text(ssl_props["ssl.key.location"], "ssl.key.location")
            ssl_props["ssl.keystore.certificate.chain"] = _read_text(
                ssl_props.pop("ssl.keystore.location", ""), "ssl.certificate.location"
            )
    if not protocol.startswith("SASL_"):
        return ClientSecurity(protocol, ssl_props=ssl_props)
    mechanism = p.get("sasl.mechanism", "GSSAPI").upper()
    if mechanism not in MECHANISMS:
        raise CommandConfigError(f"sasl.mechanism: {mechanism} is not supported (supported: {', '.join(MECHANISMS)})")
    options = _jaas_options(p["sasl.jaas.config"], mechanism) if p.get("sasl.jaas.config") else {}
    if mechanism == "OAUTHBEARER":
        return ClientSecurity(protocol, mechanism, oauth_claims=_oauth_claims(options), ssl_props=ssl_props)
    username = options.get("username", p.get("sasl.username", ""))
    password = options.get("password", p.get("sasl.password", ""))
    if not username or not password:
        raise CommandConfigError(
            f"sasl.mechanism {mechanism} needs a username and a password: sasl.jaas.config with "
            f'{"PlainLoginModule" if mechanism == "PLAIN" else "ScramLoginModule"} required username="..." '
            'password="..."; (or sasl.username and sasl.password)'
        )
    return ClientSecurity(protocol, mechanism, username, password, ssl_props=ssl_props)


def _oauth_claims(options: Mapping[str, str]) -> dict[str, Any]:
    """Claims of Kafka's unsecured login (OAuthBearerUnsecuredLoginCallbackHandler's options)."""
    sub = options.get("unsecuredLoginStringClaim_sub")
    if not sub:
        raise CommandConfigError(
            "sasl.mechanism OAUTHBEARER: only Kafka's unsecured login is supported here: sasl.jaas.config with "
            'OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="<principal>";'
        )
    try:
        life = int(options.get("unsecuredLoginLifetimeSeconds", OAUTH_UNSECURED_LIFETIME_S))
    except ValueError:
        raise CommandConfigError("sasl.jaas.config: unsecuredLoginLifetimeSeconds is not a number") from None
    claims: dict[str, Any] = {"sub": sub, "iat": 0, "exp": life}
    scope = options.get("unsecuredLoginStringClaim_scope") or options.get("unsecuredLoginListClaim_scope")
    if scope:
        claims["scope"] = scope.strip(",").replace(",", " ")
    return claims


def _read_text(path: str, key: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CommandConfigError(f"{key}: cannot read {path}: {getattr(e, 'strerror', None) or e}") from None


# -- the SASL exchange (no I/O: the wire client sends what this returns) -----------------------------------------
class SaslAuthenticationFailed(Exception):
    """The exchange cannot go on (a bad server message); the message holds no secret."""


class SaslClient:
    """The client side of PLAIN, SCRAM-SHA-256/512 (scramp) and unsecured OAUTHBEARER: `first()` is the initial
    token, `respond(server_bytes)` the next one (None when the exchange is over)."""

    def __init__(self, sec: ClientSecurity) -> None:
        self.sec = sec
        self._step = 0
        self._scram: Any = None

    def first(self) -> bytes:
        sec = self.sec
        if sec.mechanism == "PLAIN":
            return b"\0" + sec.username.encode() + b"\0" + sec.password.encode()
        if sec.mechanism == "OAUTHBEARER":
            return f"n,,\x01auth=Bearer {unsecured_jws(sec.oauth_claims)}\x01\x01".encode()
        from scramp import ScramClient

        self._scram = ScramClient([sec.mechanism], sec.username, sec.password)
        return str(self._scram.get_client_first()).encode()

    def respond(self, server: bytes) -> bytes | None:
        """The next token for the server's `server` bytes; None when nothing more is to be sent."""
        self._step += 1
        if self.sec.mechanism == "PLAIN":
            return None
        if self.sec.mechanism == "OAUTHBEARER":
            return b"\x01" if server else None  # a JSON error challenge is acknowledged; the server then fails
        from scramp import ScramException

        try:
            if self._step == 1:
                self._scram.set_server_first(server.decode())
                return str(self._scram.get_client_final()).encode()
            self._scram.set_server_final(server.decode())
            return None
        except (ScramException, UnicodeDecodeError) as e:
            raise SaslAuthenticationFailed(f"SCRAM exchange failed: {type(e).__name__}") from None


# -- the command line ---------------------------------------------------------------------------------------------
_process_security = ClientSecurity()


def load_command_config(path: str) -> ClientSecurity:
    """The security of a ``--command-config`` file (its other keys are the Java admin client's: not used here)."""
    return client_security(dict(read_properties(path)), path)


def use_for_this_process(security: ClientSecurity) -> None:
    """Make `security` (the command's --command-config) how every AdminClient of this CLI process connects, unless
    given another: one command, one identity, for its own connections and those to other brokers alike."""
    global _process_security
    _process_security = security


def process_security() -> ClientSecurity:
    return _process_security


def add_command_config_option(p: Any, default: Any = None) -> None:
    """``--command-config FILE`` as Kafka's tools spell it (`default` SUPPRESS on the repeats of an action)."""
    p.add_argument(
        "--command-config",
        metavar="FILE",
        default=default,
        help="client properties file: security.protocol, sasl.mechanism, sasl.jaas.config, ssl.* (as Kafka's tools)",
    )


__all__ = [
    "MECHANISMS",
    "PROTOCOLS",
    "SECRET_KEYS",
    "SECURITY_KEYS",
    "ClientSecurity",
    "CommandConfigError",
    "SaslAuthenticationFailed",
    "SaslClient",
    "add_command_config_option",
    "client_security",
    "load_command_config",
    "process_security",
    "parse_properties",
    "read_properties",
    "unsecured_jws",
    "use_for_this_process",
]
