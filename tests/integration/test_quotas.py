"""Client quotas (KIP-13/124/546) over real sockets: DescribeClientQuotas / AlterClientQuotas with Kafka's errors and
filters (no Python client has a quota admin API: raw requests and the `strata quotas` CLI), the quotas surviving a
restart, a producer and a consumer over their byte-rate quota throttled (throttle_time_ms as confluent-kafka reports
it, the connection muted), and an alter on one broker of an etcd cluster enforced by another."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from strata.cli.admin_client import AdminClient
from strata.cli.main import main as strata_main
from strata.cli.quotas import alter_client_quotas, describe_client_quotas
from strata.protocol.acl import CLUSTER_NAME, AclOperation, AclPermissionType, PatternType, ResourceType
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import REQUEST_CLASSES, ApiKey
from tests.support import ck
from tests.support.broker_proc import StrataBroker, free_port
from tests.support.cli_run import ok, strata
from tests.support.etcd_proc import etcd_binary
from tests.support.kafka_wire import WireClient, build_batch, decode_records
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

U, C = "user", "client-id"
PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";'
)


class QuotaBroker(StrataBroker):
    sasl_port: int  # its SASL_PLAINTEXT listener


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuotaBroker]:
    """One broker for the module: PLAINTEXT (`bootstrap`) and SASL_PLAINTEXT with PLAIN users alice and bob
    (`sasl_port`), so quotas by user are enforced on authenticated principals."""
    b = QuotaBroker(tmp_path_factory.mktemp("quotas"), name="quotas")
    b.sasl_port = free_port()
    b.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{b.sasl_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            # who may describe and alter quotas: ACLs on the cluster; topics have none, so everyone may use them
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "true",
        }
    )
    b.start()
    yield b
    b.stop()


def _sasl_wire(b: QuotaBroker, user: str) -> WireClient:
    """A raw connection authenticated as `user` with SASL/PLAIN (no Python client sends the quota APIs)."""
    w = WireClient("127.0.0.1", b.sasl_port, client_id=f"{user}-admin", timeout=30)
    assert w.request(REQUEST_CLASSES[ApiKey.SASL_HANDSHAKE](version=1, mechanism="PLAIN")).error_code == 0
    token = f"\0{user}\0{user}-secret".encode()
    auth = w.request(REQUEST_CLASSES[ApiKey.SASL_AUTHENTICATE](version=2, auth_bytes=token))
    assert auth.error_code == 0, auth
    return w


def test_describe_and_alter_need_cluster_describe_configs_and_alter_configs(quota_broker: QuotaBroker) -> None:
    """Kafka's checks: DESCRIBE_CONFIGS on the cluster to describe, ALTER_CONFIGS to alter; bob holds only the
    first, alice neither (the cluster has an ACL, so allow.everyone.if.no.acl.found does not apply to it)."""
    D, A = REQUEST_CLASSES[ApiKey.DESCRIBE_CLIENT_QUOTAS], REQUEST_CLASSES[ApiKey.ALTER_CLIENT_QUOTAS]
    CreateAcls = REQUEST_CLASSES[ApiKey.CREATE_ACLS]
    bob_may_describe = CreateAcls.AclCreation(
        resource_type=ResourceType.CLUSTER,
        resource_name=CLUSTER_NAME,
        resource_pattern_type=PatternType.LITERAL,
        principal="User:bob",
        host="*",
        operation=AclOperation.DESCRIBE_CONFIGS,
        permission_type=AclPermissionType.ALLOW,
    )
    with AdminClient(quota_broker.bootstrap) as admin:  # ANONYMOUS on PLAINTEXT: a super user here
        created = admin.request(ApiKey.CREATE_ACLS, 3, creations=[bob_may_describe])
        assert [r.error_code for r in created.results] == [0]
    describe = D(version=1, components=[], strict=False)
    alter = A(
        version=1,
        entries=[
            A.EntryData(
                entity=[A.EntryData.EntityData(entity_type=C, entity_name="by-acl")],
                ops=[A.EntryData.OpData(key="producer_byte_rate", value=1000.0, remove=False)],
            )
        ],
        validate_only=False,
    )
    denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    with _sasl_wire(quota_broker, "alice") as alice, _sasl_wire(quota_broker, "bob") as bob:
        r = alice.request(describe)
        assert (r.error_code, r.error_message, r.entries) == (denied, "Cluster authorization failed.", None)
        assert bob.request(describe).error_code == 0
        for w in (alice, bob):
            [entry] = w.request(alter).entries
            assert (entry.error_code, entry.entity[0].entity_name) == (denied, "by-acl")
    assert _describe(quota_broker.bootstrap, [(C, EXACT, "by-acl")]) == {}


EXACT, DEFAULT, SPECIFIED = 0, 1, 2


def _alter(bs: str, *alterations, validate_only: bool = False) -> list[tuple[int, str | None]]:
    with AdminClient(bs) as a:
        return [(code, msg) for _, code, msg in alter_client_quotas(a, list(alterations), validate_only)]


def _describe(bs: str, components=(), strict: bool = False) -> dict[tuple, dict[str, float]]:
    with AdminClient(bs) as a:
        return {tuple(sorted(e)): v for e, v in describe_client_quotas(a, list(components), strict)}


def _raw_describe(bs: str, components, strict: bool = False):
    R = REQUEST_CLASSES[ApiKey.DESCRIBE_CLIENT_QUOTAS]
    with AdminClient(bs) as a:
        comps = [R.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components]
        return a.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, components=comps, strict=strict)


def test_alter_describe_filters_errors_and_restart(broker_factory) -> None:
    b: StrataBroker = broker_factory()
    bs = b.bootstrap
    assert (
        _alter(
            bs,
            ([(U, "alice")], [("producer_byte_rate", 1024.0), ("consumer_byte_rate", 2048.0)]),
            ([(U, "alice"), (C, "app")], [("request_percentage", 12.5)]),
            ([(U, None)], [("producer_byte_rate", 4096.0)]),
            ([(C, None)], [("consumer_byte_rate", 512.0)]),
            ([(U, None), (C, "app")], [("producer_byte_rate", 100.0)]),
        )
        == [(0, None)] * 5
    )
    every = _describe(bs)
    assert every == {
        ((C, "app"), (U, "alice")): {"request_percentage": 12.5},
        ((U, "alice"),): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
        ((U, None),): {"producer_byte_rate": 4096.0},
        ((C, None),): {"consumer_byte_rate": 512.0},
        ((C, "app"), (U, None)): {"producer_byte_rate": 100.0},
    }
    # Kafka's matching: EXACT, DEFAULT (null name), SPECIFIED (any name), strict = no other entity type
    assert set(_describe(bs, [(U, EXACT, "alice")])) == {((U, "alice"),), ((C, "app"), (U, "alice"))}
    assert set(_describe(bs, [(U, EXACT, "alice")], strict=True)) == {((U, "alice"),)}
    assert set(_describe(bs, [(U, DEFAULT, None)])) == {((U, None),), ((C, "app"), (U, None))}
    assert set(_describe(bs, [(C, SPECIFIED, None)], strict=True)) == {((C, None),)}
    assert set(_describe(bs, [(U, SPECIFIED, None), (C, EXACT, "app")])) == {
        ((C, "app"), (U, "alice")),
        ((C, "app"), (U, None)),
    }
    assert _describe(bs, [(U, EXACT, "nobody")]) == {}

    # removal of one key, then of the last (the entity disappears); validate_only changes nothing
    assert _alter(bs, ([(U, "alice")], [("consumer_byte_rate", None)])) == [(0, None)]
    assert _alter(bs, ([(C, None)], [("consumer_byte_rate", None)])) == [(0, None)]
    assert _alter(bs, ([(U, "bob")], [("producer_byte_rate", 1.0)]), validate_only=True) == [(0, None)]
    after = _describe(bs)
    assert ((C, None),) not in after and ((U, "bob"),) not in after
    assert after[((U, "alice"),)] == {"producer_byte_rate": 1024.0}

    # per-entity errors as Kafka words them; the valid entity of the same request is applied
    bad = 42  # INVALID_REQUEST
    res = _alter(
        bs,
        ([], [("producer_byte_rate", 1.0)]),
        ([("group", "g")], [("producer_byte_rate", 1.0)]),
        ([(U, "")], [("producer_byte_rate", 1.0)]),
        ([(U, "x")], [("producer_byte_rate", 0.0)]),
        ([(U, "x1")], [("producer_byte_rate", 1.5)]),
        ([(U, "x2")], [("bogus", 1.0)]),
        ([(U, "x3")], [("controller_mutation_rate", 1.0)]),
        ([("ip", "1.2.3.4"), (U, "x4")], [("producer_byte_rate", 1.0)]),
        ([(U, "x5")], [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)]),
        ([(C, "ok")], [("request_percentage", 0.5)]),
    )
    assert [c for c, _ in res] == [bad] * 9 + [0]
    assert [m for _, m in res][:7] == [
        "Invalid empty client quota entity",
        "Unhandled client quota entity type: group",
        "Empty user not supported",
        "Quota producer_byte_rate must be greater than 0",
        "producer_byte_rate cannot be a fractional value.",
        "Invalid configuration key bogus",
        "controller_mutation_rate is not supported by Strata (no controller mutation quota)",
    ]
    assert "Duplicate quota key producer_byte_rate" in (res[8][1] or "")
    assert _describe(bs, [(C, EXACT, "ok")]) == {((C, "ok"),): {"request_percentage": 0.5}}
    assert _describe(bs, [(U, EXACT, "x5")]) == {}

    # filters Kafka refuses as a whole
    r = _raw_describe(bs, [(U, EXACT, None)])
    assert (r.error_code, r.error_message) == (bad, "Request specified MATCH_TYPE_EXACT, but set match string to null.")
    assert r.entries is None
    assert _raw_describe(bs, [("topic", SPECIFIED, None)]).error_code == ErrorCode.UNSUPPORTED_VERSION
    assert _raw_describe(bs, [(U, SPECIFIED, None), (U, DEFAULT, None)]).error_code == bad
    assert _raw_describe(bs, [(U, 7, None)]).error_message == "Unknown match type 7"

    before = _describe(bs)
    b.restart()
    assert _describe(bs) == before
    b.stop()
    stored = json.loads((b.log_dir / "strata-metadata.json").read_text())["client_quotas"]
    assert {"entity": "users/<default>", "values": {"producer_byte_rate": 4096.0}} in stored


def test_an_alter_of_more_than_10000_records_is_refused_whole(quota_broker: StrataBroker) -> None:
    """As Kafka's controller (MAX_RECORDS_PER_USER_OP): POLICY_VIOLATION for every entity, nothing stored."""
    alterations = [([(C, f"many-{i}")], [("producer_byte_rate", 1000.0)]) for i in range(10_001)]
    res = _alter(quota_broker.bootstrap, *alterations)
    assert {c for c, _ in res} == {ErrorCode.POLICY_VIOLATION} and len(res) == 10_001
    assert _describe(quota_broker.bootstrap, [(C, EXACT, "many-0")]) == {}
    assert _alter(quota_broker.bootstrap, *alterations[:10_000]) == [(0, None)] * 10_000


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`strata ...` run in this process (a subprocess costs a second of imports each)."""
    capsys.readouterr()
    rc = strata_main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_set_and_describe(quota_broker: StrataBroker, capsys: pytest.CaptureFixture[str]) -> None:
    bs = quota_broker.bootstrap
    out = ok(strata("quotas", "set", "--bootstrap-server", bs, "--user", "cli-alice", "--add-config",
                    "producer_byte_rate=1048576,consumer_byte_rate=20000000"))  # fmt: skip
    assert out.strip() == "Completed updating config for user cli-alice."
    assert _cli(capsys, "quotas", "set", "--bootstrap-server", bs, "--user-defaults", "--client", "cli-app",
                "--add-config", "request_percentage=50")[0] == 0  # fmt: skip
    rc, out, _ = _cli(capsys, "quotas", "set", "--bootstrap-server", bs, "--client-defaults", "--add-config",
                      "consumer_byte_rate=1024")  # fmt: skip
    assert (rc, out.strip()) == (0, "Completed updating default config for clients in the cluster.")
    described = _cli(capsys, "quotas", "describe", "--bootstrap-server", bs)[1].splitlines()
    assert {
        "Quota configs for the default client-id are consumer_byte_rate=1024.0",
        "Quota configs for the default user-principal, client-id 'cli-app' are request_percentage=50.0",
        "Quota configs for user-principal 'cli-alice' are consumer_byte_rate=2.0E7, producer_byte_rate=1048576.0",
    } <= set(described)
    only = _cli(capsys, "quotas", "describe", "--bootstrap-server", bs, "--user", "cli-alice")[1].splitlines()
    assert only == [
        "Quota configs for user-principal 'cli-alice' are consumer_byte_rate=2.0E7, producer_byte_rate=1048576.0"
    ]
    for opts in (["--user", "cli-alice", "--delete-config", "consumer_byte_rate"],
                 ["--client-defaults", "--delete-config", "consumer_byte_rate"]):  # fmt: skip
        assert _cli(capsys, "quotas", "set", "--bootstrap-server", bs, *opts)[0] == 0
    after = _cli(capsys, "quotas", "describe", "--bootstrap-server", bs, "--user", "cli-alice")[1]
    assert "consumer_byte_rate" not in after and "producer_byte_rate" in after
    rc, _, err = _cli(capsys, "quotas", "set", "--bootstrap-server", bs, "--user", "x", "--add-config", "nope=1")
    assert rc == 1 and "Unexpected config names: nope" in err
    rc, _, err = _cli(capsys, "quotas", "set", "--bootstrap-server", bs, "--user", "x", "--add-config",
                      "producer_byte_rate=0.5")  # fmt: skip
    assert rc == 1 and "INVALID_REQUEST: producer_byte_rate cannot be a fractional value." in err


# ---- enforcement ------------------------------------------------------------------------------------------------

QUOTA = 100_000  # bytes/s; the rate divides by at least one window of 1 s
CHUNK = 300_000


def _set_client_quota(bs: str, client_id: str, key: str, value: float) -> None:
    assert _alter(bs, ([(C, client_id)], [(key, value)])) == [(0, None)]


def _scrape(b: StrataBroker) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=5).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def _produce_until_throttled(w: WireClient, topic: str, version: int) -> tuple[int, float]:
    """Produce CHUNK-byte batches until the broker answers with a throttle time; (throttle ms, answer's seconds)."""
    batch = build_batch([(None, b"x" * CHUNK, [])])
    for _ in range(10):
        started = time.monotonic()
        resp = w.produce(topic, 0, batch, version=version)
        took = time.monotonic() - started
        assert resp.responses[0].partition_responses[0].error_code == 0
        if resp.throttle_time_ms > 0:
            return resp.throttle_time_ms, took
    raise AssertionError("never throttled")


def test_producer_over_quota_is_told_and_muted(quota_broker: StrataBroker) -> None:
    bs = quota_broker.bootstrap
    _set_client_quota(bs, "raw-producer", "producer_byte_rate", QUOTA)
    before = _scrape(quota_broker)
    with WireClient.connect(bs, client_id="raw-producer", timeout=30) as w:
        assert w.create_topic("quota-produce").topics[0].error_code == 0
        throttle_ms, took = _produce_until_throttled(w, "quota-produce", version=7)
        # 300 kB within the first window: (300 kB/s - 100 kB/s) / 100 kB/s x 1 s = 2 s
        assert 1000 <= throttle_ms <= 4000, throttle_ms
        assert took < throttle_ms / 1000  # v7 (KIP-219): answered at once ...
        started = time.monotonic()
        w.api_versions(0)
        assert time.monotonic() - started >= throttle_ms / 1000 * 0.9  # ... and nothing more read until it passed
    produce = ("strata_client_quota_throttle_time_seconds_count", (("quota_type", "produce"),))
    assert _scrape(quota_broker)[produce] > before.get(produce, 0)
    # another client id has no quota: never throttled
    with WireClient.connect(bs, client_id="free-producer", timeout=30) as w:
        batch = build_batch([(None, b"x" * CHUNK, [])])
        assert all(w.produce("quota-produce", 0, batch).throttle_time_ms == 0 for _ in range(5))


def test_old_produce_version_gets_its_answer_after_the_throttle(quota_broker: StrataBroker) -> None:
    bs = quota_broker.bootstrap
    _set_client_quota(bs, "raw-producer-v5", "producer_byte_rate", QUOTA)
    with WireClient.connect(bs, client_id="raw-producer-v5", timeout=30) as w:
        w.create_topic("quota-produce-v5")
        throttle_ms, took = _produce_until_throttled(w, "quota-produce-v5", version=5)
        assert took >= throttle_ms / 1000 * 0.9  # Produce v5 predates KIP-219: the broker holds the answer back
        started = time.monotonic()
        w.api_versions(0)
        assert time.monotonic() - started < throttle_ms / 1000  # and does not mute the connection after it


def test_consumer_over_quota_is_throttled_and_then_gets_no_records(quota_broker: StrataBroker) -> None:
    bs = quota_broker.bootstrap
    with WireClient.connect(bs, client_id="loader", timeout=30) as w:
        w.create_topic("quota-fetch")
        for _ in range(2):
            w.produce("quota-fetch", 0, build_batch([(None, b"y" * CHUNK, [])]))
    _set_client_quota(bs, "raw-consumer", "consumer_byte_rate", QUOTA)
    with (
        WireClient.connect(bs, client_id="raw-consumer", timeout=30) as w,
        WireClient.connect(bs, client_id="raw-consumer", timeout=30) as other,
    ):
        first = w.fetch("quota-fetch", 0, 0, max_bytes=50 << 20)
        answered = time.monotonic()
        records = first.responses[0].partitions[0].records
        # capped to one quota window's worth (100 kB) though 50 MB were asked: only the first batch (KIP-74),
        # which this fetch takes over the quota: delivered, with the throttle time
        assert CHUNK < len(records) < 2 * CHUNK and first.throttle_time_ms > 0
        # the same client id on another connection, still over its quota: no records (Kafka's throttled fetch)
        second = other.fetch("quota-fetch", 0, decode_records(records)[-1].offset + 1)
        assert second.throttle_time_ms > 0 and second.responses == []
        w.api_versions(0)  # the first connection stays muted for its throttle time
        assert time.monotonic() - answered >= first.throttle_time_ms / 1000 * 0.9


def test_request_percentage_throttles_by_loop_time(quota_broker: StrataBroker) -> None:
    """A request quota of 0.01 % of a core: a few Metadata requests' handler time exceeds it; the throttle time is
    bounded to one window (1 s), as Kafka's request quota."""
    bs = quota_broker.bootstrap
    _set_client_quota(bs, "raw-requests", "request_percentage", 0.01)
    throttles: list[int] = []
    with WireClient.connect(bs, client_id="raw-requests", timeout=30) as w:
        while len(throttles) < 20 and not any(throttles):
            throttles.append(w.metadata(None, version=8).throttle_time_ms)
        throttles.append(w.metadata(None, version=8).throttle_time_ms)  # muted first; still over its quota
    assert throttles[-1] > 0 and all(t <= 1000 for t in throttles), throttles
    request = ("strata_client_quota_throttle_time_seconds_count", (("quota_type", "request"),))
    assert _scrape(quota_broker).get(request, 0) > 0


def _sasl_producer(b: QuotaBroker, user: str, throttles: list[float]) -> Producer:
    return Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{b.sasl_port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": f"{user}-secret",
            "client.id": "same-app",  # the same client id for both users: the quota is alice's, by user
            "linger.ms": 5,
            "throttle_cb": lambda ev: throttles.append(ev.throttle_time),
            **ck.QUIET,
        }
    )


