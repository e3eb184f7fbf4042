"""A bounded, two-tier LRU cache of segment chunks with in-flight sharing and prefetch.

Chunks are keyed by `ChunkKey(segment, chunk)`: `segment` is the unique id of the stored object (the remote log
segment id in Kafka's base64url text form -- file-name safe, and unique per copy attempt, so cached data never goes
stale), `chunk` the chunk number within the segment. Values are the *original* (decompressed) chunk bytes.

* Memory tier: an LRU of at most `memory_max_bytes` (0 disables it).
* Disk tier (optional): files `<disk_dir>/<segment>-<chunk>.chunk`, an LRU of at most `disk_max_bytes`, filled
  write-through in the background (tmp file + rename, so a crash never leaves a torn chunk) and reused after a
  restart. A disk hit is promoted to memory.
* In-flight sharing: concurrent requests for the same chunk wait on one load. The load runs in its own task, so a
  reader that gives up (cancellation, fetch timeout) does not abort it; the chunk still lands in the cache.
* Prefetch: `get_chunks` starts background loads of the next `prefetch_chunks` chunks after the requested range
  (within the segment), so a sequential reader finds them cached.
* Runs: given a `run_loader`, chunks that are next to each other and neither cached nor loading are loaded by one
  call (one ranged GET for an untransformed segment instead of one per chunk: each S3 request costs the event loop
  about a millisecond of botocore and aiohttp), the requested chunks and the prefetched ones as separate runs.

The cache belongs to one event loop and is not thread-safe; blocking disk I/O runs in `executor` (default: the
loop's default executor). An entry larger than a tier's budget is served but not kept in that tier.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from strata.protocol.records import BufferChain

_SUFFIX = ".chunk"
# a chunk's bytes: one buffer, or the blocks as received (served as views, never joined)
Chunk = bytes | BufferChain
# loads adjacent chunks [run.start, run.stop) together: one bytes/BufferChain per chunk, in order
RunLoader = Callable[[range], Awaitable[list[Any]]]


class ChunkKey(NamedTuple):
    segment: str
    chunk: int  # not `index`: that would shadow tuple.index


@dataclass
class ChunkCacheStats:
    memory_hits: int = 0
    disk_hits: int = 0
    misses: int = 0  # loads from the source (including prefetches)
    shared_waits: int = 0  # requests that joined a load already in flight
    load_errors: int = 0
    prefetches: int = 0
    memory_evictions: int = 0
    disk_evictions: int = 0
    disk_write_errors: int = 0


def chunk_file_name(key: ChunkKey) -> str:
    return f"{key.segment}-{key.chunk}{_SUFFIX}"


def _parse_chunk_file_name(name: str) -> ChunkKey | None:
    if not name.endswith(_SUFFIX):
        return None
    seg, sep, idx = name[: -len(_SUFFIX)].rpartition("-")
    if not sep or not seg or not idx.isdigit():
        return None
    return ChunkKey(seg, int(idx))


class ChunkCache:
    def __init__(
        self,
        memory_max_bytes: int,
        *,
        disk_dir: Path | str | None = None,
        disk_max_bytes: int = 0,
        prefetch_chunks: int = 0,
        max_run_chunks: int = 4,
        executor: Executor | None = None,
    ) -> None:
        if memory_max_bytes < 0 or disk_max_bytes < 0 or prefetch_chunks < 0:
            raise ValueError("cache sizes and prefetch must not be negative")
        self.memory_max_bytes = memory_max_bytes
        self.disk_max_bytes = disk_max_bytes if disk_dir is not None else 0
        self.disk_dir = Path(disk_dir) if disk_dir is not None else None
        self.prefetch_chunks = prefetch_chunks
        self.max_run_chunks = max(1, max_run_chunks)  # chunks per run load (one GET, one attempt timeout)
        self.stats = ChunkCacheStats()
        self._executor = executor
        self._mem: OrderedDict[ChunkKey, Chunk] = OrderedDict()
        self._mem_bytes = 0
        self._disk: OrderedDict[ChunkKey, int] = OrderedDict()
        self._disk_bytes = 0
        self._disk_pending: set[ChunkKey] = set()
        self._inflight: dict[ChunkKey, asyncio.Future[Chunk]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        if self.disk_dir is not None and self.disk_max_bytes > 0:
            self._load_disk_index()

    # -- introspection -------------------------------------------------------------------------------------------
    @property
    def memory_bytes(self) -> int:
        return self._mem_bytes

    @property
    def disk_bytes(self) -> int:
        return self._disk_bytes

    def __contains__(self, key: ChunkKey) -> bool:
        return key in self._mem or key in self._disk

    def in_memory(self, key: ChunkKey) -> bool:
        return key in self._mem

    def on_disk(self, key: ChunkKey) -> bool:
        return key in self._disk

    # -- public API ----------------------------------------------------------------------------------------------
    async def get(self, key: ChunkKey, loader: Callable[[], Awaitable[Chunk]]) -> Chunk:
        """The chunk's bytes: from memory, else disk, else `loader()` (one load shared by concurrent callers)."""
        data = self._mem.get(key)
        if data is not None:
            self._mem.move_to_end(key)
            self.stats.memory_hits += 1
            return data
        fut = self._inflight.get(key)
        if fut is not None:
            self.stats.shared_waits += 1
        else:
            fut = self._start_load(key, loader, prefetch=False)
        return await asyncio.shield(fut)

    async def get_chunks(
        self,
        segment: str,
        indices: range,
        loader: Callable[[int], Awaitable[Chunk]],
        *,
        chunk_count: int | None = None,
        run_loader: RunLoader | None = None,
    ) -> list[Chunk]:
        """Chunks `indices` of `segment`, loaded concurrently; then prefetch the next chunks (below
        `chunk_count`, the number of chunks in the segment, when known)."""
        if run_loader is not None:
            self.load_runs(segment, indices, run_loader)
        results = asyncio.gather(*(self.get(ChunkKey(segment, i), functools.partial(loader, i)) for i in indices))
        if self.prefetch_chunks and len(indices):
            end = indices[-1] + 1 + self.prefetch_chunks
            if chunk_count is not None:
                end = min(end, chunk_count)
            ahead = range(indices[-1] + 1, end)
            if run_loader is not None:
                self.load_runs(segment, ahead, run_loader, prefetch=True)
            for i in ahead:
                self.prefetch(ChunkKey(segment, i), functools.partial(loader, i))
        return list(await results)

    def load_runs(self, segment: str, indices: range, run_loader: RunLoader, *, prefetch: bool = False) -> None:
        """Start one load per run of adjacent chunks of `indices` that are neither cached nor loading (a single
        missing chunk is left to the per-chunk loader)."""
        if self._closed:
            return
        run: list[int] = []

        def flush() -> None:
            for at in range(0, len(run), self.max_run_chunks):
                part = run[at : at + self.max_run_chunks]
                if len(part) > 1:
                    self._start_run(segment, range(part[0], part[-1] + 1), run_loader, prefetch)
            run.clear()

        for i in indices:  # a range: the missing chunks in a row are adjacent
            key = ChunkKey(segment, i)
            if key in self._mem or key in self._disk or key in self._inflight:
                flush()
            else:
                run.append(i)
        flush()

    def _start_run(self, segment: str, run: range, run_loader: RunLoader, prefetch: bool) -> None:
        loop = asyncio.get_running_loop()
        futs = {}
        for i in run:
            fut: asyncio.Future[Chunk] = loop.create_future()
            self._inflight[ChunkKey(segment, i)] = futs[i] = fut
        if prefetch:
            self.stats.prefetches += len(run)
        self._spawn(self._load_run(segment, run, run_loader, futs))

    async def _load_run(
        self, segment: str, run: range, run_loader: RunLoader, futs: dict[int, asyncio.Future[Chunk]]
    ) -> None:
        try:
            self.stats.misses += len(run)
            chunks = await run_loader(run)
            if len(chunks) != len(run):
                raise RuntimeError(f"a run load of chunks {run.start}..{run.stop - 1} returned {len(chunks)} chunks")
            for i, data in zip(run, chunks):
                key = ChunkKey(segment, i)
                if not isinstance(data, (bytes, BufferChain)):
                    data = bytes(data)
                self._put_disk(key, data)
                self._put_memory(key, data)
                futs[i].set_result(data)
        except BaseException as e:
            self._fail(futs.values(), e)
            if not isinstance(e, Exception):
                raise
        finally:
            for i, fut in futs.items():
                key = ChunkKey(segment, i)
                if self._inflight.get(key) is fut:
                    del self._inflight[key]

    def use_executor(self, executor: Executor) -> None:
        """Blocking disk I/O from now on runs in `executor` (the RLM's reader pool)."""
        self._executor = executor

    def prefetch(self, key: ChunkKey, loader: Callable[[], Awaitable[Chunk]]) -> None:
        """Start loading `key` in the background unless it is cached or already loading."""
        if self._closed or key in self._mem or key in self._disk or key in self._inflight:
            return
        self.stats.prefetches += 1
        self._start_load(key, loader, prefetch=True)

    def invalidate_segment(self, segment: str) -> None:
        """Drop every chunk of `segment` (its remote data was deleted)."""
        for key in [k for k in self._mem if k.segment == segment]:
            self._mem_bytes -= len(self._mem.pop(key))
        doomed = [k for k in self._disk if k.segment == segment]
        for key in doomed:
            self._disk_bytes -= self._disk.pop(key)
        if doomed:
            self._spawn(self._run(self._unlink_files, doomed))

    async def drain(self) -> None:
        """Wait for background loads (prefetch) and disk writes to finish."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Cancel background loads, wait for them and for disk writes; the cache must not be used afterwards."""
        self._closed = True
        for t in list(self._tasks):
            t.cancel()
        await self.drain()
        # a load cancelled before it first ran never reached its own clean-up: its waiters must not wait forever
        self._fail(list(self._inflight.values()), asyncio.CancelledError())
        self._inflight.clear()

    # -- loading -------------------------------------------------------------------------------------------------
    def _start_load(
        self, key: ChunkKey, loader: Callable[[], Awaitable[Chunk]], *, prefetch: bool
    ) -> asyncio.Future[Chunk]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Chunk] = loop.create_future()
        self._inflight[key] = fut
        self._spawn(self._load(key, loader, fut))
        return fut

    async def _load(self, key: ChunkKey, loader: Callable[[], Awaitable[Chunk]], fut: asyncio.Future[Chunk]) -> None:
        try:
            data: Chunk | None = None
            if key in self._disk:
                data = await self._read_disk(key)
            if data is None:
                self.stats.misses += 1
                data = await loader()
                if not isinstance(data, (bytes, BufferChain)):  # immutable: readers hold views on it
                    data = bytes(data)
                self._put_disk(key, data)
            self._put_memory(key, data)
            fut.set_result(data)
        except BaseException as e:
            self._fail((fut,), e)
            if not isinstance(e, Exception):
                raise
        finally:
            if self._inflight.get(key) is fut:
                del self._inflight[key]

    def _fail(self, futs: Iterable[asyncio.Future[Chunk]], e: BaseException) -> None:
        """A load ended with `e`: its waiters get it (cancelled with the load when it was cancelled)."""
        if isinstance(e, Exception):
            self.stats.load_errors += 1
        for fut in futs:
            if not fut.done():
                if isinstance(e, asyncio.CancelledError):
                    fut.cancel()
                else:
                    fut.set_exception(e)
                    fut.exception()  # mark retrieved: a failed prefetch nobody awaits must not warn

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(fn, *args))

    # -- memory tier ---------------------------------------------------------------------------------------------
    def _put_memory(self, key: ChunkKey, data: Chunk) -> None:
        if len(data) > self.memory_max_bytes or self._closed:
            return
        old = self._mem.pop(key, None)
        if old is not None:
            self._mem_bytes -= len(old)
        self._mem[key] = data
        self._mem_bytes += len(data)
        while self._mem_bytes > self.memory_max_bytes:
            _, evicted = self._mem.popitem(last=False)
            self._mem_bytes -= len(evicted)
            self.stats.memory_evictions += 1

    # -- disk tier -----------------------------------------------------------------------------------------------
    def _path(self, key: ChunkKey) -> Path:
        assert self.disk_dir is not None
        return self.disk_dir / chunk_file_name(key)

    def _load_disk_index(self) -> None:
        """Register chunk files left by an earlier run (oldest first), drop temporaries, trim to the budget."""
        assert self.disk_dir is not None
        self.disk_dir.mkdir(parents=True, exist_ok=True)
        found: list[tuple[float, ChunkKey, int]] = []
        for entry in os.scandir(self.disk_dir):
            if entry.name.endswith(_SUFFIX + ".tmp"):
                os.unlink(entry.path)
                continue
            key = _parse_chunk_file_name(entry.name)
            if key is not None and entry.is_file():
                st = entry.stat()
                found.append((st.st_mtime, key, st.st_size))
        for _, key, size in sorted(found):
            self._disk[key] = size
            self._disk_bytes += size
        doomed = self._evict_disk()
        self._unlink_files(doomed)

    async def _read_disk(self, key: ChunkKey) -> bytes | None:
        try:
            data = await self._run(self._path(key).read_bytes)
        except OSError:
            size = self._disk.pop(key, None)  # evicted or removed underneath: treat as a miss
            if size is not None:
                self._disk_bytes -= size
            return None
        if key in self._disk:
            self._disk.move_to_end(key)
        self.stats.disk_hits += 1
        return data

    def _put_disk(self, key: ChunkKey, data: Chunk) -> None:
        if (
            self.disk_dir is None
            or len(data) > self.disk_max_bytes
            or key in self._disk
            or key in self._disk_pending
            or self._closed
        ):
            return
        self._disk_pending.add(key)
        self._spawn(self._write_disk(key, data))

    async def _write_disk(self, key: ChunkKey, data: Chunk) -> None:
        try:
            await self._run(self._write_file, self._path(key), data)
        except OSError:
            self.stats.disk_write_errors += 1
            return
        finally:
            self._disk_pending.discard(key)
        self._disk[key] = len(data)
        self._disk_bytes += len(data)
        doomed = self._evict_disk()
        if doomed:
            await self._run(self._unlink_files, doomed)

    def _evict_disk(self) -> list[ChunkKey]:
        doomed = []
        while self._disk_bytes > self.disk_max_bytes and self._disk:
            key, size = self._disk.popitem(last=False)
            self._disk_bytes -= size
            self.stats.disk_evictions += 1
            doomed.append(key)
        return doomed

    @staticmethod
    def _write_file(path: Path, data: Chunk) -> None:
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            if isinstance(data, BufferChain):
                f.writelines(data.pieces)
            else:
                f.write(data)
        os.replace(tmp, path)

    def _unlink_files(self, keys: list[ChunkKey]) -> None:
        for key in keys:
            try:
                os.unlink(self._path(key))
            except FileNotFoundError:
                pass


__all__ = ["ChunkCache", "ChunkCacheStats", "ChunkKey", "chunk_file_name"]
