"""strata.remote.index_cache: lookups agree with the storage layer's indexes, one fetch per segment under concurrency,
LRU bounded by bytes, reuse after restart, transaction index collection, errors not cached."""

from __future__ import annotations

import asyncio
import dataclasses
import random

import pytest

from strata.remote.index_cache import AbortedTxn, OffsetPosition, RemoteIndexCache
from strata.remote.local_tiered import LocalTieredStorage
from strata.remote.rsm import IndexType, RemoteResourceNotFoundError
from strata.storage.index import OffsetIndex, TimeIndex
from tests.support.s3_servers import write_segment


class CountingRSM(LocalTieredStorage):
    def __init__(self, root, **kw) -> None:
        super().__init__(root, **kw)
        self.index_fetches: list[IndexType] = []
        self.gate: asyncio.Event | None = None
        self.three_fetches = asyncio.Event()

    async def fetch_index(self, metadata, index_type):
        self.index_fetches.append(index_type)
        if len(self.index_fetches) >= 3:
            self.three_fetches.set()
        if self.gate is not None:
            await self.gate.wait()
        return await super().fetch_index(metadata, index_type)


def setup_segments(tmp_path, n=3, **kw):
    rsm = CountingRSM(tmp_path / "remote", fsync=False)
    segs, mds = [], []
    for k in range(n):
        seg = write_segment(tmp_path / f"log{k}", 10_000 * (k + 1), batches=80, records_per_batch=5, seed=k, **kw)
        md = seg.metadata()
        asyncio.run(rsm.copy_log_segment_data(md, seg.segment_data()))
        segs.append(seg)
        mds.append(md)
    return rsm, segs, mds


def test_lookups_match_storage_indexes(tmp_path):
    rsm, (seg,), (md,) = setup_segments(tmp_path, 1)
    oi = OffsetIndex(seg.offset_index, seg.base_offset, 1 << 20)
    ti = TimeIndex(seg.time_index, seg.base_offset, 1 << 20)
    assert oi.entries > 10 and ti.entries > 10
    offsets = [seg.base_offset - 5, seg.base_offset, seg.next_offset + 100] + [
        random.Random(1).randrange(seg.base_offset, seg.next_offset) for _ in range(50)
    ]
    stamps = [0, seg.max_timestamp + 1] + [ts for *_, ts in seg.batches[::5]] + [ts - 1 for *_, ts in seg.batches[::9]]

    async def body():
        cache = RemoteIndexCache(rsm, tmp_path / "cache")
        for off in offsets:
            assert await cache.lookup_offset(md, off) == oi.lookup(off)[1], off
        for ts in stamps:
            for start in (seg.base_offset, seg.base_offset + 200):
                o, p = oi.lookup(max(start, ti.lookup(ts)[1]))
                assert await cache.lookup_timestamp(md, ts, start) == OffsetPosition(o, p), (ts, start)
        # the position found is a batch start at or before the target's batch
        for off in offsets[3:]:
            pos = await cache.lookup_offset(md, off)
            batch = next(b for b in seg.batches if b[0] <= off <= b[1])
            assert pos in {b[2] for b in seg.batches} and pos <= batch[2]
        assert cache.stats.misses == 1 and len(rsm.index_fetches) == 3
        await cache.close()

    asyncio.run(body())
    oi.close()
    ti.close()


def test_concurrent_misses_fetch_once(tmp_path):
    rsm, _, (md,) = setup_segments(tmp_path, 1)

    async def body():
        cache = RemoteIndexCache(rsm, tmp_path / "cache")
        rsm.gate = asyncio.Event()
        lookups = [asyncio.ensure_future(cache.lookup_offset(md, md.start_offset + i)) for i in range(20)]
        # the single load has asked for the offset, time and txn indexes (and waits on the gate)
        await asyncio.wait_for(rsm.three_fetches.wait(), 5)
        rsm.gate.set()
        await asyncio.gather(*lookups)
        assert sorted(t.name for t in rsm.index_fetches) == ["OFFSET", "TIMESTAMP", "TRANSACTION"]
        assert cache.stats.misses == 1 and len(cache) == 1
        await cache.close()

    asyncio.run(body())


def test_segment_copied_without_transactions_skips_the_txn_index_fetch(tmp_path):
    # KIP-1058: txn_idx_empty means the segment has no transaction index; asking for it would cost a GET (a 404)
    rsm, _, (md,) = setup_segments(tmp_path, 1)
    md = dataclasses.replace(md, txn_idx_empty=True)

    async def body():
        cache = RemoteIndexCache(rsm, tmp_path / "cache")
        assert await cache.lookup_offset(md, md.start_offset) == 0
        assert sorted(t.name for t in rsm.index_fetches) == ["OFFSET", "TIMESTAMP"]
        aborted = await cache.collect_aborted_transactions(md, md.start_offset, md.end_offset + 1)
        assert not aborted.aborted_transactions
        await cache.close()

    asyncio.run(body())


