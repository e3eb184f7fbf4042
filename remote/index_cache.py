"""RemoteIndexCache: the offset, time and transaction indexes of remote segments, cached on local disk.

Like Kafka's RemoteIndexCache: entries are keyed by the remote segment id, fetched once through the RSM's
`fetch_index` (concurrent misses for one segment share one fetch), stored under `<dir>` as
`<startOffset 20 digits>_<segmentIdBase64url>.{index,timeindex,txnindex}` and bounded by the total size of those files
(`remote.log.index.file.cache.total.size.bytes`, 1 GiB by default) with LRU eviction. The files survive a restart
and are picked up again. A segment without a transaction index is stored with an empty `.txnindex`.

Lookups read the files through `mmap` with the storage layer's entry formats (`storage/index.py`: `.index` =
relative offset int32 + position int32, `.timeindex` = timestamp int64 + relative offset int32, big-endian) and the
same floor semantics as `OffsetIndex.lookup` / `TimeIndex.lookup`; the base offset of a remote segment's indexes is
its `start_offset`. Transaction index entries are Kafka's AbortedTxn (version int16 = 0, producer id int64, first
offset int64, last offset int64, last stable offset int64).

The cache belongs to one event loop. Fetching and file writes never block it (RSM coroutines, thread pool). An
evicted entry's files are unlinked at once; a lookup still holding the entry keeps a valid mapping until done.
"""

from __future__ import annotations

import asyncio
import functools
import mmap
import os
import struct
import uuid
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from strata.protocol.uuids import kafka_uuid_str, parse_kafka_uuid
from strata.storage.txn_index import ENTRY_SIZE as _TXN_ENTRY_SIZE
from strata.storage.txn_index import AbortedTxn, TxnIndexSearchResult, decode_entries, search

from .metadata import RemoteLogSegmentMetadata
from .rsm import IndexType, RemoteResourceNotFoundError, RemoteStorageManager

DEFAULT_MAX_BYTES = 1 << 30
DIR_NAME = "remote-log-index-cache"
_SUFFIXES = (".index", ".timeindex", ".txnindex")
_OFFSET_ENTRY = 8
_TIME_ENTRY = 12


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class _Column:
    """A read-only big-endian integer column of a fixed-size-entry index, for `bisect`."""

    __slots__ = ("_buf", "_fmt", "_n", "_off", "_stride")

    def __init__(self, buf: Any, fmt: str, stride: int, off: int, n: int) -> None:
        self._buf, self._fmt, self._stride, self._off, self._n = buf, fmt, stride, off, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> int:
        if not 0 <= i < self._n:
            raise IndexError(i)
        return struct.unpack_from(self._fmt, self._buf, i * self._stride + self._off)[0]


def _map(path: Path) -> tuple[Any, int]:
    size = path.stat().st_size
    if size == 0:
        return b"", 0
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), size


