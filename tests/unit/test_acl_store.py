"""ACL storage and wiring without a socket: the local metadata file and the etcd image hold bindings by their digest
(created twice = stored once), notify 'acl' changes, survive a reopen; AclSync rebuilds the authorizer once per loop
turn; the authorizer config (Kafka's class names, one-line error otherwise); KafkaApis gives handlers the configured
authorizer; without one the ACL APIs answer SECURITY_DISABLED as Kafka's do."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from strata.broker.cluster.image import MetadataImage, acl_rel
from strata.broker.metadata_store import LocalMetadataStore, acl_id
from strata.broker.network import Connection
from strata.broker.request_context import KafkaPrincipal, RequestContext
from strata.broker.security.authorizer import AclSync, StandardAuthorizer, build_authorizer
from strata.broker.server import KafkaServer
from strata.config import BrokerConfig, ConfigError
from strata.protocol.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import REQUEST_CLASSES, RESPONSE_CLASSES, ApiKey

Op, RT = AclOperation, ResourceType
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def binding(name: str, op: AclOperation = Op.READ, principal: str = "User:alice") -> AclBinding:
    return AclBinding(
        ResourcePattern(RT.TOPIC, name, PatternType.LITERAL),
        AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW),
    )


def test_local_store_keeps_acls_once_and_across_a_reopen(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path)
    heard: list[tuple[str, object]] = []
    store.add_listener(lambda kind, key: heard.append((kind, key)))
    a, b = binding("a"), binding("b", Op.WRITE)
    asyncio.run(store.create_acls([a, b, a]))
    asyncio.run(store.create_acls([a]))  # already stored: nothing written, nothing heard
    assert store.acls() == [a, b]
    assert heard == [("acl", acl_id(a)), ("acl", acl_id(b))]
    assert LocalMetadataStore(tmp_path).acls() == [a, b]

    # two filters matching the same binding: each reports it, it is removed once
    by_name = AclBindingFilter(RT.TOPIC, "a", PatternType.LITERAL)
    by_principal = AclBindingFilter(principal="User:alice", operation=Op.READ)
    assert asyncio.run(store.delete_acls([by_name, by_principal, AclBindingFilter(name="zzz")])) == [[a], [a], []]
    assert LocalMetadataStore(tmp_path).acls() == [b]


def test_image_applies_acl_keys_and_diffs_them() -> None:
    a = binding("team/orders")  # a name may hold a slash: the key is the digest
    rel = acl_rel(acl_id(a))
    img = MetadataImage()
    assert img.apply(rel, json.dumps(a.to_json()).encode(), 5) == [("acl", acl_id(a))]
    assert list(img.acls.values()) == [a] and img.mod_revision(rel) == 5
    assert MetadataImage.from_kvs([], 7).diff(img) == [("acl", acl_id(a))]
    unreadable = json.dumps({**a.to_json(), "operation": "FLY"}).encode()  # a newer version's: skipped
    assert img.apply("acls/ffff", unreadable, 8) == [("acl", "ffff")] and "ffff" not in img.acls
    assert img.apply(rel, None, 9) == [("acl", acl_id(a))]
    assert img.acls == {} and img.mod_revision(rel) == 0


def test_acl_sync_rebuilds_once_per_loop_turn(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path)
    authorizer = StandardAuthorizer()
    rebuilds: list[int] = []
    replace = authorizer.replace_acls

    def counted(bindings: Iterable[AclBinding]) -> None:
        rebuilds.append(1)
        replace(bindings)

    authorizer.replace_acls = counted  # type: ignore[method-assign]
    sync = AclSync(authorizer, store)
    sync.load()
    alice = KafkaPrincipal("User", "alice")

    async def main() -> None:
        await store.create_acls([binding(f"t{i}") for i in range(50)])
        assert not authorizer.authorize(alice, "h", Op.READ, RT.TOPIC, "t7")  # not yet: the rebuild is queued
        await asyncio.sleep(0)  # one loop turn

    asyncio.run(main())
    assert len(rebuilds) == 2  # load() and one rebuild for 50 notifications
    assert len(authorizer.acls()) == 50


def test_authorizer_config() -> None:
    assert build_authorizer(BrokerConfig.from_dict({}).values) is None
    for name in (STANDARD, "kafka.security.authorizer.AclAuthorizer"):
        cfg = BrokerConfig.from_dict(
            {
                "authorizer.class.name": name,
                "super.users": " User:admin ; User:broker;",
                "allow.everyone.if.no.acl.found": "true",
            }
        )
        a = build_authorizer(cfg.values)
        assert a is not None and a.super_users == {"User:admin", "User:broker"} and a.allow_everyone_if_no_acl_found
    with pytest.raises(ConfigError) as e:
        BrokerConfig.from_dict({"authorizer.class.name": "com.example.OpaAuthorizer"})
    assert str(e.value).startswith("Invalid value 'com.example.OpaAuthorizer' for configuration authorizer.class.name")
    assert "\n" not in str(e.value)


def _server(tmp_path: Path, **props: str) -> KafkaServer:
    base = {"log.dirs": str(tmp_path / "data"), "metrics.listener": "", "listeners": "PLAINTEXT://127.0.0.1:0"}
    return KafkaServer(BrokerConfig.from_dict({**base, **props}))


def _call(server: KafkaServer, api_key: int, version: int, **fields: Any) -> Any:
    req = REQUEST_CLASSES[api_key](version=version, **fields)
    req.with_header(correlation_id=7, client_id="t")
    conn = Connection(1, "10.1.2.3:5555", "PLAINTEXT", writer=None)  # type: ignore[arg-type]  # nothing sent
    frame = asyncio.run(server.apis.handle(conn, bytes(req.encode(header=True, framed=False))))
    assert isinstance(frame, bytes)
    return RESPONSE_CLASSES[api_key].decode(frame[4:], version=version, header=True)


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(tmp_path: Path) -> None:
    server = _server(tmp_path)
    assert server.apis.authorizer is None
    anything = {"resource_name_filter": None, "principal_filter": None, "host_filter": None}
    d = _call(server, ApiKey.DESCRIBE_ACLS, 3, resource_type_filter=1, pattern_type_filter=1, operation=1,
              permission_type=1, **anything)  # fmt: skip
    assert (d.error_code, d.error_message) == (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the broker")
    C = REQUEST_CLASSES[ApiKey.CREATE_ACLS].AclCreation
    creation = C(resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:a", host="*",
                 operation=3, permission_type=3)  # fmt: skip
    c = _call(server, ApiKey.CREATE_ACLS, 3, creations=[creation, creation])
    assert [(r.error_code, r.error_message) for r in c.results] == [
        (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    ] * 2
    F = REQUEST_CLASSES[ApiKey.DELETE_ACLS].DeleteAclsFilter
    f = F(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
          host_filter=None, operation=1, permission_type=1)  # fmt: skip
    x = _call(server, ApiKey.DELETE_ACLS, 2, filters=[f])
    assert [(r.error_code, r.error_message) for r in x.filter_results] == [
        (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    ]
    assert server.store.acls() == []


def test_handlers_get_the_configured_authorizer(tmp_path: Path) -> None:
    server = _server(tmp_path, **{"authorizer.class.name": STANDARD, "super.users": "User:admin"})
    seen: list[RequestContext] = []

    async def record(services: Any, ctx: RequestContext, req: Any) -> None:
        seen.append(ctx)

    server.apis.handlers[ApiKey.API_VERSIONS] = record
    req = REQUEST_CLASSES[ApiKey.API_VERSIONS][3](client_software_name="t", client_software_version="1")
    req.with_header(correlation_id=7, client_id="me")
    conn = Connection(1, "10.1.2.3:5555", "PLAINTEXT", writer=None)  # type: ignore[arg-type]
    assert asyncio.run(server.apis.handle(conn, bytes(req.encode(header=True, framed=False)))) is None
    [ctx] = seen
    assert isinstance(ctx.authorizer, StandardAuthorizer) and ctx.authorizer is server.authorizer
    assert ctx.authorizer.super_users == {"User:admin"}
    assert ctx.metrics is server.metrics
