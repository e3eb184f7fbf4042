"""SCRAM user administration (KIP-554) through the clients that send it: confluent-kafka's AdminClient and
kafka-python's (both compute SaltedPassword themselves), Kafka's per-user errors on raw requests, the `strata users
scram` / `strata configs --entity-type users` CLI, credentials surviving a restart and verifying a real SCRAM exchange,
and a change on one broker of an etcd cluster described by another within a second."""

from __future__ import annotations

import time
from concurrent.futures import Future
from pathlib import Path
from typing import cast

import pytest
import scramp
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from confluent_kafka.admin import ScramMechanism as CkMechanism
from kafka.admin import KafkaAdminClient
from kafka.admin import ScramMechanism as KpMechanism
from kafka.admin import UserScramCredentialDeletion as KpDeletion
from kafka.admin import UserScramCredentialUpsertion as KpUpsertion

from strata.broker.metadata_store import LocalMetadataStore
from strata.broker.security.scram import ScramAuthenticationError, ScramServerExchange
from strata.cli.admin_client import AdminClient
from strata.cli.main import main as strata_main
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import REQUEST_CLASSES, ApiKey
from strata.protocol.scram import ScramMechanism
from tests.support import ck
from tests.support.broker_proc import StrataBroker
from tests.support.cli_run import fails, ok, strata
from tests.support.etcd_proc import etcd_binary
from tests.support.kafka_wire import WireClient
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
PASSWORD = "alice-secret"  # a test password, handed to clients through objects, files and stdin only


def _ck_upsert(user: str, mech: CkMechanism, iterations: int, password: str = PASSWORD):
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, iterations), password.encode())


def _ck_alter(bootstrap: str, alterations: list) -> dict[str, KafkaException | None]:
    out: dict[str, KafkaException | None] = {}
    admin = ck.admin(bootstrap)  # kept referenced until the futures are done: a collected client fails them
    for user, fut in admin.alter_user_scram_credentials(alterations).items():
        try:
            fut.result(30)
            out[user] = None
        except KafkaException as e:
            out[user] = e
    return out


def _described(bootstrap: str) -> dict[str, list[tuple[int, int]]]:
    admin = ck.admin(bootstrap)
    descs = cast(Future, admin.describe_user_scram_credentials()).result(30)  # users=None: one future
    return {u: sorted((i.mechanism.value, i.iterations) for i in d.scram_credential_infos) for u, d in descs.items()}


def _raw_alter(a: AdminClient, deletions=(), upsertions=()) -> dict[str, tuple[int, str | None]]:
    R = REQUEST_CLASSES[ApiKey.ALTER_USER_SCRAM_CREDENTIALS]
    resp = a.request(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        0,
        deletions=[R.ScramCredentialDeletion(name=u, mechanism=m) for u, m in deletions],
        upsertions=[
            R.ScramCredentialUpsertion(name=u, mechanism=m, iterations=i, salt=b"s" * 16, salted_password=b"p" * 32)
            for u, m, i in upsertions
        ],
    )
    return {r.user: (r.error_code, r.error_message) for r in resp.results}


def _authenticate(store: LocalMetadataStore, mech: ScramMechanism, user: str, password: str) -> str | None:
    """A full SCRAM exchange (scramp's client) against the stored credential; the user, or None if refused."""
    ex = ScramServerExchange(mech, lambda u: store.scram_credential(mech, u))
    client = scramp.ScramClient([mech.mechanism_name], user, password)
    try:
        client.set_server_first(ex.evaluate(client.get_client_first().encode()).decode())
        client.set_server_final(ex.evaluate(client.get_client_final().encode()).decode())
    except ScramAuthenticationError:
        return None
    return ex.username


def test_confluent_alter_describe_delete_and_restart(broker_factory) -> None:
    b: StrataBroker = broker_factory()
    res = _ck_alter(
        b.bootstrap,
        [_ck_upsert("alice", CkMechanism.SCRAM_SHA_256, 8192), _ck_upsert("bob", CkMechanism.SCRAM_SHA_512, 4096)],
    )
    assert res == {"alice": None, "bob": None}
    assert _ck_alter(b.bootstrap, [_ck_upsert("alice", CkMechanism.SCRAM_SHA_512, 16384)]) == {"alice": None}
    assert _described(b.bootstrap) == {"alice": [(1, 8192), (2, 16384)], "bob": [(2, 4096)]}

    admin = ck.admin(b.bootstrap)
    futs = cast(dict[str, Future], admin.describe_user_scram_credentials(["bob", "nobody"]))
    assert [i.mechanism.value for i in futs["bob"].result(30).scram_credential_infos] == [2]
    with pytest.raises(KafkaException) as e:
        futs["nobody"].result(30)
    assert e.value.args[0].code() == ErrorCode.RESOURCE_NOT_FOUND

    assert _ck_alter(b.bootstrap, [UserScramCredentialDeletion("bob", CkMechanism.SCRAM_SHA_512)]) == {"bob": None}
    assert _described(b.bootstrap) == {"alice": [(1, 8192), (2, 16384)]}

    b.restart()
    assert _described(b.bootstrap) == {"alice": [(1, 8192), (2, 16384)]}
    b.stop()
    # what the broker stored from confluent-kafka's SaltedPassword verifies a real exchange, and holds no password
    store = LocalMetadataStore(b.log_dir)
    assert PASSWORD not in store.path.read_text()
    assert _authenticate(store, SHA256, "alice", PASSWORD) == "alice"
    assert _authenticate(store, SHA512, "alice", PASSWORD) == "alice"
    assert _authenticate(store, SHA256, "alice", "not-" + PASSWORD) is None
    assert _authenticate(store, SHA512, "bob", PASSWORD) is None


