"""ACL administration end to end: confluent-kafka's and kafka-python's admin clients create, describe and delete ACLs
over SASL, the ACLs decide what a principal may do (CLUSTER DESCRIBE/ALTER of the ACL APIs themselves, the
authorized operations of DescribeCluster), denials are counted, Kafka's per-entry errors for invalid bindings, the
`strata acls` CLI (kafka-acls' options and output), and the ACLs surviving a restart.

One broker for the module: PLAINTEXT (User:ANONYMOUS, a super user here: the loopback admin listener the CLI uses)
and SASL_PLAINTEXT with PLAIN users admin (super user) and alice (whatever the ACLs say)."""

from __future__ import annotations

import io
import socket
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KpResourceType
from kafka.errors import ClusterAuthorizationFailedError

from strata.cli.admin_client import AdminClient as StrataAdmin
from strata.cli.main import main as strata_main
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import REQUEST_CLASSES, ApiKey
from tests.support.broker_proc import StrataBroker, free_port
from tests.support.cli_run import ok, strata
from tests.support.kafka_wire import WireClient
from tests.support.session_fetch import answered
from tests.support.session_fetch import fetch as session_fetch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-pw-7c1" user_alice="alice-pw-2b9";'
)
USERS = {"admin": "admin-pw-7c1", "alice": "alice-pw-2b9"}


class AclBroker:
    def __init__(self, broker: StrataBroker, sasl_port: int) -> None:
        self.broker, self.sasl_port = broker, sasl_port

    @property
    def plaintext(self) -> str:
        return self.broker.bootstrap

    @property
    def sasl(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def ck(self, user: str) -> AdminClient:
        return AdminClient(
            {
                "bootstrap.servers": self.sasl,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": user,
                "sasl.password": USERS[user],
                "log_level": 0,
            }
        )

    def kp(self, user: str) -> KafkaAdminClient:
        return KafkaAdminClient(
            bootstrap_servers=self.sasl,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username=user,
            sasl_plain_password=USERS[user],
            request_timeout_ms=30000,
        )

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.broker.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclBroker]:
    broker = StrataBroker(tmp_path_factory.mktemp("acls"), name="acls")
    sasl_port = free_port()
    broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS",
        }
    )
    broker.start()
    try:
        yield AclBroker(broker, sasl_port)
    finally:
        broker.stop()


def _topic_acl(name: str, op: AclOperation, principal: str = "User:alice", **kw: Any) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC,
        name,
        kw.get("pattern", ResourcePatternType.LITERAL),
        principal,
        kw.get("host", "*"),
        op,
        kw.get("perm", AclPermissionType.ALLOW),
    )


def _cluster_acl(op: AclOperation, perm: AclPermissionType, principal: str = "User:alice") -> AclBinding:
    return AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, principal, "*", op, perm)


def _create(admin: AdminClient, bindings: list[AclBinding]) -> None:
    for fut in admin.create_acls(bindings, request_timeout=30).values():
        fut.result(30)


def _delete(admin: AdminClient, filt: AclBindingFilter) -> list[AclBinding]:
    [fut] = admin.delete_acls([filt], request_timeout=30).values()
    return list(fut.result(30))


def _filter(
    rtype: ResourceType = ResourceType.ANY,
    name: str | None = None,
    ptype: ResourcePatternType = ResourcePatternType.ANY,
    host: str | None = None,
) -> AclBindingFilter:
    """None matches anything (confluent-kafka's stubs type the strings as str)."""
    any_op, any_perm = AclOperation.ANY, AclPermissionType.ANY
    return AclBindingFilter(rtype, name, ptype, None, host, any_op, any_perm)  # type: ignore[arg-type]


def _all(admin: AdminClient) -> AclBindingFilter:
    return _filter()


_KP_ANY = ACLFilter(
    None,
    None,
    ACLOperation.ANY,
    ACLPermissionType.ANY,
    ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY),
)


def _code(e: pytest.ExceptionInfo[KafkaException]) -> int:
    return int(e.value.args[0].code())


