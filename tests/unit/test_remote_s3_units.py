"""strata.remote.s3 and its modules without a server: chunk maths, the manifest, zstd chunks (s3_manifest),
configuration (s3_config), and the retry engine of s3_client (error classification, backoff, per-attempt timeout,
overall deadline) against a fake client."""

from __future__ import annotations

import asyncio
import time

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from strata.protocol.records import ZSTD, build_batch
from strata.remote.rsm import RemoteResourceNotFoundError, RemoteStorageError, RemoteStorageTimeoutError
from strata.remote.s3 import S3RemoteStorageManager
from strata.remote.s3_client import S3Client
from strata.remote.s3_config import S3Config
from strata.remote.s3_manifest import (
    SegmentManifest,
    compress_chunk,
    decompress_chunk,
    first_batch_is_compressed,
)


def test_uncompressed_chunk_maths():
    m = SegmentManifest(chunk_size=100, original_size=250)
    assert m.chunk_count == 3 and m.stored_size == 250
    assert [m.original_chunk_range(i) for i in range(3)] == [(0, 100), (100, 200), (200, 250)]
    assert m.stored_chunk_range(2) == (200, 250)
    assert m.chunks_for(0, 1) == range(1)
    assert m.chunks_for(99, 101) == range(2)
    assert m.chunks_for(100, 200) == range(1, 2)
    assert m.chunks_for(0, 250) == range(3)
    assert m.chunks_for(5, 5) == range(0)
    with pytest.raises(IndexError):
        m.original_chunk_range(3)
    assert SegmentManifest(chunk_size=100, original_size=0).chunk_count == 0
    assert SegmentManifest(chunk_size=100, original_size=200).chunk_count == 2


def test_compressed_manifest_offsets_and_json_roundtrip():
    m = SegmentManifest(100, 250, "zstd", (30, 40, 5))
    assert m.stored_size == 75
    assert [m.stored_chunk_range(i) for i in range(3)] == [(0, 30), (30, 70), (70, 75)]
    raw = m.to_json()
    assert raw == (
        b'{"version":1,"chunk_size":100,"original_size":250,"compression":"zstd","stored_chunk_sizes":[30,40,5]}'
    )
    assert SegmentManifest.from_json(raw) == m
    plain = SegmentManifest(100, 250)
    assert SegmentManifest.from_json(plain.to_json()) == plain


@pytest.mark.parametrize(
    "kwargs",
    [
        {"chunk_size": 100, "original_size": 250, "compression": "zstd", "stored_chunk_sizes": (30, 40)},  # too few
        {"chunk_size": 100, "original_size": 250, "compression": "zstd", "stored_chunk_sizes": (30, 0, 1)},
        {"chunk_size": 100, "original_size": 250, "compression": "lz4", "stored_chunk_sizes": (1, 1, 1)},
        {"chunk_size": 100, "original_size": 250, "stored_chunk_sizes": (1, 1, 1)},
        {"chunk_size": 0, "original_size": 250},
        {"chunk_size": 100, "original_size": 250, "version": 2},
    ],
)
def test_manifest_rejects_inconsistent_values(kwargs):
    with pytest.raises(ValueError):
        SegmentManifest(**kwargs)


def test_corrupt_manifest_json_is_a_non_retriable_storage_error():
    no_chunks = b'{"chunk_size":10,"original_size":5,"compression":"zstd","stored_chunk_sizes":[]}'
    for raw in (b"{", b'{"chunk_size":1}', no_chunks):
        with pytest.raises(RemoteStorageError) as ei:
            SegmentManifest.from_json(raw)
        assert ei.value.retriable is False


def test_zstd_chunks_are_independent_frames():
    a, b = b"abc" * 1000, b"xyz" * 700
    ca, cb = compress_chunk(a), compress_chunk(b)
    assert len(ca) < len(a) // 10
    assert decompress_chunk(ca, len(a)) == a and decompress_chunk(cb, len(b)) == b
    with pytest.raises(RemoteStorageError):
        decompress_chunk(ca, len(a) - 1)
    with pytest.raises(RemoteStorageError):
        decompress_chunk(b"not zstd at all", 10)


def test_first_batch_compression_heuristic(tmp_path):
    plain = tmp_path / "plain.log"
    plain.write_bytes(build_batch([b"v" * 500] * 5))
    packed = tmp_path / "packed.log"
    packed.write_bytes(build_batch([b"v" * 500] * 5, compression=ZSTD))
    assert not first_batch_is_compressed(plain)
    assert first_batch_is_compressed(packed)
    (tmp_path / "empty.log").write_bytes(b"")
    assert not first_batch_is_compressed(tmp_path / "empty.log")


