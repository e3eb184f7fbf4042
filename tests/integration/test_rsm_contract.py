"""The RemoteStorageManager contract, run against every implementation:

LocalTieredStorage; S3RemoteStorageManager on moto's server and on SeaweedFS, each with and without zstd chunk
compression (plus moto without a chunk cache, the direct ranged-GET path). Small chunks (16 KiB) make ordinary test
segments span many chunks, so ranges across chunk boundaries are exercised everywhere.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
import uuid
from pathlib import Path

import pytest

from strata.protocol.records import BufferChain
from strata.remote.local_tiered import LocalTieredStorage
from strata.remote.metadata import TopicIdPartition
from strata.remote.rsm import IndexType, RemoteResourceNotFoundError, RemoteStorageManager
from strata.remote.s3 import MANIFEST_SUFFIX, S3RemoteStorageManager
from tests.support.s3_servers import MotoServer, SeaweedServer, run, write_random_log, write_segment

CHUNK = 16 * 1024
BACKENDS = ["local", "moto", "moto-zstd", "moto-nocache", "seaweed", "seaweed-zstd"]
SUFFIXES = [".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".leader_epoch_checkpoint"]


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    with MotoServer(tmp_path_factory.mktemp("moto")) as server:
        yield server


@pytest.fixture(scope="module")
def seaweed(tmp_path_factory):
    with SeaweedServer(tmp_path_factory.mktemp("seaweed")) as server:
        yield server


class Backend:
    """Builds a fresh RSM (inside the test's event loop) and lists what it stored."""

    def __init__(self, kind: str, tmp: Path, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        self.tmp = tmp
        self.prefix = f"t-{uuid.uuid4().hex[:8]}/"
        self.server: MotoServer | SeaweedServer | None = None
        if kind != "local":
            self.server = request.getfixturevalue("moto" if kind.startswith("moto") else "seaweed")

    def make(self, **extra) -> RemoteStorageManager:
        if self.kind == "local":
            return LocalTieredStorage(self.tmp / "remote")
        cfg = {
            "key.prefix": self.prefix,
            "chunk.size": CHUNK,
            "s3.retry.backoff.ms": 20,
            "s3.api.call.attempt.timeout.ms": 20000,
        }
        if self.kind.endswith("zstd"):
            cfg["compression.enabled"] = "true"
        if self.kind.endswith("nocache"):
            cfg["fetch.chunk.cache.size"] = 0
        cfg.update(extra)
        assert self.server is not None
        return S3RemoteStorageManager.from_config(self.server.rsm_config(**cfg))

    def stored(self) -> list[str]:
        """Stored object names relative to the storage root / key prefix."""
        if self.kind == "local":
            root = self.tmp / "remote"
            return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        assert self.server is not None
        return [k[len(self.prefix) :] for k in self.server.keys(self.prefix)]


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path) -> Backend:
    return Backend(request.param, tmp_path, request)


@pytest.fixture
def seg(tmp_path):
    return write_segment(
        tmp_path / "local" / "tiered-topic-3",
        1000,
        batches=60,
        aborted_txns=[(7, 1005, 1012, 1013), (9, 1100, 1150, 1151)],
    )


def expected_names(md, with_manifest: bool, with_txn: bool = True) -> list[str]:
    from strata.remote.rsm import partition_dir_name

    d = partition_dir_name(md.topic_id_partition)
    base = f"{md.start_offset:020d}-{md.remote_log_segment_id.id_str}"
    sfx = [s for s in SUFFIXES if with_txn or s != ".txnindex"] + ([MANIFEST_SUFFIX] if with_manifest else [])
    return sorted(f"{d}/{base}{s}" for s in sfx)


def test_copy_fetch_full_and_indexes(backend, seg):
    md = seg.metadata()

    async def body():
        async with backend.make() as rsm:
            custom = await rsm.copy_log_segment_data(md, seg.segment_data())
            # LocalTieredStorage has none; S3 returns an uncompressed segment's manifest (chunk size, size)
            hinted = backend.kind != "local" and not backend.kind.endswith("zstd")
            assert custom == ({"c": [rsm.config.chunk_size, seg.size]} if hinted else None)
            assert await rsm.fetch_log_segment(md, 0) == seg.log_bytes()
            assert await rsm.fetch_log_segment(md, 0, seg.size - 1) == seg.log_bytes()
            assert await rsm.fetch_index(md, IndexType.OFFSET) == seg.offset_index.read_bytes()
            assert await rsm.fetch_index(md, IndexType.TIMESTAMP) == seg.time_index.read_bytes()
            assert await rsm.fetch_index(md, IndexType.TRANSACTION) == seg.txn_index.read_bytes()
            assert await rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT) == seg.producer_snapshot.read_bytes()
            assert await rsm.fetch_index(md, IndexType.LEADER_EPOCH) == seg.leader_epoch

    run(body)
    # Kafka's LocalTieredStorage names, e.g. tiered-topic-3-AAAAAAAAAAAAABI0VniavA/00000000000000001000-<id>.log
    assert backend.stored() == expected_names(md, with_manifest=backend.kind != "local")
    assert backend.stored()[0].startswith("tiered-topic-3-AAAAAAAAAAAAABI0VniavA/00000000000000001000-")