def test_confluent_create_describe_delete(acl_broker: AclBroker) -> None:
    admin = acl_broker.ck("admin")
    wanted = [
        _topic_acl("orders", AclOperation.READ),
        _topic_acl("orders", AclOperation.WRITE, host="10.0.0.7"),
        _topic_acl("ord", AclOperation.DESCRIBE, pattern=ResourcePatternType.PREFIXED),
        _topic_acl("*", AclOperation.READ, principal="User:bob", perm=AclPermissionType.DENY),
        AclBinding(
            ResourceType.GROUP,
            "g1",
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        ),
    ]
    _create(admin, wanted)
    _create(admin, wanted[:1])  # creating one again is no error and stores no second copy
    everything = admin.describe_acls(_all(admin), request_timeout=30).result(30)
    assert sorted(map(str, everything)) == sorted(map(str, wanted))

    # MATCH: every ACL that applies to topic "orders" (literal, wildcard and prefixes)
    match = _filter(ResourceType.TOPIC, "orders", ResourcePatternType.MATCH)
    matched = admin.describe_acls(match, request_timeout=30).result(30)
    assert sorted(map(str, matched)) == sorted(map(str, wanted[:4]))

    by_host = _filter(host="10.0.0.7")
    assert [str(b) for b in _delete(admin, by_host)] == [str(wanted[1])]
    assert _delete(admin, by_host) == []
    assert len(_delete(admin, _all(admin))) == 4
    assert admin.describe_acls(_all(admin), request_timeout=30).result(30) == []


def _kp_describe(admin: KafkaAdminClient) -> list[ACL]:
    acls, _ = admin.describe_acls(_KP_ANY)  # raises the response's error (librdkafka drops DescribeAcls' error code)
    return list(acls)


def test_the_acls_decide_who_administers_acls(acl_broker: AclBroker) -> None:
    """alice has no ACL: DescribeAcls, CreateAcls and DeleteAcls are refused with CLUSTER_AUTHORIZATION_FAILED (and
    counted); an ALLOW of DESCRIBE on the cluster lets her describe, a DENY takes it back; ALTER lets her create."""
    admin, alice, kp_alice = acl_broker.ck("admin"), acl_broker.ck("alice"), acl_broker.kp("alice")
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            _kp_describe(kp_alice)
        with pytest.raises(KafkaException) as e:
            _create(alice, [_topic_acl("mine", AclOperation.ALL)])
        assert _code(e) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        with pytest.raises(KafkaException) as e:
            _delete(alice, _all(alice))
        assert _code(e) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        metrics = acl_broker.metrics()
        for op in ("DESCRIBE", "ALTER"):
            labels = f'listener="SASL_PLAINTEXT",operation="{op}",resource_type="CLUSTER"'
            assert f"strata_authorizer_denials_total{{{labels}}}" in metrics, metrics

        _create(admin, [_cluster_acl(AclOperation.DESCRIBE, AclPermissionType.ALLOW)])
        assert "\nstrata_authorizer_acls 1.0\n" in acl_broker.metrics()
        assert [a.principal for a in _kp_describe(kp_alice)] == ["User:alice"]  # she sees her own ACL
        assert len(alice.describe_acls(_all(alice), request_timeout=30).result(30)) == 1
        # DescribeCluster's authorized operations come from the same ACLs
        ops = alice.describe_cluster(include_authorized_operations=True, request_timeout=30).result(30)
        assert set(ops.authorized_operations) == {AclOperation.DESCRIBE}

        _create(admin, [_cluster_acl(AclOperation.ALL, AclPermissionType.DENY)])
        with pytest.raises(ClusterAuthorizationFailedError):  # DENY wins over ALLOW
            _kp_describe(kp_alice)

        _delete(admin, _all(admin))
        _create(admin, [_cluster_acl(AclOperation.ALTER, AclPermissionType.ALLOW)])
        _create(alice, [_topic_acl("mine", AclOperation.ALL)])  # ALTER on the cluster: she may create ACLs
        assert len(admin.describe_acls(_all(admin), request_timeout=30).result(30)) == 2
    finally:
        kp_alice.close()
        _delete(admin, _all(admin))


def test_kafka_python_create_describe_delete(acl_broker: AclBroker) -> None:
    admin = acl_broker.kp("admin")
    try:
        acl = ACL(
            "User:alice",
            "*",
            ACLOperation.WRITE,
            ACLPermissionType.ALLOW,
            ResourcePattern(KpResourceType.TOPIC, "kp-topic", ACLResourcePatternType.PREFIXED),
        )
        res = admin.create_acls([acl])
        assert res["failed"] == [] and len(res["succeeded"]) == 1
        any_filter = _KP_ANY
        described, err = admin.describe_acls(any_filter)
        assert err.errno == 0
        assert [(a.principal, a.operation, a.resource_pattern.resource_name) for a in described] == [
            ("User:alice", ACLOperation.WRITE, "kp-topic")
        ]
        [(_, deleted, err)] = admin.delete_acls([any_filter])
        assert err.errno == 0 and [a.resource_pattern.pattern_type for a in deleted] == [
            ACLResourcePatternType.PREFIXED
        ]
        assert admin.describe_acls(any_filter)[0] == []
    finally:
        admin.close()


