"""TLS and SASL listeners with stock clients: one broker with PLAINTEXT, SSL, SASL_SSL and SASL_PLAINTEXT listeners
at once (and a second broker for mTLS), certificates generated at test time.

Each client produces and consumes over a secured listener; bad credentials, a wrong CA, a plaintext client on a TLS
port, a TLS client on a plaintext port, a request before SASL and an oversized SASL token each get Kafka's error or
a closed connection, and the broker keeps serving the other listeners.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests.support.broker_proc import StrataBroker, free_port
from tests.support.certs import Pki, make_pki
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)
REAUTH_MS = 1500
OAUTH_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"


ISSUER = "https://idp.test"
_SIGNING_KEY: Any = None


def write_jwks(path: Path) -> Path:
    """An RSA signing key for the test's identity provider; its public half as a JWKS file."""
    import json

    from cryptography.hazmat.primitives.asymmetric import rsa
    from jwt.algorithms import RSAAlgorithm

    global _SIGNING_KEY
    _SIGNING_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(RSAAlgorithm.to_jwk(_SIGNING_KEY.public_key()))
    jwk.update({"kid": "k1", "alg": "RS256", "use": "sig"})
    path.write_text(json.dumps({"keys": [jwk]}))
    return path


def signed_jwt(sub: str, issuer: str = ISSUER, audience: str = "kafka", lifetime_s: int = 300) -> tuple[str, float]:
    import jwt

    exp = time.time() + lifetime_s
    claims = {"sub": sub, "iss": issuer, "aud": audience, "iat": int(time.time()), "exp": int(exp)}
    return jwt.encode(claims, _SIGNING_KEY, algorithm="RS256", headers={"kid": "k1"}), exp


class SecureBroker:
    def __init__(self, broker: StrataBroker, ports: dict[str, int], pki: Pki) -> None:
        self.broker, self.ports, self.pki = broker, ports, pki

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def client_conf(self, listener: str, **extra: Any) -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap(listener), "log_level": 0}
        if listener == "SSL":
            conf.update({"security.protocol": "SSL", "ssl.ca.location": str(self.pki.ca_pem)})
        elif listener == "SASL_SSL":
            conf.update(
                {
                    "security.protocol": "SASL_SSL",
                    "ssl.ca.location": str(self.pki.ca_pem),
                    "sasl.mechanism": "PLAIN",
                    "sasl.username": "alice",
                    "sasl.password": "alice-secret",
                }
            )
        elif listener == "SASL_PLAINTEXT":
            conf.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"})
            conf.update({"sasl.username": "alice", "sasl.password": "alice-secret"})
        conf.update(extra)
        return conf

    def metrics(self) -> str:
        return urllib_get(f"http://127.0.0.1:{self.broker.metrics_port}/metrics")


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("secure")
    pki = make_pki(tmp / "pki")
    broker = StrataBroker(tmp / "broker")
    ports = {"PLAINTEXT": broker.port, "SSL": free_port(), "SASL_SSL": free_port(), "SASL_PLAINTEXT": free_port()}
    ports["OAUTH"] = free_port()
    ports["SHORT"] = free_port()  # SASL_PLAINTEXT whose sessions last REAUTH_MS
    ports["JWT"] = free_port()  # SASL_PLAINTEXT with OAUTHBEARER JWTs checked against a JWKS file
    jwks = write_jwks(tmp / "jwks.json")
    listeners = ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items())
    broker.overrides.update(
        {
            "listeners": listeners,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,"
            "SASL_PLAINTEXT:SASL_PLAINTEXT,OAUTH:SASL_PLAINTEXT,SHORT:SASL_PLAINTEXT,JWT:SASL_PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.dir / "broker.pem"),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca_pem),
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.oauth.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
            "connections.max.reauth.ms": "3600000",
            "listener.name.short.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.short.connections.max.reauth.ms": str(REAUTH_MS),
            "listener.name.jwt.sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.jwt.sasl.oauthbearer.jwks.endpoint.url": f"file://{jwks}",
            "listener.name.jwt.sasl.oauthbearer.expected.issuer": ISSUER,
            "listener.name.jwt.sasl.oauthbearer.expected.audience": "kafka",
        }
    )
    broker.start()
    try:
        yield SecureBroker(broker, ports, pki)
    finally:
        broker.stop()


