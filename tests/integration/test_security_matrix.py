"""The client security matrix (issue 18): every stock client over every way of authenticating, against one broker.

Clients: confluent-kafka, kcat (both librdkafka), kafka-python, aiokafka and kafkajs. Ways: TLS without a client
certificate (principal User:ANONYMOUS), mTLS (a client certificate mapped by `ssl.principal.mapping.rules`), and
SASL_SSL with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER (Kafka's unsecured JWS). Each case creates a topic
over the secured listener (kcat: auto-creation through Metadata), produces N records, consumes them in a consumer
group (subscribe, not assign) and commits; the test then checks the values, that the group's committed offsets
reached the log end (over the PLAINTEXT listener), and that the broker counted a successful authentication with
that listener and mechanism.

One module-scoped broker with three listeners: PLAINTEXT (the test's own checks), SSL (`ssl.client.auth=requested`,
a mapping rule without DEFAULT so an unmapped certificate is refused) and SASL_SSL with all four mechanisms.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support import ck
from tests.support.broker_proc import StrataBroker, free_port
from tests.support.certs import Pki, make_pki
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

N = 20
PARTITIONS = 2
JS_DIR = Path(__file__).resolve().parents[1] / "js"
PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)
OAUTH_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
MAPPING = "RULE:^CN=([^,]+),OU=clients,.*$/$1/L"  # no DEFAULT: a certificate outside OU=clients has no principal
SCRAM_PASSWORD = {"SCRAM-SHA-256": "s256-" + uuid.uuid4().hex[:12], "SCRAM-SHA-512": "s512-" + uuid.uuid4().hex[:12]}
CLIENTS = ["confluent", "kcat", "kafka-python", "aiokafka", "kafkajs"]
WAYS = ["SSL", "mTLS", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]


@dataclass(frozen=True)
class Auth:
    """How one case connects: the listener, and its SASL mechanism, credentials or client certificate."""

    listener: str  # SSL | SASL_SSL
    bootstrap: str
    ca: Path
    mechanism: str | None = None  # SASL mechanism; None on SSL
    user: str = ""
    password: str = ""
    cert: Path | None = None
    key: Path | None = None

    @property
    def metric_mechanism(self) -> str:
        return self.mechanism or "SSL"


def unsecured_jws(sub: str, lifetime_s: int = 3600) -> str:
    """Kafka's unsecured OAUTHBEARER token: an `alg: none` JWS with `sub` and `exp`, and no signature."""

    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    now = int(time.time())
    return f"{part({'alg': 'none'})}.{part({'sub': sub, 'iat': now, 'exp': now + lifetime_s})}."


class MatrixBroker:
    def __init__(self, broker: StrataBroker, ports: dict[str, int], pki: Pki, cert: tuple[Path, Path]) -> None:
        self.broker, self.ports, self.pki, self.cert = broker, ports, pki, cert

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def auth(self, way: str) -> Auth:
        if way in ("SSL", "mTLS"):
            crt, key = self.cert if way == "mTLS" else (None, None)
            return Auth("SSL", self.bootstrap("SSL"), self.pki.ca_pem, cert=crt, key=key)
        user, password = {
            "PLAIN": ("alice", "alice-secret"),
            "SCRAM-SHA-256": ("scram256", SCRAM_PASSWORD["SCRAM-SHA-256"]),
            "SCRAM-SHA-512": ("scram512", SCRAM_PASSWORD["SCRAM-SHA-512"]),
            "OAUTHBEARER": ("alice", ""),
        }[way]
        return Auth("SASL_SSL", self.bootstrap("SASL_SSL"), self.pki.ca_pem, way, user, password)

    def successful_authentications(self, listener: str, mechanism: str) -> float:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.broker.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        prefix = f'strata_network_successful_authentication_total{{listener="{listener}",mechanism="{mechanism}"}}'
        return sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith(prefix))


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("secmatrix")
    pki = make_pki(tmp / "pki")
    cert = pki.client("alice", "Alice", "clients")
    broker = StrataBroker(tmp / "broker")
    ports = {"PLAINTEXT": broker.port, "SSL": free_port(), "SASL_SSL": free_port()}
    broker.overrides.update(
        {
            "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
            "inter.broker.listener.name": "PLAINTEXT",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.dir / "broker.pem"),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca_pem),
            "listener.name.ssl.ssl.client.auth": "requested",
            "ssl.principal.mapping.rules": MAPPING,
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
            "offsets.topic.num.partitions": "1",
        }
    )
    broker.start()
    try:
        from confluent_kafka.admin import (
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialAlteration,
            UserScramCredentialUpsertion,
        )

        admin = ck.admin(broker.bootstrap)
        ups: list[UserScramCredentialAlteration] = [
            UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, 4096), SCRAM_PASSWORD[name].encode())
            for user, mech, name in (
                ("scram256", ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-256"),
                ("scram512", ScramMechanism.SCRAM_SHA_512, "SCRAM-SHA-512"),
            )
        ]
        for fut in admin.alter_user_scram_credentials(ups).values():
            fut.result(30)
        yield MatrixBroker(broker, ports, pki, cert)
    finally:
        broker.stop()


