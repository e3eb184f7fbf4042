"""KIP-405 data classes shared by the RemoteStorageManager and the RemoteLogMetadataManager.

Names and fields follow Kafka's `org.apache.kafka.server.log.remote.storage` API (snake_case):

* `TopicIdPartition(topic_id, topic, partition)` and `RemoteLogSegmentId(topic_id_partition, id)` -- a fresh
  random `id` for every copy attempt, so two attempts at the same offsets never collide.
* `RemoteLogSegmentMetadata`: immutable; state transitions produce a new object via `create_with_update`.
* `RemoteLogSegmentMetadataUpdate`, `RemotePartitionDeleteMetadata` and the state enums carry Kafka's ids (the
  RLMM serializes them in `__remote_log_metadata`).
* `LogSegmentData`: the local files of one segment handed to `copy_log_segment_data`.

Custom metadata (KIP-917) is a small JSON-able dict on this side; `encode_custom_metadata` gives the bytes the RLMM
stores (Kafka caps them with `remote.log.metadata.custom.metadata.max.bytes`, 128 by default).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strata.protocol.uuids import kafka_uuid_str


@dataclass(frozen=True)
class TopicIdPartition:
    topic_id: uuid.UUID
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{kafka_uuid_str(self.topic_id)}:{self.topic}-{self.partition}"


@dataclass(frozen=True)
class RemoteLogSegmentId:
    topic_id_partition: TopicIdPartition
    id: uuid.UUID

    @classmethod
    def generate_new(cls, topic_id_partition: TopicIdPartition) -> RemoteLogSegmentId:
        return cls(topic_id_partition, uuid.uuid4())

    @property
    def id_str(self) -> str:
        """Kafka's text form of the id (22 characters of URL-safe base64), as used in object names."""
        return kafka_uuid_str(self.id)

    def __str__(self) -> str:
        return f"RemoteLogSegmentId{{topicIdPartition={self.topic_id_partition}, id={self.id_str}}}"


class RemoteLogSegmentState(enum.IntEnum):
    """Kafka's RemoteLogSegmentState ids (byte on the wire)."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


_VALID_SEGMENT_TRANSITIONS: dict[RemoteLogSegmentState, frozenset[RemoteLogSegmentState]] = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: frozenset(
        {RemoteLogSegmentState.COPY_SEGMENT_FINISHED, RemoteLogSegmentState.DELETE_SEGMENT_STARTED}
    ),
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: frozenset({RemoteLogSegmentState.DELETE_SEGMENT_STARTED}),
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: frozenset({RemoteLogSegmentState.DELETE_SEGMENT_FINISHED}),
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: frozenset(),
}


def is_valid_segment_transition(src: RemoteLogSegmentState | None, dst: RemoteLogSegmentState) -> bool:
    """Kafka's state machine; `src` None means "no metadata yet" (only COPY_SEGMENT_STARTED may start it).
    A transition to the same state is allowed (idempotent replays of the metadata topic)."""
    if src is None:
        return dst == RemoteLogSegmentState.COPY_SEGMENT_STARTED
    return dst == src or dst in _VALID_SEGMENT_TRANSITIONS[src]


class RemotePartitionDeleteState(enum.IntEnum):
    """Kafka's RemotePartitionDeleteState ids."""

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


def encode_custom_metadata(custom: Mapping[str, Any] | None) -> bytes | None:
    """Compact JSON bytes for the RLMM record (None stays None)."""
    if custom is None:
        return None
    return json.dumps(dict(custom), separators=(",", ":"), sort_keys=True).encode()


def decode_custom_metadata(raw: bytes | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    return json.loads(raw.decode())


@dataclass(frozen=True, eq=True)
class RemoteLogSegmentMetadata:
    """Metadata of one remote log segment (one copy attempt).

    `segment_leader_epochs` maps leader epoch -> start offset of that epoch within the segment (non-empty, as in
    Kafka). `txn_idx_empty` (KIP-1058) tells readers they can skip the segment's transaction index.
    """

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: dict[int, int]
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    custom_metadata: dict[str, Any] | None = None
    txn_idx_empty: bool = False

    def __post_init__(self) -> None:
        if self.start_offset < 0 or self.end_offset < self.start_offset:
            raise ValueError(f"invalid offsets: start {self.start_offset}, end {self.end_offset}")
        if self.segment_size_in_bytes < 0:
            raise ValueError(f"negative segment size {self.segment_size_in_bytes}")
        if not self.segment_leader_epochs:
            raise ValueError("segment_leader_epochs must not be empty")
        # keep the epochs sorted by epoch (Kafka uses a NavigableMap) and immune to the caller's later edits
        object.__setattr__(self, "segment_leader_epochs", dict(sorted(self.segment_leader_epochs.items())))
        object.__setattr__(self, "state", RemoteLogSegmentState(self.state))

    # Hash by identity of the copy attempt: equal objects have equal segment ids.
    def __hash__(self) -> int:
        return hash(self.remote_log_segment_id)

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition

    @property
    def segment_id(self) -> uuid.UUID:
        return self.remote_log_segment_id.id

    def create_with_update(self, update: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        if update.remote_log_segment_id != self.remote_log_segment_id:
            raise ValueError(f"update for {update.remote_log_segment_id} applied to {self.remote_log_segment_id}")
        return dataclasses.replace(
            self,
            state=update.state,
            event_timestamp_ms=update.event_timestamp_ms,
            broker_id=update.broker_id,
            custom_metadata=update.custom_metadata if update.custom_metadata is not None else self.custom_metadata,
        )


@dataclass(frozen=True)
class RemoteLogSegmentMetadataUpdate:
    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    custom_metadata: dict[str, Any] | None
    state: RemoteLogSegmentState
    broker_id: int

    def __post_init__(self) -> None:
        if self.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError("an update cannot carry COPY_SEGMENT_STARTED (that is the initial metadata)")


@dataclass(frozen=True)
class RemotePartitionDeleteMetadata:
    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int


@dataclass(frozen=True)
class LogSegmentData:
    """The local files of a segment to copy (Kafka's LogSegmentData).

    `leader_epoch_index` is the content of the leader-epoch checkpoint truncated to the segment (bytes, like Kafka's
    ByteBuffer); `transaction_index` is optional (segments without aborted transactions may have none).
    """

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot_index: Path
    leader_epoch_index: bytes = field(default=b"")

    def __post_init__(self) -> None:
        for name in ("log_segment", "offset_index", "time_index", "producer_snapshot_index"):
            object.__setattr__(self, name, Path(getattr(self, name)))
        if self.transaction_index is not None:
            object.__setattr__(self, "transaction_index", Path(self.transaction_index))
        object.__setattr__(self, "leader_epoch_index", bytes(self.leader_epoch_index))


__all__ = [
    "LogSegmentData",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataUpdate",
    "RemoteLogSegmentState",
    "RemotePartitionDeleteMetadata",
    "RemotePartitionDeleteState",
    "TopicIdPartition",
    "decode_custom_metadata",
    "encode_custom_metadata",
    "is_valid_segment_transition",
]