def test_kafka_python_alter_and_describe(broker) -> None:
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        errors = kp.alter_user_scram_credentials(
            [KpUpsertion("carol", KpMechanism.SCRAM_SHA_256, PASSWORD, iterations=4096), KpDeletion("dave", 1)]
        )
        assert errors["carol"] is None and errors["dave"] is not None  # dave has no credential to delete
        described = kp.describe_user_scram_credentials(["carol"])
        assert described["carol"]["error"] is None
        assert [(int(c["mechanism"]), c["iterations"]) for c in described["carol"]["credential_infos"]] == [(1, 4096)]
    finally:
        kp.close()
    with AdminClient(broker.bootstrap) as a:  # a second look through the raw codec: carol is stored once
        assert [(u.user, u.credentials) for u in a.describe_user_scram_credentials()] == [("carol", [(SHA256, 4096)])]


def test_kafka_errors_per_user(broker) -> None:
    with AdminClient(broker.bootstrap) as a:
        assert _raw_alter(a, upsertions=[("ok", 1, 4096)]) == {"ok": (0, None)}
        res = _raw_alter(
            a,
            deletions=[("ok", 1), ("ghost", 2), ("ok", 1)],  # as Kafka: a refused first deletion is no duplicate
            upsertions=[
                ("few", 1, 4095),
                ("many", 2, 16385),
                ("", 1, 4096),
                ("mech", 7, 4096),
                ("dup", 1, 4096),
                ("dup", 2, 4096),
                ("good", 2, 8192),
            ],
        )
        codes = {u: c for u, (c, _) in res.items()}
        assert codes == {
            "ok": ErrorCode.DUPLICATE_RESOURCE,
            "ghost": ErrorCode.RESOURCE_NOT_FOUND,
            "few": ErrorCode.UNACCEPTABLE_CREDENTIAL,
            "many": ErrorCode.UNACCEPTABLE_CREDENTIAL,
            "": ErrorCode.UNACCEPTABLE_CREDENTIAL,
            "mech": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
            "dup": ErrorCode.DUPLICATE_RESOURCE,
            "good": ErrorCode.NONE,
        }
        assert res["few"][1] == "Too few iterations" and res["many"][1] == "Too many iterations"
        # the valid user of a partly refused request is stored; the refused ones are not
        assert {u.user for u in a.describe_user_scram_credentials()} == {"ok", "good"}

        D = REQUEST_CLASSES[ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS]
        resp = a.request(
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=[D.UserName(name=n) for n in ("ok", "x", "ok")]
        )
        assert resp.error_code == 0
        assert {r.user: r.error_code for r in resp.results} == {
            "ok": ErrorCode.DUPLICATE_RESOURCE,
            "x": ErrorCode.RESOURCE_NOT_FOUND,
        }
        empty = a.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=[])  # empty = every user, as null
        assert sorted(r.user for r in empty.results) == ["good", "ok"]


def test_undecodable_alter_is_logged_without_its_salted_password(broker) -> None:
    R = REQUEST_CLASSES[ApiKey.ALTER_USER_SCRAM_CREDENTIALS]
    secret = bytes(range(0xA0, 0xC0))
    up = R.ScramCredentialUpsertion(name="a", mechanism=1, iterations=4096, salt=b"s", salted_password=secret)
    req = R(version=0, deletions=[], upsertions=[up])
    req.with_header(correlation_id=1, client_id="c")
    frame = bytes(req.encode(header=True, framed=True))
    body = frame[4:-2] + b"\xff\xff"  # the tagged fields at the end replaced by garbage: undecodable
    with WireClient.connect(broker.bootstrap) as w:
        w.send_raw(len(body).to_bytes(4, "big") + body)
        assert w.wait_closed()
    wait_until(lambda: "undecodable request" in broker.output(), 10, message="the refusal logged")
    assert secret.hex()[:16] not in broker.output()
    with AdminClient(broker.bootstrap) as a:  # still serving
        assert a.describe_user_scram_credentials() == []


