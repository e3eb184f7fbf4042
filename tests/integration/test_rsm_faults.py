"""S3RemoteStorageManager against moto behind a fault-injecting proxy: 500/503 answers, added latency, connections
dropped before or in the middle of a response are retried until the operation succeeds; a server that never
answers makes the call fail with a timeout within its bound instead of hanging; a multipart upload that cannot
finish is aborted and leaves nothing behind; non-retriable errors fail at once. A body corrupted on the way is
refused by a server that checks the upload's CRC32C (SeaweedFS does, moto does not) and sent again."""

from __future__ import annotations

import contextlib
import time
import uuid

import pytest

from strata.remote.rsm import IndexType, RemoteStorageError, RemoteStorageTimeoutError
from strata.remote.s3 import S3RemoteStorageManager
from tests.support.s3_servers import (
    Fault,
    FaultProxy,
    MotoServer,
    SeaweedServer,
    run,
    write_random_log,
    write_segment,
)

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    with MotoServer(tmp_path_factory.mktemp("moto-faults")) as server:
        yield server


def make_rsm(moto: MotoServer, proxy: FaultProxy, prefix: str, **extra) -> S3RemoteStorageManager:
    cfg = moto.rsm_config(
        **{
            "key.prefix": prefix,
            "chunk.size": 16 * 1024,
            "s3.retry.backoff.ms": 10,
            "s3.retry.backoff.max.ms": 50,
            "s3.retry.max.attempts": 6,
            "s3.api.call.attempt.timeout.ms": 2000,
            "s3.api.call.timeout.ms": 10000,
            **extra,
        }
    )
    cfg["s3.endpoint.url"] = proxy.endpoint
    return S3RemoteStorageManager.from_config(cfg)


@contextlib.asynccontextmanager
async def proxied_rsm(moto: MotoServer, prefix: str, **extra):
    async with FaultProxy("127.0.0.1", moto.port) as proxy, make_rsm(moto, proxy, prefix, **extra) as rsm:
        yield proxy, rsm


@pytest.fixture
def seg(tmp_path):
    return write_segment(tmp_path / "log", 0, batches=40)


@pytest.mark.parametrize("compression", ["false", "true"])
def test_errors_and_dropped_connections_are_retried(moto, seg, compression):
    prefix = f"f-{uuid.uuid4().hex[:8]}/"
    md = seg.metadata()

    async def body():
        extra = {"compression.enabled": compression, "fetch.chunk.cache.size": 0}
        async with proxied_rsm(moto, prefix, **extra) as (proxy, rsm):
            # the copy's requests run concurrently, so which request meets which fault varies; aiohttp itself
            # re-sends a request once when its connection drops, our retry loop handles the rest
            proxy.add(
                Fault("status", 503, method="PUT"),
                Fault("status", 500, method="PUT"),
                Fault("drop_request", method="PUT"),
                Fault("drop_request", method="PUT"),
                Fault("drop_response", method="PUT"),
                Fault("drop_response", method="PUT"),
            )
            await rsm.copy_log_segment_data(md, seg.segment_data())
            assert proxy.log.faults_applied == ["status", "status"] + ["drop_request"] * 2 + ["drop_response"] * 2
            copy_retries = rsm.stats.retries
            assert copy_retries >= 2  # at least the two error statuses went through our retries
            proxy.add(
                Fault("status", 503, method="GET"),
                Fault("drop_response", method="GET"),
                Fault("drop_response", method="GET"),
                Fault("drop_request", method="GET"),
                Fault("drop_request", method="GET"),
                Fault("status", 500, method="GET"),
            )
            assert await rsm.fetch_log_segment(md, 0) == seg.log_bytes()
            assert await rsm.fetch_log_segment(md, 1000, 50_000) == seg.log_bytes()[1000:50_001]
            assert await rsm.fetch_index(md, IndexType.OFFSET) == seg.offset_index.read_bytes()
            assert len(proxy.log.faults_applied) == 12 and not proxy.faults
            assert rsm.stats.retries - copy_retries >= 2
            # one request (an index GET), three drops in a row: beyond aiohttp's single re-send
            before = rsm.stats.retries
            proxy.add(*[Fault("drop_request", method="GET") for _ in range(3)])
            assert await rsm.fetch_index(md, IndexType.TIMESTAMP) == seg.time_index.read_bytes()
            assert not proxy.faults and rsm.stats.retries > before

    run(body)


