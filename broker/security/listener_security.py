"""What each listener needs to secure its connections, built once at startup from the broker's properties.

`ListenerSecurity` holds a listener's protocol, its TLS context (SSL, SASL_SSL; reloaded when the keystore or
truststore files change), the DN -> principal mapper for client certificates, and its SASL server settings
(SASL_PLAINTEXT, SASL_SSL), from which every connection gets its own `SaslAuthenticator`. A setting that does not
load raises ConfigError naming the setting and the listener, never a password.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from strata.config import BrokerConfig, ConfigError
from strata.config.security import enabled_mechanisms, listener_settings, protocol_map

from ..request_context import ANONYMOUS, KafkaPrincipal
from .jaas import JaasConfigError, LoginModule, parse_jaas_config
from .oauthbearer import JwksSource, JwtValidator, TokenValidator, UnsecuredJwsValidator
from .plain import PasswordCheck, jaas_users, password_check_from_users
from .sasl import SaslAuthenticator, SaslServerConfig
from .scram import ScramCredential, ScramMechanism
from .ssl_config import ReloadingServerContext, SslConfigError, SslSettings, build_client_context
from .ssl_principal import NoMatchingRule, SslPrincipalMapper, certificate_dn

ScramLookup = Callable[[ScramMechanism, str], ScramCredential | None]


@dataclass
class ListenerSecurity:
    listener: str
    protocol: str
    tls: ReloadingServerContext | None = None
    principal_mapper: SslPrincipalMapper | None = None
    sasl: SaslServerConfig | None = None

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        return self.tls.context if self.tls is not None else None

    def new_authenticator(self) -> SaslAuthenticator | None:
        return SaslAuthenticator(self.sasl) if self.sasl is not None else None

    def tls_principal(self, peer_cert_der: bytes | None) -> KafkaPrincipal:
        """User:<mapped DN> for a client certificate, ANONYMOUS without one (Kafka's DefaultKafkaPrincipalBuilder).
        Raises NoMatchingRule when no rule maps the DN (the connection is refused)."""
        if peer_cert_der is None or self.principal_mapper is None:
            return ANONYMOUS
        return KafkaPrincipal("User", self.principal_mapper.name(certificate_dn(peer_cert_der)))


def _jaas(props: Mapping[str, str], listener: str, mechanism: str) -> LoginModule | None:
    text = props.get("sasl.jaas.config", "")
    if not text:
        return None
    try:
        return parse_jaas_config(text)[0]
    except JaasConfigError as e:
        raise ConfigError(f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config: {e}") from None


def _plain_check(values: Mapping[str, Any], listener: str) -> PasswordCheck:
    module = _jaas(listener_settings(values, listener, "PLAIN"), listener, "PLAIN")
    if module is None:
        raise ConfigError(
            f"listener {listener}: PLAIN is enabled but no JAAS entry lists its users (set "
            f"listener.name.{listener.lower()}.plain.sasl.jaas.config or sasl.jaas.config)"
        )
    return password_check_from_users(jaas_users(module))


def _oauth_validator(values: Mapping[str, Any], listener: str) -> TokenValidator:
    props = listener_settings(values, listener, "OAUTHBEARER")
    url = props.get("sasl.oauthbearer.jwks.endpoint.url", "")
    if url:
        audience = [a.strip() for a in props.get("sasl.oauthbearer.expected.audience", "").split(",") if a.strip()]
        return JwtValidator(
            JwksSource(url),
            issuer=props.get("sasl.oauthbearer.expected.issuer") or None,
            audience=audience or None,
            sub_claim=props.get("sasl.oauthbearer.sub.claim.name") or "sub",
            scope_claim=props.get("sasl.oauthbearer.scope.claim.name") or "scope",
            clock_skew_s=int(props.get("sasl.oauthbearer.clock.skew.seconds") or 30),
        )
    module = _jaas(props, listener, "OAUTHBEARER")
    try:
        return UnsecuredJwsValidator(module.options if module is not None else {})
    except ValueError as e:
        raise ConfigError(f"listener {listener}: OAUTHBEARER: {e}") from None


def _sasl_config(values: Mapping[str, Any], listener: str, scram_lookup: ScramLookup | None) -> SaslServerConfig:
    mechanisms = tuple(enabled_mechanisms(values, listener))
    props = listener_settings(values, listener)
    return SaslServerConfig(
        enabled_mechanisms=mechanisms,
        plain_check=_plain_check(values, listener) if "PLAIN" in mechanisms else None,
        scram_lookup=scram_lookup,
        oauth_validator=_oauth_validator(values, listener) if "OAUTHBEARER" in mechanisms else None,
        max_reauth_ms=int(props.get("connections.max.reauth.ms") or 0),
    )


def build_listener_security(
    config: BrokerConfig, scram_lookup: ScramLookup | None = None
) -> dict[str, ListenerSecurity]:
    """Every listener's security, by listener name (ConfigError for a setting that does not load)."""
    protocols = protocol_map(config.values)
    out: dict[str, ListenerSecurity] = {}
    for lst in config.listeners:
        protocol = protocols.get(lst.name, "PLAINTEXT")
        sec = ListenerSecurity(lst.name, protocol)
        props = listener_settings(config.values, lst.name)
        if protocol in ("SSL", "SASL_SSL"):
            try:
                sec.tls = ReloadingServerContext(SslSettings(props))
            except SslConfigError as e:
                raise ConfigError(f"listener {lst.name}: {e}") from None
            try:
                sec.principal_mapper = SslPrincipalMapper(props.get("ssl.principal.mapping.rules") or "DEFAULT")
            except ValueError as e:
                raise ConfigError(f"ssl.principal.mapping.rules: {e}") from None
        if protocol.startswith("SASL_"):
            sec.sasl = _sasl_config(config.values, lst.name, scram_lookup)
        out[lst.name] = sec
    return out


@dataclass(frozen=True)
class ClientSecurity:
    """How this broker connects to another one (`inter.broker.listener.name`): TLS context and SASL credentials."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str = ""
    username: str = ""
    password: str = ""

    def __repr__(self) -> str:  # never print the credentials
        return f"ClientSecurity({self.protocol}, mechanism={self.mechanism or '-'})"


def build_client_security(config: BrokerConfig, listener: str) -> ClientSecurity:
    """Kafka's inter-broker client side: the listener's truststore for TLS, `sasl.mechanism.inter.broker.protocol`
    with the `username` / `password` options of the listener's JAAS entry for that mechanism."""
    protocol = protocol_map(config.values).get(listener.upper(), "PLAINTEXT")
    ctx = None
    if protocol in ("SSL", "SASL_SSL"):
        try:
            ctx = build_client_context(SslSettings(listener_settings(config.values, listener)))
        except SslConfigError as e:
            raise ConfigError(f"inter-broker listener {listener}: {e}") from None
    if not protocol.startswith("SASL_"):
        return ClientSecurity(protocol, ctx)
    mechanism = str(config.values.get("sasl.mechanism.inter.broker.protocol") or "").upper()
    module = _jaas(listener_settings(config.values, listener, mechanism), listener, mechanism)
    options = module.options if module is not None else {}
    if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        raise ConfigError(f"sasl.mechanism.inter.broker.protocol: {mechanism} is not supported between brokers")
    if not options.get("username") or not options.get("password"):
        raise ConfigError(
            f"sasl.mechanism.inter.broker.protocol {mechanism}: the JAAS entry of listener {listener} needs "
            "username and password options for inter-broker connections"
        )
    return ClientSecurity(protocol, ctx, mechanism, options["username"], options["password"])


__all__ = [
    "ClientSecurity",
    "ListenerSecurity",
    "NoMatchingRule",
    "ScramLookup",
    "build_client_security",
    "build_listener_security",
]