def test_lru_bounded_by_bytes_and_reused_after_restart(tmp_path):
    rsm, segs, mds = setup_segments(tmp_path, 3)
    sizes = [s.offset_index.stat().st_size + s.time_index.stat().st_size for s in segs]
    budget = sizes[0] + sizes[1] + sizes[2] - 1  # all three do not fit

    async def first():
        cache = RemoteIndexCache(rsm, tmp_path / "cache", budget)
        await cache.lookup_offset(mds[0], mds[0].start_offset)
        await cache.lookup_offset(mds[1], mds[1].start_offset)
        await cache.lookup_offset(mds[0], mds[0].start_offset)  # 1 is now least recently used
        await cache.lookup_offset(mds[2], mds[2].start_offset)
        assert [m.segment_id in cache for m in mds] == [True, False, True]
        assert cache.stats.evictions == 1 and cache.size_bytes == sizes[0] + sizes[2] <= budget
        files = sorted(p.name for p in (tmp_path / "cache").iterdir())
        assert len(files) == 6 and not any(mds[1].remote_log_segment_id.id_str in f for f in files)
        await cache.close()

    asyncio.run(first())
    (tmp_path / "cache" / "leftover.index.tmp").write_bytes(b"x")
    (tmp_path / "cache" / "notes.txt").write_bytes(b"not ours")
    fetched = len(rsm.index_fetches)

    async def second():
        cache = RemoteIndexCache(rsm, tmp_path / "cache", budget)
        assert len(cache) == 2 and not (tmp_path / "cache" / "leftover.index.tmp").exists()
        assert (tmp_path / "cache" / "notes.txt").exists()  # not ours: left alone
        (tmp_path / "cache" / "notes.txt").unlink()
        oi = OffsetIndex(segs[2].offset_index, segs[2].base_offset, 1 << 20)
        target = mds[2].start_offset + 123
        assert await cache.lookup_offset(mds[2], target) == oi.lookup(target)[1]
        oi.close()
        assert len(rsm.index_fetches) == fetched and cache.stats.hits == 1
        cache.remove(mds[2].segment_id)
        assert mds[2].segment_id not in cache and len(list((tmp_path / "cache").iterdir())) == 3
        await cache.close()

    asyncio.run(second())


def test_small_budget_still_serves_the_lookup(tmp_path):
    rsm, (seg,), (md,) = setup_segments(tmp_path, 1)
    oi = OffsetIndex(seg.offset_index, seg.base_offset, 1 << 20)

    async def body():
        cache = RemoteIndexCache(rsm, tmp_path / "cache", max_bytes=10)
        target = md.start_offset + 250
        assert await cache.lookup_offset(md, target) == oi.lookup(target)[1]
        assert len(cache) == 0 and cache.size_bytes == 0 and list((tmp_path / "cache").iterdir()) == []
        await cache.close()

    asyncio.run(body())
    oi.close()


def test_aborted_transactions(tmp_path):
    txns = [(7, 10_005, 10_012, 10_013), (9, 10_100, 10_150, 10_151), (11, 10_300, 10_310, 10_320)]
    rsm, _, (md,) = setup_segments(tmp_path, 1, aborted_txns=txns)

    async def body():
        cache = RemoteIndexCache(rsm, tmp_path / "cache")
        r = await cache.collect_aborted_transactions(md, 10_010, 10_120)
        assert r.aborted_transactions == [AbortedTxn(*txns[0]), AbortedTxn(*txns[1])] and r.is_complete
        r = await cache.collect_aborted_transactions(md, 10_200, 10_400)
        assert r.aborted_transactions == [AbortedTxn(*txns[2])] and not r.is_complete
        await cache.close()

    asyncio.run(body())


def test_segment_without_txn_index_and_missing_segment(tmp_path):
    rsm, (seg,), (md,) = setup_segments(tmp_path, 1)

    async def body():
        cache = RemoteIndexCache(rsm, tmp_path / "cache")
        r = await cache.collect_aborted_transactions(md, 0, 1 << 40)
        assert r.aborted_transactions == [] and not r.is_complete
        gone = seg.metadata()  # never copied
        for _ in range(2):  # the failure is not cached: each lookup tries again
            with pytest.raises(RemoteResourceNotFoundError):
                await cache.lookup_offset(gone, gone.start_offset)
        assert cache.stats.load_errors == 2 and gone.segment_id not in cache
        await cache.close()

    asyncio.run(body())