def _produce_for(p: Producer, topic: str, seconds: float, stop: Callable[[], bool] = lambda: False) -> int:
    """Keep the producer's queue full for `seconds` (or until `stop()`); the bytes acknowledged."""
    acked = [0]

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked[0] += len(msg.value())

    value = b"z" * 50_000
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop():
        try:
            p.produce(topic, value, on_delivery=delivered)
        except BufferError:
            pass
        p.poll(0.05)
    p.purge()
    p.flush(1)
    return acked[0]


def test_user_quota_throttles_that_user_only(quota_broker: QuotaBroker) -> None:
    """A `/users/alice` producer_byte_rate: alice's confluent-kafka producer sees librdkafka's throttle events
    (the broker's throttle_time_ms) and gets about her quota; bob, with the same client id, is not throttled."""
    bs = quota_broker.bootstrap
    assert _alter(bs, ([(U, "alice")], [("producer_byte_rate", QUOTA)])) == [(0, None)]
    ck.create_topic(bs, "quota-users", 1)
    alice_throttles: list[float] = []
    alice = _sasl_producer(quota_broker, "alice", alice_throttles)
    assert _produce_for(alice, "quota-users", 30, stop=lambda: bool(alice_throttles)) > 0
    assert alice_throttles and max(alice_throttles) > 0
    bob_throttles: list[float] = []
    bob = _sasl_producer(quota_broker, "bob", bob_throttles)
    bob_bytes = _produce_for(bob, "quota-users", 2.0)
    assert bob_throttles == [] and bob_bytes > 4 * QUOTA  # far over alice's quota in 2 s, never throttled


