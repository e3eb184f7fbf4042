"""The manifest store: plain object I/O on the bucket (or LocalTieredStorage's directory) beside the RSM.

Not part of Kafka's RemoteStorageManager interface on purpose: the manifests are Strata's, and tools (recovery,
restore, read replicas) need to list and read a bucket without an RSM's segment semantics. Keys are relative to the
RSM's root (LocalTieredStorage's `kafka-tiered-storage` directory, the S3 RSM's `key.prefix`), so the segment
objects of a partition are `<partition dir>/<segment prefix><suffix>` here too.

`put` is atomic: a reader sees the whole object or none (S3 PUTs are; locally a `.tmp` file is fsynced and renamed).
`manifest_store_for(rsm)` gives the store of a configured RSM, None for an RSM it does not know.
"""

from __future__ import annotations

import abc
import asyncio
import builtins
import functools
import os
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .local_tiered import LocalTieredStorage
from .rsm import (
    LOG_SUFFIX,
    IndexType,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
)
from .s3_manifest import MANIFEST_SUFFIX

if TYPE_CHECKING:
    from .s3 import S3RemoteStorageManager

T = TypeVar("T")

# the files every complete segment has, whichever store (the transaction index only when it has aborted txns)
BASE_SEGMENT_SUFFIXES: tuple[str, ...] = (
    LOG_SUFFIX,
    IndexType.OFFSET.suffix,
    IndexType.TIMESTAMP.suffix,
    IndexType.PRODUCER_SNAPSHOT.suffix,
    IndexType.LEADER_EPOCH.suffix,
)


class ManifestStore(abc.ABC):
    """Objects under one root: put (atomic), get, list by prefix, delete."""

    #: objects a complete segment has in this store besides BASE_SEGMENT_SUFFIXES (the S3 RSM's chunk manifest,
    #: written after all the others)
    extra_segment_suffixes: tuple[str, ...] = ()

    @abc.abstractmethod
    async def put(self, key: str, data: bytes) -> None: ...

    @abc.abstractmethod
    async def get(self, key: str) -> bytes:
        """The object; RemoteResourceNotFoundError when it does not exist."""

    @abc.abstractmethod
    async def list(self, prefix: str) -> list[str]:
        """Every key starting with `prefix` (a directory when it ends with "/"), sorted."""

    @abc.abstractmethod
    async def delete(self, key: str) -> None:
        """Remove the object; a missing one is not an error."""

    def segment_suffixes(self, txn_idx_empty: bool) -> tuple[str, ...]:
        """The suffixes a complete segment's objects have."""
        txn = () if txn_idx_empty else (IndexType.TRANSACTION.suffix,)
        return BASE_SEGMENT_SUFFIXES + txn + self.extra_segment_suffixes

    async def close(self) -> None:
        """Release what the store owns (nothing when it shares the RSM's client)."""


class LocalManifestStore(ManifestStore):
    """Files under a directory (LocalTieredStorage's root); blocking work in `executor`."""

    def __init__(self, root: Path | str, *, executor: Executor | None = None, fsync: bool = True) -> None:
        self.root = Path(root)
        self._executor = executor
        self._fsync = fsync

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, functools.partial(fn, *args))
        except FileNotFoundError as e:
            raise RemoteResourceNotFoundError(f"not found in local tiered storage: {e.filename}") from e
        except OSError as e:
            raise RemoteStorageError(f"local tiered storage I/O error: {e}") from e

    def _path(self, key: str) -> Path:
        if key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"invalid object key {key!r}")
        return self.root / key

    async def put(self, key: str, data: bytes) -> None:
        await self._run(self._put_sync, self._path(key), data)

    def _put_sync(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            if self._fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if self._fsync:
            fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    async def get(self, key: str) -> bytes:
        return await self._run(self._path(key).read_bytes)

    async def list(self, prefix: str) -> list[str]:
        return await self._run(self._list_sync, prefix)

    def _list_sync(self, prefix: str) -> builtins.list[str]:
        directory, _, _ = prefix.rpartition("/")
        base = self._path(directory) if directory else self.root
        if not base.is_dir():
            return []
        out = []
        for p in base.rglob("*"):
            if p.is_file() and not p.name.endswith(".tmp"):
                rel = p.relative_to(self.root).as_posix()
                if rel.startswith(prefix):
                    out.append(rel)
        return sorted(out)

    async def delete(self, key: str) -> None:
        def unlink(path: Path) -> None:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

        await self._run(unlink, self._path(key))


class S3ManifestStore(ManifestStore):
    """Objects under the S3 RSM's `key.prefix`, through the RSM's own client (its retries, timeouts, metrics)."""

    extra_segment_suffixes = (MANIFEST_SUFFIX,)

    def __init__(self, rsm: S3RemoteStorageManager) -> None:
        self.rsm = rsm
        self.prefix = rsm.config.key_prefix

    async def put(self, key: str, data: bytes) -> None:
        await self.rsm.s3.put(self.prefix + key, data)

    async def get(self, key: str) -> bytes:
        return await self.rsm.s3.get(self.prefix + key)

    async def list(self, prefix: str) -> list[str]:
        n = len(self.prefix)
        return [k[n:] for k in await self.rsm.list_keys(self.prefix + prefix)]

    async def delete(self, key: str) -> None:
        await self.rsm.s3.delete(self.prefix + key)


def manifest_store_for(rsm: RemoteStorageManager) -> ManifestStore | None:
    """The store beside a configured RSM (same root, same client); None for another RSM class."""
    if isinstance(rsm, LocalTieredStorage):
        return LocalManifestStore(rsm.root, fsync=rsm.fsync)
    from .s3 import S3RemoteStorageManager  # the S3 client stack (aiobotocore, aiohttp) loads only with an S3 RSM

    if isinstance(rsm, S3RemoteStorageManager):
        return S3ManifestStore(rsm)
    return None


__all__ = [
    "BASE_SEGMENT_SUFFIXES",
    "LocalManifestStore",
    "ManifestStore",
    "S3ManifestStore",
    "manifest_store_for",
]