def roundtrip(conf: dict[str, Any], topic: str, n: int = 50) -> list[bytes]:
    """Produce n records (the topic is auto-created) and read them back with a consumer group."""
    p = Producer({**conf, "enable.idempotence": True})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), key=str(i).encode())
    assert p.flush(30) == 0, "undelivered records"
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value() or b"")
        c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def expect_failure(conf: dict[str, Any], timeout: float = 20.0) -> str:
    """The errors a client reports when it cannot connect or authenticate (it never gets metadata)."""
    errors: list[str] = []
    p = Producer({**conf, "error_cb": lambda e: errors.append(str(e))})
    deadline = time.monotonic() + timeout
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    with pytest.raises(KafkaException):
        p.list_topics(timeout=1)
    return " | ".join(errors)


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL", "SASL_PLAINTEXT"])
def test_confluent_produces_and_consumes(secure: SecureBroker, listener: str) -> None:
    topic = f"sec-{listener.lower()}-{uuid.uuid4().hex[:6]}"
    got = roundtrip(secure.client_conf(listener), topic)
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(50))
    if listener.startswith("SASL"):
        text = secure.metrics()
        assert f'strata_network_successful_authentication_total{{listener="{listener}",mechanism="PLAIN"}}' in text
        assert "alice" not in text, "a user name in a metric"


def test_confluent_oauthbearer_unsecured_jws(secure: SecureBroker) -> None:
    conf = {
        "bootstrap.servers": secure.bootstrap("OAUTH"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.config": "principal=alice",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "log_level": 0,
    }
    topic = f"sec-oauth-{uuid.uuid4().hex[:6]}"
    assert len(roundtrip(conf, topic, 10)) == 10


def test_kafka_python_over_ssl_and_sasl_ssl(secure: SecureBroker) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    common = {"ssl_cafile": str(secure.pki.ca_pem), "ssl_check_hostname": True}
    for listener, extra in (
        ("SSL", {"security_protocol": "SSL"}),
        (
            "SASL_SSL",
            {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "PLAIN",
                "sasl_plain_username": "alice",
                "sasl_plain_password": "alice-secret",
            },
        ),
    ):
        topic = f"kp-{listener.lower()}-{uuid.uuid4().hex[:6]}"
        kw = {"bootstrap_servers": secure.bootstrap(listener), **common, **extra}
        prod = KafkaProducer(**kw)
        for i in range(20):
            prod.send(topic, f"m{i}".encode())
        prod.flush(30)
        prod.close()
        cons = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=20000, **kw)
        got = []
        for m in cons:
            got.append(m.value)
            if len(got) == 20:
                break
        cons.close()
        assert sorted(got) == sorted(f"m{i}".encode() for i in range(20)), listener


def test_wrong_password_and_unknown_user_fail_with_kafka_message(secure: SecureBroker) -> None:
    for user, password in (("alice", "wrong-pw-7f3a"), ("mallory", "mallory-pw-9c2e")):
        err = expect_failure(secure.client_conf("SASL_SSL", **{"sasl.username": user, "sasl.password": password}))
        assert "Invalid username or password" in err, err
        assert password not in secure.broker.tail(), "a password in the broker's log"
    text = secure.metrics()
    assert 'strata_network_failed_authentication_total{listener="SASL_SSL",mechanism="PLAIN"}' in text
    # the other listeners still serve
    assert len(roundtrip(secure.client_conf("SSL"), f"after-fail-{uuid.uuid4().hex[:6]}", 5)) == 5