def test_cluster_alter_on_one_broker_is_enforced_by_another(tmp_path: Path) -> None:
    if etcd_binary() is None:
        pytest.skip("etcd not installed")
    from tests.support.cluster_proc import StrataCluster

    with StrataCluster(tmp_path, size=2) as cluster:
        one, two = cluster.brokers[1], cluster.brokers[2]
        with AdminClient(two.bootstrap) as probe:  # connected beforehand: the wait measures the watch only
            assert _alter(one.bootstrap, ([(C, "cluster-producer")], [("producer_byte_rate", QUOTA)])) == [(0, None)]
            t0 = time.monotonic()
            wait_until(
                lambda: describe_client_quotas(probe, [(C, EXACT, "cluster-producer")], False) != [],
                5,
                message="seen by the other broker",
            )
            assert time.monotonic() - t0 < 1.0  # the etcd watch brings it within a second
        with WireClient.connect(two.bootstrap, client_id="loader", timeout=30) as w:
            assert w.create_topic("quota-cluster", partitions=2).topics[0].error_code == 0
            led_by_two = wait_until(lambda: _partitions_led_by(w, "quota-cluster", 2), 30)[0]
        cluster.restart(2)  # the quota comes back from etcd
        with WireClient.connect(two.bootstrap, client_id="cluster-producer", timeout=30) as w:
            batch = build_batch([(None, b"x" * CHUNK, [])])
            # retried while the restarted broker takes its partition back; 300 kB is over the quota at once
            resp = wait_until(lambda: _appended(w.produce("quota-cluster", led_by_two, batch)), 30)
            assert resp.throttle_time_ms > 0


def _partitions_led_by(w: WireClient, topic: str, broker_id: int) -> list[int]:
    """The partitions of `topic` that `broker_id` leads, once every partition has a leader ([] before)."""
    parts = w.metadata([topic]).topics[0].partitions
    if not parts or any(p.leader_id < 0 for p in parts):
        return []
    return [p.partition_index for p in parts if p.leader_id == broker_id]


def _appended(resp: Any) -> Any:
    return resp if resp.responses[0].partition_responses[0].error_code == 0 else None
