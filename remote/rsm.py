"""RemoteStorageManager: the KIP-405 plugin interface (Kafka's `RemoteStorageManager`, asyncio flavour).

Every method is a coroutine: implementations never block the event loop (file I/O goes to a thread pool, S3 calls
are asynchronous). Semantics follow Kafka's javadoc:

* `copy_log_segment_data(metadata, data) -> dict | None` copies the segment and its auxiliary files (offset, time and
  optional transaction index, producer snapshot, leader-epoch checkpoint). Idempotent: a retry with the same
  segment id overwrites what an earlier attempt left. Returns KIP-917 custom metadata (or None).
* `fetch_log_segment(metadata, start_position, end_position=None) -> bytes` returns the bytes of the segment's
  `.log` from `start_position` to `end_position` **inclusive** (Kafka's convention), or to the end of the segment
  when `end_position` is None. An `end_position` past the end is clamped to the last byte; a `start_position` at or
  past the end returns `b""`. We return `bytes` rather than a stream: remote reads are bounded by the fetch's
  `max.bytes`, and the chunked/cached implementations assemble whole chunks anyway. `stream_log_segment` gives an
  async iterator over a range for callers that want to consume a long range piecewise, and
  `fetch_log_segment_into(metadata, start_position, buffer) -> int` writes a range into the caller's (reused) buffer
  (Spark's direct mode; not part of Kafka's interface).
* `fetch_index(metadata, index_type) -> bytes` returns the whole index (`IndexType`). A transaction index that was
  never copied raises `RemoteResourceNotFoundError` (as in Kafka; callers treat it as "no aborted transactions").
* `delete_log_segment_data(metadata)` removes everything stored for the segment. Idempotent: deleting a segment
  that is (partly or wholly) gone succeeds.
* `delete_partition(topic_id_partition)` (Kafka's KAFKA-15166 addition) removes whatever is left under the
  partition's directory/prefix; optional, a no-op by default.

Errors: `RemoteStorageError` (`retriable` True: I/O failures, timeouts, 5xx) and `RemoteResourceNotFoundError`
(`retriable` False: the object does not exist). Invalid arguments raise `ValueError`.

Object names are those of Kafka's LocalTieredStorage (`RemoteTopicPartitionDirectory`/`RemoteLogSegmentFileset`):
`<topic>-<partition>-<topicIdBase64url>/<startOffset 20 digits>-<segmentIdBase64url><suffix>`.
"""

from __future__ import annotations

import abc
import enum
import importlib
from collections.abc import AsyncIterator, Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, Self

from strata.protocol.errors import ErrorCode
from strata.protocol.uuids import kafka_uuid_str
from strata.storage.errors import StorageError

from .executors import RemoteExecutors
from .metadata import LogSegmentData, RemoteLogSegmentMetadata, TopicIdPartition

RSM_CONFIG_PREFIX = "rsm.config."


