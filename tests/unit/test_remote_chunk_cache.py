"""strata.remote.chunk_cache: LRU bounds per tier, shared in-flight loads, cancellation, prefetch, disk tier reuse."""

from __future__ import annotations

import asyncio

import pytest

from strata.remote.chunk_cache import ChunkCache, ChunkKey, chunk_file_name


class Source:
    """A fake remote: chunk i of segment s is bytes([i % 256]) * size; counts loads; can be gated or fail."""

    def __init__(self, size: int = 100) -> None:
        self.size = size
        self.loads: list[ChunkKey] = []
        self.gate: asyncio.Event | None = None
        self.fail: set[int] = set()
        self.started = asyncio.Event()

    def loader(self, seg: str, i: int):
        async def load() -> bytes:
            self.loads.append(ChunkKey(seg, i))
            self.started.set()
            if self.gate is not None:
                await self.gate.wait()
            if i in self.fail:
                raise OSError(f"boom {i}")
            return bytes([i % 256]) * self.size

        return load

    def index_loader(self, seg: str):
        return lambda i: self.loader(seg, i)()


def test_memory_lru_eviction_order():
    async def body():
        src = Source(100)
        cache = ChunkCache(300)
        for i in range(3):
            await cache.get(ChunkKey("s", i), src.loader("s", i))
        await cache.get(ChunkKey("s", 0), src.loader("s", 0))  # touch 0: 1 is now the oldest
        await cache.get(ChunkKey("s", 3), src.loader("s", 3))
        assert cache.memory_bytes == 300
        assert [cache.in_memory(ChunkKey("s", i)) for i in range(4)] == [True, False, True, True]
        assert cache.stats.memory_evictions == 1 and cache.stats.memory_hits == 1 and cache.stats.misses == 4
        assert await cache.get(ChunkKey("s", 1), src.loader("s", 1)) == b"\x01" * 100
        assert len(src.loads) == 5
        await cache.close()

    asyncio.run(body())


def test_concurrent_requests_share_one_load():
    async def body():
        src = Source()
        src.gate = asyncio.Event()
        cache = ChunkCache(10_000)
        key = ChunkKey("s", 7)
        waiters = [asyncio.ensure_future(cache.get(key, src.loader("s", 7))) for _ in range(10)]
        await asyncio.wait_for(src.started.wait(), 5)
        assert len(src.loads) == 1
        src.gate.set()
        assert await asyncio.gather(*waiters) == [b"\x07" * 100] * 10
        assert len(src.loads) == 1 and cache.stats.shared_waits == 9
        await cache.close()

    asyncio.run(body())


def test_failure_reaches_every_waiter_and_is_not_cached():
    async def body():
        src = Source()
        src.fail = {2}
        src.gate = asyncio.Event()
        cache = ChunkCache(10_000)
        key = ChunkKey("s", 2)
        waiters = [asyncio.ensure_future(cache.get(key, src.loader("s", 2))) for _ in range(3)]
        await asyncio.wait_for(src.started.wait(), 5)
        src.gate.set()
        results = await asyncio.gather(*waiters, return_exceptions=True)
        assert all(isinstance(r, OSError) for r in results) and len(src.loads) == 1
        src.fail = set()
        assert await cache.get(key, src.loader("s", 2)) == b"\x02" * 100
        assert len(src.loads) == 2 and cache.stats.load_errors == 1
        await cache.close()

    asyncio.run(body())


def test_cancelled_reader_does_not_abort_the_load():
    async def body():
        src = Source()
        src.gate = asyncio.Event()
        cache = ChunkCache(10_000)
        key = ChunkKey("s", 1)
        reader = asyncio.ensure_future(cache.get(key, src.loader("s", 1)))
        await asyncio.wait_for(src.started.wait(), 5)
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
        src.gate.set()
        await cache.drain()
        assert cache.in_memory(key)  # the load finished and was cached (Aiven issue #404's lesson)
        assert await cache.get(key, src.loader("s", 1)) == b"\x01" * 100 and len(src.loads) == 1
        await cache.close()

    asyncio.run(body())


def test_get_chunks_prefetches_next_chunks_within_segment():
    async def body():
        src = Source()
        cache = ChunkCache(10_000, prefetch_chunks=2)
        got = await cache.get_chunks("s", range(2), src.index_loader("s"), chunk_count=5)
        assert got == [b"\x00" * 100, b"\x01" * 100]
        await cache.drain()
        assert [ChunkKey("s", i) in cache for i in range(5)] == [True, True, True, True, False]
        assert cache.stats.prefetches == 2
        # a sequential reader now hits memory; the next prefetch stops at the last chunk (index 4)
        loads_before = len(src.loads)
        await cache.get_chunks("s", range(2, 4), src.index_loader("s"), chunk_count=5)
        await cache.drain()
        assert cache.stats.memory_hits == 2
        assert src.loads[loads_before:] == [ChunkKey("s", 4)]
        await cache.close()

    asyncio.run(body())


def test_oversized_chunk_is_served_not_kept():
    async def body():
        src = Source(500)
        cache = ChunkCache(100)
        assert await cache.get(ChunkKey("s", 0), src.loader("s", 0)) == b"\x00" * 500
        assert cache.memory_bytes == 0 and ChunkKey("s", 0) not in cache
        await cache.close()

    asyncio.run(body())