def test_wrong_ca_is_refused(secure: SecureBroker, tmp_path: Path) -> None:
    other = make_pki(tmp_path / "other", organization="not-the-broker-ca")
    err = expect_failure(secure.client_conf("SSL", **{"ssl.ca.location": str(other.ca_pem)}))
    assert "certificate verify failed" in err or "SSL handshake failed" in err, err
    wait_until(lambda: "TLS handshake failed" in secure.broker.tail(), 10)


def _raw(port: int, data: bytes, tls: ssl.SSLContext | None = None) -> bytes:
    """Send bytes, return whatever comes back until the broker closes (b'' if it closed at once)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        conn: Any = tls.wrap_socket(s, server_hostname="127.0.0.1") if tls else s
        conn.sendall(data)
        out = b""
        while True:
            try:
                chunk = conn.recv(65536)
            except (ConnectionResetError, ssl.SSLError):
                break
            if not chunk:
                break
            out += chunk
        return out


def _request(api_key: int, version: int, body: bytes, corr: int = 1) -> bytes:
    client = b"raw"
    hdr = struct.pack(">hhih", api_key, version, corr, len(client)) + client
    if (api_key, version) == (36, 2) or (api_key == 18 and version >= 3):
        hdr += b"\x00"
    msg = hdr + body
    return struct.pack(">i", len(msg)) + msg


def test_plaintext_client_on_tls_port_and_tls_client_on_plaintext_port(secure: SecureBroker) -> None:
    api_versions = _request(18, 0, b"")
    answer = _raw(secure.ports["SSL"], api_versions)
    assert answer == b"" or answer[:1] == b"\x15", "anything but nothing or a TLS alert"  # 0x15: alert record
    wait_until(lambda: "TLS handshake failed" in secure.broker.tail(), 10)
    tls = ssl.create_default_context(cafile=str(secure.pki.ca_pem))
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        _raw(secure.ports["PLAINTEXT"], api_versions, tls)
    assert len(roundtrip(secure.client_conf("SASL_PLAINTEXT"), f"after-raw-{uuid.uuid4().hex[:6]}", 5)) == 5


def test_metadata_before_sasl_closes_the_connection(secure: SecureBroker) -> None:
    metadata_v1 = _request(3, 1, struct.pack(">i", -1))
    assert _raw(secure.ports["SASL_PLAINTEXT"], metadata_v1) == b""
    # ApiVersions is allowed before authentication
    assert len(_raw_first(secure.ports["SASL_PLAINTEXT"], _request(18, 0, b""))) > 8


def _raw_first(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        (size,) = struct.unpack(">i", _exact(s, 4))
        return _exact(s, size)


def _roundtrip(s: socket.socket, data: bytes) -> bytes:
    """Send one frame, return the body of the size-prefixed answer."""
    s.sendall(data)
    (size,) = struct.unpack(">i", _exact(s, 4))
    return _exact(s, size)


def _exact(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def test_oversized_sasl_token_closes_the_connection(secure: SecureBroker) -> None:
    handshake = _request(17, 1, struct.pack(">h", 5) + b"PLAIN")
    token = b"\0alice\0" + b"x" * (600 * 1024)
    authenticate = _request(36, 1, struct.pack(">i", len(token)) + token)
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=10) as s:
        body = _roundtrip(s, handshake)
        assert struct.unpack_from(">h", body, 4)[0] == 0, "handshake error code"
        try:
            s.sendall(authenticate)
        except OSError:
            pass
        s.settimeout(10)
        try:
            assert s.recv(1) == b""
        except ConnectionResetError:
            pass
    assert "request size out of bounds" in secure.broker.tail()


def test_sasl_authenticate_failure_answers_58_then_closes(secure: SecureBroker) -> None:
    handshake = _request(17, 1, struct.pack(">h", 5) + b"PLAIN")
    token = b"\0alice\0nope"
    authenticate = _request(36, 1, struct.pack(">i", len(token)) + token, corr=2)
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=10) as s:
        _roundtrip(s, handshake)
        body = _roundtrip(s, authenticate)
        (corr, code) = struct.unpack_from(">ih", body, 0)
        assert (corr, code) == (2, 58)
        assert b"Invalid username or password" in body
        assert s.recv(1) == b"", "the connection stays open after a failed authentication"


def test_legacy_v0_handshake_with_raw_tokens(secure: SecureBroker) -> None:
    handshake = _request(17, 0, struct.pack(">h", 5) + b"PLAIN")
    token = b"\0alice\0alice-secret"
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=10) as s:
        _roundtrip(s, handshake)
        s.sendall(struct.pack(">i", len(token)) + token)
        (size,) = struct.unpack(">i", _exact(s, 4))
        assert size == 0  # PLAIN's empty server message
        metadata_v1 = _request(3, 1, struct.pack(">i", -1), corr=7)
        assert struct.unpack(">i", _roundtrip(s, metadata_v1)[:4])[0] == 7


def test_sasl_session_lifetime_is_returned(secure: SecureBroker) -> None:
    handshake = _request(17, 1, struct.pack(">h", 5) + b"PLAIN")
    token = b"\0alice\0alice-secret"
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=10) as s:
        _roundtrip(s, handshake)
        body = _roundtrip(s, _request(36, 1, struct.pack(">i", len(token)) + token, corr=3))
        corr, code, msg_len = struct.unpack_from(">ihh", body, 0)
        assert (corr, code, msg_len) == (3, 0, -1)
        (n,) = struct.unpack_from(">i", body, 8)
        (lifetime,) = struct.unpack_from(">q", body, 12 + n)
        assert 3_500_000 < lifetime <= 3_600_000


def test_ssl_mtls_principal_mapping_and_certificate_reload(tmp_path: Path) -> None:
    """ssl.client.auth=required with a RULE that maps only OU=clients: a mapped client works, an unmapped one is
    refused; a broker certificate replaced on disk is served to the next connection."""
    pki = make_pki(tmp_path / "pki")
    broker = StrataBroker(tmp_path / "broker")
    port = free_port()
    broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SSL://127.0.0.1:{port}",
            "listener.name.ssl.ssl.keystore.type": "PEM",
            "listener.name.ssl.ssl.keystore.location": str(pki.dir / "broker.pem"),
            "listener.name.ssl.ssl.truststore.type": "PEM",
            "listener.name.ssl.ssl.truststore.location": str(pki.ca_pem),
            "listener.name.ssl.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=clients,.*$/$1/L",
            # the mapped principal is what the authorizer judges: alice may use mtls* only
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
        }
    )
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for rtype, prefix in ((ResourceType.TOPIC, "mtls"), (ResourceType.GROUP, "g-mtls")):
            binding = AclBinding(
                rtype,
                prefix,
                ResourcePatternType.PREFIXED,
                "User:alice",
                "*",
                AclOperation.ALL,
                AclPermissionType.ALLOW,
            )
            for f in admin.create_acls([binding]).values():
                f.result(30)
        crt, key = pki.client("alice", "Alice", "clients")
        conf = {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca_pem),
            "ssl.certificate.location": str(crt),
            "ssl.key.location": str(key),
            "log_level": 0,
        }
        assert len(roundtrip(conf, "mtls", 10)) == 10
        wait_until(lambda: "no principal" not in broker.tail(), 1)
        # the same certificate outside alice's prefix: refused as User:alice (an unmapped name would be refused on
        # mtls too, and a super user nowhere)
        errors: list[int] = []
        p = Producer({**conf, "message.timeout.ms": 10000})
        p.produce("elsewhere", b"x", on_delivery=lambda err, _m: errors.append(err.code() if err else 0))
        p.flush(30)
        assert errors == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
        wait_until(lambda: "User:alice" in broker.tail() and "authorization denied" in broker.tail(), 10)

        crt2, key2 = pki.client("eve", "Eve", "outsiders")
        expect_failure({**conf, "ssl.certificate.location": str(crt2), "ssl.key.location": str(key2)})
        wait_until(lambda: "no principal for the client certificate" in broker.tail(), 10)
        # without a certificate: the handshake fails (client auth required)
        expect_failure({k: v for k, v in conf.items() if not k.startswith(("ssl.certificate", "ssl.key"))})

        # rotate the broker's certificate on disk: the next handshake presents the new one
        def served_serial() -> int:
            ctx = ssl.create_default_context(cafile=str(pki.ca_pem))
            ctx.load_cert_chain(str(crt), str(key))
            with (
                socket.create_connection(("127.0.0.1", port), timeout=5) as s,
                ctx.wrap_socket(s, server_hostname="127.0.0.1") as t,
            ):
                der = t.getpeercert(binary_form=True)
            assert der is not None
            from cryptography import x509

            return x509.load_der_x509_certificate(der).serial_number

        before = served_serial()
        time.sleep(0.01)  # a distinct mtime on filesystems with coarse timestamps
        pki.leaf("broker", "127.0.0.1", "localhost", cn="broker-rotated")
        wait_until(lambda: served_serial() != before, 10)
        assert len(roundtrip(conf, "mtls-after", 5)) == 5
    finally:
        broker.stop()


def _authenticated_socket(port: int) -> tuple[socket.socket, int]:
    """A socket that passed SASL/PLAIN as alice (v1 handshake, v1 authenticate), and its session lifetime."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    _roundtrip(s, _request(17, 1, struct.pack(">h", 5) + b"PLAIN"))
    token = b"\0alice\0alice-secret"
    body = _roundtrip(s, _request(36, 1, struct.pack(">i", len(token)) + token, corr=3))
    (n,) = struct.unpack_from(">i", body, 8)
    (lifetime,) = struct.unpack_from(">q", body, 12 + n)
    return s, lifetime


