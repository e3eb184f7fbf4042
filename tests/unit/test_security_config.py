"""Listener security settings as Kafka resolves them: `listener.name.<l>.<key>` over the broker-wide key, a
mechanism's JAAS entry per listener, and the one-line refusals of what Strata does not implement."""

from __future__ import annotations

import pytest

from strata.broker.security.listener_security import build_client_security, build_listener_security
from strata.config import BrokerConfig, ConfigError
from strata.config.security import listener_settings

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="b" password="bp" user_b="bp";'


def test_listener_override_wins_over_the_broker_wide_value() -> None:
    c = BrokerConfig.from_dict(
        {
            "ssl.keystore.location": "/wide.pem",
            "listener.name.external.ssl.keystore.location": "/ext.pem",
            "connections.max.reauth.ms": "1000",
            "listener.name.external.connections.max.reauth.ms": "5000",
        }
    )
    ext, other = listener_settings(c.values, "EXTERNAL"), listener_settings(c.values, "INTERNAL")
    assert ext["ssl.keystore.location"] == "/ext.pem" and other["ssl.keystore.location"] == "/wide.pem"
    assert ext["connections.max.reauth.ms"] == "5000" and other["connections.max.reauth.ms"] == "1000"
    assert ext["ssl.enabled.protocols"] == "TLSv1.2,TLSv1.3"  # list defaults as Kafka writes them


def test_a_mechanism_jaas_entry_per_listener_falls_back_to_sasl_jaas_config() -> None:
    c = BrokerConfig.from_dict(
        {"sasl.jaas.config": "wide", "listener.name.sasl_ssl.plain.sasl.jaas.config": "per-listener"}
    )
    assert listener_settings(c.values, "SASL_SSL", "PLAIN")["sasl.jaas.config"] == "per-listener"
    assert listener_settings(c.values, "SASL_SSL", "SCRAM-SHA-256")["sasl.jaas.config"] == "wide"
    assert listener_settings(c.values, "OTHER", "PLAIN")["sasl.jaas.config"] == "wide"


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, "GSSAPI is not supported"),
        (
            {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN,GSSAPI"},
            "listener SASL_PLAINTEXT: GSSAPI is not supported",
        ),
        (
            {"listeners": "A://127.0.0.1:0", "listener.security.protocol.map": "A:KERBEROS"},
            "listener A uses KERBEROS",
        ),
        (
            {
                "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            },
            "sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms",
        ),
    ],
)
def test_refused_with_one_line(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_dict(props).check_listeners()


def test_plain_without_users_and_bad_rules_are_config_errors(tmp_path) -> None:
    c = BrokerConfig.from_dict(
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",  # the only listener is the inter-broker one
        }
    )
    c.check_listeners()
    with pytest.raises(ConfigError, match="PLAIN is enabled but no JAAS entry"):
        build_listener_security(c)
    c = BrokerConfig.from_dict({"listeners": "SSL://127.0.0.1:0", "ssl.principal.mapping.rules": "RULE:x"})
    with pytest.raises(ConfigError, match=r"listener SSL: ssl\.keystore\.location"):
        build_listener_security(c)


def test_inter_broker_client_credentials_come_from_the_listener_jaas_and_are_not_printed() -> None:
    c = BrokerConfig.from_dict(
        {
            "listeners": "INTERNAL://127.0.0.1:0",
            "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": JAAS,
        }
    )
    c.check_listeners()
    sec = build_client_security(c, "INTERNAL")
    assert (sec.protocol, sec.mechanism, sec.username, sec.password) == ("SASL_PLAINTEXT", "PLAIN", "b", "bp")
    assert "bp" not in repr(sec)
    plain = build_client_security(BrokerConfig.from_dict({}), "PLAINTEXT")
    assert plain.protocol == "PLAINTEXT" and plain.ssl_context is None and not plain.mechanism
