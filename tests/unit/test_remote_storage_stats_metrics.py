"""strata.remote.remote_metrics.RemoteStorageStatsCollector: S3Stats, ChunkCacheStats and IndexCacheStats exported at
scrape time under strata_rsm_s3_*, strata_remote_chunk_cache_*, strata_remote_index_cache_*."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from strata.remote.chunk_cache import ChunkCache, ChunkKey
from strata.remote.index_cache import IndexCacheStats
from strata.remote.remote_metrics import RemoteMetrics
from strata.remote.s3 import S3Config, S3RemoteStorageManager


def samples(metrics: RemoteMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


class FakeIndexCache:
    def __init__(self) -> None:
        self.stats = IndexCacheStats()
        self.size_bytes = 0
        self.n = 0

    def __len__(self) -> int:
        return self.n


def test_s3_chunk_and_index_stats_are_read_at_scrape_time() -> None:
    rsm = S3RemoteStorageManager(S3Config(bucket="b", cache_memory_bytes=1 << 20))
    idx = FakeIndexCache()
    m = RemoteMetrics()
    m.register_storage_stats(lambda: rsm, lambda: idx)
    before = samples(m)
    assert before[("strata_rsm_s3_requests_total", ())] == 0
    assert before[("strata_remote_chunk_cache_hits_total", (("tier", "memory"),))] == 0

    rsm.stats.requests, rsm.stats.retries, rsm.stats.errors, rsm.stats.timeouts = 7, 3, 1, 2
    rsm.stats.bytes_uploaded, rsm.stats.bytes_downloaded, rsm.stats.multipart_aborts = 1000, 500, 1
    assert rsm.chunk_cache is not None
    cs = rsm.chunk_cache.stats
    cs.memory_hits, cs.disk_hits, cs.misses, cs.load_errors, cs.prefetches, cs.memory_evictions = 5, 2, 4, 1, 3, 6
    idx.stats.hits, idx.stats.misses, idx.stats.load_errors, idx.stats.evictions = 9, 2, 1, 1
    idx.size_bytes, idx.n = 4096, 2

    got = samples(m)
    want = {
        ("strata_rsm_s3_requests_total", ()): 7,
        ("strata_rsm_s3_retries_total", ()): 3,
        ("strata_rsm_s3_errors_total", ()): 1,
        ("strata_rsm_s3_timeouts_total", ()): 2,
        ("strata_rsm_s3_upload_bytes_total", ()): 1000,
        ("strata_rsm_s3_download_bytes_total", ()): 500,
        ("strata_rsm_s3_multipart_aborts_total", ()): 1,
        ("strata_remote_chunk_cache_hits_total", (("tier", "memory"),)): 5,
        ("strata_remote_chunk_cache_hits_total", (("tier", "disk"),)): 2,
        ("strata_remote_chunk_cache_misses_total", ()): 4,
        ("strata_remote_chunk_cache_load_errors_total", ()): 1,
        ("strata_remote_chunk_cache_prefetches_total", ()): 3,
        ("strata_remote_chunk_cache_evictions_total", (("tier", "memory"),)): 6,
        ("strata_remote_chunk_cache_evictions_total", (("tier", "disk"),)): 0,
        ("strata_remote_chunk_cache_size_bytes", (("tier", "memory"),)): 0,
        ("strata_remote_index_cache_hits_total", ()): 9,
        ("strata_remote_index_cache_misses_total", ()): 2,
        ("strata_remote_index_cache_load_errors_total", ()): 1,
        ("strata_remote_index_cache_evictions_total", ()): 1,
        ("strata_remote_index_cache_size_bytes", ()): 4096,
        ("strata_remote_index_cache_entries", ()): 2,
    }
    assert {k: got.get(k) for k in want} == want


def test_families_without_a_source_are_absent() -> None:
    """LocalTieredStorage has no S3 statistics and no chunk cache: only the index cache is exported."""
    m = RemoteMetrics()
    m.register_storage_stats(lambda: SimpleNamespace(), lambda: FakeIndexCache())
    names = {n for n, _ in samples(m)}
    assert not any(n.startswith(("strata_rsm_s3_", "strata_remote_chunk_cache_")) for n in names)
    assert "strata_remote_index_cache_hits_total" in names
    # an S3 RSM with its chunk cache turned off: S3 counters, no chunk cache families
    rsm = S3RemoteStorageManager(S3Config(bucket="b", cache_memory_bytes=0))
    m2 = RemoteMetrics()
    m2.register_storage_stats(lambda: rsm, lambda: None)
    names = {n for n, _ in samples(m2)}
    assert "strata_rsm_s3_requests_total" in names
    assert not any(n.startswith(("strata_remote_chunk_cache_", "strata_remote_index_cache_")) for n in names)


def test_chunk_cache_size_gauge_follows_the_cache() -> None:
    async def body() -> None:
        cache = ChunkCache(1 << 20)
        rsm = SimpleNamespace(chunk_cache=cache)
        m = RemoteMetrics()
        m.register_storage_stats(lambda: rsm, lambda: None)

        async def load() -> bytes:
            return b"x" * 1000

        await cache.get(ChunkKey("s", 0), load)
        await cache.get(ChunkKey("s", 0), load)
        got = samples(m)
        assert got[("strata_remote_chunk_cache_size_bytes", (("tier", "memory"),))] == 1000
        assert got[("strata_remote_chunk_cache_misses_total", ())] == 1
        assert got[("strata_remote_chunk_cache_hits_total", (("tier", "memory"),))] == 1
        await cache.close()

    asyncio.run(body())