def test_cli_users_scram_and_configs_users(broker, tmp_path: Path, capsys) -> None:
    bs = broker.bootstrap
    pw = tmp_path / "alice.password"
    pw.write_text(PASSWORD + "\n")
    out = ok(strata("users", "scram", "add", "--bootstrap-server", bs, "--user", "alice",
                    "--mechanism", "SCRAM-SHA-256", "--iterations", "8192", "--password-file", str(pw)))  # fmt: skip
    assert PASSWORD not in out
    r = strata("users", "scram", "add", "--bootstrap-server", bs, "--user", "bob", "--mechanism", "SCRAM-SHA-512",
               "--password-stdin", stdin="bob-secret\n")  # fmt: skip
    ok(r)
    listed = ok(strata("users", "scram", "list", "--bootstrap-server", bs))
    assert listed.splitlines() == [
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192",
        "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-512=iterations=4096",
    ]
    assert "bob" not in ok(strata("users", "scram", "list", "--bootstrap-server", bs, "--user", "alice"))
    err = fails(strata("users", "scram", "add", "--bootstrap-server", bs, "--user", "x", "--mechanism",
                       "SCRAM-SHA-256", "--iterations", "100", "--password-stdin", stdin="pw\n"))  # fmt: skip
    assert "UNACCEPTABLE_CREDENTIAL" in err or "iterations" in err
    assert "x" not in [u.user for u in AdminClient(bs).describe_user_scram_credentials()]

    # refused before connecting: no password source off a terminal; a config that is no SCRAM mechanism
    nowhere = "127.0.0.1:1"
    err = fails(strata("users", "scram", "add", "--bootstrap-server", nowhere, "--user", "x", "--mechanism",
                       "SCRAM-SHA-256", stdin=""))  # fmt: skip
    assert "--password-file or --password-stdin" in err
    err = fails(strata("configs", "--bootstrap-server", nowhere, "alter", "--entity-type", "users", "--entity-name",
                       "x", "--add-config", "producer_byte_rate=1024"))  # fmt: skip
    assert "Unexpected config names: producer_byte_rate" in err

    ok(strata("users", "scram", "delete", "--bootstrap-server", bs, "--user", "bob", "--mechanism", "SCRAM-SHA-512"))
    assert "RESOURCE_NOT_FOUND" in fails(
        strata("users", "scram", "delete", "--bootstrap-server", bs, "--user", "bob", "--mechanism", "SCRAM-SHA-512")
    )

    # kafka-configs' form; run in-process so that the password (part of Kafka's option value) is on no command line
    capsys.readouterr()
    scram = f"SCRAM-SHA-256=[iterations=4096,password={PASSWORD}],SCRAM-SHA-512=[password={PASSWORD}]"
    alter = ["alter", "--entity-type", "users", "--entity-name", "carol", "--add-config", scram]
    rc = strata_main(["configs", "--bootstrap-server", bs, *alter])
    assert rc == 0
    assert capsys.readouterr().out.strip() == "Completed updating config for user carol."
    described = ok(strata("configs", "--bootstrap-server", bs, "describe", "--entity-type", "users",
                          "--entity-name", "carol"))  # fmt: skip
    assert described.strip() == (
        "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-256=iterations=4096, "
        "SCRAM-SHA-512=iterations=4096"
    )
    ok(strata("configs", "--bootstrap-server", bs, "alter", "--entity-type", "users", "--entity-name", "carol",
              "--delete-config", "SCRAM-SHA-512"))  # fmt: skip
    every = ok(strata("configs", "--bootstrap-server", bs, "describe", "--entity-type", "users"))
    assert "user-principal 'carol' are SCRAM-SHA-256=iterations=4096\n" in every and "'alice'" in every
    broker.stop()
    store = LocalMetadataStore(broker.log_dir)
    assert _authenticate(store, SHA256, "alice", PASSWORD) == "alice"
    assert _authenticate(store, SHA512, "carol", PASSWORD) is None  # deleted
    assert _authenticate(store, SHA256, "carol", PASSWORD) == "carol"


def test_cluster_alter_on_one_broker_is_described_by_another(tmp_path: Path) -> None:
    if etcd_binary() is None:
        pytest.skip("etcd not installed")
    from tests.support.cluster_proc import StrataCluster

    cluster = StrataCluster(tmp_path, size=3).start()
    try:
        with AdminClient(cluster.brokers[cluster.ids[0]].bootstrap) as a:
            controller = a.metadata([]).controller_id
        others = [cluster.brokers[i] for i in cluster.ids if i != controller]
        sender, reader = others[0], others[-1]
        # sent to a broker that is not the controller: forwarded to it, and seen by a third broker
        with AdminClient(reader.bootstrap) as probe:  # connected beforehand: a probe costs a round trip
            assert _ck_alter(sender.bootstrap, [_ck_upsert("alice", CkMechanism.SCRAM_SHA_512, 8192)]) == {
                "alice": None
            }
            t0 = time.monotonic()
            wait_until(
                lambda: (
                    [(u.user, u.credentials) for u in probe.describe_user_scram_credentials()]
                    == [("alice", [(SHA512, 8192)])]
                ),
                5,
                message="seen by another broker",
            )
            assert time.monotonic() - t0 < 1.0  # the etcd watch brings it within a second
        assert _described(sender.bootstrap) == {"alice": [(2, 8192)]}
        assert _ck_alter(reader.bootstrap, [UserScramCredentialDeletion("alice", CkMechanism.SCRAM_SHA_512)]) == {
            "alice": None
        }
        wait_until(lambda: _described(sender.bootstrap) == {}, 5, message="deletion seen by another")
    finally:
        cluster.close()