# -- the clients ---------------------------------------------------------------------------------------------------
def librdkafka_conf(a: Auth) -> dict[str, str]:
    """librdkafka properties (confluent-kafka's config dict, kcat's -X)."""
    conf = {"bootstrap.servers": a.bootstrap, "security.protocol": a.listener, "ssl.ca.location": str(a.ca)}
    if a.cert is not None and a.key is not None:
        conf.update({"ssl.certificate.location": str(a.cert), "ssl.key.location": str(a.key)})
    if a.mechanism == "OAUTHBEARER":  # librdkafka builds the unsecured JWS itself
        conf.update(
            {
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.config": f"principal={a.user}",
                "enable.sasl.oauthbearer.unsecure.jwt": "true",
            }
        )
    elif a.mechanism is not None:
        conf.update({"sasl.mechanism": a.mechanism, "sasl.username": a.user, "sasl.password": a.password})
    return conf


def run_confluent(a: Auth, topic: str, group: str) -> list[str]:
    conf: dict[str, Any] = {**librdkafka_conf(a), "log_level": 3}
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=30)[topic].result(30)
    p = Producer({**conf, "acks": "all", "linger.ms": 5})
    for i in range(N):
        p.produce(topic, key=str(i).encode(), value=f"v{i}".encode())
    assert p.flush(30) == 0, "undelivered records"
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < N and time.monotonic() < deadline:
            got += [(m.value() or b"").decode() for m in c.consume(N, 0.5) if m.error() is None]
        c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def run_kcat(a: Auth, topic: str, group: str) -> list[str]:
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat is not installed")
    props = [x for k, v in librdkafka_conf(a).items() if k != "bootstrap.servers" for x in ("-X", f"{k}={v}")]
    base = [kcat, "-b", a.bootstrap, *props]
    lines = "".join(f"v{i}\n" for i in range(N)).encode()
    subprocess.run([*base, "-P", "-t", topic], input=lines, check=True, timeout=60, capture_output=True)
    # -G: a balanced consumer (subscribe); -c N: exit after N records, closing the consumer commits its offsets
    out = subprocess.run(
        [*base, "-G", group, topic, "-c", str(N), "-q", "-f", "%s\\n", "-X", "auto.offset.reset=earliest"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-2000:]
    return out.stdout.decode().split()


def run_kafka_python(a: Auth, topic: str, group: str) -> list[str]:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient
    from kafka.errors import RebalanceInProgressError
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Token(AbstractTokenProvider):
        def token(self) -> str:
            return unsecured_jws(a.user)

    kw: dict[str, Any] = {"bootstrap_servers": a.bootstrap, "security_protocol": a.listener, "ssl_cafile": str(a.ca)}
    if a.cert is not None:
        kw.update({"ssl_certfile": str(a.cert), "ssl_keyfile": str(a.key)})
    if a.mechanism == "OAUTHBEARER":
        kw.update({"sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": Token()})
    elif a.mechanism is not None:
        kw.update({"sasl_mechanism": a.mechanism, "sasl_plain_username": a.user, "sasl_plain_password": a.password})
    admin = KafkaAdminClient(**kw)
    try:
        admin.create_topics({topic: {"num_partitions": PARTITIONS, "replication_factor": 1}})
    finally:
        admin.close()
    prod = KafkaProducer(acks="all", **kw)
    futures = [prod.send(topic, key=str(i).encode(), value=f"v{i}".encode()) for i in range(N)]
    prod.flush(30)
    for f in futures:
        f.get(timeout=30)
    prod.close()
    cons = KafkaConsumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, **kw)
    # the topic's metadata before joining: a leader that assigns without it rejoins at once, and kafka-python 3.0.12
    # sometimes stops heartbeating after such a rejoin (the session then expires with nothing consumed)
    assert len(cons.partitions_for_topic(topic)) == PARTITIONS
    cons.subscribe([topic])
    got: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < N and time.monotonic() < deadline:
            for recs in cons.poll(timeout_ms=200).values():
                got += [(r.value or b"").decode() for r in recs]
        while True:
            try:
                cons.commit()
                break
            except RebalanceInProgressError:  # a session lost under load: poll to rejoin, then commit, as it says
                assert time.monotonic() < deadline + 30, "the group never settled for the commit"
                cons.poll(timeout_ms=200)
    finally:
        cons.close()
    return got