class RemoteStorageError(StorageError):
    """A remote storage operation failed. `retriable` tells the caller whether trying again may succeed."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR  # retriable for clients; the broker may map it otherwise
    retriable = True

    def __init__(self, message: str = "", *, retriable: bool | None = None) -> None:
        super().__init__(message)
        if retriable is not None:
            self.retriable = retriable


class RemoteResourceNotFoundError(RemoteStorageError):
    """The segment or index does not exist in remote storage (never retriable)."""

    retriable = False


class RemoteStorageTimeoutError(RemoteStorageError):
    """An operation did not complete within its deadline (retriable)."""

    retriable = True


class IndexType(enum.Enum):
    """Kafka's RemoteStorageManager.IndexType, with the file suffix of each index in LocalTieredStorage's layout."""

    OFFSET = ".index"
    TIMESTAMP = ".timeindex"
    PRODUCER_SNAPSHOT = ".snapshot"
    TRANSACTION = ".txnindex"
    LEADER_EPOCH = ".leader_epoch_checkpoint"

    @property
    def suffix(self) -> str:
        return self.value


LOG_SUFFIX = ".log"
#: every suffix a segment's fileset may use, the `.log` first
SEGMENT_FILE_SUFFIXES: tuple[str, ...] = (LOG_SUFFIX,) + tuple(t.suffix for t in IndexType)


def partition_dir_name(tip: TopicIdPartition) -> str:
    """`<topic>-<partition>-<topicIdBase64url>` (Kafka's RemoteTopicPartitionDirectory)."""
    return f"{tip.topic}-{tip.partition}-{kafka_uuid_str(tip.topic_id)}"


def segment_file_prefix(metadata: RemoteLogSegmentMetadata) -> str:
    """`<startOffset 20 digits>-<segmentIdBase64url>` (Kafka's RemoteLogSegmentFileset)."""
    return f"{metadata.start_offset:020d}-{metadata.remote_log_segment_id.id_str}"


def segment_file_name(metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
    return segment_file_prefix(metadata) + suffix


def resolve_range(start_position: int, end_position: int | None, size: int) -> tuple[int, int]:
    """Validate a fetch range against an object of `size` bytes; returns [start, stop) (stop exclusive, clamped).

    `end_position` is inclusive; None means "to the end". An empty result is (start, start)."""
    if start_position < 0:
        raise ValueError(f"start position {start_position} must not be negative")
    if end_position is not None and end_position < start_position:
        raise ValueError(f"end position {end_position} is before start position {start_position}")
    stop = size if end_position is None else min(end_position + 1, size)
    if start_position >= stop:
        return start_position, start_position
    return start_position, stop


class RemoteStorageManager(abc.ABC):
    """Kafka's RemoteStorageManager; see the module docstring for the contract."""

    @classmethod
    def from_config(
        cls,
        configs: Mapping[str, Any],
        *,
        broker_id: int = -1,
        default_dir: Path | None = None,
        executor: Executor | None = None,
    ) -> Self:
        """The RSM `remote.log.storage.manager.class.name` names, built from its `rsm.config.*` keys (prefix
        stripped). An RSM that can be named in a broker's configuration overrides this (Kafka calls configure())."""
        raise NotImplementedError(f"{cls.__name__} cannot be built from rsm.config.* keys")

    @abc.abstractmethod
    async def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> dict[str, Any] | None: ...

    @abc.abstractmethod
    async def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> bytes: ...

    async def fetch_log_segment_pieces(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> list[memoryview]:
        """`fetch_log_segment`'s bytes as consecutive pieces: a chunked store hands out its chunks as they are
        instead of joining them (the RLM's read path sends the pieces to the client unjoined)."""
        return [memoryview(await self.fetch_log_segment(metadata, start_position, end_position))]

    async def fetch_log_segment_into(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, buffer: memoryview
    ) -> int:
        """The segment's bytes from `start_position` written into `buffer` (at most its length; fewer at the end
        of the segment); returns how many. A reader that reuses its buffers (Spark's direct mode reads whole
        segments in fixed-size pieces) saves a fresh buffer per piece, whose pages cost more CPU to fault in than
        the copy into them. This default copies `fetch_log_segment`'s result; stores override it to write the bytes
        where they arrive."""
        if not len(buffer):
            return 0
        data = await self.fetch_log_segment(metadata, start_position, start_position + len(buffer) - 1)
        buffer[: len(data)] = data
        return len(data)

    @abc.abstractmethod
    async def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes: ...

    @abc.abstractmethod
    async def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None: ...

    async def delete_partition(self, topic_id_partition: TopicIdPartition) -> None:
        """Remove whatever remains stored for the partition (optional; no-op by default)."""

    #: The RLM's copier/expiration/reader pools (remote/executors.py); None: the loop's default executor.
    executors: RemoteExecutors | None = None

    def use_executors(self, executors: RemoteExecutors) -> None:
        """Run blocking work on the pool of the RLM path that asks for it (copy, expiration, read)."""
        self.executors = executors

    def blocking_executor(self, fallback: Executor | None = None) -> Executor | None:
        """The executor for blocking work now: an explicit one given at construction, else the current RLM path's."""
        if fallback is not None or self.executors is None:
            return fallback
        return self.executors.current()

    async def warm_up(self) -> None:
        """Build clients before the first request needs them (no request to the store). No-op by default."""

    #: Bytes a sequential reader is read ahead of (0: no read-ahead). The RemoteLogManager hands the next segment to
    #: `read_ahead` when a read ends within this distance of its segment's end.
    read_ahead_bytes: int = 0

    def read_ahead(self, metadata: RemoteLogSegmentMetadata, start_position: int = 0) -> None:
        """Hint (not part of Kafka's interface): a sequential reader reaches this segment soon; start loading its
        first `read_ahead_bytes` from `start_position` in the background. No-op by default."""

    async def stream_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
        *,
        piece_size: int = 1 << 20,
    ) -> AsyncIterator[bytes]:
        """Yield the range [start_position, end_position] (inclusive; None = to the end) in pieces of at most
        `piece_size` bytes, each obtained with `fetch_log_segment`."""
        if piece_size <= 0:
            raise ValueError("piece_size must be positive")
        resolve_range(start_position, end_position, 1 << 62)  # argument checks only
        pos = start_position
        while end_position is None or pos <= end_position:
            last = pos + piece_size - 1 if end_position is None else min(pos + piece_size - 1, end_position)
            data = await self.fetch_log_segment(metadata, pos, last)
            if data:
                yield data
            if len(data) < last - pos + 1:
                return
            pos += len(data)

    async def close(self) -> None:
        """Release clients, pools and caches."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# -- loading by class name (remote.log.storage.manager.class.name) ---------------------------------------------------
_ALIASES = {
    "local": "strata.remote.local_tiered:LocalTieredStorage",
    "localtieredstorage": "strata.remote.local_tiered:LocalTieredStorage",
    "org.apache.kafka.server.log.remote.storage.localtieredstorage": "strata.remote.local_tiered:LocalTieredStorage",
    "s3": "strata.remote.s3:S3RemoteStorageManager",
    "s3remotestoragemanager": "strata.remote.s3:S3RemoteStorageManager",
}


def strip_rsm_prefix(configs: Mapping[str, Any]) -> dict[str, Any]:
    """Accept either the broker's full config (keeps only `rsm.config.*`, prefix removed) or already-stripped keys."""
    if any(k.startswith(RSM_CONFIG_PREFIX) for k in configs):
        return {k[len(RSM_CONFIG_PREFIX) :]: v for k, v in configs.items() if k.startswith(RSM_CONFIG_PREFIX)}
    return dict(configs)


def load_rsm_class(class_name: str) -> type[RemoteStorageManager]:
    """Resolve `remote.log.storage.manager.class.name`: an alias (`local`, `s3`, Kafka's LocalTieredStorage name)
    or `package.module:Class` / `package.module.Class`."""
    target = _ALIASES.get(class_name.strip().lower(), class_name.strip())
    mod_name, sep, cls_name = target.partition(":")
    if not sep:
        mod_name, _, cls_name = target.rpartition(".")
    if not mod_name or not cls_name:
        raise ValueError(f"remote storage manager class {class_name!r} is not an alias or a module path")
    cls = getattr(importlib.import_module(mod_name), cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, RemoteStorageManager)):
        raise ValueError(f"{class_name!r} does not name a RemoteStorageManager")  # noqa: TRY004 (a config error)
    return cls


def create_remote_storage_manager(
    class_name: str, configs: Mapping[str, Any], *, broker_id: int = -1, default_dir: Path | None = None
) -> RemoteStorageManager:
    """Build the configured RSM. `configs` are the `rsm.config.*` keys (prefix stripped or not); `default_dir` is
    where LocalTieredStorage lives when `rsm.config.dir` is unset."""
    cls = load_rsm_class(class_name)
    return cls.from_config(strip_rsm_prefix(configs), broker_id=broker_id, default_dir=default_dir)


__all__ = [
    "LOG_SUFFIX",
    "RSM_CONFIG_PREFIX",
    "SEGMENT_FILE_SUFFIXES",
    "IndexType",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "RemoteStorageManager",
    "RemoteStorageTimeoutError",
    "create_remote_storage_manager",
    "load_rsm_class",
    "partition_dir_name",
    "resolve_range",
    "segment_file_name",
    "segment_file_prefix",
    "strip_rsm_prefix",
]