def test_reads_into_a_buffer_start_over_after_a_partial_body_or_a_timeout(moto, seg):
    """fetch_log_segment_into (Spark's direct mode) writes the received blocks straight into the caller's buffer: an
    attempt that dies half-way (the body cut off, or slower than the attempt timeout) has already written some; the
    retry writes the range from its start again, and nothing lands past it."""
    prefix = f"f-{uuid.uuid4().hex[:8]}/"
    md = seg.metadata()
    data = seg.log_bytes()

    async def body():
        async with proxied_rsm(
            moto, prefix, **{"fetch.chunk.cache.size": 0, "s3.api.call.attempt.timeout.ms": 500}
        ) as (proxy, rsm):
            await rsm.copy_log_segment_data(md, seg.segment_data())
            await rsm.get_manifest(md)
            buf = bytearray(b"\xee" * 60_000)
            proxy.add(*[Fault("drop_response", method="GET") for _ in range(3)])
            assert await rsm.fetch_log_segment_into(md, 1000, memoryview(buf)[:50_000]) == 50_000
            assert proxy.log.faults_applied == ["drop_response"] * 3 and rsm.stats.retries >= 2
            assert buf[:50_000] == data[1000:51_000] and buf[50_000:] == b"\xee" * 10_000
            buf[:] = b"\xee" * len(buf)
            proxy.add(Fault("delay", delay=1.0, method="GET"))
            assert await rsm.fetch_log_segment_into(md, 7, memoryview(buf)[:40_000]) == 40_000
            assert rsm.stats.timeouts == 1
            assert buf[:40_000] == data[7:40_007] and buf[40_000:] == b"\xee" * 20_000
            # a server that ignores the Range header sends the whole object: refused before it overflows, retried
            buf[:] = b"\xee" * len(buf)
            retries = rsm.stats.retries
            proxy.add(Fault("ignore_range", method="GET"))
            assert await rsm.fetch_log_segment_into(md, 300, memoryview(buf)[:30_000]) == 30_000
            assert proxy.log.faults_applied[-1] == "ignore_range" and rsm.stats.retries == retries + 1
            assert buf[:30_000] == data[300:30_300] and buf[30_000:] == b"\xee" * 30_000

    run(body)


def test_added_latency_within_the_attempt_timeout_succeeds(moto, seg):
    prefix = f"f-{uuid.uuid4().hex[:8]}/"
    md = seg.metadata()

    async def body():
        async with proxied_rsm(moto, prefix) as (proxy, rsm):
            proxy.default_delay = 0.1
            proxy.add(Fault("delay", delay=0.5, method="GET"))
            await rsm.copy_log_segment_data(md, seg.segment_data())
            t0 = time.monotonic()
            assert await rsm.fetch_log_segment(md, 0) == seg.log_bytes()
            assert time.monotonic() - t0 >= 0.6  # the latency really applied
            assert rsm.stats.retries == 0 and rsm.stats.timeouts == 0

    run(body)


def test_unanswered_requests_time_out_within_the_deadline(moto, seg):
    prefix = f"f-{uuid.uuid4().hex[:8]}/"
    md = seg.metadata()

    async def body():
        async with FaultProxy("127.0.0.1", moto.port) as proxy:
            async with make_rsm(moto, proxy, prefix) as rsm:
                await rsm.copy_log_segment_data(md, seg.segment_data())
            # a fresh instance (no cached manifest); every GET now hangs
            async with make_rsm(
                moto,
                proxy,
                prefix,
                **{"s3.api.call.attempt.timeout.ms": 300, "s3.api.call.timeout.ms": 1500, "s3.retry.max.attempts": 100},
            ) as rsm:
                proxy.add(*[Fault("hang", method="GET") for _ in range(100)])
                t0 = time.monotonic()
                with pytest.raises(RemoteStorageTimeoutError) as ei:
                    await rsm.fetch_log_segment(md, 0, 99)
                elapsed = time.monotonic() - t0
                assert 1.5 <= elapsed < 12.0, elapsed  # bounded (no hang); generous for a loaded CI machine
                assert ei.value.retriable and rsm.stats.timeouts >= 4
                # a latency above the attempt timeout is a timeout too; once it goes, the read succeeds
                proxy.faults.clear()
                proxy.add(Fault("delay", delay=1.0, method="GET"))
                assert await rsm.fetch_log_segment(md, 0, 99) == seg.log_bytes()[:100]
                assert "delay" in proxy.log.faults_applied

    run(body)


def test_failed_multipart_upload_is_aborted_and_leaves_no_objects(moto, tmp_path):
    prefix = f"f-{uuid.uuid4().hex[:8]}/"
    seg = write_segment(tmp_path / "big", 0, batches=2)
    write_random_log(seg.log, 11 * MIB)
    md = seg.metadata()

    async def body():
        extra = {"s3.multipart.upload.part.size": 5 * MIB, "s3.retry.max.attempts": 3}
        async with proxied_rsm(moto, prefix, **extra) as (proxy, rsm):
            # part 2 fails on every attempt
            proxy.add(*[Fault("status", 500, method="PUT", path_contains="partNumber=2") for _ in range(3)])
            with pytest.raises(RemoteStorageError) as ei:
                await rsm.copy_log_segment_data(md, seg.segment_data())
            assert ei.value.retriable
            assert rsm.stats.multipart_aborts == 1
            assert any(m == "DELETE" and "uploadId=" in p for m, p in proxy.log.requests)  # AbortMultipartUpload
            # the same copy (same segment id) then succeeds: idempotent retry
            await rsm.copy_log_segment_data(md, seg.segment_data())
            assert (
                await rsm.fetch_log_segment(md, 5 * MIB - 3, 5 * MIB + 3) == seg.log_bytes()[5 * MIB - 3 : 5 * MIB + 4]
            )
            await rsm.delete_log_segment_data(md)

    run(body)
    assert moto.keys(prefix) == []
    assert [k for k in moto.multipart_uploads() if k.startswith(prefix)] == []