def test_ranged_fetches(backend, seg):
    md = seg.metadata()
    data = seg.log_bytes()
    size = len(data)
    assert size > 6 * CHUNK
    rnd = random.Random(5)
    ranges = [
        (0, 0),
        (size - 1, size - 1),
        (0, CHUNK - 1),
        (CHUNK - 1, CHUNK),
        (CHUNK, 2 * CHUNK - 1),
        (CHUNK - 10, 3 * CHUNK + 10),
        (size - CHUNK - 3, size - 1),
        (size - 5, size + 1000),
        (1, size - 2),
    ]
    ranges += [tuple(sorted((rnd.randrange(size), rnd.randrange(size)))) for _ in range(20)]
    ranges += [(pos, pos + bsize - 1) for _, _, pos, bsize, _ in seg.batches[::7]]  # whole batches

    async def body():
        async with backend.make() as rsm:
            await rsm.copy_log_segment_data(md, seg.segment_data())
            for start, end in ranges:
                got = await rsm.fetch_log_segment(md, start, end)
                assert got == data[start : end + 1], (start, end)
            assert await rsm.fetch_log_segment(md, size - 100) == data[-100:]
            assert await rsm.fetch_log_segment(md, size) == b""
            assert await rsm.fetch_log_segment(md, size + 5, size + 10) == b""
            with pytest.raises(ValueError):
                await rsm.fetch_log_segment(md, -1)
            with pytest.raises(ValueError):
                await rsm.fetch_log_segment(md, 10, 9)
            pieces = [p async for p in rsm.stream_log_segment(md, 100, size - 100, piece_size=CHUNK + 17)]
            assert b"".join(pieces) == data[100 : size - 99] and max(map(len, pieces)) == CHUNK + 17
            # concurrent readers of overlapping ranges all get the right bytes
            outs = await asyncio.gather(*(rsm.fetch_log_segment(md, s, e) for s, e in ranges))
            assert outs == [data[s : e + 1] for s, e in ranges]

    run(body)


def test_fetches_into_a_reused_buffer(backend, seg):
    """fetch_log_segment_into writes exactly the range's bytes at the buffer's start, fewer at the segment's end,
    and leaves the rest of the buffer alone; the same buffer serves read after read."""
    md = seg.metadata()
    data = seg.log_bytes()
    size = len(data)
    buf = bytearray(3 * CHUNK + 5)
    view = memoryview(buf)

    async def body():
        async with backend.make() as rsm:
            await rsm.copy_log_segment_data(md, seg.segment_data())
            for start, length in [
                (0, len(buf)),
                (CHUNK - 7, 2 * CHUNK),
                (5, 1),
                (size - 100, len(buf)),
                (size - len(buf), len(buf)),
                (CHUNK, len(buf)),
            ]:
                buf[:] = b"\xee" * len(buf)
                n = await rsm.fetch_log_segment_into(md, start, view[:length])
                assert n == min(length, size - start), (start, length)
                assert buf[:n] == data[start : start + n], (start, length)
                assert buf[n:] == b"\xee" * (len(buf) - n)  # nothing written past the bytes returned
            assert await rsm.fetch_log_segment_into(md, size, view) == 0
            assert await rsm.fetch_log_segment_into(md, 0, view[:0]) == 0
            with pytest.raises(ValueError):
                await rsm.fetch_log_segment_into(md, -1, view)
            # readers sharing nothing but the store, concurrently
            bufs = [bytearray(CHUNK + 3) for _ in range(6)]
            starts = [i * (CHUNK - 11) for i in range(6)]
            got = await asyncio.gather(
                *(rsm.fetch_log_segment_into(md, s, memoryview(b)) for s, b in zip(starts, bufs))
            )
            assert got == [CHUNK + 3] * 6
            assert [bytes(b) for b in bufs] == [data[s : s + CHUNK + 3] for s in starts]

    run(body)


