"""Client properties as Kafka's Java clients read them (strata.cli.command_config): the properties syntax, the
security they describe, and its translation for librdkafka and kafka-python."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from strata.cli.clients import client_config
from strata.cli.command_config import (
    ClientSecurity,
    CommandConfigError,
    SaslClient,
    client_security,
    parse_properties,
    unsecured_jws,
)
from tests.support.certs import make_pki

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" password="pw-x1";'


def test_java_properties_syntax() -> None:
    text = (
        "# comment\n! also a comment\n"
        "a=1\n b : 2\nc 3\n"
        'sasl.jaas.config=org.Foo required \\\n    username="u" \\\n    password="p";\n'
        "esc=tab\\there\\u0041\\\\\n"
        "empty=\n"
        "key\\=with\\:seps=v\n"
    )
    assert parse_properties(text) == [
        ("a", "1"),
        ("b", "2"),
        ("c", "3"),
        ("sasl.jaas.config", 'org.Foo required username="u" password="p";'),
        ("esc", "tab\there" + "A\\"),
        ("empty", ""),
        ("key=with:seps", "v"),
    ]


def test_sasl_ssl_scram_from_kafka_names(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    sec = client_security(
        {
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": JAAS,
            "ssl.truststore.location": str(pki.ca_pem),  # no type: PEM text is read as PEM (Kafka's default: JKS)
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert (sec.protocol, sec.mechanism, sec.username, sec.password) == ("SASL_SSL", "SCRAM-SHA-512", "bob", "pw-x1")
    assert "pw-x1" not in repr(sec) and "pw-x1" not in str(sec)
    assert not sec.check_hostname
    ctx = sec.ssl_context()
    assert ctx is not None and not ctx.check_hostname and ctx.get_ca_certs()
    rd = sec.librdkafka_config()
    assert rd == {
        "security.protocol": "sasl_ssl",
        "ssl.endpoint.identification.algorithm": "none",
        "ssl.ca.location": str(pki.ca_pem),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "bob",
        "sasl.password": "pw-x1",
    }
    kp = sec.kafka_python_config()
    assert (
        kp["sasl_plain_username"] == "bob" and kp["ssl_context"] is not None and kp["security_protocol"] == "SASL_SSL"
    )


def test_pem_keystore_and_librdkafka_file_names(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    crt, key = pki.client("alice", cn="alice", ou="clients")
    sec = client_security({"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_pem)} | {
        "ssl.certificate.location": str(crt), "ssl.key.location": str(key)
    })  # fmt: skip
    assert sec.ssl_context() is not None  # the key and the chain load as one PEM keystore
    rd = sec.librdkafka_config()
    assert (
        rd["ssl.ca.location"] == str(pki.ca_pem)
        and "BEGIN" in rd["ssl.key.pem"]
        and "BEGIN" in rd["ssl.certificate.pem"]
    )
    one = client_security(
        {"security.protocol": "SSL", "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.dir / "broker.pem")}
    )
    assert one.librdkafka_config()["ssl.key.location"] == one.librdkafka_config()["ssl.certificate.location"]


def test_pkcs12_truststore_becomes_inline_pem_for_librdkafka(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

    pki = make_pki(tmp_path)
    ca = x509.load_pem_x509_certificate(pki.ca_pem.read_bytes())
    p12 = tmp_path / "trust.p12"
    p12.write_bytes(pkcs12.serialize_key_and_certificates(None, None, None, [ca], BestAvailableEncryption(b"tpw")))
    sec = client_security({
        "security.protocol": "SSL", "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(p12),
        "ssl.truststore.password": "tpw",
    })  # fmt: skip
    assert sec.librdkafka_config()["ssl.ca.pem"].startswith("-----BEGIN CERTIFICATE-----")
    assert sec.ssl_context() is not None


def test_jks_is_refused_with_the_way_out(tmp_path: Path) -> None:
    jks = tmp_path / "trust.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\0" * 64)
    with pytest.raises(CommandConfigError, match=r"JKS file.*keytool -importkeystore"):
        client_security({"security.protocol": "SSL", "ssl.truststore.location": str(jks)})


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "needs a username and a password"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "GSSAPI is not supported"),
        ({"security.protocol": "SASL_SSL"}, "GSSAPI is not supported"),  # Kafka's default mechanism
        (
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": 'x required password="pw-x1"',
            },
            "does not end",
        ),
        (
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.jaas.config": "OAuthBearerLoginModule required;",
            },
            "unsecuredLoginStringClaim_sub",
        ),
    ],
)
def test_refusals_name_the_key_never_the_secret(props: dict[str, str], message: str) -> None:
    with pytest.raises(CommandConfigError, match=message) as e:
        client_security(props, "client.properties")
    assert "pw-x1" not in str(e.value) and str(e.value).startswith("client.properties: ")


def test_unsecured_oauthbearer_token_and_librdkafka_config() -> None:
    sec = client_security({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "sasl.jaas.config": 'OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="alice" '
        'unsecuredLoginLifetimeSeconds="600";',
    })  # fmt: skip
    head, body, sig = unsecured_jws(sec.oauth_claims, now=1000.0).split(".")
    pad = lambda s: s + "=" * (-len(s) % 4)  # noqa: E731
    assert json.loads(base64.urlsafe_b64decode(pad(head))) == {"alg": "none"} and sig == ""
    assert json.loads(base64.urlsafe_b64decode(pad(body))) == {"sub": "alice", "iat": 1000, "exp": 1600}
    assert SaslClient(sec).first().startswith(b"n,,\x01auth=Bearer ")
    rd = sec.librdkafka_config()
    assert rd["sasl.oauthbearer.config"] == "principal=alice lifeSeconds=600"
    assert rd["enable.sasl.oauthbearer.unsecure.jwt"] == "true"


def test_kafka_python_commands_translate_the_same_keys() -> None:
    from kafka import KafkaConsumer

    out = client_config(
        KafkaConsumer.DEFAULT_CONFIG,
        [("security.protocol", "SASL_PLAINTEXT"), ("sasl.mechanism", "PLAIN"), ("sasl.username", "u"),
         ("sasl.password", "p"), ("client.id", "c1")],
    )  # fmt: skip
    assert out == {
        "client_id": "c1",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "u",
        "sasl_plain_password": "p",
    }


def test_plaintext_needs_nothing() -> None:
    sec = ClientSecurity()
    assert sec.ssl_context() is None and sec.librdkafka_config() == {"security.protocol": "plaintext"}


def test_pipeline_jobs_pass_a_command_config_as_kafka_options(tmp_path: Path) -> None:
    """`strata pipeline <job> --command-config FILE`: the file's keys become the source's kafka.* options (and the
    security ones the sink's), --option wins."""
    import argparse

    from strata.pipeline.jobs.common import job_options, security_options

    cfg = tmp_path / "client.properties"
    cfg.write_text(
        f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config={JAAS}\nclient.id=etl\n"
    )
    args = argparse.Namespace(command_config=str(cfg), option=[("minPartitions", "4"), ("kafka.client.id", "mine")])
    opts = job_options(args)
    assert opts == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": JAAS,
        "kafka.client.id": "mine",
        "minPartitions": "4",
    }
    assert set(security_options(opts)) == {"kafka.security.protocol", "kafka.sasl.mechanism", "kafka.sasl.jaas.config"}