def _raw_create(a: StrataAdmin, *creations: tuple[int, str, int, str, str, int, int]) -> list[tuple[int, str]]:
    C = REQUEST_CLASSES[ApiKey.CREATE_ACLS].AclCreation
    fields = ("resource_type", "resource_name", "resource_pattern_type", "principal", "host", "operation")
    items = [C(**dict(zip(fields, c[:6], strict=True)), permission_type=c[6]) for c in creations]
    resp = a.request(ApiKey.CREATE_ACLS, 3, creations=items)
    return [(r.error_code, r.error_message) for r in resp.results]


def test_invalid_bindings_get_kafkas_errors(acl_broker: AclBroker) -> None:
    INVALID = ErrorCode.INVALID_REQUEST
    with StrataAdmin(acl_broker.plaintext) as a:
        results = _raw_create(
            a,
            (4, "my-cluster", 3, "User:a", "*", 3, 3),
            (2, "", 3, "User:a", "*", 3, 3),
            (99, "t", 3, "User:a", "*", 3, 3),  # a code Kafka does not know reads as UNKNOWN
            (2, "t", 2, "User:a", "*", 3, 3),  # MATCH: a filter's pattern type
            (2, "t", 3, "User:a", "*", 1, 3),  # ANY operation
            (2, "t", 3, "User:a", "*", 3, 1),  # ANY permission
            (2, "valid-one", 3, "User:a", "*", 3, 3),
        )
        assert results == [
            (INVALID, "The only valid name for the CLUSTER resource is kafka-cluster"),
            (INVALID, "Invalid empty resource name"),
            (INVALID, "Invalid resourceType UNKNOWN"),
            (INVALID, "Invalid patternType MATCH"),
            (INVALID, "Invalid operation ANY"),
            (INVALID, "Invalid permissionType ANY"),
            (0, None),
        ]
        F = REQUEST_CLASSES[ApiKey.DELETE_ACLS].DeleteAclsFilter
        base = {"resource_name_filter": None, "principal_filter": None, "host_filter": None}
        resp = a.request(
            ApiKey.DELETE_ACLS,
            3,
            filters=[
                F(resource_type_filter=1, pattern_type_filter=1, operation=77, permission_type=1, **base),
                F(
                    resource_type_filter=2,
                    pattern_type_filter=3,
                    operation=1,
                    permission_type=1,
                    **{**base, "resource_name_filter": "valid-one"},
                ),
            ],
        )
        [bad, good] = resp.filter_results
        assert (bad.error_code, bad.error_message, bad.matching_acls) == (INVALID, "Unknown entryFilter.", [])
        assert good.error_code == 0 and [m.resource_name for m in good.matching_acls] == ["valid-one"]

    # the code 0 (UNKNOWN) is what Kafka's request parser refuses: the connection is closed, the broker serves on
    C = REQUEST_CLASSES[ApiKey.CREATE_ACLS]
    unknown_type = C.AclCreation(
        resource_type=0, resource_name="t", resource_pattern_type=3, principal="User:a", host="*", operation=3
    )
    unknown_type.permission_type = 3
    req = C(version=3, creations=[unknown_type])
    req.with_header(correlation_id=1, client_id="t")
    with socket.create_connection(("127.0.0.1", acl_broker.broker.port), timeout=10) as s:
        s.sendall(bytes(req.encode(header=True, framed=True)))
        assert s.recv(4) == b""
    with StrataAdmin(acl_broker.plaintext) as a:
        assert a.api_version(ApiKey.DESCRIBE_ACLS) == 3


