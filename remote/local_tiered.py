"""LocalTieredStorage: a RemoteStorageManager on a local (or mounted) directory, Kafka's object layout.

    <root>/<topic>-<partition>-<topicIdBase64url>/<startOffset 20 digits>-<segmentIdBase64url>.log
                                                 .../...index .timeindex [.txnindex] .snapshot .leader_epoch_checkpoint

`from_config` puts `<root>` at `<rsm.config.dir>/kafka-tiered-storage`, as Kafka's LocalTieredStorage does
(`rsm.config.fsync.enable=false` skips the fsyncs, for tests on slow disks). Every file
is written to `<name>.tmp`, fsynced and renamed over the final name (so a retried copy overwrites atomically and a
crash never leaves a torn file under a final name); the partition directory is fsynced after a copy, since local
retention deletes the local segment as soon as the copy returns. All blocking file work runs in a thread pool
(`executor`, default: the loop's default executor), so the event loop never waits on the disk.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import os
import shutil
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, TypeVar

from strata.config import parse_bool

from .metadata import LogSegmentData, RemoteLogSegmentMetadata, TopicIdPartition
from .rsm import (
    LOG_SUFFIX,
    SEGMENT_FILE_SUFFIXES,
    IndexType,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    partition_dir_name,
    resolve_range,
    segment_file_name,
)

ROOT_STORAGE_DIR_NAME = "kafka-tiered-storage"
T = TypeVar("T")


def _fsync_path(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _install_file(dst: Path, write: Callable[[Path], object]) -> None:
    tmp = dst.with_name(dst.name + ".tmp")
    write(tmp)
    _fsync_path(tmp)
    os.replace(tmp, dst)


def _copy_file(src: Path, dst: Path) -> None:
    _install_file(dst, lambda tmp: shutil.copyfile(src, tmp))


def _write_bytes(data: bytes, dst: Path) -> None:
    _install_file(dst, lambda tmp: tmp.write_bytes(data))


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class LocalTieredStorage(RemoteStorageManager):
    def __init__(
        self, root: Path | str, *, executor: Executor | None = None, broker_id: int = -1, fsync: bool = True
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.broker_id = broker_id
        self._executor = executor
        self._fsync = fsync

    @classmethod
    def from_config(
        cls,
        configs: Mapping[str, Any],
        *,
        broker_id: int = -1,
        default_dir: Path | None = None,
        executor: Executor | None = None,
    ) -> LocalTieredStorage:
        base = configs.get("dir") or default_dir
        if not base:
            raise ValueError("LocalTieredStorage needs rsm.config.dir (or a default directory)")
        fsync = parse_bool(configs.get("fsync.enable", True))
        return cls(Path(base) / ROOT_STORAGE_DIR_NAME, executor=executor, broker_id=broker_id, fsync=fsync)

    @property
    def fsync(self) -> bool:
        """Whether writes are fsynced (`rsm.config.fsync.enable`); the manifest store beside it does the same."""
        return self._fsync

    # -- helpers -------------------------------------------------------------------------------------------------
    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self.blocking_executor(self._executor), functools.partial(fn, *args))
        except RemoteStorageError:
            raise
        except FileNotFoundError as e:
            raise RemoteResourceNotFoundError(f"not found in local tiered storage: {e.filename}") from e
        except OSError as e:
            # a full or read-only disk will not heal by retrying at once, but an operator can fix it: retriable
            raise RemoteStorageError(
                f"local tiered storage I/O error: {e}", retriable=e.errno not in (errno.EINVAL, errno.EISDIR)
            ) from e

    def partition_dir(self, tip: TopicIdPartition) -> Path:
        return self.root / partition_dir_name(tip)

    def segment_path(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> Path:
        return self.partition_dir(metadata.topic_id_partition) / segment_file_name(metadata, suffix)

    # -- RSM API -------------------------------------------------------------------------------------------------
    async def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> dict[str, Any] | None:
        await self._run(self._copy_sync, metadata, segment_data)
        return None

    def _copy_sync(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> None:
        pdir = self.partition_dir(metadata.topic_id_partition)
        pdir.mkdir(parents=True, exist_ok=True)
        copy = _copy_file if self._fsync else (lambda s, d: shutil.copyfile(s, d))
        write = _write_bytes if self._fsync else (lambda b, d: d.write_bytes(b))
        sources: list[tuple[Path, str]] = [
            (data.offset_index, IndexType.OFFSET.suffix),
            (data.time_index, IndexType.TIMESTAMP.suffix),
            (data.producer_snapshot_index, IndexType.PRODUCER_SNAPSHOT.suffix),
        ]
        if data.transaction_index is not None:
            sources.append((data.transaction_index, IndexType.TRANSACTION.suffix))
        sources.append((data.log_segment, LOG_SUFFIX))  # the segment last: its presence implies the rest
        try:
            if data.transaction_index is None:  # a retry without one must not leave an earlier attempt's
                _unlink_quietly(self.segment_path(metadata, IndexType.TRANSACTION.suffix))
            write(data.leader_epoch_index, self.segment_path(metadata, IndexType.LEADER_EPOCH.suffix))
            for src, suffix in sources:
                try:
                    copy(src, self.segment_path(metadata, suffix))
                except FileNotFoundError as e:
                    if src.exists():
                        raise
                    raise RemoteStorageError(
                        f"cannot copy {metadata.remote_log_segment_id}: local file {src} is missing", retriable=False
                    ) from e
            if self._fsync:
                _fsync_path(pdir, directory=True)
        except BaseException:
            # keep the storage consistent: no partial fileset stays behind (as Kafka's LocalTieredStorage)
            self._delete_sync(metadata)
            raise

    async def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> bytes:
        resolve_range(start_position, end_position, 1 << 62)  # argument errors before any I/O
        return await self._run(self._read_range, self.segment_path(metadata, LOG_SUFFIX), start_position, end_position)

    @staticmethod
    def _read_range(path: Path, start: int, end: int | None) -> bytes:
        fd = os.open(path, os.O_RDONLY)
        try:
            start, stop = resolve_range(start, end, os.fstat(fd).st_size)
            parts = []
            pos = start
            while pos < stop:
                piece = os.pread(fd, stop - pos, pos)
                if not piece:
                    break
                parts.append(piece)
                pos += len(piece)
            return b"".join(parts)
        finally:
            os.close(fd)

    async def fetch_log_segment_into(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, buffer: memoryview
    ) -> int:
        resolve_range(start_position, None, 1 << 62)
        if not len(buffer):
            return 0
        return await self._run(self._read_into, self.segment_path(metadata, LOG_SUFFIX), start_position, buffer)

    @staticmethod
    def _read_into(path: Path, start: int, buffer: memoryview) -> int:
        fd = os.open(path, os.O_RDONLY)
        try:
            start, stop = resolve_range(start, start + len(buffer) - 1, os.fstat(fd).st_size)
            done = 0
            while done < stop - start:
                n = os.preadv(fd, [buffer[done : stop - start]], start + done)
                if not n:
                    break
                done += n
            return done
        finally:
            os.close(fd)

    async def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        path = self.segment_path(metadata, IndexType(index_type).suffix)
        return await self._run(path.read_bytes)

    async def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        await self._run(self._delete_sync, metadata)

    def _delete_sync(self, metadata: RemoteLogSegmentMetadata) -> None:
        for suffix in SEGMENT_FILE_SUFFIXES:
            path = self.segment_path(metadata, suffix)
            _unlink_quietly(path)
            _unlink_quietly(path.with_name(path.name + ".tmp"))

    async def delete_partition(self, topic_id_partition: TopicIdPartition) -> None:
        await self._run(self._delete_partition_sync, self.partition_dir(topic_id_partition))

    @staticmethod
    def _delete_partition_sync(pdir: Path) -> None:
        try:
            entries = list(pdir.iterdir())
        except FileNotFoundError:
            return
        for p in entries:
            if p.is_file():
                _unlink_quietly(p)
        try:
            pdir.rmdir()
        except FileNotFoundError:
            pass

    # -- inspection (tests, tools) ---------------------------------------------------------------------------------
    def list_files(self) -> list[str]:
        """Relative paths of every stored file (sorted); blocking, for tools and tests."""
        if not self.root.exists():
            return []
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file())


__all__ = ["ROOT_STORAGE_DIR_NAME", "LocalTieredStorage"]