def test_expired_session_is_closed_on_its_next_request(secure: SecureBroker) -> None:
    s, lifetime = _authenticated_socket(secure.ports["SHORT"])
    with s:
        assert 0 < lifetime <= REAUTH_MS
        metadata_v1 = _request(3, 1, struct.pack(">i", -1), corr=8)
        assert struct.unpack(">i", _roundtrip(s, metadata_v1)[:4])[0] == 8  # within the session: served
        expires = time.monotonic() + lifetime / 1000
        wait_until(lambda: time.monotonic() > expires + 0.1, lifetime / 1000 + 5)  # the session's end, not a sync
        s.sendall(metadata_v1)
        try:
            assert s.recv(1) == b"", "an expired session was served"
        except ConnectionResetError:
            pass


def test_librdkafka_reauthenticates_before_the_session_ends(secure: SecureBroker) -> None:
    """KIP-368 end to end: a consumer that polls for several session lifetimes keeps working (librdkafka
    re-authenticates on the same connections) and the broker counts the re-authentications."""
    conf = secure.client_conf("SASL_PLAINTEXT", **{"bootstrap.servers": secure.bootstrap("SHORT")})
    topic = f"reauth-{uuid.uuid4().hex[:6]}"
    p = Producer(conf)
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 4 * REAUTH_MS / 1000
    i = 0
    try:
        while time.monotonic() < deadline or len(got) < i:
            p.produce(topic, value=f"r{i}".encode())
            p.flush(10)
            i += 1
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value() or b"")
            assert time.monotonic() < deadline + 30, "records stopped flowing"
    finally:
        c.close()
    assert len(got) == i
    text = secure.metrics()
    line = next(
        (
            x
            for x in text.splitlines()
            if x.startswith('strata_network_successful_reauthentication_total{listener="SHORT"')
        ),
        "",
    )
    assert line and float(line.split()[-1]) > 0, "no re-authentication counted"