def test_idempotent_copy_overwrites_and_drops_stale_txn_index(backend, seg, tmp_path):
    md = seg.metadata()
    other = write_segment(tmp_path / "other", 1000, batches=30, seed=9)  # same offsets, other content, no txnindex

    async def body():
        async with backend.make() as rsm:
            await rsm.copy_log_segment_data(md, seg.segment_data())
            await rsm.copy_log_segment_data(md, seg.segment_data())
            assert await rsm.fetch_log_segment(md, 0) == seg.log_bytes()
            await rsm.copy_log_segment_data(md, other.segment_data())  # a retry overwrites
        async with backend.make() as rsm:  # fresh instance: no cached manifest or chunks
            assert await rsm.fetch_log_segment(md, 0) == other.log_bytes()
            assert await rsm.fetch_index(md, IndexType.OFFSET) == other.offset_index.read_bytes()
            with pytest.raises(RemoteResourceNotFoundError) as ei:
                await rsm.fetch_index(md, IndexType.TRANSACTION)
            assert ei.value.retriable is False

    run(body)
    assert backend.stored() == expected_names(md, with_manifest=backend.kind != "local", with_txn=False)


def test_delete_is_idempotent_and_fetches_fail_not_found(backend, seg):
    md = seg.metadata()
    keep = seg.metadata()  # a second copy (new segment id) of the same data stays

    async def body():
        async with backend.make() as rsm:
            await rsm.copy_log_segment_data(md, seg.segment_data())
            await rsm.copy_log_segment_data(keep, seg.segment_data())
            assert await rsm.fetch_log_segment(md, 0, 99) == seg.log_bytes()[:100]  # warm any cache
            await rsm.delete_log_segment_data(md)
            await rsm.delete_log_segment_data(md)
            await rsm.delete_log_segment_data(seg.metadata())  # never copied
            with pytest.raises(RemoteResourceNotFoundError):
                await rsm.fetch_log_segment(md, 0, 99)
            for t in IndexType:
                with pytest.raises(RemoteResourceNotFoundError):
                    await rsm.fetch_index(md, t)
            assert await rsm.fetch_log_segment(keep, 0) == seg.log_bytes()

    run(body)
    assert backend.stored() == expected_names(keep, with_manifest=backend.kind != "local")


def test_unknown_segment_not_found(backend, seg):
    async def body():
        async with backend.make() as rsm:
            with pytest.raises(RemoteResourceNotFoundError) as ei:
                await rsm.fetch_log_segment(seg.metadata(), 0)
            assert ei.value.retriable is False and ei.value.error_code == 56
            with pytest.raises(RemoteResourceNotFoundError):
                await rsm.fetch_index(seg.metadata(), IndexType.OFFSET)

    run(body)