class _Entry:
    """One segment's cached indexes (mapped lazily)."""

    def __init__(self, segment_id: uuid.UUID, base_offset: int, paths: tuple[Path, Path, Path], size: int) -> None:
        self.segment_id = segment_id
        self.base_offset = base_offset
        self.paths = paths
        self.size = size
        self._maps: tuple[Any, Any, Any] | None = None

    def map(self) -> None:
        self._mapped()

    def _mapped(self) -> tuple[Any, Any, Any]:
        if self._maps is None:
            self._maps = tuple(_map(p)[0] for p in self.paths)
        return self._maps

    def lookup_offset(self, offset: int) -> OffsetPosition:
        buf = self._mapped()[0]
        n = len(buf) // _OFFSET_ENTRY
        i = bisect_right(_Column(buf, ">i", _OFFSET_ENTRY, 0, n), offset - self.base_offset) - 1
        if i < 0:
            return OffsetPosition(self.base_offset, 0)
        rel, pos = struct.unpack_from(">ii", buf, i * _OFFSET_ENTRY)
        return OffsetPosition(self.base_offset + rel, pos)

    def lookup_time(self, timestamp: int) -> tuple[int, int]:
        buf = self._mapped()[1]
        n = len(buf) // _TIME_ENTRY
        i = bisect_right(_Column(buf, ">q", _TIME_ENTRY, 0, n), timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        ts, rel = struct.unpack_from(">qi", buf, i * _TIME_ENTRY)
        return ts, self.base_offset + rel

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        return search(decode_entries(self._mapped()[2]), fetch_offset, upper_bound_offset)

    def close(self) -> None:
        maps, self._maps = self._maps, None
        for m in maps or ():
            if isinstance(m, mmap.mmap):
                m.close()


@dataclass
class IndexCacheStats:
    hits: int = 0
    misses: int = 0
    load_errors: int = 0
    evictions: int = 0


def _file_prefix(start_offset: int, segment_id: uuid.UUID) -> str:
    return f"{start_offset:020d}_{kafka_uuid_str(segment_id)}"


class RemoteIndexCache:
    def __init__(
        self,
        rsm: RemoteStorageManager,
        cache_dir: Path | str,
        max_bytes: int = DEFAULT_MAX_BYTES,
        *,
        executor: Executor | None = None,
    ) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must not be negative")
        self.rsm = rsm
        self.dir = Path(cache_dir)
        self.max_bytes = max_bytes
        self.stats = IndexCacheStats()
        self._executor = executor
        self._entries: OrderedDict[uuid.UUID, _Entry] = OrderedDict()
        self._bytes = 0
        self._inflight: dict[uuid.UUID, asyncio.Future[_Entry]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._load_existing()

    # -- introspection -------------------------------------------------------------------------------------------
    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, segment_id: uuid.UUID) -> bool:
        return segment_id in self._entries

    # -- lookups -------------------------------------------------------------------------------------------------
    async def lookup_offset(self, metadata: RemoteLogSegmentMetadata, offset: int) -> int:
        """Position in the remote `.log` of the batch holding the greatest indexed offset <= `offset` (0 when the
        index has no such entry): where a reader starts scanning for `offset`."""
        return (await self._entry(metadata)).lookup_offset(offset).position

    async def lookup_timestamp(
        self, metadata: RemoteLogSegmentMetadata, timestamp: int, start_offset: int
    ) -> OffsetPosition:
        """Where to start scanning for the first record with timestamp >= `timestamp` at or after `start_offset`:
        the offset index floor of max(`start_offset`, time index floor of `timestamp`), as (offset, position).

        Kafka's RemoteIndexCache.lookupTimestamp returns only the position; we also return the indexed offset."""
        entry = await self._entry(metadata)
        _, ts_offset = entry.lookup_time(timestamp)
        return entry.lookup_offset(max(start_offset, ts_offset))

    async def collect_aborted_transactions(
        self, metadata: RemoteLogSegmentMetadata, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """Aborted transactions of the segment overlapping [fetch_offset, upper_bound_offset) (Kafka's
        TransactionIndex.collectAbortedTxns)."""
        return (await self._entry(metadata)).collect_aborted(fetch_offset, upper_bound_offset)

    def remove(self, segment_id: uuid.UUID) -> None:
        """Forget a segment (its remote data was deleted) and delete its files."""
        entry = self._entries.pop(segment_id, None)
        if entry is not None:
            self._bytes -= entry.size
            self._unlink(entry.paths)

    async def close(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        for entry in self._entries.values():
            entry.close()

    # -- entries -------------------------------------------------------------------------------------------------
    async def _entry(self, metadata: RemoteLogSegmentMetadata) -> _Entry:
        sid = metadata.segment_id
        entry = self._entries.get(sid)
        if entry is not None:
            self._entries.move_to_end(sid)
            self.stats.hits += 1
            return entry
        fut = self._inflight.get(sid)
        if fut is None:
            self.stats.misses += 1
            fut = asyncio.get_running_loop().create_future()
            self._inflight[sid] = fut
            self._spawn(self._load(metadata, fut))
        return await asyncio.shield(fut)

    async def _load(self, metadata: RemoteLogSegmentMetadata, fut: asyncio.Future[_Entry]) -> None:
        sid = metadata.segment_id
        try:
            offset_idx, time_idx, txn_idx = await asyncio.gather(
                self.rsm.fetch_index(metadata, IndexType.OFFSET),
                self.rsm.fetch_index(metadata, IndexType.TIMESTAMP),
                self._fetch_txn(metadata),
            )
            prefix = _file_prefix(metadata.start_offset, sid)
            paths = tuple(self.dir / (prefix + s) for s in _SUFFIXES)
            # drop a torn trailing entry, as the storage layer does on load
            datas = (
                offset_idx[: len(offset_idx) - len(offset_idx) % _OFFSET_ENTRY],
                time_idx[: len(time_idx) - len(time_idx) % _TIME_ENTRY],
                txn_idx[: len(txn_idx) - len(txn_idx) % _TXN_ENTRY_SIZE],
            )
            entry = _Entry(sid, metadata.start_offset, paths, sum(len(d) for d in datas))  # type: ignore[arg-type]
            # written and mapped before it becomes visible: an eviction right after insertion (the entry alone
            # exceeding the budget, or a waiter resuming late) unlinks files that are already mapped
            await self._run(self._write_files, paths, datas)
            await self._run(entry.map)
            self._insert(entry)
            fut.set_result(entry)
        except BaseException as e:
            if isinstance(e, Exception):
                self.stats.load_errors += 1
            if not fut.done():
                if isinstance(e, asyncio.CancelledError):
                    fut.cancel()
                else:
                    fut.set_exception(e)
                    fut.exception()
            if not isinstance(e, Exception):
                raise
        finally:
            if self._inflight.get(sid) is fut:
                del self._inflight[sid]

    async def _fetch_txn(self, metadata: RemoteLogSegmentMetadata) -> bytes:
        if metadata.txn_idx_empty:
            return b""  # KIP-1058: the segment was copied without transaction index entries
        try:
            return await self.rsm.fetch_index(metadata, IndexType.TRANSACTION)
        except RemoteResourceNotFoundError:
            return b""

    def _insert(self, entry: _Entry) -> None:
        old = self._entries.pop(entry.segment_id, None)
        if old is not None:
            self._bytes -= old.size
        self._entries[entry.segment_id] = entry
        self._bytes += entry.size
        doomed: list[Path] = []
        while self._bytes > self.max_bytes and self._entries:
            _, victim = self._entries.popitem(last=False)
            self._bytes -= victim.size
            self.stats.evictions += 1
            doomed.extend(victim.paths)
        # unlinked synchronously (a few metadata syscalls): a background unlink could race a reload of the
        # same segment and delete its fresh files
        self._unlink(doomed)

    def _load_existing(self) -> None:
        """Pick up complete entries left by an earlier run (LRU order by mtime); delete partial ones."""
        self.dir.mkdir(parents=True, exist_ok=True)
        groups: dict[str, dict[str, os.DirEntry[str]]] = {}
        for de in os.scandir(self.dir):
            stem, dot, ext = de.name.partition(".")
            if not dot or not de.is_file():
                continue
            if ext.endswith(".tmp") and ("." + ext[:-4]) in _SUFFIXES:
                os.unlink(de.path)  # a write cut short by a crash
                continue
            if ("." + ext) not in _SUFFIXES:
                continue  # not ours: left alone
            groups.setdefault(stem, {})["." + ext] = de
        found: list[tuple[float, _Entry]] = []
        for stem, files in groups.items():
            base, sep, sid_text = stem.partition("_")
            try:
                if not sep or not base.isdigit() or len(files) != len(_SUFFIXES):
                    raise ValueError(stem)
                sid = parse_kafka_uuid(sid_text)
            except ValueError:
                for de in files.values():
                    os.unlink(de.path)
                continue
            stats = [files[s].stat() for s in _SUFFIXES]
            entry = _Entry(
                sid,
                int(base),
                tuple(Path(files[s].path) for s in _SUFFIXES),  # type: ignore[arg-type]
                sum(st.st_size for st in stats),
            )
            found.append((max(st.st_mtime for st in stats), entry))
        for _, entry in sorted(found, key=lambda x: x[0]):
            self._entries[entry.segment_id] = entry
            self._bytes += entry.size
        while self._bytes > self.max_bytes and self._entries:
            _, victim = self._entries.popitem(last=False)
            self._bytes -= victim.size
            self._unlink(victim.paths)

    # -- file helpers ----------------------------------------------------------------------------------------------
    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        # the RLM path's pool unless one was given
        executor = self._executor if self._executor is not None else self.rsm.blocking_executor()
        return await asyncio.get_running_loop().run_in_executor(executor, functools.partial(fn, *args))

    @staticmethod
    def _write_files(paths: tuple[Path, ...], datas: tuple[bytes, ...]) -> None:
        for path, data in zip(paths, datas):
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)

    @staticmethod
    def _unlink(paths: Any) -> None:
        for p in paths:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


__all__ = [
    "DEFAULT_MAX_BYTES",
    "DIR_NAME",
    "AbortedTxn",
    "IndexCacheStats",
    "OffsetPosition",
    "RemoteIndexCache",
    "TxnIndexSearchResult",
]