def test_example_sasl_ssl_properties_serve_as_documented(tmp_path: Path) -> None:
    """config/server-sasl-ssl.properties as shipped (only ports and paths changed) with the certificates
    scripts/gen_certs.py writes, and the client settings docs/security.md shows."""
    import subprocess
    import sys

    from strata.config import parse_properties
    from tests.support.broker_proc import REPO_ROOT

    certs = tmp_path / "certs"
    subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gen_certs.py"), str(certs)], check=True, timeout=60)
    props = parse_properties((REPO_ROOT / "config" / "server-sasl-ssl.properties").read_text())
    broker = StrataBroker(tmp_path / "broker")
    tls_port = free_port()
    props["listeners"] = props["listeners"].replace("9092", str(broker.port)).replace("9093", str(tls_port))
    props.pop("log.dirs")
    props["ssl.keystore.location"] = str(certs / "broker.pem")
    props["ssl.truststore.location"] = str(certs / "ca.pem")
    broker.overrides.update(props)
    broker.start()
    try:
        conf = {
            "bootstrap.servers": f"127.0.0.1:{tls_port}",
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(certs / "ca.pem"),
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
            "log_level": 0,
        }
        assert len(roundtrip(conf, "example", 5)) == 5
    finally:
        broker.stop()


def test_kcat_over_sasl_ssl(secure: SecureBroker) -> None:
    import shutil
    import subprocess

    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat is not installed")
    topic = f"kcat-{uuid.uuid4().hex[:6]}"
    base = [
        kcat,
        "-b",
        secure.bootstrap("SASL_SSL"),
        "-X",
        "security.protocol=SASL_SSL",
        "-X",
        f"ssl.ca.location={secure.pki.ca_pem}",
        "-X",
        "sasl.mechanism=PLAIN",
        "-X",
        "sasl.username=alice",
        "-X",
        "sasl.password=alice-secret",
        "-t",
        topic,
    ]
    lines = "".join(f"k{i}\n" for i in range(10))
    subprocess.run([*base, "-P"], input=lines.encode(), check=True, timeout=60)
    out = subprocess.run([*base, "-C", "-o", "beginning", "-e", "-c", "10"], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr[-500:]
    assert out.stdout.decode().split() == [f"k{i}" for i in range(10)]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_users_from_the_store_authenticate(secure: SecureBroker, mechanism: str) -> None:
    """A credential added with AlterUserScramCredentials (over the PLAINTEXT listener) lets confluent-kafka and
    kafka-python produce and consume over SASL_SSL with that mechanism; a wrong password is refused with 58."""
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    from tests.support import ck

    user = f"scram-{mechanism[-3:]}"
    password = f"pw-{uuid.uuid4().hex[:10]}"
    mech = ScramMechanism.SCRAM_SHA_256 if mechanism.endswith("256") else ScramMechanism.SCRAM_SHA_512
    admin = ck.admin(secure.bootstrap("PLAINTEXT"))
    up = UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, 4096), password.encode())
    for fut in admin.alter_user_scram_credentials([up]).values():
        fut.result(30)
    conf = secure.client_conf(
        "SASL_SSL", **{"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
    )
    topic = f"scram-{mechanism[-3:]}-{uuid.uuid4().hex[:6]}"
    assert len(roundtrip(conf, topic, 20)) == 20

    from kafka import KafkaProducer

    prod = KafkaProducer(
        bootstrap_servers=secure.bootstrap("SASL_SSL"),
        security_protocol="SASL_SSL",
        ssl_cafile=str(secure.pki.ca_pem),
        sasl_mechanism=mechanism,
        sasl_plain_username=user,
        sasl_plain_password=password,
    )
    prod.send(topic, b"from-kafka-python").get(timeout=30)
    prod.close()

    err = expect_failure({**conf, "sasl.password": "not-" + password})
    assert "Authentication failed" in err, err
    assert password not in secure.broker.tail().split("\n", 2)[-1]


def test_sasl_requests_on_a_plaintext_listener_answer_illegal_sasl_state(secure: SecureBroker) -> None:
    with socket.create_connection(("127.0.0.1", secure.ports["PLAINTEXT"]), timeout=10) as s:
        body = _roundtrip(s, _request(17, 1, struct.pack(">h", 5) + b"PLAIN"))
        assert struct.unpack_from(">h", body, 4)[0] == 34  # ILLEGAL_SASL_STATE, as Kafka
        token = b"\0alice\0alice-secret"
        body = _roundtrip(s, _request(36, 1, struct.pack(">i", len(token)) + token, corr=2))
        assert struct.unpack_from(">h", body, 4)[0] == 34


def test_unsupported_mechanism_lists_the_enabled_ones_then_closes(secure: SecureBroker) -> None:
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=10) as s:
        body = _roundtrip(s, _request(17, 1, struct.pack(">h", 6) + b"GSSAPI"))
        assert struct.unpack_from(">h", body, 4)[0] == 33  # UNSUPPORTED_SASL_MECHANISM
        assert b"PLAIN" in body and b"SCRAM-SHA-256" in body
        assert s.recv(1) == b""


