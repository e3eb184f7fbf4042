"""`--command-config client.properties` as Kafka's tools take it: admin commands (the CLI's wire client) and data-path
commands (kafka-python) against one broker with SASL_SSL (PLAIN, SCRAM-SHA-512) and SASL_PLAINTEXT (unsecured
OAUTHBEARER) listeners, certificates generated at test time. Bad files and refused credentials are one line on
stderr that never shows a secret."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_proc import StrataBroker, free_port
from tests.support.certs import Pki, make_pki
from tests.support.cli_run import fails, ok, strata

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ADMIN_SECRET = "admin-s3cret-Zq9"
SCRAM_SECRET = "carol-s3cret-Xw4"
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'username="admin" password="{ADMIN_SECRET}" user_admin="{ADMIN_SECRET}";'
)
SECRETS = (ADMIN_SECRET, SCRAM_SECRET)
REAUTH_MS = 1500


class Secure:
    def __init__(self, broker: StrataBroker, ports: dict[str, int], pki: Pki, dir: Path) -> None:
        self.broker, self.ports, self.pki, self.dir = broker, ports, pki, dir

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def config(self, name: str, text: str) -> str:
        path = self.dir / f"{name}.properties"
        path.write_text(text)
        return str(path)

    def plain_admin(self) -> str:
        """Kafka's own spelling: a JAAS value continued over lines, the truststore as a PEM file."""
        return self.config(
            "admin",
            "security.protocol=SASL_SSL\n"
            "sasl.mechanism=PLAIN\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
            f'    username="admin" \\\n    password="{ADMIN_SECRET}";\n'
            "ssl.truststore.type=PEM\n"
            f"ssl.truststore.location={self.pki.ca_pem}\n",
        )


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    tmp = tmp_path_factory.mktemp("cmdcfg")
    pki = make_pki(tmp / "pki")
    broker = StrataBroker(tmp / "broker")
    ports = {"PLAINTEXT": broker.port, "SASL_SSL": free_port(), "OAUTH": free_port(), "SHORT": free_port()}
    broker.overrides.update(
        {
            "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
            "listener.security.protocol.map": (
                "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,OAUTH:SASL_PLAINTEXT,SHORT:SASL_PLAINTEXT"
            ),
            "inter.broker.listener.name": "PLAINTEXT",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.dir / "broker.pem"),
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.short.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.short.connections.max.reauth.ms": str(REAUTH_MS),  # KIP-368 sessions of 1.5 s
            "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.oauth.oauthbearer.sasl.jaas.config": (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
            ),
        }
    )
    broker.start()
    try:
        yield Secure(broker, ports, pki, tmp)
    finally:
        broker.stop()


def no_secret(*texts: str) -> None:
    for text in texts:
        for s in SECRETS:
            assert s not in text


def test_admin_commands_over_sasl_ssl(secure: Secure) -> None:
    bs, cfg = secure.bootstrap("SASL_SSL"), secure.plain_admin()
    topic = f"cc-{uuid.uuid4().hex[:6]}"
    ok(
        strata(
            "topics", "--bootstrap-server", bs, "--command-config", cfg, "create", "--topic", topic, "--partitions", "2"
        )
    )
    # the option after the action, as kafka-topics.sh users type it
    out = ok(strata("topics", "list", "--bootstrap-server", bs, "--command-config", cfg))
    assert topic in out.split()
    r = strata("topics", "describe", "--topic", topic, "--bootstrap-server", bs, "--command-config", cfg)
    assert "PartitionCount: 2" in ok(r)
    out = ok(strata("get-offsets", "--bootstrap-server", bs, "--command-config", cfg, "--topic", topic))
    assert sorted(out.split()) == [f"{topic}:0:0", f"{topic}:1:0"]
    out = ok(strata("broker-api-versions", "--bootstrap-server", bs, "--command-config", cfg))
    assert f"127.0.0.1:{secure.ports['SASL_SSL']} (id: 0" in out
    no_secret(r.stdout, r.stderr)


def test_scram_user_added_over_sasl_ssl_then_used(secure: Secure) -> None:
    """The admin (PLAIN) adds a SCRAM-SHA-512 user over SASL_SSL; that user's own file then works, with
    librdkafka's key names for the same settings."""
    bs = secure.bootstrap("SASL_SSL")
    r = strata(
        "users", "scram", "add", "--bootstrap-server", bs, "--command-config", secure.plain_admin(),
        "--user", "carol", "--mechanism", "SCRAM-SHA-512", "--password-stdin", stdin=SCRAM_SECRET + "\n",
    )  # fmt: skip
    ok(r)
    carol = secure.config(
        "carol",
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=carol\n"
        f"sasl.password={SCRAM_SECRET}\nssl.ca.location={secure.pki.ca_pem}\n",
    )
    topic = f"carol-{uuid.uuid4().hex[:6]}"
    ok(strata("topics", "create", "--topic", topic, "--bootstrap-server", bs, "--command-config", carol))
    assert topic in ok(strata("topics", "list", "--bootstrap-server", bs, "--command-config", carol)).split()
    wrong = secure.config("carol-wrong", Path(carol).read_text().replace(SCRAM_SECRET, "not-" + SCRAM_SECRET[4:]))
    err = fails(strata("topics", "list", "--bootstrap-server", bs, "--command-config", wrong), 1)
    assert "SASL_AUTHENTICATION_FAILED" in err and "carol" in err
    no_secret(err, r.stdout, r.stderr)