def test_large_segment_multipart_and_part_boundaries(backend, tmp_path):
    """A 12 MiB `.log` (5 MiB parts: a 3-part multipart upload on S3), read across part and chunk boundaries."""
    seg = write_segment(tmp_path / "big", 0, batches=2)
    data = write_random_log(seg.log, 12 * 1024 * 1024 + 123)
    md = seg.metadata()
    part = 5 * 1024 * 1024
    ranges = [
        (0, 0),
        (part - 1, part),
        (part - 20, 2 * part + 20),
        (len(data) - 1, len(data) - 1),
        (2 * part - CHUNK, 2 * part + 3 * CHUNK),
    ]

    async def body():
        async with backend.make(**{"s3.multipart.upload.part.size": part, "chunk.size": 256 * 1024}) as rsm:
            await rsm.copy_log_segment_data(md, seg.segment_data())
            for s, e in ranges:
                assert await rsm.fetch_log_segment(md, s, e) == data[s : e + 1], (s, e)
                pieces = await rsm.fetch_log_segment_pieces(md, s, e)  # the read path's unjoined views
                assert b"".join(pieces) == data[s : e + 1], (s, e)
            assert await rsm.fetch_log_segment(md, 0) == data
            if isinstance(rsm, S3RemoteStorageManager):
                manifest = await rsm.get_manifest(md)
                assert manifest.original_size == len(data)
                assert manifest.chunk_count == -(-len(data) // (256 * 1024))

    run(body)
    if backend.server is not None:
        assert backend.server.multipart_uploads() == []


@pytest.mark.parametrize("backend", ["moto", "moto-zstd", "seaweed", "seaweed-zstd"], indirect=True)
def test_stored_log_object_and_manifest(backend, seg):
    """zstd chunks make the stored `.log` smaller than the original; without compression it is byte-identical."""
    md = seg.metadata()

    async def body():
        async with backend.make() as rsm:
            await rsm.copy_log_segment_data(md, seg.segment_data())
            return await rsm.get_manifest(md)

    m = run(body)
    key = next(k for k in backend.server.keys(backend.prefix) if k.endswith(".log"))
    c = backend.server.client()
    try:
        stored = c.get_object(Bucket=backend.server.bucket, Key=key)["Body"].read()
    finally:
        c.close()
    assert m.original_size == seg.size and m.chunk_count == -(-seg.size // CHUNK)
    assert len(stored) == m.stored_size
    if backend.kind.endswith("zstd"):
        assert m.compression == "zstd" and m.stored_size < seg.size // 2  # word values: zstd shrinks them well
    else:
        assert m.compression is None and stored == seg.log_bytes()


def test_delete_partition_empties_its_prefix(backend, seg, tmp_path):
    tip_a = TopicIdPartition(uuid.uuid4(), "doomed", 0)
    tip_b = TopicIdPartition(uuid.uuid4(), "kept", 0)
    mds = [seg.metadata(tip_a) for _ in range(3)]
    kept = seg.metadata(tip_b)

    async def body():
        async with backend.make() as rsm:
            for md in mds + [kept]:
                await rsm.copy_log_segment_data(md, seg.segment_data())
            await rsm.delete_partition(tip_a)
            await rsm.delete_partition(tip_a)
            assert await rsm.fetch_log_segment(kept, 0, 9) == seg.log_bytes()[:10]

    run(body)
    assert backend.stored() == expected_names(kept, with_manifest=backend.kind != "local")


# -- S3-specific behaviour on moto -----------------------------------------------------------------------------------
def test_default_credential_chain_and_custom_metadata(moto, seg, monkeypatch):
    """Without static keys the default provider chain (here: the environment) is used; KIP-917 custom metadata
    fields are returned by the copy when configured."""
    from tests.support.s3_servers import ACCESS_KEY, SECRET_KEY

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    cfg = moto.rsm_config(**{"key.prefix": "creds/", "custom.metadata.fields.include": "REMOTE_SIZE,OBJECT_KEY"})
    del cfg["aws.access.key.id"], cfg["aws.secret.access.key"]
    md = seg.metadata()

    async def body():
        async with S3RemoteStorageManager.from_config(cfg) as rsm:
            custom = await rsm.copy_log_segment_data(md, seg.segment_data())
            assert await rsm.fetch_log_segment(md, 5, 9) == seg.log_bytes()[5:10]
            return custom

    custom = run(body)
    from strata.remote.metadata import encode_custom_metadata
    from strata.remote.rsm import partition_dir_name

    # the manifest hint is left out: with it the custom metadata would pass Kafka's default cap of 128 bytes
    assert custom == {
        "remote_size": seg.size,
        "object_key": f"creds/{partition_dir_name(md.topic_id_partition)}/"
        f"{md.start_offset:020d}-{md.remote_log_segment_id.id_str}",
    }
    assert len(encode_custom_metadata(custom)) <= 128  # Kafka's default custom metadata cap


def test_concurrent_reads_of_one_chunk_share_one_get(moto, seg):
    md = seg.metadata()
    cfg = moto.rsm_config(
        **{
            "key.prefix": f"share-{uuid.uuid4().hex[:6]}/",
            "chunk.size": CHUNK,
            "fetch.chunk.cache.prefetch.max.size": 0,
        }
    )

    async def body():
        async with S3RemoteStorageManager.from_config(cfg) as rsm:
            await rsm.copy_log_segment_data(md, seg.segment_data())
        async with S3RemoteStorageManager.from_config(cfg) as rsm:
            outs = await asyncio.gather(*(rsm.fetch_log_segment(md, 100 + i, 200 + i) for i in range(20)))
            assert outs == [seg.log_bytes()[100 + i : 201 + i] for i in range(20)]
            assert rsm.stats.requests == 2  # the manifest and chunk 0, once each
            assert rsm.chunk_cache.stats.shared_waits == 19
            assert rsm.stats.bytes_downloaded == CHUNK + len((await rsm.get_manifest(md)).to_json())

    run(body)


def test_uncompressed_chunks_are_cached_as_received_blocks_and_read_as_views(moto, tmp_path):
    """A 1 MiB chunk arrives from the S3 server in several blocks: the chunk cache keeps them as received (a
    BufferChain, never joined), and reads across block and chunk boundaries give the segment's bytes."""
    seg = write_segment(tmp_path / "blocks", 0, batches=2)
    data = write_random_log(seg.log, 3 * 1024 * 1024 + 77)
    md = seg.metadata()
    cfg = moto.rsm_config(**{"key.prefix": f"blocks-{uuid.uuid4().hex[:6]}/", "chunk.size": 1024 * 1024})
    mib = 1024 * 1024
    ranges = [(0, len(data) - 1), (mib - 5, mib + 5), (100, 2 * mib + 100), (3 * mib - 1, len(data) - 1), (7, 7)]

    async def body():
        async with S3RemoteStorageManager.from_config(cfg) as rsm:
            await rsm.copy_log_segment_data(md, seg.segment_data())
            for s, e in ranges:
                pieces = await rsm.fetch_log_segment_pieces(md, s, e)
                assert b"".join(pieces) == data[s : e + 1], (s, e)
                assert await rsm.fetch_log_segment(md, s, e) == data[s : e + 1], (s, e)
            chains = [v for v in rsm.chunk_cache._mem.values() if isinstance(v, BufferChain)]
            assert chains, "no chunk kept as the blocks received"

    run(body)


@pytest.mark.parametrize("compression", ["true", "false"])  # uncompressed chunks are cached as received blocks
def test_disk_chunk_cache_serves_a_restarted_reader(moto, seg, tmp_path, compression):
    md = seg.metadata()
    cache_dir = tmp_path / "chunk-cache"
    cfg = moto.rsm_config(
        **{
            "key.prefix": f"disk-{uuid.uuid4().hex[:6]}/",
            "chunk.size": CHUNK,
            "compression.enabled": compression,
            "fetch.chunk.cache.path": str(cache_dir),
            "fetch.chunk.cache.disk.size": 64 * CHUNK,
            "fetch.chunk.cache.size": 4 * CHUNK,
        }
    )

    async def body():
        async with S3RemoteStorageManager.from_config(cfg) as rsm:
            await rsm.copy_log_segment_data(md, seg.segment_data())
            assert await rsm.fetch_log_segment(md, 0) == seg.log_bytes()
            await rsm.chunk_cache.drain()
            assert rsm.chunk_cache.stats.memory_evictions > 0  # memory holds 4 chunks, the segment has more
        files = sorted(p.name for p in cache_dir.iterdir())
        assert len(files) == -(-seg.size // CHUNK)
        async with S3RemoteStorageManager.from_config(cfg) as rsm:  # "restart": only the manifest is fetched
            assert await rsm.fetch_log_segment(md, 0) == seg.log_bytes()
            assert rsm.stats.requests == 1 and rsm.chunk_cache.stats.disk_hits == len(files)
            await rsm.delete_log_segment_data(md)
            await rsm.chunk_cache.drain()
        assert list(cache_dir.iterdir()) == []

    run(body)


@pytest.mark.parametrize("backend", ["local", "moto-zstd"], indirect=True)
def test_event_loop_keeps_running_during_copy_and_reads(backend, tmp_path):
    """Client start-up, file reads, compression and fetches stay off the event loop while a 24 MiB segment is copied
    and read back: between two ticks of a 5 ms ticker the loop's thread never burns much CPU (compressing the segment
    on the loop costs ~100 ms; a tick of the client start-up, the heaviest thing left on it, ~30 ms), and the ticker
    never stops for long. CPU time rather than wall time, so that a loaded CI machine (other processes, other threads
    holding the GIL) does not look like a blocked loop; automatic GC is off meanwhile, because a full collection of
    the interpreter's heap is not the storage manager's work."""
    seg = write_segment(tmp_path / "stall", 0, batches=2)
    data = write_random_log(seg.log, 24 * 1024 * 1024)
    md = seg.metadata()

    async def body():
        ticks: list[tuple[float, float]] = []  # (wall gap, loop-thread CPU) between two ticks

        async def ticker():
            loop = asyncio.get_running_loop()
            last, last_cpu = loop.time(), time.thread_time()
            while True:
                await asyncio.sleep(0.005)
                now, cpu = loop.time(), time.thread_time()
                ticks.append((now - last, cpu - last_cpu))
                last, last_cpu = now, cpu

        tick = asyncio.ensure_future(ticker())
        try:
            async with backend.make(**{"chunk.size": 1024 * 1024}) as rsm:
                await rsm.copy_log_segment_data(md, seg.segment_data())
                assert await rsm.fetch_log_segment(md, 0) == data
                assert await rsm.fetch_index(md, IndexType.OFFSET) == seg.offset_index.read_bytes()
        finally:
            tick.cancel()
        return ticks

    gc.collect()
    gc.disable()
    try:
        ticks = run(body)
    finally:
        gc.enable()
    assert len(ticks) >= 3
    assert max(cpu for _, cpu in ticks) < 0.1, sorted(cpu for _, cpu in ticks)[-5:]
    assert max(gap for gap, _ in ticks) < 1.0, sorted(gap for gap, _ in ticks)[-5:]


def test_adjacent_chunks_of_an_untransformed_segment_come_with_one_get(moto, tmp_path):
    """A read over several uncompressed chunks (and the chunks it prefetches) costs one ranged GET per run of
    adjacent chunks, not one per chunk; the chunks cached from it give the segment's bytes at every boundary."""
    seg = write_segment(tmp_path / "runs", 0, batches=2)
    mib = 1024 * 1024
    data = write_random_log(seg.log, 6 * mib + 5)
    md = seg.metadata()
    cfg = moto.rsm_config(
        **{
            "key.prefix": f"runs-{uuid.uuid4().hex[:6]}/",
            "chunk.size": mib,
            "fetch.chunk.cache.prefetch.max.size": 2 * mib,
        }
    )

    async def body():
        async with S3RemoteStorageManager.from_config(cfg) as rsm:
            await rsm.copy_log_segment_data(md, seg.segment_data())
        async with S3RemoteStorageManager.from_config(cfg) as rsm:
            assert await rsm.fetch_log_segment(md, 10, 3 * mib - 1) == data[10 : 3 * mib]  # chunks 0-2
            await rsm.chunk_cache.drain()  # prefetch of 3-4 done
            # the manifest, chunks 0-2 in one GET, chunks 3-4 (the prefetch) in another
            assert rsm.stats.requests == 3, rsm.stats
            assert rsm.chunk_cache.stats.misses == 5 and rsm.chunk_cache.stats.prefetches == 2
            for s, e in [(mib - 3, mib + 3), (0, 5 * mib - 1), (4 * mib + 7, 4 * mib + 7)]:
                assert await rsm.fetch_log_segment(md, s, e) == data[s : e + 1], (s, e)
            assert rsm.stats.requests == 4  # chunk 5 (alone: the per-chunk load) for the last read

    run(body)


@pytest.mark.parametrize("compression", ["false", "true"])
def test_the_manifest_travels_in_custom_metadata_for_untransformed_segments(moto, seg, compression):
    """An uncompressed segment's copy returns its manifest as custom metadata (KIP-917), so a reader given that
    metadata (another broker, a restarted one, a Spark executor) GETs only the chunks; a compressed one's manifest
    (per-chunk sizes) is still read from its object."""
    import dataclasses

    md = seg.metadata()
    cfg = moto.rsm_config(
        **{
            "key.prefix": f"hint-{uuid.uuid4().hex[:6]}/",
            "chunk.size": CHUNK,
            "compression.enabled": compression,
            "fetch.chunk.cache.prefetch.max.size": 0,
        }
    )

    async def body():
        async with S3RemoteStorageManager.from_config(cfg) as rsm:
            custom = await rsm.copy_log_segment_data(md, seg.segment_data())
        if compression == "true":
            assert custom is None
            return
        assert custom == {"c": [CHUNK, seg.size]}
        async with S3RemoteStorageManager.from_config(cfg) as rsm:  # a reader that never saw the copy
            hinted = dataclasses.replace(md, custom_metadata=custom)
            assert await rsm.fetch_log_segment(hinted, 3, CHUNK + 9) == seg.log_bytes()[3 : CHUNK + 10]
            assert rsm.stats.requests == 1  # chunks 0 and 1 in one GET; no manifest GET
        async with S3RemoteStorageManager.from_config(cfg) as rsm:  # without the hint: the manifest object
            assert await rsm.fetch_log_segment(md, 3, 9) == seg.log_bytes()[3:10]
            assert rsm.stats.requests == 2
        # a hint that does not match the segment's size is not trusted (a short one would cut reads silently)
        for wrong in ([CHUNK, seg.size - 1000], [CHUNK, seg.size + 1000]):
            async with S3RemoteStorageManager.from_config(cfg) as rsm:
                bad = dataclasses.replace(md, custom_metadata={"c": wrong})
                assert await rsm.fetch_log_segment(bad, 0) == seg.log_bytes()
                assert rsm.stats.requests >= 2 and rsm.stats.retries == 0  # the manifest object, then the data

    run(body)


def test_chunks_of_one_get_hold_only_their_own_bytes(moto, tmp_path):
    """Chunks cached from one ranged GET are views on the received blocks; a block shared by two chunks is copied at
    the boundary, so the memory a cached chunk keeps alive is what the cache counts for it (with chunks smaller than
    the blocks, a chunk used to pin a whole block). A run is at most 16 MiB per GET."""
    seg = write_segment(tmp_path / "pin", 0, batches=2)
    data = write_random_log(seg.log, 40 * CHUNK + 123)
    md = seg.metadata()
    cfg = moto.rsm_config(
        **{"key.prefix": f"pin-{uuid.uuid4().hex[:6]}/", "chunk.size": CHUNK, "fetch.chunk.cache.prefetch.max.size": 0}
    )

    def held(chunk) -> int:
        pieces = chunk.pieces if isinstance(chunk, BufferChain) else [chunk]
        return sum(memoryview(p.obj).nbytes if isinstance(p, memoryview) else len(p) for p in pieces)

    async def body():
        async with S3RemoteStorageManager.from_config(cfg) as rsm:
            await rsm.copy_log_segment_data(md, seg.segment_data())
        async with S3RemoteStorageManager.from_config(cfg) as rsm:
            assert await rsm.fetch_log_segment(md, 5, 40 * CHUNK - 1) == data[5 : 40 * CHUNK]
            assert rsm.chunk_cache.max_run_chunks == 16 * 1024 * 1024 // CHUNK
            cached = list(rsm.chunk_cache._mem.values())
            assert len(cached) == 40
            assert sum(held(c) for c in cached) == sum(len(c) for c in cached) == rsm.chunk_cache.memory_bytes

    run(body)


def test_a_run_of_an_older_segment_stays_within_the_get_size_cap(moto, tmp_path, monkeypatch):
    """The cache's run length comes from the configured chunk.size, but a segment copied with larger chunks (before
    chunk.size was lowered) keeps its own: its runs are split so that no ranged GET exceeds RUN_MAX_BYTES."""
    import strata.remote.s3 as s3mod

    small, big = 16 * 1024, 64 * 1024
    monkeypatch.setattr(s3mod, "RUN_MAX_BYTES", 4 * small)  # 64 KiB here, 16 MiB in production
    seg = write_segment(tmp_path / "cap", 0, batches=2)
    data = write_random_log(seg.log, 16 * big)
    md = seg.metadata()
    base = {"key.prefix": f"cap-{uuid.uuid4().hex[:6]}/", "fetch.chunk.cache.prefetch.max.size": 0}

    async def body():
        async with S3RemoteStorageManager.from_config(moto.rsm_config(**base, **{"chunk.size": big})) as rsm:
            await rsm.copy_log_segment_data(md, seg.segment_data())
        async with S3RemoteStorageManager.from_config(moto.rsm_config(**base, **{"chunk.size": small})) as rsm:
            assert rsm.chunk_cache.max_run_chunks == 4
            assert await rsm.fetch_log_segment(md, 0, len(data) - 1) == data
            # the manifest, then 16 chunks of 64 KiB in runs of 4 (the cache's count): one GET per chunk (it was
            # one GET per run of 4, 256 KiB each)
            assert rsm.stats.requests == 1 + 16, rsm.stats

    run(body)
