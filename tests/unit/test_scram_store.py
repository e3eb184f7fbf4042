"""SCRAM credentials in the metadata stores: the local file (durable, owner-only, no password in it) and the etcd
image's `scram/<mechanism>/<user>` keys; a stored credential verifies a real exchange (scramp's client) through
`scram_credential(...)`, the lookup SASL/SCRAM uses."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path
from typing import cast

import pytest
import scramp

from strata.broker.cluster.image import MetadataImage, scram_rel
from strata.broker.handlers.scram_admin import alter_user_scram_credentials, describe_user_scram_credentials
from strata.broker.metadata_store import LocalMetadataStore, MetadataStore
from strata.broker.request_context import KafkaPrincipal, RequestContext
from strata.broker.security.authorizer import StandardAuthorizer
from strata.broker.security.scram import (
    ScramAuthenticationError,
    ScramServerExchange,
    credential_from_password,
    credential_from_salted_password,
)
from strata.broker.services import BrokerServices
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import REQUEST_CLASSES, ApiKey
from strata.protocol.scram import ScramMechanism, salted_password

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
PASSWORD = "alice-secret"


def authenticate(store: MetadataStore, mech: ScramMechanism, user: str, password: str) -> str:
    """One SCRAM exchange against the store's credential; the authenticated user name."""
    ex = ScramServerExchange(mech, lambda u: store.scram_credential(mech, u))
    client = scramp.ScramClient([mech.mechanism_name], user, password)
    client.set_server_first(ex.evaluate(client.get_client_first().encode()).decode())
    client.set_server_final(ex.evaluate(client.get_client_final().encode()).decode())
    assert ex.complete and ex.username is not None
    return ex.username


def test_local_store_keeps_credentials_across_restart_and_verifies_an_exchange(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path)
    heard: list[tuple[str, object]] = []
    store.add_listener(lambda kind, key: heard.append((kind, key)))
    salt = b"0123456789abcdef"
    cred = credential_from_salted_password(SHA512, salt, salted_password(SHA512, PASSWORD, salt, 8192), 8192)
    asyncio.run(store.alter_scram_credentials([("alice", cred), ("bob", credential_from_password(SHA256, "b"))], []))
    assert heard == [("scram", ("alice", SHA512)), ("scram", ("bob", SHA256))]

    reopened = LocalMetadataStore(tmp_path)
    assert reopened.scram_credential(SHA512, "alice") == cred
    assert reopened.scram_credential(SHA256, "alice") is None
    assert authenticate(reopened, SHA512, "alice", PASSWORD) == "alice"
    with pytest.raises(ScramAuthenticationError):
        authenticate(reopened, SHA512, "alice", "wrong")

    text = store.path.read_text()
    assert PASSWORD not in text and "scram_credentials" in text
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600

    asyncio.run(reopened.alter_scram_credentials([], [("alice", SHA512)]))
    assert set(LocalMetadataStore(tmp_path).scram_credentials()) == {("bob", SHA256)}


def test_image_applies_scram_keys_and_diffs_them() -> None:
    cred = credential_from_password(SHA256, PASSWORD, 4096)
    rel = scram_rel("team/alice", SHA256)  # a user name may hold a slash
    img = MetadataImage()
    assert img.apply(rel, json.dumps(cred.to_json()).encode(), 5) == [("scram", ("team/alice", SHA256))]
    assert img.scram[("team/alice", SHA256)] == cred
    assert img.mod_revision(rel) == 5
    reread = MetadataImage.from_kvs([], 7)
    assert reread.diff(img) == [("scram", ("team/alice", SHA256))]
    assert img.apply(rel, None, 6) == [("scram", ("team/alice", SHA256))]
    assert img.scram == {} and img.mod_revision(rel) == 0


def _ctx(api_key: int, authorizer: StandardAuthorizer) -> RequestContext:
    return RequestContext(
        api_key, 0, 1, "c", 0.0, "PLAINTEXT", "127.0.0.1:5000", KafkaPrincipal("User", "eve"), authorizer
    )


def test_without_cluster_permission_both_apis_answer_cluster_authorization_failed() -> None:
    """Kafka checks DESCRIBE / ALTER on the CLUSTER resource; a denied request touches no broker service."""
    deny = StandardAuthorizer(super_users=["User:admin"], allow_everyone_if_no_acl_found=False)
    services = cast(BrokerServices, None)  # never reached when denied
    D = REQUEST_CLASSES[ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS]
    req = D(version=0, users=[D.UserName(name="alice"), D.UserName(name="bob")])
    resp = asyncio.run(describe_user_scram_credentials(services, _ctx(50, deny), req))
    assert resp.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert [r.error_code for r in resp.results] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 2

    A = REQUEST_CLASSES[ApiKey.ALTER_USER_SCRAM_CREDENTIALS]
    up = A.ScramCredentialUpsertion(name="bob", mechanism=1, iterations=4096, salt=b"s", salted_password=b"p")
    req = A(version=0, deletions=[A.ScramCredentialDeletion(name="alice", mechanism=1)], upsertions=[up, up])
    resp = asyncio.run(alter_user_scram_credentials(services, _ctx(51, deny), req))
    assert [(r.user, r.error_code) for r in resp.results] == [
        ("alice", ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
        ("bob", ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    ]
