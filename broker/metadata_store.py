"""Cluster metadata (topics, topic ids, partition counts, topic config overrides, dynamic broker and group configs,
SCRAM credentials, ACLs).

`MetadataStore` is the interface; `LocalMetadataStore` keeps it in one JSON file for a single broker. The etcd-backed
store of a cluster implements the same interface, so the rest of the broker never knows which it has.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strata.protocol.acl import AclBinding, AclBindingFilter
from strata.protocol.errors import ErrorCode, KafkaApiError
from strata.protocol.uuids import kafka_uuid_str

from .cluster.model import BrokerInfo, PartitionState, StaleStateError
from .security.client_quotas import QuotaChanges, QuotaEntity, altered
from .security.scram import ScramCredential, ScramMechanism

ScramKey = tuple[str, ScramMechanism]  # (user, mechanism): one SCRAM credential, as Kafka's ScramCredentialKey


def acl_id(binding: AclBinding) -> str:
    """A binding's identity in the store: a digest of its stored form, so creating it again writes the same key and
    deleting it needs no read-modify-write (Kafka's controller gives each ACL a random Uuid instead)."""
    text = json.dumps(binding.to_json(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


async def match_acls(bindings: list[AclBinding], filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
    """Each filter's matches, yielding to the event loop every ~10,000 comparisons (a DeleteAcls may carry
    100,000 filters)."""
    out: list[list[AclBinding]] = []
    work = 0
    for f in filters:
        out.append([b for b in bindings if f.matches(b)])
        work += len(bindings) + 1
        if work >= 10_000:
            work = 0
            await asyncio.sleep(0)
    return out


MAX_TOPIC_NAME = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str | None) -> None:
    """Kafka's Topic.validate: non-empty, <= 249 chars, [a-zA-Z0-9._-], not '.' or '..'."""
    if not name:
        raise KafkaApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is empty")
    if name in (".", ".."):
        raise KafkaApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name cannot be '.' or '..'")
    if len(name) > MAX_TOPIC_NAME:
        raise KafkaApiError(
            ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name is longer than the maximum of {MAX_TOPIC_NAME} characters"
        )
    if not _LEGAL.match(name):
        raise KafkaApiError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name {name!r} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
        )


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)  # topic-level overrides, as strings
    internal: bool = False
    # Replica assignment per partition (index = partition), as the topic was created/reassigned; the live replica
    # set of a partition is its PartitionState.replicas. Empty means "not recorded" (old local files: [self]).
    assignments: list[list[int]] = field(default_factory=list)
    # A topic recovered from the bucket (issue 24, broker/topic_recovery.py): where each partition's log starts,
    # its leader-epoch chain and first leader epoch; None for every other topic.
    recovery: dict[str, Any] | None = None

    def replicas(self, partition: int) -> list[int]:
        return list(self.assignments[partition]) if 0 <= partition < len(self.assignments) else []

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "topic_id": str(self.topic_id),
            "partitions": self.partitions,
            "configs": self.configs,
            "internal": self.internal,
            "assignments": self.assignments,
            **({"recovery": self.recovery} if self.recovery is not None else {}),
        }

    @classmethod
    def from_json(cls, d: dict) -> TopicInfo:
        assignments = [list(map(int, a)) for a in d.get("assignments", [])]
        partitions = int(d["partitions"]) if "partitions" in d else len(assignments)
        return cls(
            d["name"],
            uuid.UUID(d["topic_id"]),
            partitions,
            dict(d.get("configs", {})),
            bool(d.get("internal", False)),
            assignments,
            d.get("recovery"),
        )