def test_disk_tier_write_through_eviction_and_reuse_after_restart(tmp_path):
    d = tmp_path / "chunks"

    async def first():
        src = Source(100)
        cache = ChunkCache(0, disk_dir=d, disk_max_bytes=250)  # memory tier off
        for i in range(3):
            await cache.get(ChunkKey("seg-A", i), src.loader("seg-A", i))
            await cache.drain()
        assert cache.disk_bytes == 200 and cache.stats.disk_evictions == 1
        assert sorted(p.name for p in d.iterdir()) == [chunk_file_name(ChunkKey("seg-A", i)) for i in (1, 2)]
        assert await cache.get(ChunkKey("seg-A", 2), src.loader("seg-A", 2)) == b"\x02" * 100
        assert cache.stats.disk_hits == 1 and len(src.loads) == 3
        await cache.close()

    asyncio.run(first())
    (d / "junk.chunk.tmp").write_bytes(b"torn")
    (d / "readme.txt").write_bytes(b"not ours")

    async def second():
        src = Source(100)
        cache = ChunkCache(1000, disk_dir=d, disk_max_bytes=250)
        assert not (d / "junk.chunk.tmp").exists() and (d / "readme.txt").exists()
        (d / "readme.txt").unlink()
        assert cache.disk_bytes == 200
        assert await cache.get(ChunkKey("seg-A", 1), src.loader("seg-A", 1)) == b"\x01" * 100
        assert src.loads == [] and cache.stats.disk_hits == 1 and cache.in_memory(ChunkKey("seg-A", 1))
        cache.invalidate_segment("seg-A")
        await cache.drain()
        assert cache.disk_bytes == 0 and cache.memory_bytes == 0 and list(d.iterdir()) == []
        await cache.close()

    asyncio.run(second())


def test_disk_file_removed_underneath_is_a_miss(tmp_path):
    async def body():
        src = Source(100)
        cache = ChunkCache(0, disk_dir=tmp_path, disk_max_bytes=1000)
        key = ChunkKey("s", 0)
        await cache.get(key, src.loader("s", 0))
        await cache.drain()
        (tmp_path / chunk_file_name(key)).unlink()
        assert await cache.get(key, src.loader("s", 0)) == b"\x00" * 100
        assert len(src.loads) == 2
        await cache.close()

    asyncio.run(body())


def test_bad_arguments():
    with pytest.raises(ValueError):
        ChunkCache(-1)
    with pytest.raises(ValueError):
        ChunkCache(10, prefetch_chunks=-1)


def test_runs_of_missing_chunks_load_together_and_failures_reach_every_waiter():
    """With a run loader, adjacent missing chunks come from one call; a cached chunk splits the run, a lone
    missing chunk goes to the per-chunk loader; a failed run fails each of its chunks and is not cached."""

    async def body():
        src = Source(10)
        runs: list[range] = []
        fail = {"on": False}

        async def run_loader(run: range) -> list[bytes]:
            runs.append(run)
            await asyncio.sleep(0)  # a real load awaits its GET: the readers are waiting on it by then
            if fail["on"]:
                raise OSError("run boom")
            return [bytes([i % 256]) * 10 for i in run]

        cache = ChunkCache(10_000, prefetch_chunks=2)
        await cache.get(ChunkKey("s", 2), src.loader("s", 2))  # chunk 2 cached: splits 0..4
        got = await cache.get_chunks("s", range(5), src.index_loader("s"), chunk_count=10, run_loader=run_loader)
        assert got == [bytes([i]) * 10 for i in range(5)]
        await cache.drain()
        # 0-1 and 3-4 requested, 5-6 prefetched as a run of their own; nothing per chunk but the first get of 2
        assert runs == [range(2), range(3, 5), range(5, 7)]
        assert src.loads == [ChunkKey("s", 2)]
        assert cache.stats.prefetches == 2 and cache.stats.misses == 7

        fail["on"] = True
        with pytest.raises(OSError, match="run boom"):
            await cache.get_chunks("s", range(7, 9), src.index_loader("s"), run_loader=run_loader)
        assert ChunkKey("s", 7) not in cache and ChunkKey("s", 8) not in cache
        fail["on"] = False
        assert await cache.get_chunks("s", range(7, 9), src.index_loader("s"), run_loader=run_loader) == [
            b"\x07" * 10,
            b"\x08" * 10,
        ]
        await cache.close()

    asyncio.run(body())


def test_runs_are_capped_at_max_run_chunks():
    """A long run of missing chunks is split into loads of at most `max_run_chunks` (one GET each, each within one
    attempt timeout); a lone chunk left over goes to the per-chunk loader."""

    async def body():
        src = Source(10)
        runs: list[range] = []

        async def run_loader(run: range) -> list[bytes]:
            runs.append(run)
            return [bytes([i % 256]) * 10 for i in run]

        cache = ChunkCache(10_000, max_run_chunks=3)
        got = await cache.get_chunks("s", range(7), src.index_loader("s"), run_loader=run_loader)
        assert got == [bytes([i]) * 10 for i in range(7)]
        assert runs == [range(3), range(3, 6)] and src.loads == [ChunkKey("s", 6)]
        await cache.close()

    asyncio.run(body())


@pytest.mark.parametrize("kind", ["run", "chunk"])
def test_close_fails_loads_cancelled_before_they_started(kind):
    """close() cancels background loads; one cancelled before its first step never runs its own clean-up, so
    close() fails its waiters itself: a reader gets CancelledError instead of waiting forever."""

    async def body():
        src = Source(10)

        async def run_loader(run: range) -> list[bytes]:
            return [bytes([i % 256]) * 10 for i in run]

        cache = ChunkCache(10_000)
        if kind == "run":
            cache.load_runs("s", range(3), run_loader)  # registered, its task not started yet
        else:
            cache.prefetch(ChunkKey("s", 0), src.loader("s", 0))
        waiter = asyncio.ensure_future(cache.get(ChunkKey("s", 0), src.loader("s", 0)))
        await cache.close()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(waiter, 5)
        assert not cache._inflight and src.loads == []

    asyncio.run(body())