def run_aiokafka(a: Auth, topic: str, group: str) -> list[str]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as AioNewTopic
    from aiokafka.helpers import create_ssl_context

    class Token(AbstractTokenProvider):
        async def token(self) -> str:
            return unsecured_jws(a.user)

    kw: dict[str, Any] = {
        "bootstrap_servers": a.bootstrap,
        "security_protocol": a.listener,
        "ssl_context": create_ssl_context(cafile=str(a.ca), certfile=a.cert, keyfile=a.key),
    }
    if a.mechanism == "OAUTHBEARER":
        kw.update({"sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": Token()})
    elif a.mechanism is not None:
        kw.update({"sasl_mechanism": a.mechanism, "sasl_plain_username": a.user, "sasl_plain_password": a.password})

    async def run() -> list[str]:
        admin = AIOKafkaAdminClient(**kw)
        await admin.start()
        try:
            await admin.create_topics([AioNewTopic(topic, PARTITIONS, 1)])
        finally:
            await admin.close()
        prod = AIOKafkaProducer(acks="all", **kw)
        await prod.start()
        try:
            sent = [await prod.send(topic, key=str(i).encode(), value=f"v{i}".encode()) for i in range(N)]
            await asyncio.gather(*sent)
        finally:
            await prod.stop()
        cons = AIOKafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, **kw)
        await cons.start()
        got: list[str] = []
        try:
            async with asyncio.timeout(60):
                while len(got) < N:
                    for recs in (await cons.getmany(timeout_ms=200)).values():
                        got += [(r.value or b"").decode() for r in recs]
            await cons.commit()
        finally:
            await cons.stop()
        return got

    return asyncio.run(run())


def run_kafkajs(a: Auth, topic: str, group: str, tmp_path: Path) -> list[str]:
    if shutil.which("node") is None or not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        pytest.skip("node or tests/js/node_modules (make node-deps) missing")
    ssl: dict[str, str] = {"ca": a.ca.read_text()}
    if a.cert is not None and a.key is not None:
        ssl.update({"cert": a.cert.read_text(), "key": a.key.read_text()})
    sasl: dict[str, str] | None = None
    if a.mechanism == "OAUTHBEARER":
        sasl = {"mechanism": "oauthbearer", "token": unsecured_jws(a.user)}
    elif a.mechanism is not None:
        sasl = {"mechanism": a.mechanism.lower(), "username": a.user, "password": a.password}
    spec = {"brokers": [a.bootstrap], "topic": topic, "partitions": PARTITIONS, "n": N, "group": group, "ssl": ssl}
    spec["sasl"] = sasl
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    proc = subprocess.run(
        ["node", str(JS_DIR / "secure_roundtrip.js"), str(path)], cwd=JS_DIR, capture_output=True, timeout=90
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    values: list[str] = json.loads(proc.stdout.decode().strip().splitlines()[-1])["values"]
    return [v.replace("j", "v", 1) for v in values]


# -- the matrix ----------------------------------------------------------------------------------------------------
def committed_and_end(bootstrap: str, topic: str, group: str) -> tuple[dict[int, int], dict[int, int]]:
    """The group's committed offsets and the log end offsets, read over the PLAINTEXT listener."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
    try:
        n = len(c.list_topics(topic, timeout=10).topics[topic].partitions)
        tps = [TopicPartition(topic, p) for p in range(n)]
        committed = {tp.partition: tp.offset for tp in c.committed(tps, timeout=10)}
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(n)}
    finally:
        c.close()
    return committed, ends


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_produces_and_consumes_in_a_group(matrix: MatrixBroker, client: str, way: str, tmp_path: Path) -> None:
    a = matrix.auth(way)
    tag = f"{client}-{way}".lower().replace("_", "-")
    topic, group = f"mx-{tag}-{uuid.uuid4().hex[:6]}", f"g-{tag}-{uuid.uuid4().hex[:6]}"
    before = matrix.successful_authentications(a.listener, a.metric_mechanism)
    if client == "confluent":
        got = run_confluent(a, topic, group)
    elif client == "kcat":
        got = run_kcat(a, topic, group)
    elif client == "kafka-python":
        got = run_kafka_python(a, topic, group)
    elif client == "aiokafka":
        got = run_aiokafka(a, topic, group)
    else:
        got = run_kafkajs(a, topic, group, tmp_path)
    assert sorted(got) == sorted(f"v{i}" for i in range(N))
    committed, ends = committed_and_end(matrix.bootstrap("PLAINTEXT"), topic, group)
    assert committed == ends and sum(ends.values()) == N, f"committed {committed}, log ends {ends}"
    assert matrix.successful_authentications(a.listener, a.metric_mechanism) > before, "no authentication counted"


def test_unmapped_client_certificate_is_refused_on_the_requested_listener(matrix: MatrixBroker) -> None:
    """The mTLS cases' certificate is mapped by the rule; one the rule does not map (no DEFAULT) is refused, so the
    mapping applies to the certificates a `requested` listener receives."""
    import socket
    import ssl
    import struct

    crt, key = matrix.pki.client("eve", "Eve", "outsiders")
    ctx = ssl.create_default_context(cafile=str(matrix.pki.ca_pem))
    ctx.load_cert_chain(str(crt), str(key))
    api_versions = struct.pack(">ihhih", 10, 18, 0, 1, 0)  # size, ApiVersions v0, correlation id 1, empty client id
    with socket.create_connection(("127.0.0.1", matrix.ports["SSL"]), timeout=10) as s:
        try:  # TLS 1.3: the client may finish its handshake before the broker looks at the certificate
            with ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
                t.sendall(api_versions)
                answer = t.recv(4)
        except (ssl.SSLError, ConnectionError):
            answer = b""
    assert answer == b"", "a certificate without a principal was served"
    wait_until(lambda: "no principal for the client certificate" in matrix.broker.tail(200), 10)