def test_spark_options_translate_kafka_names_and_never_show_the_password() -> None:
    from strata.pipeline.options import OptionError, parse_sink_options, parse_source_options

    jaas = JAAS.replace("pw-x1", "pw-secret-9")
    o = parse_source_options(
        {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.security.protocol": "SASL_PLAINTEXT"}
        | {"kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.jaas.config": jaas, "kafka.client.id": "c"},
        streaming=False,
    )
    assert o.kafka_conf == {
        "client.id": "c",
        "security.protocol": "sasl_plaintext",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "bob",
        "sasl.password": "pw-secret-9",
    }
    assert (o.security.username, o.security.mechanism) == ("bob", "SCRAM-SHA-512")
    sink = parse_sink_options({"kafka.bootstrap.servers": "h:1", "kafka.security.protocol": "SASL_SSL"} | {
        "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.username": "u", "kafka.sasl.password": "pw-secret-9"
    })  # fmt: skip
    assert "pw-secret-9" not in repr(o) + repr(sink)
    with pytest.raises(OptionError, match=r"sasl\.mechanism: GSSAPI is not supported") as e:
        parse_source_options(
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.security.protocol": "SASL_SSL"}
            | {"kafka.sasl.jaas.config": jaas},
            streaming=False,
        )
    assert "pw-secret-9" not in str(e.value)


def test_a_command_config_applies_to_its_own_command_only(tmp_path: Path) -> None:
    """main() run in-process (as tests do) leaves the process's default connection as it found it."""
    from strata.cli.command_config import process_security
    from strata.cli.main import main

    cfg = tmp_path / "c.properties"
    cfg.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=u\nsasl.password=p\n")
    port = 1  # nothing listens there: the command fails after loading the file
    assert main(["topics", "--bootstrap-server", f"127.0.0.1:{port}", "--command-config", str(cfg), "list"]) == 1
    assert process_security() == ClientSecurity()
