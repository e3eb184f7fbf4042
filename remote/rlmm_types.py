"""Types of the topic-based RemoteLogMetadataManager that `strata.remote.metadata` does not carry.

* `RemoteLogSegmentMetadataSnapshot`: Kafka's snapshot entry (a segment's metadata without its TopicIdPartition),
  the payload of `RemoteLogSegmentMetadataSnapshotRecord` (api key 3).
* Errors: `RemoteStorageNotReadyError` (retriable: the cache of a user partition has not caught up with its
  metadata partition yet), `InvalidStateTransitionError` (an add/update that Kafka's state machine forbids).
* `MetadataTopicIO`: what the RLMM needs from the broker to use `__remote_log_metadata` (the broker implements it
  over its own logs; `remote` never imports `broker`).
* `RlmmConfig`: the `rlmm.config.`-prefixed settings under Kafka's names (prefix stripped by the caller).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from strata.config import broker_default
from strata.protocol.constants import REMOTE_LOG_METADATA_TOPIC as REMOTE_LOG_METADATA_TOPIC_NAME
from strata.protocol.errors import ErrorCode
from strata.protocol.wire import WireFormatError

from .metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from .rsm import RemoteStorageError


class RemoteStorageNotReadyError(RemoteStorageError):
    """The RLMM cache of a user partition is not caught up yet (Kafka's RemoteStorageNotReadyException).

    Retriable. Kafka's cache raised ReplicaNotAvailableException for the same condition before the dedicated
    exception existed, so the error code handed to clients is REPLICA_NOT_AVAILABLE (9).
    """

    error_code = ErrorCode.REPLICA_NOT_AVAILABLE
    retriable = True


class InvalidStateTransitionError(ValueError):
    """A segment state change that RemoteLogSegmentState.isValidTransition rejects (or an add not in
    COPY_SEGMENT_STARTED, an update to COPY_SEGMENT_STARTED)."""


class MetadataDecodeError(WireFormatError):
    """Bytes that are not a KIP-405 remote log metadata value."""


@dataclass(frozen=True)
class RemoteLogSegmentMetadataSnapshot:
    """Kafka's RemoteLogSegmentMetadataSnapshot: a segment's metadata keyed by the segment UUID alone (the user
    partition is implied by where the snapshot is stored). `custom_metadata` is kept as the raw stored bytes."""

    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: dict[int, int]
    state: RemoteLogSegmentState
    custom_metadata: bytes | None = None
    txn_idx_empty: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "segment_leader_epochs", dict(sorted(self.segment_leader_epochs.items())))
        object.__setattr__(self, "state", RemoteLogSegmentState(self.state))

    @classmethod
    def from_metadata(cls, m: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataSnapshot:
        from .rlmm_serde import custom_metadata_to_bytes

        return cls(
            m.remote_log_segment_id.id,
            m.start_offset,
            m.end_offset,
            m.max_timestamp_ms,
            m.broker_id,
            m.event_timestamp_ms,
            m.segment_size_in_bytes,
            dict(m.segment_leader_epochs),
            m.state,
            custom_metadata_to_bytes(m.custom_metadata),
            m.txn_idx_empty,
        )

    def to_metadata(self, tip: TopicIdPartition) -> RemoteLogSegmentMetadata:
        from .rlmm_serde import custom_metadata_from_bytes

        return RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tip, self.segment_id),
            self.start_offset,
            self.end_offset,
            self.max_timestamp_ms,
            self.broker_id,
            self.event_timestamp_ms,
            self.segment_size_in_bytes,
            dict(self.segment_leader_epochs),
            self.state,
            custom_metadata_from_bytes(self.custom_metadata),
            self.txn_idx_empty,
        )


@runtime_checkable
class MetadataTopicIO(Protocol):
    """Access to the partitions of `__remote_log_metadata`, implemented by the broker.

    * `ensure_topic` creates the topic if missing (cleanup.policy=delete, retention.ms as given) and returns once
      its partitions can be appended to and read; an existing topic with another partition count must raise.
    * `append(partition, records)` appends one magic-v2 record batch (base offset 0 as built; the log assigns the
      offsets) and returns the assigned base offset once the batch is durable per the topic's acks semantics
      (acks=all, i.e. at or below the high watermark).
    * `read(partition, offset, max_bytes)` returns whole batches holding offsets >= `offset` and below the high
      watermark (possibly b""; the first batch may start below `offset`; at least one whole batch when one is
      available, even if larger than `max_bytes`). Reading below the log start offset returns batches from the log
      start offset. It may return an awaitable instead (a partition read from its leader over the network, which
      may wait a little for data).
    * `end_offset(partition)` is the high watermark: the next offset to be made visible to readers; None while it
      is not known yet (a partition read from its leader before its first read).
    * `replicated_end_offset(partition)` is the end of this broker's replica of the partition (its log end offset,
      above the high watermark while followers catch up; see RemoteLogMetadataManager.wait_for_catch_up); None
      while it is not known.
    * `wait_for_data(partition, offset, timeout_s)` returns when `end_offset(partition) > offset` may hold, or at
      the timeout, whichever is first (spurious wake-ups are allowed).
    """

    async def ensure_topic(self, num_partitions: int, replication_factor: int, retention_ms: int) -> None: ...

    async def append(self, partition: int, records: bytes) -> int: ...

    def read(self, partition: int, offset: int, max_bytes: int) -> bytes | Awaitable[bytes]: ...

    def end_offset(self, partition: int) -> int | None: ...

    def replicated_end_offset(self, partition: int) -> int | None: ...

    async def wait_for_data(self, partition: int, offset: int, timeout_s: float) -> None: ...


REMOTE_LOG_METADATA_TOPIC_PARTITIONS_PROP = "remote.log.metadata.topic.num.partitions"
REMOTE_LOG_METADATA_TOPIC_REPLICATION_FACTOR_PROP = "remote.log.metadata.topic.replication.factor"
REMOTE_LOG_METADATA_TOPIC_RETENTION_MS_PROP = "remote.log.metadata.topic.retention.ms"
REMOTE_LOG_METADATA_CONSUME_WAIT_MS_PROP = "remote.log.metadata.consume.wait.ms"


@dataclass(frozen=True)
class RlmmConfig:
    """TopicBasedRemoteLogMetadataManagerConfig's settings (defaults as in Kafka)."""

    num_partitions: int = broker_default(REMOTE_LOG_METADATA_TOPIC_PARTITIONS_PROP)
    replication_factor: int = broker_default(REMOTE_LOG_METADATA_TOPIC_REPLICATION_FACTOR_PROP)
    retention_ms: int = broker_default(REMOTE_LOG_METADATA_TOPIC_RETENTION_MS_PROP)
    consume_wait_ms: int = broker_default(REMOTE_LOG_METADATA_CONSUME_WAIT_MS_PROP)

    def __post_init__(self) -> None:
        if self.num_partitions <= 0:
            raise ValueError(f"{REMOTE_LOG_METADATA_TOPIC_PARTITIONS_PROP} must be positive: {self.num_partitions}")
        if self.replication_factor <= 0:
            raise ValueError(
                f"{REMOTE_LOG_METADATA_TOPIC_REPLICATION_FACTOR_PROP} must be positive: {self.replication_factor}"
            )
        if self.retention_ms < -1 or self.retention_ms == 0:
            raise ValueError(
                f"{REMOTE_LOG_METADATA_TOPIC_RETENTION_MS_PROP} must be -1 or positive: {self.retention_ms}"
            )
        if self.consume_wait_ms < 0:
            raise ValueError(f"{REMOTE_LOG_METADATA_CONSUME_WAIT_MS_PROP} must not be negative: {self.consume_wait_ms}")

    @classmethod
    def from_configs(cls, configs: Mapping[str, Any]) -> RlmmConfig:
        """From Kafka-named properties (`rlmm.config.` already stripped); unknown keys are ignored."""
        kw: dict[str, int] = {}
        for prop, name in (
            (REMOTE_LOG_METADATA_TOPIC_PARTITIONS_PROP, "num_partitions"),
            (REMOTE_LOG_METADATA_TOPIC_REPLICATION_FACTOR_PROP, "replication_factor"),
            (REMOTE_LOG_METADATA_TOPIC_RETENTION_MS_PROP, "retention_ms"),
            (REMOTE_LOG_METADATA_CONSUME_WAIT_MS_PROP, "consume_wait_ms"),
        ):
            if prop in configs and configs[prop] is not None:
                try:
                    kw[name] = int(configs[prop])
                except (TypeError, ValueError):
                    raise ValueError(f"{prop} must be an integer, got {configs[prop]!r}") from None
        return cls(**kw)

    def replace(self, **changes: int) -> RlmmConfig:
        return dataclasses.replace(self, **changes)


__all__ = [
    "REMOTE_LOG_METADATA_TOPIC_NAME",
    "InvalidStateTransitionError",
    "MetadataDecodeError",
    "MetadataTopicIO",
    "RemoteLogSegmentMetadataSnapshot",
    "RemoteStorageNotReadyError",
    "RlmmConfig",
]
