"""The bucket manifests (issue 24): the JSON documents that make a tiered-storage bucket self-describing.

Four kinds, each a versioned JSON object (`"format": 1`, `"kind"`) documented in docs/tiered-storage.md ("Bucket
layout and manifests") as an interface other tools may read:

* partition manifest: the segments of the partition's current lineage that are COPY_SEGMENT_FINISHED and not deleted,
  the leader-epoch chain, the log start offset and the highest uploaded offset;
* topic manifest: topic id, name, partition count, replication factor and every non-default topic config;
* cluster manifest: cluster id, topics with ids, ACLs, SCRAM credentials (salted and hashed, as stored) and client
  quotas;
* group offsets manifest: the committed offsets of the groups one `__consumer_offsets` partition holds, written by
  that partition's leader (only a group's coordinator has its offsets).

They live under `__strata_manifests/` beside Kafka's LocalTieredStorage partition directories (whose names always
end in `-<partition>-<topicIdBase64url>`, so no topic can collide with it). Every write is a new object named
`manifest.<writer epoch 10 digits>.<revision 20 digits>.json`; nothing is overwritten in place, and a reader takes
the greatest name, i.e. the highest (writer epoch, revision): a deposed leader's late write (lower leader epoch)
loses to its successor's.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from strata.protocol.uuids import kafka_uuid_str, parse_kafka_uuid

FORMAT_VERSION = 1
MANIFESTS_ROOT = "__strata_manifests/"
CLUSTER_DIR = MANIFESTS_ROOT + "cluster/"
TOPICS_DIR = MANIFESTS_ROOT + "topics/"
GROUPS_DIR = MANIFESTS_ROOT + "groups/"
D = TypeVar("D")
_ID_CHARS = 22  # Kafka's base64url text of a 16-byte uuid, unpadded
_NAME_RE = re.compile(r"^manifest\.(\d{10})\.(\d{20})\.json$")


class ManifestFormatError(ValueError):
    """A manifest object that is not valid JSON of a known format version."""


def topic_dir(topic: str, topic_id: uuid.UUID) -> str:
    """`__strata_manifests/topics/<topic>-<topicIdBase64url>/` (a recreated topic gets a new directory)."""
    return f"{TOPICS_DIR}{topic}-{kafka_uuid_str(topic_id)}/"


def topic_manifest_dir(topic: str, topic_id: uuid.UUID) -> str:
    return topic_dir(topic, topic_id) + "topic/"


def partition_manifest_dir(topic: str, topic_id: uuid.UUID, partition: int) -> str:
    return f"{topic_dir(topic, topic_id)}partition-{partition}/"


def group_offsets_dir(offsets_partition: int) -> str:
    """`__strata_manifests/groups/partition-<n>/`: the offsets of the groups `__consumer_offsets`-<n> holds."""
    return f"{GROUPS_DIR}partition-{offsets_partition}/"


def manifest_name(writer_epoch: int, revision: int) -> str:
    if writer_epoch < 0 or revision < 0:
        raise ValueError(f"negative writer epoch {writer_epoch} or revision {revision}")
    return f"manifest.{writer_epoch:010d}.{revision:020d}.json"


def parse_manifest_name(name: str) -> tuple[int, int] | None:
    """(writer epoch, revision) of a manifest object's base name, None for anything else (temporary files)."""
    m = _NAME_RE.match(name.rsplit("/", 1)[-1])
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse_topic_dir(name: str) -> tuple[str, uuid.UUID] | None:
    """(topic, topic id) of a `<topic>-<topicIdBase64url>` directory name. The id is always 22 characters and may
    itself contain "-" (base64url), so it is cut by length, not at the last "-"."""
    name = name.rstrip("/")
    topic, sep, tid = name[: -_ID_CHARS - 1], name[-_ID_CHARS - 1 : -_ID_CHARS], name[-_ID_CHARS:]
    if sep != "-" or not topic:
        return None
    try:
        return topic, parse_kafka_uuid(tid)
    except ValueError:
        return None


def _dumps(kind: str, fields: Mapping[str, Any]) -> bytes:
    return json.dumps({"format": FORMAT_VERSION, "kind": kind, **fields}, indent=1, sort_keys=True).encode()