def test_console_producer_and_consumer_over_sasl_ssl(secure: Secure) -> None:
    bs, cfg = secure.bootstrap("SASL_SSL"), secure.plain_admin()
    topic = f"cc-data-{uuid.uuid4().hex[:6]}"
    ok(strata("topics", "create", "--topic", topic, "--bootstrap-server", bs, "--command-config", cfg))
    lines = [f"line-{i}" for i in range(20)]
    r = strata(
        "console-producer",
        "--bootstrap-server",
        bs,
        "--command-config",
        cfg,
        "--topic",
        topic,
        stdin="\n".join(lines) + "\n",
    )
    ok(r)
    r = strata(
        "console-consumer", "--bootstrap-server", bs, "--command-config", cfg, "--topic", topic,
        "--from-beginning", "--max-messages", "20", "--timeout-ms", "30000",
    )  # fmt: skip
    assert ok(r).split() == lines
    no_secret(r.stdout, r.stderr)


def test_oauthbearer_unsecured_login(secure: Secure) -> None:
    cfg = secure.config(
        "oauth",
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredLoginStringClaim_sub="alice";\n',
    )
    ok(strata("topics", "list", "--bootstrap-server", secure.bootstrap("OAUTH"), "--command-config", cfg))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, "cannot read"),
        ("security.protocol=SASL_TLS\n", "security.protocol: 'SASL_TLS' is not one of"),
        ("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n", "sasl.mechanism: GSSAPI is not supported"),
        (
            "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
            f'sasl.jaas.config=PlainLoginModule required password="{ADMIN_SECRET}";\n',
            "needs a username and a password",
        ),
        (
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
            f'sasl.jaas.config=PlainLoginModule required username="a" password="{ADMIN_SECRET}";\n',
            "needs ScramLoginModule, not PlainLoginModule",
        ),
        (
            "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
            f"sasl.jaas.config=PlainLoginModule password={ADMIN_SECRET};\n",
            "JAAS config",
        ),
        ("security.protocol=SSL\nssl.truststore.location=/nonexistent/ca.pem\n", "ssl.truststore.location"),
    ],
)
def test_bad_command_config_is_one_line(secure: Secure, tmp_path: Path, text: str | None, expected: str) -> None:
    path = tmp_path / "client.properties"
    if text is not None:
        path.write_text(text)
    r = strata("topics", "list", "--bootstrap-server", secure.bootstrap("SASL_SSL"), "--command-config", str(path))
    err = fails(r, 1)
    assert err.startswith("strata topics: error: --command-config: ") and expected in err, err
    no_secret(err, r.stdout)


def test_refusals_name_the_cause(secure: Secure, tmp_path: Path) -> None:
    bs = secure.bootstrap("SASL_SSL")
    wrong = secure.config("wrong", Path(secure.plain_admin()).read_text().replace(ADMIN_SECRET, "nope"))
    err = fails(strata("topics", "list", "--bootstrap-server", bs, "--command-config", wrong), 1)
    assert "SASL_AUTHENTICATION_FAILED" in err, err
    other_ca = make_pki(tmp_path / "other").ca_pem
    text = Path(secure.plain_admin()).read_text().replace(str(secure.pki.ca_pem), str(other_ca))
    err = fails(strata("topics", "list", "--bootstrap-server", bs, "--command-config", secure.config("ca", text)), 1)
    assert "TLS handshake" in err and "certificate" in err, err
    admin = Path(secure.plain_admin()).read_text()
    scram = secure.config(
        "scram256",
        admin.replace("=PLAIN", "=SCRAM-SHA-256").replace("plain.PlainLoginModule", "scram.ScramLoginModule"),
    )
    err = fails(strata("topics", "list", "--bootstrap-server", bs, "--command-config", scram), 1)
    assert "does not enable SASL mechanism SCRAM-SHA-256" in err and "PLAIN" in err, err
    no_secret(err)


def test_a_pipeline_job_refuses_a_bad_file_before_starting_spark(tmp_path: Path) -> None:
    r = strata("pipeline", "export", "--topic", "t", "--to", str(tmp_path / "out"), "--command-config", "/nonexistent")
    assert fails(r, 1).startswith("strata pipeline: error: --command-config: cannot read /nonexistent")


def test_help_names_the_option_without_values() -> None:
    for cmd in (["topics"], ["topics", "list"], ["console-consumer"], ["producer-perf-test"], ["groups"]):
        out = ok(strata(*cmd, "--help"))
        assert "--command-config" in out, cmd


def test_wire_client_reauthenticates_before_its_session_ends(secure: Secure) -> None:
    """KIP-368: the broker gives SHORT's sessions 1.5 s and closes a connection whose session has expired; the CLI's
    client authenticates again on the same connection before that, as Kafka's clients do."""
    import time
    import urllib.request

    from strata.cli.admin_client import AdminClient
    from strata.cli.command_config import client_security
    from tests.support.waiting import wait_until

    sec = client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"} | {
        "sasl.username": "admin", "sasl.password": ADMIN_SECRET
    })  # fmt: skip
    with AdminClient(secure.bootstrap("SHORT"), 30.0, sec) as a:
        for _ in range(3):  # each round outlives a whole session
            end = time.monotonic() + REAUTH_MS / 1000 * 1.2
            wait_until(lambda: time.monotonic() > end, timeout=10, interval=0.1)  # noqa: B023 - used at once
            a.list_topics()  # AdminError ("closed the connection") had the broker closed an expired session
    url = f"http://127.0.0.1:{secure.broker.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    line = next(
        (
            x
            for x in text.splitlines()
            if x.startswith('strata_network_successful_reauthentication_total{listener="SHORT"')
        ),
        "",
    )
    assert line and float(line.split()[-1]) >= 3, line
