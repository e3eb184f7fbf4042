"""The metadata image: a broker's in-memory copy of the cluster metadata kept in etcd (docs/cluster.md).

Keys are relative to `<prefix>/<cluster.id>/`. Every key remembers the etcd revision of its last change (its
`mod_revision`, or the revision that deleted it), so changes that arrive twice or late -- once from a transaction's
own result, once from the watch; or from a direct read racing the watch -- apply once, newest wins.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

import structlog

from strata.protocol.acl import AclBinding

from ..metadata_store import ScramKey, TopicInfo
from ..security.client_quotas import QuotaEntity
from ..security.scram import ScramCredential, ScramMechanism
from .model import BrokerInfo, PartitionState

log = structlog.get_logger("strata.etcd")

Change = tuple[str, object]  # (kind, key) as MetadataStore listeners receive them


@dataclass
class ControllerInfo:
    broker_id: int
    epoch: int


@dataclass
class MetadataImage:
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    broker_leases: dict[int, int] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    by_id: dict[uuid.UUID, TopicInfo] = field(default_factory=dict)
    partitions: dict[tuple[str, int], PartitionState] = field(default_factory=dict)
    controller: ControllerInfo | None = None
    controller_epoch: int = 0
    deleting: dict[str, dict] = field(default_factory=dict)
    shutdown: dict[int, dict] = field(default_factory=dict)
    revs: dict[str, int] = field(default_factory=dict)  # key -> revision of its last change
    revision: int = 0  # highest revision applied
    deleted_topics: dict[str, TopicInfo] = field(default_factory=dict)  # last deletion of each name
    departed: dict[int, tuple[BrokerInfo, float]] = field(default_factory=dict)  # lease gone: (info, monotonic)
    configs: dict[tuple[int, str], dict[str, str]] = field(default_factory=dict)  # configs/<type>/<name>
    scram: dict[ScramKey, ScramCredential] = field(default_factory=dict)  # scram/<mechanism code>/<user>
    quotas: dict[QuotaEntity, dict[str, float]] = field(default_factory=dict)  # quotas/<QuotaEntity.store_key()>
    acls: dict[str, AclBinding] = field(default_factory=dict)  # acls/<acl_id>

    def mod_revision(self, key: str) -> int:
        """The key's mod_revision if it exists in the image, else 0 (etcd's compare value for 'absent')."""
        return self.revs.get(key, 0) if self._exists(key) else 0

    def _exists(self, key: str) -> bool:
        kind, rest = key.split("/", 1) if "/" in key else (key, "")
        if kind == "brokers":
            return _int(rest) in self.brokers
        if kind == "topics":
            return rest in self.topics
        if kind == "partitions":
            t, _, p = rest.rpartition("/")
            return (t, _int(p)) in self.partitions
        if kind == "controller":
            return self.controller is not None
        if kind == "deleting":
            return rest in self.deleting
        if kind == "shutdown":
            return _int(rest) in self.shutdown
        if kind == "configs":
            return config_key(rest) in self.configs
        if kind == "scram":
            return scram_key(rest) in self.scram
        if kind == "quotas":
            return _quota_entity(rest) in self.quotas
        if kind == "acls":
            return rest in self.acls
        return key in self.revs

    def apply(self, key: str, value: bytes | None, revision: int) -> list[Change]:
        """Apply a put (value) or delete (None) of `key` seen at `revision`; returns the listener notifications.
        A change older than what the image holds for that key is ignored."""
        if revision <= self.revs.get(key, 0):
            return []
        self.revs[key] = revision
        self.revision = max(self.revision, revision)
        kind, _, rest = key.partition("/")
        d = json.loads(value) if value is not None else None
        if kind == "brokers":
            bid = _int(rest)
            if d is None:
                gone = self.brokers.pop(bid, None)
                self.broker_leases.pop(bid, None)
                # remembered only if it still led partitions (killed, not shut down after handing them over):
                # Metadata keeps listing it a moment (handlers/metadata.py DEPARTED_BROKER_GRACE_S)
                if gone is not None and any(st.leader == bid for st in self.partitions.values()):
                    self.departed[bid] = (gone, time.monotonic())
            else:
                self.departed.pop(bid, None)
                self.brokers[bid] = BrokerInfo.from_json(d)
                self.broker_leases[bid] = int(d.get("lease", 0))
            return [("broker", bid)]
        if kind == "topics":
            old = self.topics.pop(rest, None)
            if old is not None:
                self.by_id.pop(old.topic_id, None)
            if d is None:
                if old is not None:
                    self.deleted_topics[rest] = old
            else:
                info = topic_from_json(rest, d)
                self.topics[rest] = info
                self.by_id[info.topic_id] = info
            return [("topic", rest)]
        if kind == "partitions":
            t, _, p = rest.rpartition("/")
            tp = (t, _int(p))
            if d is None:
                self.partitions.pop(tp, None)
            else:
                self.partitions[tp] = PartitionState.from_json(d)
            return [("partition", tp)]
        if kind == "controller" and not rest:
            self.controller = ControllerInfo(int(d["broker_id"]), int(d["epoch"])) if d is not None else None
            return [("controller", self.controller.broker_id if self.controller else -1)]
        if kind == "controller_epoch":
            self.controller_epoch = int(d) if d is not None else 0
            return []
        if kind == "deleting":
            if d is None:
                self.deleting.pop(rest, None)
            else:
                self.deleting[rest] = d
            return []
        if kind == "shutdown":
            bid = _int(rest)
            if d is None:
                self.shutdown.pop(bid, None)
            else:
                self.shutdown[bid] = d
            return [("broker", bid)]
        if kind == "configs":
            ck = config_key(rest)
            if d is None:
                self.configs.pop(ck, None)
            else:
                self.configs[ck] = {str(k): str(v) for k, v in d.items()}
            return [("config", ck)]
        if kind == "scram":
            sk = scram_key(rest)
            if d is None:
                self.scram.pop(sk, None)
            else:
                self.scram[sk] = ScramCredential.from_json(d)
            return [("scram", sk)]
        if kind == "quotas":
            qe = _quota_entity(rest)
            if qe is None:
                return []
            if d is None:
                self.quotas.pop(qe, None)
            else:
                self.quotas[qe] = {str(k): float(v) for k, v in d.items()}
            return [("quota", qe)]
        if kind == "acls":
            binding = None
            if d is not None:
                try:
                    binding = AclBinding.from_json(d)
                except (KeyError, ValueError, TypeError) as e:  # written by a newer version: skipped, not fatal
                    log.warning("ignoring an ACL this broker cannot read", key=key, error=repr(e))
            if binding is None:
                self.acls.pop(rest, None)
            else:
                self.acls[rest] = binding
            return [("acl", rest)]
        return []

    @classmethod
    def from_kvs(cls, kvs: list[tuple[str, bytes, int]], revision: int) -> MetadataImage:
        img = cls()
        for key, value, mod in kvs:
            img.apply(key, value, mod)
        img.revision = max(img.revision, revision)
        return img

    def diff(self, old: MetadataImage) -> list[Change]:
        """Notifications that turn `old` into this image (after a full re-read)."""
        out: list[Change] = []
        for bid in sorted(set(old.brokers) | set(self.brokers) | set(old.shutdown) | set(self.shutdown)):
            if old.brokers.get(bid) != self.brokers.get(bid) or old.shutdown.get(bid) != self.shutdown.get(bid):
                out.append(("broker", bid))
        for name in sorted(set(old.topics) | set(self.topics)):
            a, b = old.topics.get(name), self.topics.get(name)
            if (a.to_json() if a else None) != (b.to_json() if b else None):
                out.append(("topic", name))
                if b is None and a is not None:
                    self.deleted_topics[name] = a
        for tp in sorted(set(old.partitions) | set(self.partitions)):
            if old.partitions.get(tp) != self.partitions.get(tp):
                out.append(("partition", tp))
        for ck in sorted(set(old.configs) | set(self.configs)):
            if old.configs.get(ck) != self.configs.get(ck):
                out.append(("config", ck))
        for sk in sorted(set(old.scram) | set(self.scram)):
            if old.scram.get(sk) != self.scram.get(sk):
                out.append(("scram", sk))
        for qe in set(old.quotas) | set(self.quotas):
            if old.quotas.get(qe) != self.quotas.get(qe):
                out.append(("quota", qe))
        out += [("acl", i) for i in sorted(set(old.acls) ^ set(self.acls))]
        if old.controller != self.controller:
            out.append(("controller", self.controller.broker_id if self.controller else -1))
        for name, info in old.deleted_topics.items():
            self.deleted_topics.setdefault(name, info)
        return out


def topic_to_json(info: TopicInfo) -> dict:
    return {
        "topic_id": str(info.topic_id),
        "assignments": info.assignments,
        "configs": info.configs,
        "internal": info.internal,
        **({"recovery": info.recovery} if info.recovery is not None else {}),
    }


def topic_from_json(name: str, d: dict) -> TopicInfo:
    assignments = [list(map(int, a)) for a in d.get("assignments", [])]
    return TopicInfo(
        name,
        uuid.UUID(d["topic_id"]),
        len(assignments),
        dict(d.get("configs", {})),
        bool(d.get("internal", False)),
        assignments,
        d.get("recovery"),
    )


def config_key(rest: str) -> tuple[int, str]:
    """(resource type, name) of a `configs/<type>/<name>` key (the name may be empty or hold slashes)."""
    t, _, name = rest.partition("/")
    return _int(t), name


def scram_rel(user: str, mechanism: ScramMechanism) -> str:
    """The key of one credential: `scram/<mechanism code>/<user>` (the user name may hold slashes)."""
    return f"scram/{int(mechanism)}/{user}"


def acl_rel(acl_id: str) -> str:
    return f"acls/{acl_id}"


def scram_key(rest: str) -> ScramKey:
    """(user, mechanism) of a `scram/<mechanism code>/<user>` key."""
    m, _, user = rest.partition("/")
    return user, ScramMechanism.from_type(_int(m))


def quota_rel(entity: QuotaEntity) -> str:
    """The key of one client quota entity: `quotas/users/<user>[/clients/<client>]` or `quotas/clients/<client>`."""
    return "quotas/" + entity.store_key()


def _quota_entity(rest: str) -> QuotaEntity | None:
    try:
        return QuotaEntity.from_store_key(rest)
    except ValueError:
        return None


def _int(s: str) -> int:
    try:
        return int(s)
    except ValueError:
        return -1
