"""Listener security settings under Kafka's names: which protocol each listener speaks, and the `ssl.*` / `sasl.*`
values that apply to one listener after its `listener.name.<listener>.` overrides.

Kafka resolves a listener's security setting `k` as `listener.name.<listener lower case>.k` when set, else the
broker-wide `k`; a SASL mechanism's JAAS entry as `listener.name.<listener>.<mechanism lower case>.sasl.jaas.config`,
else the broker-wide `sasl.jaas.config`. Only the resolution lives here; `strata.broker.security` builds the TLS
contexts and SASL servers from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .defs import ConfigDef, ConfigError, at_least
from .defs import ConfigType as T

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

SECURITY_DEFS: list[ConfigDef] = [
    ConfigDef("sasl.enabled.mechanisms", T.LIST, ["GSSAPI"], "SASL mechanisms a SASL listener accepts"),
    ConfigDef("sasl.mechanism.inter.broker.protocol", T.STRING, "GSSAPI", "SASL mechanism of inter-broker connections"),
    ConfigDef("sasl.jaas.config", T.PASSWORD, None, "JAAS login module entry (users, client credentials)"),
    ConfigDef(
        "connections.max.reauth.ms",
        T.LONG,
        0,
        "SASL session lifetime (KIP-368): a client re-authenticates before it; 0: sessions never expire",
        at_least(0),
    ),
    ConfigDef("sasl.server.max.receive.size", T.INT, 524288, "largest frame before authentication", at_least(1)),
    ConfigDef("ssl.principal.mapping.rules", T.STRING, "DEFAULT", "certificate DN -> principal name rules"),
    ConfigDef("ssl.client.auth", T.STRING, "none", "mTLS", choices=("none", "requested", "required")),
    ConfigDef("ssl.keystore.type", T.STRING, "JKS", "PEM or PKCS12 (JKS cannot be read)"),
    ConfigDef("ssl.keystore.location", T.STRING, "", "key and certificate chain file"),
    ConfigDef("ssl.keystore.password", T.PASSWORD, None, "PKCS12 keystore password"),
    ConfigDef("ssl.key.password", T.PASSWORD, None, "password of an encrypted private key"),
    ConfigDef("ssl.keystore.key", T.PASSWORD, None, "PEM private key in the config"),
    ConfigDef("ssl.keystore.certificate.chain", T.PASSWORD, None, "PEM certificate chain in the config"),
    ConfigDef("ssl.truststore.type", T.STRING, "JKS", "PEM or PKCS12"),
    ConfigDef("ssl.truststore.location", T.STRING, "", "trusted CA certificates file"),
    ConfigDef("ssl.truststore.password", T.PASSWORD, None, "PKCS12 truststore password"),
    ConfigDef("ssl.truststore.certificates", T.PASSWORD, None, "PEM trusted certificates in the config"),
    ConfigDef("ssl.enabled.protocols", T.LIST, ["TLSv1.2", "TLSv1.3"], "TLS versions"),
    ConfigDef("ssl.cipher.suites", T.LIST, [], "TLS 1.2 cipher suites (IANA names); empty: OpenSSL's defaults"),
    ConfigDef(
        "ssl.endpoint.identification.algorithm", T.STRING, "https", "https: inter-broker clients check host names"
    ),
    ConfigDef("sasl.oauthbearer.jwks.endpoint.url", T.STRING, "", "JWKS (https URL or file:) to validate JWTs"),
    ConfigDef("sasl.oauthbearer.expected.issuer", T.STRING, "", "required `iss` of a JWT"),
    ConfigDef("sasl.oauthbearer.expected.audience", T.LIST, [], "accepted `aud` values of a JWT"),
    ConfigDef("sasl.oauthbearer.sub.claim.name", T.STRING, "sub", "claim holding the principal name"),
    ConfigDef("sasl.oauthbearer.scope.claim.name", T.STRING, "scope", "claim holding the scopes"),
    ConfigDef("sasl.oauthbearer.clock.skew.seconds", T.INT, 30, "tolerated clock skew", at_least(0)),
]

_SECURITY_PREFIXES = ("ssl.", "sasl.", "connections.max.reauth.ms")


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, list | tuple):
        return ",".join(str(x) for x in v)
    return str(v)


def protocol_map(values: Mapping[str, Any]) -> dict[str, str]:
    """`listener.security.protocol.map` as {LISTENER: PROTOCOL} (ConfigError for a malformed entry)."""
    out: dict[str, str] = {}
    for entry in values["listener.security.protocol.map"]:
        name, sep, protocol = entry.partition(":")
        if not sep:
            raise ConfigError(f"listener.security.protocol.map: {entry!r} is not of the form NAME:PROTOCOL")
        out[name.strip().upper()] = protocol.strip().upper()
    return out


def listener_settings(values: Mapping[str, Any], listener: str, mechanism: str | None = None) -> dict[str, str]:
    """The `ssl.*`, `sasl.*` and `connections.max.reauth.ms` values of one listener, as strings: the broker-wide
    value overridden by `listener.name.<listener>.<key>`; with `mechanism`, `sasl.jaas.config` is that mechanism's
    entry (`listener.name.<listener>.<mechanism>.sasl.jaas.config` first)."""
    out = {k: _text(v) for k, v in values.items() if k.startswith(_SECURITY_PREFIXES) and v is not None}
    prefix = f"listener.name.{listener.lower()}."
    mech_prefix = f"{prefix}{mechanism.lower()}." if mechanism else None
    for k, v in values.items():
        if not k.startswith(prefix):
            continue
        rest = k[len(prefix) :]
        if rest.startswith(_SECURITY_PREFIXES):
            out[rest] = _text(v)
    if mech_prefix is not None:
        jaas = values.get(mech_prefix + "sasl.jaas.config")
        if jaas is not None:
            out["sasl.jaas.config"] = _text(jaas)
    return out


def enabled_mechanisms(values: Mapping[str, Any], listener: str) -> list[str]:
    text = listener_settings(values, listener).get("sasl.enabled.mechanisms", "")
    return [m.strip().upper() for m in text.split(",") if m.strip()]


def check_security(values: Mapping[str, Any], listeners: Mapping[str, str], inter_broker: str) -> None:
    """Kafka's checks of the security settings that Strata implements, with one clear line for what it does not:
    `listeners` maps each listener name to its protocol."""
    for name, protocol in listeners.items():
        if protocol not in PROTOCOLS:
            raise ConfigError(
                f"listeners: listener {name} uses {protocol}; supported protocols are {', '.join(PROTOCOLS)}"
            )
        if protocol.startswith("SASL_"):
            mechs = enabled_mechanisms(values, name)
            if not mechs:
                raise ConfigError(f"sasl.enabled.mechanisms: listener {name} uses {protocol} but enables no mechanism")
            bad = [m for m in mechs if m not in SASL_MECHANISMS]
            if bad:
                raise ConfigError(
                    f"sasl.enabled.mechanisms: listener {name}: {', '.join(bad)} is not supported "
                    f"(supported: {', '.join(SASL_MECHANISMS)})"
                )
    inter_protocol = listeners.get(inter_broker, "")
    if inter_protocol.startswith("SASL_"):
        mech = str(values.get("sasl.mechanism.inter.broker.protocol") or "").upper()
        if mech not in enabled_mechanisms(values, inter_broker):
            raise ConfigError(
                f"sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms when SASL is used "
                f"for inter-broker communication: {mech} is not enabled on listener {inter_broker}"
            )


__all__ = [
    "PROTOCOLS",
    "SASL_MECHANISMS",
    "SECURITY_DEFS",
    "check_security",
    "enabled_mechanisms",
    "listener_settings",
    "protocol_map",
]