def test_config_parsing_and_validation():
    c = S3Config.from_mapping(
        {
            "s3.bucket.name": "b",
            "s3.path.style.access.enabled": "true",
            "s3.api.call.timeout.ms": "1500",
            "compression.enabled": "TRUE",
            "custom.metadata.fields.include": "remote_size, object_key",
            "key.prefix": "p/",
            "unrelated.key": "x",
        }
    )
    assert (c.bucket, c.path_style, c.api_call_timeout_s, c.compression, c.key_prefix) == ("b", True, 1.5, True, "p/")
    assert c.custom_metadata_fields == ("REMOTE_SIZE", "OBJECT_KEY")
    assert c.chunk_size == 4 * 1024 * 1024 and c.access_key_id is None
    for bad in (
        {},
        {"s3.bucket.name": "b", "aws.access.key.id": "k"},
        {"s3.bucket.name": "b", "s3.multipart.upload.part.size": str(1024 * 1024)},
        {"s3.bucket.name": "b", "chunk.size": "0"},
        {"s3.bucket.name": "b", "compression.enabled": "maybe"},
        {"s3.bucket.name": "b", "custom.metadata.fields.include": "NOPE"},
    ):
        with pytest.raises(ValueError):
            S3Config.from_mapping(bad)


def test_object_keys_follow_kafka_layout():
    from tests.unit.test_remote_rsm_api import md

    rsm = S3RemoteStorageManager(S3Config(bucket="b", key_prefix="tiered/"))
    assert (
        rsm.object_key(md(), ".log")
        == "tiered/orders-7-wP_uAAAAQACAAAAAAAAAAQ/00000000000000000100-AAAAAAAAAAAAAAAAAAAAAQ.log"
    )


# -- retry engine --------------------------------------------------------------------------------------------------
def client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject"
    )


def make_client(**kw) -> S3Client:
    cfg = S3Config(bucket="b", backoff_s=0.001, backoff_max_s=0.005, **kw)
    return S3Client(cfg, S3RemoteStorageManager(cfg)._run, client=object())  # a fake: ops below ignore it


def scripted(*outcomes):
    """An op that raises/returns the outcomes in order; `calls` counts attempts."""
    state = {"calls": 0}

    async def op(_client):
        i = state["calls"]
        state["calls"] += 1
        o = outcomes[min(i, len(outcomes) - 1)]
        if o == "hang":
            await asyncio.Event().wait()
        if isinstance(o, BaseException):
            raise o
        return o

    return op, state


def test_retriable_errors_are_retried_until_success():
    async def body():
        client = make_client(max_attempts=5)
        op, st = scripted(
            client_error("ServiceUnavailable", 503),
            client_error("InternalError", 500),
            EndpointConnectionError(endpoint_url="http://x"),
            client_error("SlowDown", 503),
            "ok",
        )
        assert await client.call("GET k", op) == "ok"
        assert st["calls"] == 5 and client.stats.retries == 4 and client.stats.errors == 0

    asyncio.run(body())


def test_attempts_are_bounded():
    async def body():
        client = make_client(max_attempts=3)
        op, st = scripted(client_error("InternalError", 500))
        with pytest.raises(RemoteStorageError) as ei:
            await client.call("PUT k", op)
        assert st["calls"] == 3 and ei.value.retriable is True and client.stats.errors == 1

    asyncio.run(body())


@pytest.mark.parametrize(
    "code,status,exc,retriable",
    [
        ("NoSuchKey", 404, RemoteResourceNotFoundError, False),
        ("AccessDenied", 403, RemoteStorageError, False),
        ("NoSuchBucket", 404, RemoteStorageError, False),
        ("InvalidRange", 416, RemoteStorageError, False),
    ],
)
def test_non_retriable_errors_fail_at_once(code, status, exc, retriable):
    async def body():
        client = make_client(max_attempts=5)
        op, st = scripted(client_error(code, status))
        with pytest.raises(exc) as ei:
            await client.call("GET k", op)
        assert st["calls"] == 1 and ei.value.retriable is retriable
        if code == "NoSuchBucket":
            assert not isinstance(ei.value, RemoteResourceNotFoundError) and "does not exist" in str(ei.value)

    asyncio.run(body())


def test_hanging_attempts_time_out_and_the_call_deadline_is_bounded():
    async def body():
        client = make_client(max_attempts=100, attempt_timeout_s=0.05, api_call_timeout_s=0.3)
        op, st = scripted("hang")
        t0 = time.monotonic()
        with pytest.raises(RemoteStorageTimeoutError) as ei:
            await client.call("GET k", op)
        elapsed = time.monotonic() - t0
        assert 0.3 <= elapsed < 1.5 and ei.value.retriable is True
        assert 3 <= st["calls"] < 100 and client.stats.timeouts >= 3

    asyncio.run(body())


def test_slow_attempt_then_success():
    async def body():
        client = make_client(max_attempts=3, attempt_timeout_s=0.05, api_call_timeout_s=5)
        op, st = scripted("hang", "ok")
        assert await client.call("GET k", op) == "ok" and st["calls"] == 2 and client.stats.timeouts == 1

    asyncio.run(body())
