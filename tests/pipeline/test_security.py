"""The data source and sink over SASL_SSL with the option names of Spark's Kafka source (``kafka.security.protocol``,
``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.*``), and read.mode=direct's READ check (the executors read the
bucket with their own credentials: the broker must say the principal may READ the topic)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from strata.config.broker_config import BROKER_CONFIG_DEFS
from strata.pipeline.client import direct_read_refusal
from tests.pipeline.support import (
    consume_all,
    create_topic,
    df_records,
    direct_options,
    produce,
    s3_broker_overrides,
    wait_offloaded,
)
from tests.support.broker_proc import StrataBroker, free_port
from tests.support.certs import make_pki
from tests.support.s3_servers import MotoServer

SECRET = "spark-s3cret-Pq7"
READER_SECRET = "reader-s3cret-Lm2"
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'username="spark" password="{SECRET}" user_spark="{SECRET}" user_reader="{READER_SECRET}";'
)
# the authorizer (ACLs) when this checkout has it: spark and the test's plaintext helpers are super users
AUTHORIZER = "authorizer.class.name" in BROKER_CONFIG_DEFS
needs_authorizer = pytest.mark.skipif(not AUTHORIZER, reason="this broker has no authorizer (authorizer.class.name)")
TOPIC = "secure-history"


@dataclass
class SecureTiered:
    broker: StrataBroker
    sasl_ssl: str
    options: dict[str, str]  # the Spark source/sink options of a SASL_SSL client
    direct: dict[str, str]


@pytest.fixture(scope="module")
def secure_tiered(tmp_path_factory: pytest.TempPathFactory, pipeline_moto: MotoServer) -> Iterator[SecureTiered]:
    tmp = tmp_path_factory.mktemp("spark-secure")
    pki = make_pki(tmp / "pki")
    prefix = f"spark-secure-{uuid.uuid4().hex[:8]}/"
    broker = StrataBroker(tmp / "broker", s3_broker_overrides(pipeline_moto, prefix), name="spark-secure")
    port = free_port()
    broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_SSL://127.0.0.1:{port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
            "inter.broker.listener.name": "PLAINTEXT",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.dir / "broker.pem"),
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        }
    )
    if AUTHORIZER:
        broker.overrides.update(
            {
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": "User:spark;User:ANONYMOUS",
            }
        )
    broker.start()
    options = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": JAAS.split(" user_")[0] + ";",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(pki.ca_pem),
    }
    try:
        yield SecureTiered(broker, f"127.0.0.1:{port}", options, direct_options(pipeline_moto, prefix))
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def history(secure_tiered: SecureTiered) -> str:
    """A topic whose first records live only in the bucket, and a local tail."""
    bs = secure_tiered.broker.bootstrap
    create_topic(bs, TOPIC, 1, remote_storage_enable="true", segment_bytes=8192, local_retention_bytes=1)
    produce(bs, TOPIC, [{"key": f"k{i}".encode(), "value": f"v{i}".encode() * 30} for i in range(400)], batch_size=4096)
    wait_offloaded(bs, TOPIC, 0, at_least=200)
    produce(bs, TOPIC, [{"value": b"tail"} for _ in range(10)])
    return TOPIC


@pytest.mark.parametrize("mode", ["broker", "direct"])
def test_batch_read_over_sasl_ssl(spark, secure_tiered: SecureTiered, history: str, mode: str) -> None:
    opts = {"kafka.bootstrap.servers": secure_tiered.sasl_ssl, "subscribe": history, **secure_tiered.options}
    if mode == "direct":
        opts.update(secure_tiered.direct)  # no authorizer: the broker reports READ among the operations
    df = spark.read.format("strata").options(**opts).load()
    expected = consume_all(secure_tiered.broker.bootstrap, history)
    assert df_records(df) == expected and len(expected) == 410


def test_sink_writes_over_sasl_ssl(spark, secure_tiered: SecureTiered) -> None:
    out = f"secure-out-{uuid.uuid4().hex[:6]}"
    create_topic(secure_tiered.broker.bootstrap, out, 1)
    rows = [(f"k{i}".encode(), f"w{i}".encode()) for i in range(25)]
    df = spark.createDataFrame(rows, "key binary, value binary")
    opts = {"kafka.bootstrap.servers": secure_tiered.sasl_ssl, "topic": out, **secure_tiered.options}
    df.write.format("strata").options(**opts).mode("append").save()
    got = consume_all(secure_tiered.broker.bootstrap, out)
    assert sorted((r[2], r[3]) for r in got) == sorted(rows)


def test_a_wrong_password_fails_the_query_without_showing_it(spark, secure_tiered: SecureTiered, history: str) -> None:
    opts = {"kafka.bootstrap.servers": secure_tiered.sasl_ssl, "subscribe": history, **secure_tiered.options}
    opts["kafka.sasl.jaas.config"] = opts["kafka.sasl.jaas.config"].replace(SECRET, "wrong-" + SECRET[6:])
    with pytest.raises(Exception) as e:
        spark.read.format("strata").options(**opts).load().count()
    assert "authentication with PLAIN as spark failed: SASL_AUTHENTICATION_FAILED" in str(e.value), str(e.value)[:2000]
    assert "wrong-" + SECRET[6:] not in str(e.value)


def test_direct_mode_needs_read_among_the_authorized_operations() -> None:
    """The decision on the operations the broker reports (Metadata v8+ topic_authorized_operations)."""
    from confluent_kafka.admin import AclOperation

    assert direct_read_refusal("t", [AclOperation.READ, AclOperation.DESCRIBE]) is None
    msg = direct_read_refusal("t", [AclOperation.DESCRIBE, AclOperation.WRITE])
    assert msg is not None and "read.mode=direct refused for topic 't'" in msg and "lacks READ" in msg
    assert "read.mode=broker" in msg
    msg = direct_read_refusal("t", None)
    assert msg is not None and "does not report authorized operations" in msg


@needs_authorizer
def test_direct_mode_is_refused_without_read_on_the_topic(spark, secure_tiered: SecureTiered, history: str) -> None:
    """`reader` may DESCRIBE the topic but not READ it: direct mode is refused on the driver, before any executor
    touches the bucket."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": secure_tiered.broker.bootstrap, "log_level": 3})
    binding = AclBinding(
        ResourceType.TOPIC, history, ResourcePatternType.LITERAL, "User:reader", "*", AclOperation.DESCRIBE,
        AclPermissionType.ALLOW,
    )  # fmt: skip
    for f in admin.create_acls([binding], request_timeout=30).values():
        f.result()
    reader = dict(secure_tiered.options)
    reader["kafka.sasl.jaas.config"] = (
        reader["kafka.sasl.jaas.config"].replace('"spark"', '"reader"').replace(SECRET, READER_SECRET)
    )
    opts = {"kafka.bootstrap.servers": secure_tiered.sasl_ssl, "subscribe": history, **reader, **secure_tiered.direct}
    with pytest.raises(Exception) as e:
        spark.read.format("strata").options(**opts).load().count()
    text = str(e.value)
    assert f"read.mode=direct refused for topic '{history}': the principal lacks READ on it" in text, text[:3000]
    assert READER_SECRET not in text