class MetadataStore(ABC):
    """Source of truth for topics, brokers and partition states.

    Reads are synchronous, from an in-memory image the store keeps current (a watch, for etcd); mutations are
    coroutines that return once the change is durable in the store (and applied to the image).
    """

    cluster_id: str
    _listeners: list[Callable[[str, object], None]]  # set up by each store's constructor (add_listener)
    clustered = False  # True for a multi-broker store: replicas follow partition states, not topic creation

    async def start(self) -> None:
        """Connect/register; the image is complete when this returns."""

    async def close(self) -> None:
        """Deregister and release resources."""

    # ---- reads (the image) ------------------------------------------------------------------------------------
    @abstractmethod
    def topics(self) -> dict[str, TopicInfo]: ...

    @abstractmethod
    def brokers(self) -> dict[int, BrokerInfo]:
        """Live brokers (registered with a valid lease)."""

    def departed_brokers(self, within_s: float) -> dict[int, BrokerInfo]:
        """Brokers whose registration ended less than `within_s` ago (a single broker has none)."""
        return {}

    @abstractmethod
    def partition_state(self, topic: str, partition: int) -> PartitionState | None: ...

    @property
    @abstractmethod
    def controller_id(self) -> int: ...

    # ---- mutations ----------------------------------------------------------------------------------------------
    @abstractmethod
    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        internal: bool = False,
        replication_factor: int = 1,
        assignments: list[list[int]] | None = None,
        topic_id: uuid.UUID | None = None,
        recovery: dict[str, Any] | None = None,
    ) -> TopicInfo:
        """`topic_id` and `recovery`: a topic recovered from the bucket keeps its id (broker/topic_recovery.py)."""

    @abstractmethod
    async def delete_topic(self, name: str) -> TopicInfo: ...

    @abstractmethod
    async def set_partition_count(
        self, name: str, partitions: int, assignments: list[list[int]] | None = None
    ) -> TopicInfo: ...

    @abstractmethod
    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicInfo: ...

    def config_overrides(self, resource_type: int, name: str) -> dict[str, str]:
        """Dynamic configs of a non-topic config resource (ConfigResource type and name: BROKER with a broker id or
        "" for the cluster-wide default, GROUP with a group id); {} when none is set."""
        return {}

    async def update_config_overrides(
        self, resource_type: int, name: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]:
        """Replace the resource's dynamic configs by `change(current)` atomically (re-run on a concurrent change;
        what `change` raises propagates and nothing is written); listeners hear ('config', (type, name))."""
        raise NotImplementedError

    def scram_credential(self, mechanism: ScramMechanism, user: str) -> ScramCredential | None:
        """The user's stored credential for this mechanism (salt, StoredKey, ServerKey, iterations), None if none."""
        return self.scram_credentials().get((user, mechanism))

    def scram_credentials(self) -> dict[ScramKey, ScramCredential]:
        """Every stored SCRAM credential (DescribeUserScramCredentials)."""
        return {}

    async def alter_scram_credentials(
        self, upserts: list[tuple[str, ScramCredential]], deletions: list[ScramKey]
    ) -> None:
        """Store and remove credentials in one atomic change (Kafka's controller writes them as one batch);
        listeners hear ('scram', (user, mechanism)) for each."""
        raise NotImplementedError

    # ---- client quotas (KIP-546) --------------------------------------------------------------------------------
    def client_quotas(self) -> dict[QuotaEntity, dict[str, float]]:
        """Every entity's quota values (DescribeClientQuotas, and what the broker enforces)."""
        return {}

    async def alter_client_quotas(self, changes: QuotaChanges) -> None:
        """Set (a value) or remove (None) each entity's keys in one atomic change (Kafka's controller writes them
        as one batch); listeners hear ('quota', entity) for each entity."""
        raise NotImplementedError

    def acls(self) -> list[AclBinding]:
        """Every stored ACL binding (the authorizer's whole set, replaced on every 'acl' change)."""
        return []

    async def create_acls(self, bindings: list[AclBinding]) -> None:
        """Store the bindings (valid ones; one already stored is kept as it is, as in Kafka); listeners hear
        ('acl', acl_id) for each new one."""
        raise NotImplementedError

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove every binding a filter matches, judged on the store's current set (not a possibly lagging
        image); returns each filter's matches (a binding matched by two filters is in both and removed once)."""
        raise NotImplementedError

    @abstractmethod
    async def alter_partition(self, topic: str, partition: int, new: PartitionState) -> PartitionState:
        """Compare-and-set: `new.partition_epoch` must be the stored epoch + 1, else StaleStateError."""

    async def allocate_producer_id_block(self, size: int) -> int:
        """Reserve `size` producer ids for this broker and return the first; never hands out an id twice, also
        across restarts (Kafka's ProducerIdManager blocks)."""
        raise NotImplementedError

    async def register(self, broker: BrokerInfo) -> None:
        """Make this broker live (a cluster store registers it on its lease; again to update endpoints)."""

    def shutting_down(self) -> frozenset[int]:
        """Brokers in controlled shutdown: never elected leader, never added back to an ISR."""
        return frozenset()

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask the controller to move this broker's leaderships away; True once it has (a single broker: at once)."""
        return True

    def add_listener(self, callback: Callable[[str, object], None]) -> None:
        """callback(kind, key) after the image changed: kind is 'topic', 'partition', 'broker', 'controller',
        'config' (key: (resource type, name)), 'scram' (key: (user, mechanism)), 'quota' (key: a QuotaEntity) or
        'acl' (key: acl_id)."""
        self._listeners.append(callback)

    def _notify(self, kind: str, key: object) -> None:
        for cb in list(self._listeners):
            cb(kind, key)

    def topic(self, name: str) -> TopicInfo | None:
        return self.topics().get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for t in self.topics().values():
            if t.topic_id == topic_id:
                return t
        return None


