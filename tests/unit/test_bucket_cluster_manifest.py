"""The cluster manifest (issue 24) holds what a restore needs from the metadata store -- cluster id, topics with ids,
ACLs, SCRAM credentials and client quotas -- and never a secret: SCRAM credentials in their salted, hashed form."""

from __future__ import annotations

import asyncio
from pathlib import Path

from strata.broker.bucket_manifests import cluster_manifest
from strata.broker.metadata_store import LocalMetadataStore
from strata.broker.security.client_quotas import QuotaEntity
from strata.broker.security.scram import credential_from_password
from strata.protocol.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strata.protocol.scram import ScramMechanism
from strata.protocol.uuids import kafka_uuid_str
from strata.remote.bucket_manifest import ClusterManifest

PASSWORD = "correct-horse-battery-staple"


def test_cluster_manifest_has_acls_quotas_and_hashed_scram_only(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, cluster_id="c-1")
    acl = AclBinding(
        ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL),
        AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
    )

    async def setup() -> None:
        await store.create_topic("orders", 2, {"remote.storage.enable": "true"})
        cred = credential_from_password(ScramMechanism.SCRAM_SHA_256, PASSWORD)
        await store.alter_scram_credentials([("alice", cred)], [])
        await store.create_acls([acl])
        await store.alter_client_quotas({QuotaEntity(user="alice"): {"producer_byte_rate": 1024.0}})

    asyncio.run(setup())
    cm = ClusterManifest.from_bytes(cluster_manifest(store, 3).to_bytes())
    t = store.topic("orders")
    assert t is not None
    assert (cm.cluster_id, cm.revision, cm.topics) == ("c-1", 3, {"orders": kafka_uuid_str(t.topic_id)})
    assert cm.acls == [acl.to_json()]
    assert cm.client_quotas == [{"entity": [["user", "alice"]], "quotas": {"producer_byte_rate": 1024.0}}]
    stored = store.scram_credential(ScramMechanism.SCRAM_SHA_256, "alice")
    assert stored is not None
    assert cm.scram_credentials == {"alice": {"SCRAM_SHA_256": stored.to_json()}}
    assert PASSWORD.encode() not in cluster_manifest(store, 3).to_bytes()