def _loads(raw: bytes, kind: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ManifestFormatError(f"{kind} manifest is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("kind") != kind:
        raise ManifestFormatError(f"not a {kind} manifest")
    if doc.get("format") != FORMAT_VERSION:
        raise ManifestFormatError(f"{kind} manifest format {doc.get('format')!r} is not {FORMAT_VERSION}")
    return doc


_SCALARS: dict[str, Callable[[Any], Any]] = {"int": int, "str": str, "bool": bool}


def _fields_to_json(obj: Any, **special: Any) -> dict[str, Any]:
    """The dataclass's fields as a JSON object; `special` replaces the fields that need an encoding."""
    out = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    out.update(special)
    return out


def _fields_from_json(cls: type[D], d: Mapping[str, Any], what: str, **special: Callable[[Any], Any]) -> D:
    """`cls` built from a JSON object: scalar fields checked by their annotation, `special` ones decoded by the
    function given; an absent field takes its default. Anything malformed is a ManifestFormatError."""
    kwargs: dict[str, Any] = {}
    try:
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name not in d:
                continue
            conv = special.get(f.name) or _SCALARS.get(str(f.type))
            kwargs[f.name] = conv(d[f.name]) if conv is not None and d[f.name] is not None else d[f.name]
        return cls(**kwargs)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ManifestFormatError(f"{what}: {e!r}") from None


def _pairs(v: Any) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in v]


@dataclass(frozen=True)
class SegmentEntry:
    """One COPY_SEGMENT_FINISHED segment: its RLMM metadata, enough to rebuild the record and find its objects."""

    segment_id: str  # Kafka's base64url text of the RemoteLogSegmentId's uuid, as in the object names
    start_offset: int
    end_offset: int
    size_bytes: int
    max_timestamp_ms: int
    segment_leader_epochs: dict[int, int]  # leader epoch -> first offset of that epoch in the segment
    txn_idx_empty: bool = False
    custom_metadata: dict[str, Any] | None = None
    broker_id: int = -1
    event_timestamp_ms: int = -1

    @property
    def object_prefix(self) -> str:
        """The segment's file prefix in Kafka's layout: `<startOffset 20 digits>-<segmentIdBase64url>`."""
        return f"{self.start_offset:020d}-{self.segment_id}"

    def to_json(self) -> dict[str, Any]:
        return _fields_to_json(
            self, segment_leader_epochs=[[e, o] for e, o in sorted(self.segment_leader_epochs.items())]
        )

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SegmentEntry:
        return _fields_from_json(cls, d, "segment entry", segment_leader_epochs=lambda v: dict(_pairs(v)))


@dataclass(frozen=True)
class PartitionManifest:
    """What the partition's leader at `leader_epoch` knew was in the bucket at `revision`."""

    topic_id: uuid.UUID
    topic: str
    partition: int
    leader_epoch: int  # the writer's leader epoch
    revision: int
    broker_id: int
    written_at_ms: int
    log_start_offset: int
    highest_uploaded_offset: int  # -1: nothing uploaded
    leader_epochs: list[tuple[int, int]]  # the replica's leader-epoch chain: (epoch, start offset)
    segments: list[SegmentEntry] = field(default_factory=list)  # offset order

    @property
    def name(self) -> str:
        return manifest_name(self.leader_epoch, self.revision)

    def to_bytes(self) -> bytes:
        return _dumps(
            "partition",
            _fields_to_json(
                self,
                topic_id=kafka_uuid_str(self.topic_id),
                leader_epochs=[[e, o] for e, o in self.leader_epochs],
                segments=[seg.to_json() for seg in self.segments],
            ),
        )

    @classmethod
    def from_bytes(cls, raw: bytes) -> PartitionManifest:
        return _fields_from_json(
            cls,
            _loads(raw, "partition"),
            "partition manifest",
            topic_id=parse_kafka_uuid,
            leader_epochs=_pairs,
            segments=lambda v: [SegmentEntry.from_json(x) for x in v],
        )


@dataclass(frozen=True)
class TopicManifest:
    topic_id: uuid.UUID
    topic: str
    partitions: int
    replication_factor: int
    configs: dict[str, str]  # every non-default topic config (no secret: topics have none)
    revision: int
    written_at_ms: int
    writer_epoch: int = 0  # the writer's controller epoch (cluster) or 0 (single broker)

    @property
    def name(self) -> str:
        return manifest_name(self.writer_epoch, self.revision)

    def to_bytes(self) -> bytes:
        return _dumps("topic", _fields_to_json(self, topic_id=kafka_uuid_str(self.topic_id)))

    @classmethod
    def from_bytes(cls, raw: bytes) -> TopicManifest:
        return _fields_from_json(
            cls,
            _loads(raw, "topic"),
            "topic manifest",
            topic_id=parse_kafka_uuid,
            configs=lambda v: {str(k): str(x) for k, x in v.items()},
        )


@dataclass(frozen=True)
class ClusterManifest:
    """The cluster-wide state a restore needs besides the topics' own manifests: `topics` name -> topic id; `acls`:
    Kafka's ACL bindings as the metadata store keeps them; `scram_credentials`: user -> mechanism -> the stored
    salted/hashed form (never a password); `client_quotas`: [{"entity": [[type, name]], "quotas": {key: value}}]."""

    cluster_id: str
    revision: int
    written_at_ms: int
    writer_epoch: int = 0
    topics: dict[str, str] = field(default_factory=dict)  # name -> topic id (base64url)
    acls: list[dict[str, Any]] = field(default_factory=list)
    scram_credentials: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    client_quotas: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return manifest_name(self.writer_epoch, self.revision)

    def to_bytes(self) -> bytes:
        return _dumps("cluster", _fields_to_json(self))

    @classmethod
    def from_bytes(cls, raw: bytes) -> ClusterManifest:
        return _fields_from_json(cls, _loads(raw, "cluster"), "cluster manifest", topics=dict, acls=list)


@dataclass(frozen=True)
class GroupOffsetsManifest:
    """The committed offsets of the groups one `__consumer_offsets` partition holds, written by its leader (the
    groups' coordinator) at `leader_epoch`: group -> topic -> partition (text) -> {offset, leader_epoch, metadata}."""

    offsets_partition: int
    leader_epoch: int
    revision: int
    written_at_ms: int
    broker_id: int
    offsets: dict[str, dict[str, dict[str, dict[str, Any]]]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return manifest_name(self.leader_epoch, self.revision)

    def to_bytes(self) -> bytes:
        return _dumps("groups", _fields_to_json(self))

    @classmethod
    def from_bytes(cls, raw: bytes) -> GroupOffsetsManifest:
        return _fields_from_json(cls, _loads(raw, "groups"), "group offsets manifest", offsets=dict)


__all__ = [
    "CLUSTER_DIR",
    "FORMAT_VERSION",
    "GROUPS_DIR",
    "MANIFESTS_ROOT",
    "TOPICS_DIR",
    "ClusterManifest",
    "GroupOffsetsManifest",
    "ManifestFormatError",
    "PartitionManifest",
    "SegmentEntry",
    "TopicManifest",
    "group_offsets_dir",
    "manifest_name",
    "parse_manifest_name",
    "parse_topic_dir",
    "partition_manifest_dir",
    "topic_dir",
    "topic_manifest_dir",
]