class LocalMetadataStore(MetadataStore):
    """One JSON file, rewritten atomically (tmp + fsync + rename + dir fsync) on every change; readable by its owner
    only, since it holds SCRAM credentials (no password, but a ServerKey lets its holder pose as the broker).

    A single broker leads every partition at leader epoch 0 with ISR = {itself}; nothing else can change that."""

    FILE = "strata-metadata.json"

    def __init__(self, directory: Path, cluster_id: str | None = None, broker: BrokerInfo | None = None) -> None:
        self._listeners: list[Callable[[str, object], None]] = []
        self.broker = broker or BrokerInfo(0, {})
        self.path = directory / self.FILE
        self._topics: dict[str, TopicInfo] = {}
        self.cluster_id = cluster_id or ""
        self._next_producer_id = 0
        self._configs: dict[tuple[int, str], dict[str, str]] = {}
        self._scram: dict[ScramKey, ScramCredential] = {}
        self._quotas: dict[QuotaEntity, dict[str, float]] = {}
        self._acls: dict[str, AclBinding] = {}  # acl_id -> binding, in creation order
        changed = True  # rewritten at start only when it changes (20,000 partitions: 1.5 s of JSON and fsyncs)
        if self.path.exists():
            data = json.loads(self.path.read_text())
            # (also a file an older version left readable by others: rewritten owner-only)
            changed = not data.get("cluster_id") or data.get("version") != 1 or bool(self.path.stat().st_mode & 0o077)
            self.cluster_id = data.get("cluster_id") or self.cluster_id
            self._next_producer_id = int(data.get("next_producer_id_block", 0))
            for c in data.get("configs", []):
                self._configs[(int(c["resource_type"]), str(c["name"]))] = dict(c["configs"])
            for c in data.get("scram_credentials", []):
                cred = ScramCredential.from_json(c)
                self._scram[(str(c["user"]), cred.mechanism)] = cred
            for q in data.get("client_quotas", []):
                self._quotas[QuotaEntity.from_store_key(q["entity"])] = {k: float(v) for k, v in q["values"].items()}
            for a in data.get("acls", []):
                binding = AclBinding.from_json(a)
                self._acls[acl_id(binding)] = binding
            self._topics = {t["name"]: TopicInfo.from_json(t) for t in data.get("topics", [])}
            for t in self._topics.values():  # files written before assignments were recorded
                if len(t.assignments) != t.partitions:
                    t.assignments = [[self.broker.broker_id] for _ in range(t.partitions)]
                    changed = True
        if not self.cluster_id:
            self.cluster_id = _new_cluster_id()
        self._by_id = {t.topic_id: t for t in self._topics.values()}
        if changed:
            self._save()

    def _save(self) -> None:
        data = {
            "version": 1,
            "cluster_id": self.cluster_id,
            "topics": [t.to_json() for t in sorted(self._topics.values(), key=lambda t: t.name)],
            "next_producer_id_block": self._next_producer_id,
            "configs": [
                {"resource_type": t, "name": n, "configs": c} for (t, n), c in sorted(self._configs.items()) if c
            ],
            "scram_credentials": [{"user": u, **c.to_json()} for (u, _), c in sorted(self._scram.items())],
            "client_quotas": [
                {"entity": e.store_key(), "values": v}
                for e, v in sorted(self._quotas.items(), key=lambda ev: ev[0].store_key())
            ],
            "acls": [b.to_json() for b in self._acls.values()],
        }
        tmp = self.path.with_suffix(".tmp")
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            os.fchmod(f.fileno(), 0o600)  # also a leftover tmp file of an older version
            json.dump(data, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def topics(self) -> dict[str, TopicInfo]:
        return self._topics

    def brokers(self) -> dict[int, BrokerInfo]:
        return {self.broker.broker_id: self.broker}

    @property
    def controller_id(self) -> int:
        return self.broker.broker_id

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        info = self._topics.get(topic)
        if info is None or not 0 <= partition < info.partitions:
            return None
        me = (self.broker.broker_id,)
        return PartitionState(self.broker.broker_id, first_leader_epoch(info, partition), me, me, 0)

    async def alter_partition(self, topic: str, partition: int, new: PartitionState) -> PartitionState:
        raise StaleStateError("a single broker's partition state never changes")

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        internal: bool = False,
        replication_factor: int = 1,
        assignments: list[list[int]] | None = None,
        topic_id: uuid.UUID | None = None,
        recovery: dict[str, Any] | None = None,
    ) -> TopicInfo:
        if name in self._topics:
            raise KafkaApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        me = self.broker.broker_id
        info = TopicInfo(
            name,
            topic_id or uuid.uuid4(),
            partitions,
            dict(configs),
            internal,
            [[me] for _ in range(partitions)],
            recovery,
        )
        self._topics[name] = info
        self._by_id[info.topic_id] = info
        self._save()
        self._notify("topic", name)
        return info

    async def delete_topic(self, name: str) -> TopicInfo:
        info = self._topics.pop(name, None)
        if info is None:
            raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        self._by_id.pop(info.topic_id, None)
        self._save()
        self._notify("topic", name)
        return info

    async def set_partition_count(
        self, name: str, partitions: int, assignments: list[list[int]] | None = None
    ) -> TopicInfo:
        info = self._require(name)
        info.partitions = partitions
        info.assignments = [[self.broker.broker_id] for _ in range(partitions)]
        self._save()
        self._notify("topic", name)
        return info

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        info = self._require(name)
        info.configs = dict(configs)
        self._save()
        self._notify("topic", name)
        return info

    def config_overrides(self, resource_type: int, name: str) -> dict[str, str]:
        return dict(self._configs.get((resource_type, name), {}))

    async def update_config_overrides(
        self, resource_type: int, name: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]:
        new = dict(change(self.config_overrides(resource_type, name)))
        if new:
            self._configs[(resource_type, name)] = new
        else:
            self._configs.pop((resource_type, name), None)
        self._save()
        self._notify("config", (resource_type, name))
        return new

    def scram_credentials(self) -> dict[ScramKey, ScramCredential]:
        return dict(self._scram)

    def scram_credential(self, mechanism: ScramMechanism, user: str) -> ScramCredential | None:
        return self._scram.get((user, mechanism))

    async def alter_scram_credentials(
        self, upserts: list[tuple[str, ScramCredential]], deletions: list[ScramKey]
    ) -> None:
        for key in deletions:
            self._scram.pop(key, None)
        for user, cred in upserts:
            self._scram[(user, cred.mechanism)] = cred
        self._save()
        for key in [*deletions, *((u, c.mechanism) for u, c in upserts)]:
            self._notify("scram", key)

    def client_quotas(self) -> dict[QuotaEntity, dict[str, float]]:
        return {e: dict(v) for e, v in self._quotas.items()}

    async def alter_client_quotas(self, changes: QuotaChanges) -> None:
        for entity, ops in changes.items():
            new = altered(self._quotas.get(entity, {}), ops)
            if new:
                self._quotas[entity] = new
            else:
                self._quotas.pop(entity, None)
        self._save()
        for entity in changes:
            self._notify("quota", entity)

    def acls(self) -> list[AclBinding]:
        return list(self._acls.values())

    async def create_acls(self, bindings: list[AclBinding]) -> None:
        new = {i: b for b in bindings if (i := acl_id(b)) not in self._acls}
        if not new:
            return
        self._acls.update(new)
        self._save()
        for i in new:
            self._notify("acl", i)

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        matched = await match_acls(list(self._acls.values()), filters)
        gone = {acl_id(b) for found in matched for b in found}
        if gone:
            for i in gone:
                del self._acls[i]
            self._save()
            for i in gone:
                self._notify("acl", i)
        return matched

    async def allocate_producer_id_block(self, size: int) -> int:
        if size <= 0:
            raise ValueError(f"producer id block size must be positive, not {size}")
        start = self._next_producer_id
        if start > 2**63 - 1 - size:
            raise KafkaApiError(ErrorCode.UNKNOWN_SERVER_ERROR, "all producer ids are exhausted")
        self._next_producer_id = start + size
        self._save()  # durable before any id of the block is handed out
        return start

    def _require(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        return info


def _new_cluster_id() -> str:
    """Kafka cluster ids are a random Uuid in Kafka's base64url form (22 chars)."""
    return kafka_uuid_str(uuid.uuid4())


def first_leader_epoch(info: TopicInfo, partition: int) -> int:
    """The leader epoch a partition starts in: 0, or one above the recovered lineage's last (a recovered topic's
    producers continue in a new epoch, and its leader's manifests sort above the old cluster's)."""
    parts = (info.recovery or {}).get("partitions", {})
    return int(parts.get(str(partition), {}).get("leader_epoch", 0))