def test_a_silent_tls_handshake_is_closed_after_the_idle_time_and_others_are_served(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    broker = StrataBroker(tmp_path / "broker")
    port = free_port()
    broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SSL://127.0.0.1:{port}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.dir / "broker.pem"),
            "connections.max.idle.ms": "1500",
        }
    )
    broker.start()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as silent:
            # meanwhile a TLS client is served
            ctx = ssl.create_default_context(cafile=str(pki.ca_pem))
            with (
                socket.create_connection(("127.0.0.1", port), timeout=10) as s,
                ctx.wrap_socket(s, server_hostname="127.0.0.1") as t,
            ):
                body = _roundtrip(t, _request(18, 0, b""))
                assert struct.unpack_from(">h", body, 4)[0] == 0
            started = time.monotonic()
            assert silent.recv(1) == b"", "the broker sent something to a client that never said hello"
            assert time.monotonic() - started < 15
        wait_until(lambda: "handshake timed out" in broker.tail(), 10)
        # a probe that connects and closes is not a failed authentication (the liveness watcher does this); the
        # TLS round trip after it is accepted later, so by then the probe's close has usually been seen
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as s,
            ctx.wrap_socket(s, server_hostname="127.0.0.1") as t,
        ):
            _roundtrip(t, _request(18, 0, b""))
        text = urllib_get(f"http://127.0.0.1:{broker.metrics_port}/metrics")
        line = next(x for x in text.splitlines() if x.startswith("strata_network_failed_authentication_total{"))
        assert float(line.split()[-1]) == 1.0, line
    finally:
        broker.stop()