def test_failed_copy_removes_partial_objects(moto, seg):
    prefix = f"f-{uuid.uuid4().hex[:8]}/"
    md = seg.metadata()

    async def body():
        async with proxied_rsm(moto, prefix, **{"s3.retry.max.attempts": 2}) as (proxy, rsm):
            proxy.add(*[Fault("status", 503, method="PUT", path_contains=".timeindex") for _ in range(2)])
            with pytest.raises(RemoteStorageError):
                await rsm.copy_log_segment_data(md, seg.segment_data())
            assert any(p.endswith(".log") and m == "PUT" for m, p in proxy.log.requests)

    run(body)
    assert moto.keys(prefix) == []


def test_access_denied_is_not_retried(moto, seg):
    prefix = f"f-{uuid.uuid4().hex[:8]}/"
    md = seg.metadata()

    async def body():
        async with FaultProxy("127.0.0.1", moto.port) as proxy:
            async with make_rsm(moto, proxy, prefix) as rsm:
                await rsm.copy_log_segment_data(md, seg.segment_data())
            async with make_rsm(moto, proxy, prefix) as rsm:
                proxy.add(Fault("status", 403, method="GET"))
                n = len(proxy.log.requests)
                with pytest.raises(RemoteStorageError) as ei:
                    await rsm.fetch_log_segment(md, 0, 10)
                assert ei.value.retriable is False and len(proxy.log.requests) == n + 1

    run(body)


@pytest.fixture(scope="module")
def seaweed(tmp_path_factory):
    with SeaweedServer(tmp_path_factory.mktemp("seaweed-faults")) as server:
        yield server


@pytest.mark.parametrize("checksum", [True, False])
def test_a_body_corrupted_in_transit_is_refused_and_sent_again(seaweed, seg, checksum):
    """Uploads are UNSIGNED-PAYLOAD (no SHA-256 of every byte on the event loop) and carry an x-amz-checksum-crc32c
    instead: without it a flipped byte is stored as sent."""
    prefix = f"c-{uuid.uuid4().hex[:8]}/"
    md = seg.metadata()

    async def body():
        async with proxied_rsm(
            seaweed, prefix, **{"s3.checksum.check.enabled": str(checksum).lower(), "fetch.chunk.cache.size": 0}
        ) as (proxy, rsm):
            proxy.add(Fault("corrupt_body", method="PUT"), Fault("corrupt_body", method="PUT"))
            await rsm.copy_log_segment_data(md, seg.segment_data())
            assert proxy.log.faults_applied == ["corrupt_body"] * 2
            if checksum:
                assert rsm.stats.retries == 2  # BadDigest twice, each sent again
                assert await rsm.fetch_log_segment(md, 0) == seg.log_bytes()
                assert await rsm.fetch_index(md, IndexType.OFFSET) == seg.offset_index.read_bytes()
                assert await rsm.fetch_index(md, IndexType.TIMESTAMP) == seg.time_index.read_bytes()
            else:
                assert rsm.stats.retries == 0  # stored as corrupted, nothing noticed

    run(body)


def test_warm_up_readies_the_client_with_one_head_and_never_fails(moto, seg):
    """The broker warms its S3 client up at start (RemoteLogManager.start): one HeadBucket builds the HTTP session
    and a pooled connection before the first remote read; an unanswered or failing warm-up is only logged."""
    prefix = f"f-{uuid.uuid4().hex[:8]}/"
    md = seg.metadata()

    async def body():
        async with proxied_rsm(moto, prefix) as (proxy, rsm):
            await rsm.warm_up()
            assert proxy.log.requests == [("HEAD", f"/{moto.bucket}")]
        async with proxied_rsm(moto, prefix, **{"s3.api.call.attempt.timeout.ms": 300}) as (proxy, rsm):
            proxy.add(Fault("hang", method="HEAD"))
            t0 = time.monotonic()
            await rsm.warm_up()  # no exception, bounded by one attempt timeout
            assert time.monotonic() - t0 < 5.0
            await rsm.copy_log_segment_data(md, seg.segment_data())
            assert await rsm.fetch_log_segment(md, 0, 99) == seg.log_bytes()[:100]
            assert "hang" in proxy.log.faults_applied

    run(body)