def test_cli_add_list_remove(acl_broker: AclBroker, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    """The real command once; the rest in-process (a subprocess costs ~1.5 s of imports)."""
    bs = acl_broker.plaintext
    add = "--add --allow-principal User:alice --operation Read --operation Describe --topic cli-topic"
    out = ok(strata("acls", "--bootstrap-server", bs, *add.split()))
    entries = (
        " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW) \n"
    )
    topic = "ResourcePattern(resourceType=TOPIC, name=cli-topic, patternType=LITERAL)"
    assert out == f"Adding ACLs for resource `{topic}`: \n{entries}\n"

    cli = _Cli(capsys, monkeypatch, bs)
    cli.ok("add --deny-principal User:bob --deny-host 10.1.1.1 --cluster --operation IdempotentWrite")
    cli.ok("--add --consumer --allow-principal User:carol --topic in --group g --resource-pattern-type prefixed")
    assert cli.ok("--list --topic cli-topic") == f"Current ACLs for resource `{topic}`: \n{entries}\n"
    everything = cli.ok("--list")
    assert everything.count("Current ACLs for resource") == 4
    assert "(principal=User:bob, host=10.1.1.1, operation=IDEMPOTENT_WRITE, permissionType=DENY)" in everything
    assert "name=g, patternType=PREFIXED)`: \n \t(principal=User:carol, host=*, operation=READ," in everything
    carol = cli.ok("--list --principal User:carol")
    assert carol.startswith("ACLs for principal `User:carol`\n") and carol.count("Current ACLs") == 2

    # removal asks first; anything but y keeps the ACLs
    asked = cli.ok("--remove --topic cli-topic", stdin="n\n")
    assert asked == f"Are you sure you want to delete all ACLs for resource filter `{topic}`? (y/n)\n"
    assert "cli-topic" in cli.ok("--list")
    cli.ok("--remove --topic cli-topic --allow-principal User:alice --operation Read --force")
    left = cli.ok("--list --topic cli-topic")
    assert "operation=DESCRIBE" in left and "operation=READ" not in left
    cli.ok("remove --topic cli-topic", stdin="y\n")
    assert cli.ok("--list --topic cli-topic") == ""
    cli.ok("--remove --force --cluster")
    cli.ok("--remove --force --topic in --group g --resource-pattern-type prefixed")
    assert cli.ok("--list") == ""

    # kafka-acls' refusals, before connecting
    cli.bootstrap = "127.0.0.1:1"
    assert "exactly one action" in cli.fails("--topic t", code=1)
    err = cli.fails("--add --topic t --operation Read", code=1)
    assert err.endswith("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    err = cli.fails("--add --allow-principal User:a --group g --operation Write", code=1)
    assert "ResourceType GROUP only supports operations Read, Describe, Delete, DescribeConfigs" in err
    err = cli.fails("--add --allow-principal alice --topic t")
    assert "expected a string in format principalType:principalName but got alice" in err
    # a SASL listener closes on a request before authentication (the CLI has no credentials): one line
    cli.bootstrap = acl_broker.sasl
    assert cli.fails("--list").startswith("strata acls: error:")


class _Cli:
    """`strata acls --bootstrap-server B <args>` run in this process: its stdout, or the one line on stderr of a
    refusal."""

    def __init__(self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, bootstrap: str) -> None:
        self.capsys, self.monkeypatch, self.bootstrap = capsys, monkeypatch, bootstrap

    def run(self, args: str, stdin: str = "") -> tuple[int, str, str]:
        self.capsys.readouterr()
        self.monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        rc = strata_main(["acls", "--bootstrap-server", self.bootstrap, *args.split()])
        out, err = self.capsys.readouterr()
        return rc, out, err

    def ok(self, args: str, stdin: str = "") -> str:
        rc, out, err = self.run(args, stdin)
        assert rc == 0, (rc, out, err)
        return out

    def fails(self, args: str, code: int | None = None) -> str:
        rc, _, err = self.run(args)
        assert rc != 0 if code is None else rc == code, (rc, err)
        assert err.count("\n") == 1, err
        return err.strip()


def test_a_fetch_session_answers_an_unreadable_partition_every_time(acl_broker: AclBroker) -> None:
    """KIP-227 under ACLs: a partition alice may not read stays in her fetch session and every incremental fetch
    answers it TOPIC_AUTHORIZATION_FAILED, while the readable one is left out when nothing changed."""
    admin = acl_broker.ck("admin")
    try:
        with WireClient.connect(acl_broker.plaintext) as su:
            for t in ("sess-ok", "sess-denied"):
                assert su.create_topic(t).topics[0].error_code == 0
        _create(admin, [_topic_acl("sess-ok", AclOperation.READ)])
        with WireClient.connect(acl_broker.sasl) as w:
            w.sasl_plain("alice", USERS["alice"])
            parts = {("sess-ok", 0): 0, ("sess-denied", 0): 0}
            r = session_fetch(w, 12, (0, 0), parts)
            assert r.session_id != 0
            assert {k: v[0] for k, v in answered(r, 12).items()} == {
                ("sess-ok", 0): 0,
                ("sess-denied", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            }
            for epoch in (1, 2):
                r = session_fetch(w, 12, (r.session_id, epoch), {})
                assert {k: v[0] for k, v in answered(r, 12).items()} == {
                    ("sess-denied", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED
                }
    finally:
        _delete(admin, _all(admin))


def test_acls_survive_a_restart(acl_broker: AclBroker) -> None:
    admin = acl_broker.ck("admin")
    _create(
        admin, [_topic_acl("kept", AclOperation.READ), _cluster_acl(AclOperation.DESCRIBE, AclPermissionType.ALLOW)]
    )
    acl_broker.broker.restart()
    alice = acl_broker.ck("alice")  # her DESCRIBE on the cluster is in force again at once
    got = alice.describe_acls(_all(alice), request_timeout=30).result(30)
    assert sorted(b.name for b in got) == ["kafka-cluster", "kept"]
    _delete(acl_broker.ck("admin"), _all(admin))