def urllib_get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def test_oauthbearer_jwt_validated_against_a_jwks(secure: SecureBroker) -> None:
    """confluent-kafka with an oauth_cb handing signed JWTs: the right issuer and audience are served; a token of
    another issuer is refused."""
    base = {
        "bootstrap.servers": secure.bootstrap("JWT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "log_level": 0,
    }
    conf = {**base, "oauth_cb": lambda _cfg: signed_jwt("svc-orders")}
    assert len(roundtrip(conf, f"jwt-{uuid.uuid4().hex[:6]}", 10)) == 10
    bad = {**base, "oauth_cb": lambda _cfg: signed_jwt("svc-orders", issuer="https://evil.test")}
    err = expect_failure(bad)
    assert "invalid_token" in err, err
    wait_until(lambda: "reason='Invalid issuer'" in secure.broker.tail(), 10)


def test_aiokafka_over_sasl_ssl(secure: SecureBroker) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    topic = f"aio-{uuid.uuid4().hex[:6]}"

    async def run() -> list[bytes]:
        kw: dict[str, Any] = {
            "bootstrap_servers": secure.bootstrap("SASL_SSL"),
            "security_protocol": "SASL_SSL",
            "ssl_context": create_ssl_context(cafile=str(secure.pki.ca_pem)),
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "alice",
            "sasl_plain_password": "alice-secret",
        }
        prod = AIOKafkaProducer(**kw)
        await prod.start()
        try:
            for i in range(10):
                await prod.send_and_wait(topic, f"a{i}".encode())
        finally:
            await prod.stop()
        cons = AIOKafkaConsumer(topic, group_id=f"g-{topic}", auto_offset_reset="earliest", **kw)
        await cons.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(60):
                async for m in cons:
                    got.append(m.value or b"")
                    if len(got) == 10:
                        break
        finally:
            await cons.stop()
        return got

    assert sorted(asyncio.run(run())) == sorted(f"a{i}".encode() for i in range(10))


def test_kafkajs_produces_over_sasl_ssl(secure: SecureBroker, tmp_path: Path) -> None:
    import base64
    import shutil

    from tests.integration.test_kafkajs import JS_DIR, run_node

    if shutil.which("node") is None or not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        pytest.skip("node or tests/js/node_modules (make node-deps) missing")
    topic = f"kjs-{uuid.uuid4().hex[:6]}"
    spec = {
        "brokers": [secure.bootstrap("SASL_SSL")],
        "topic": topic,
        "partitions": 1,
        "codec": "none",
        "records": [
            {
                "p": 0,
                "k": base64.b64encode(b"k").decode(),
                "v": base64.b64encode(f"j{i}".encode()).decode(),
                "h": [],
                "ts": int(time.time() * 1000),
            }
            for i in range(10)
        ],
        "ssl_ca": secure.pki.ca_pem.read_text(),
        "sasl": {"mechanism": "plain", "username": "alice", "password": "alice-secret"},
    }
    out = run_node(spec, tmp_path)
    assert out["created"] is True
    assert [(o["low"], o["high"]) for o in out["offsets"]] == [(0, 10)]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_inter_broker_client_authenticates_over_sasl_ssl(secure: SecureBroker, mechanism: str) -> None:
    """The client the brokers use among themselves (BrokerConnection with the inter-broker ClientSecurity: the
    listener's truststore, the JAAS username/password) against a real SASL_SSL listener; a wrong password is a
    BrokerConnectionError carrying Kafka's message."""
    import asyncio

    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    from strata.broker.cluster.broker_client import BrokerConnection, BrokerConnectionError
    from strata.broker.security.listener_security import ClientSecurity
    from strata.broker.security.ssl_config import SslSettings, build_client_context
    from strata.protocol.registry import ApiKey
    from tests.support import ck

    user, password = ("alice", "alice-secret") if mechanism == "PLAIN" else ("broker-ib", "ib-" + uuid.uuid4().hex[:8])
    if mechanism != "PLAIN":
        admin = ck.admin(secure.bootstrap("PLAINTEXT"))
        up = UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
        )
        for fut in admin.alter_user_scram_credentials([up]).values():
            fut.result(30)
    ctx = build_client_context(
        SslSettings({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(secure.pki.ca_pem)})
    )
    host, port = secure.bootstrap("SASL_SSL").split(":")

    async def metadata(pw: str) -> int:
        conn = BrokerConnection(host, int(port), "ib-test", 10.0, ClientSecurity("SASL_SSL", ctx, mechanism, user, pw))
        try:
            resp = await conn.request(ApiKey.METADATA, 1, topics=[])
            return len(resp.brokers)
        finally:
            await conn.close()

    assert asyncio.run(metadata(password)) == 1
    with pytest.raises(BrokerConnectionError, match="Authentication failed"):
        asyncio.run(metadata("wrong-" + password))
