"""The coordinator runtime over an internal compacted topic, shared by the group and transaction coordinators."""

from .runtime import (
    CoordinatorMetadataStore,
    CoordinatorReplicaManager,
    CoordinatorRuntime,
    CoordinatorShard,
    CoordinatorTopic,
    partition_for,
)

__all__ = [
    "CoordinatorMetadataStore",
    "CoordinatorReplicaManager",
    "CoordinatorRuntime",
    "CoordinatorShard",
    "CoordinatorTopic",
    "partition_for",
]
