"""S3RemoteStorageManager: KIP-405 remote storage on S3 (or any S3-compatible server) through aiobotocore.

Object layout (Kafka's LocalTieredStorage names under `key.prefix`, used verbatim -- end it with "/" if wanted):

    <key.prefix><topic>-<partition>-<topicIdBase64url>/<startOffset 20 digits>-<segmentIdBase64url><suffix>

with suffixes `.log .index .timeindex [.txnindex] .snapshot .leader_epoch_checkpoint` and `.rsm-manifest`.

Chunking: the `.log` is cut into fixed-size original chunks of `chunk.size` bytes (4 MiB by default; the last one may
be shorter). Without compression the object is the original file byte for byte, so original chunk i is the stored
range [i*C, (i+1)*C). With `compression.enabled` each chunk is compressed on its own with zstd and the compressed
chunks are concatenated; the JSON manifest (`SegmentManifest`) lists each chunk's stored size, from which a reader
derives the stored range of any chunk. Either way a read of [start, end] issues ranged GETs of just the chunks that
cover it (through the chunk cache when one is configured, with prefetch of the following chunks). The manifest is
written last, after the segment and its indexes, and is cached (LRU by entry count). An untransformed segment's
manifest is also returned as custom metadata (KIP-917: `{"c": [chunk size, size]}`, 23 bytes) and so stored with the
segment's metadata in `__remote_log_metadata`: a reader with that metadata (any broker, a Spark executor) needs no
GET of the manifest, which was one of every two requests of a sequential cold read. It is left out where it would
take the custom metadata past Kafka's default cap of 128 bytes (`custom.metadata.fields.include` with OBJECT_KEY).

Uploads: a `.log` larger than `s3.multipart.upload.part.size` goes up as a multipart upload (parts uploaded
concurrently, `s3.multipart.upload.concurrency`); any failure aborts the upload and removes the segment's objects
already written. Every S3 call has a per-attempt timeout (`s3.api.call.attempt.timeout.ms`) and an overall deadline
including retries (`s3.api.call.timeout.ms`), so nothing hangs forever; retriable failures (connection errors,
timeouts, HTTP 5xx, throttling) are retried up to `s3.retry.max.attempts` times with exponential backoff and full
jitter (`s3.retry.backoff.ms` doubling up to `s3.retry.backoff.max.ms`). botocore's own retries are disabled.

Configuration keys (the `rsm.config.` prefix removed), defaults in `S3Config`:
`s3.bucket.name` (required), `s3.region`, `s3.endpoint.url`, `s3.path.style.access.enabled`, `key.prefix`,
`aws.access.key.id` + `aws.secret.access.key` (+ `aws.session.token`) -- else botocore's default provider chain --,
`chunk.size`, `compression.enabled`, `compression.zstd.level`, `compression.heuristic.enabled` (skip compression
when the first batch is already compressed), `s3.multipart.upload.part.size`, `s3.multipart.upload.concurrency`,
`s3.api.call.timeout.ms`, `s3.api.call.attempt.timeout.ms`, `s3.retry.max.attempts`, `s3.retry.backoff.ms`,
`s3.retry.backoff.max.ms`, `s3.max.connections`, `fetch.chunk.cache.size` (memory bytes), `fetch.chunk.cache.path` +
`fetch.chunk.cache.disk.size` (disk tier), `fetch.chunk.cache.prefetch.max.size` (bytes read ahead),
`fetch.manifest.cache.size` (entries), `custom.metadata.fields.include` (REMOTE_SIZE, OBJECT_PREFIX, OBJECT_KEY).
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import email.utils
import functools
import json
import os
import random
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import aiohttp
import botocore.utils
import crc32c
import structlog
import zstandard
from aiobotocore.config import AioConfig
from aiobotocore.response import AioStreamingBody
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from strata.config import parse_bool
from strata.protocol.records import BufferChain

from .chunk_cache import ChunkCache, ChunkKey
from .executors import RemoteExecutors
from .metadata import LogSegmentData, RemoteLogSegmentMetadata, TopicIdPartition, encode_custom_metadata
from .pieces import Pieces
from .rsm import (
    LOG_SUFFIX,
    SEGMENT_FILE_SUFFIXES,
    IndexType,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    RemoteStorageTimeoutError,
    partition_dir_name,
    resolve_range,
    segment_file_prefix,
)

log = structlog.get_logger("strata.remote")

T = TypeVar("T")
MANIFEST_SUFFIX = ".rsm-manifest"
MANIFEST_HINT = "c"             # custom metadata key: [chunk size, size] of an untransformed segment
CUSTOM_METADATA_DEFAULT_MAX_BYTES = 128     # Kafka's remote.log.metadata.custom.metadata.max.bytes default
MIB = 1 << 20
RUN_MAX_BYTES = 16 * MIB      # adjacent chunks per ranged GET at most: one attempt timeout must cover one GET
S3_MIN_PART_SIZE = 5 * MIB
COMPRESSION_ZSTD = "zstd"


# ---------------------------------------------------------------------------------------------------------------------
# chunk maths and the manifest
# ---------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SegmentManifest:
    """How a segment's `.log` is stored: original size, chunk size, and -- when transformed -- each chunk's stored
    size. JSON on the wire: {"version":1,"chunk_size":C,"original_size":N,"compression":null|"zstd",
    "stored_chunk_sizes":null|[...]}."""

    chunk_size: int
    original_size: int
    compression: str | None = None
    stored_chunk_sizes: tuple[int, ...] | None = None
    version: int = 1
    _stored_offsets: tuple[int, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.version != 1:
            raise ValueError(f"unsupported manifest version {self.version}")
        if self.chunk_size <= 0 or self.original_size < 0:
            raise ValueError(f"invalid manifest sizes: chunk {self.chunk_size}, original {self.original_size}")
        if self.compression not in (None, COMPRESSION_ZSTD):
            raise ValueError(f"unsupported compression {self.compression!r}")
        if self.compression is None:
            if self.stored_chunk_sizes is not None:
                raise ValueError("an untransformed segment has no stored chunk sizes")
            return
        sizes = tuple(int(s) for s in (self.stored_chunk_sizes or ()))
        if len(sizes) != self.chunk_count or any(s <= 0 for s in sizes):
            raise ValueError(f"manifest lists {len(sizes)} stored chunks for {self.chunk_count} chunks")
        offsets = [0]
        for s in sizes:
            offsets.append(offsets[-1] + s)
        object.__setattr__(self, "stored_chunk_sizes", sizes)
        object.__setattr__(self, "_stored_offsets", tuple(offsets))

    @property
    def chunk_count(self) -> int:
        return -(-self.original_size // self.chunk_size)

    @property
    def stored_size(self) -> int:
        return self._stored_offsets[-1] if self.compression else self.original_size

    def original_chunk_range(self, i: int) -> tuple[int, int]:
        """[start, stop) of chunk i in the original `.log`."""
        if not 0 <= i < self.chunk_count:
            raise IndexError(f"chunk {i} of {self.chunk_count}")
        start = i * self.chunk_size
        return start, min(start + self.chunk_size, self.original_size)

    def stored_chunk_range(self, i: int) -> tuple[int, int]:
        """[start, stop) of chunk i in the stored object."""
        if not self.compression:
            return self.original_chunk_range(i)
        if not 0 <= i < self.chunk_count:
            raise IndexError(f"chunk {i} of {self.chunk_count}")
        return self._stored_offsets[i], self._stored_offsets[i + 1]

    def chunks_for(self, start: int, stop: int) -> range:
        """Indices of the chunks covering original bytes [start, stop) (empty for an empty range)."""
        if stop <= start:
            return range(0)
        return range(start // self.chunk_size, (stop - 1) // self.chunk_size + 1)

    def to_json(self) -> bytes:
        return json.dumps({"version": self.version, "chunk_size": self.chunk_size,
                           "original_size": self.original_size, "compression": self.compression,
                           "stored_chunk_sizes": list(self.stored_chunk_sizes)
                           if self.stored_chunk_sizes is not None else None},
                          separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> SegmentManifest:
        try:
            d = json.loads(raw)
            sizes = d.get("stored_chunk_sizes")
            return cls(chunk_size=int(d["chunk_size"]), original_size=int(d["original_size"]),
                       compression=d.get("compression"),
                       stored_chunk_sizes=tuple(sizes) if sizes is not None else None,
                       version=int(d.get("version", 1)))
        except (ValueError, KeyError, TypeError) as e:
            raise RemoteStorageError(f"corrupt segment manifest: {e}", retriable=False) from e


def compress_chunk(data: bytes | memoryview, level: int = 3) -> bytes:
    """One chunk as an independent zstd frame (with the content size, so decompression is bounded)."""
    return zstandard.ZstdCompressor(level=level, write_content_size=True).compress(data)


def decompress_chunk(data: bytes, expected_size: int) -> bytes:
    try:
        out = zstandard.ZstdDecompressor().decompress(data, max_output_size=expected_size)
    except zstandard.ZstdError as e:
        raise RemoteStorageError(f"corrupt compressed chunk: {e}", retriable=False) from e
    if len(out) != expected_size:
        raise RemoteStorageError(f"chunk decompressed to {len(out)} bytes, expected {expected_size}",
                                 retriable=False)
    return out


def first_batch_is_compressed(path: Path) -> bool:
    """Whether the first record batch of a `.log` uses a compression codec (attributes bits 0-2)."""
    with open(path, "rb") as f:
        head = f.read(23)
    return len(head) >= 23 and head[16] == 2 and (int.from_bytes(head[21:23], "big") & 0x7) != 0


# ---------------------------------------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------------------------------------
def _bool(v: Any) -> bool:
    return parse_bool(v, empty=False)


@dataclass
class S3Config:
    bucket: str
    region: str = "us-east-1"
    endpoint_url: str | None = None
    path_style: bool = False
    key_prefix: str = ""
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    chunk_size: int = 4 * MIB
    compression: bool = False
    compression_level: int = 3
    compression_heuristic: bool = False
    part_size: int = 16 * MIB
    upload_concurrency: int = 4
    api_call_timeout_s: float = 120.0
    attempt_timeout_s: float = 30.0
    max_attempts: int = 5
    backoff_s: float = 0.1
    backoff_max_s: float = 10.0
    max_connections: int = 32
    cache_memory_bytes: int = 64 * MIB
    cache_disk_path: Path | None = None
    cache_disk_bytes: int = 1 << 30
    prefetch_bytes: int = 8 * MIB
    manifest_cache_entries: int = 1000
    custom_metadata_fields: tuple[str, ...] = ()
    checksum: bool = True

    _KEYS: ClassVar[dict[str, tuple[str, Callable[[Any], Any]]]] = {
        "s3.bucket.name": ("bucket", str), "s3.region": ("region", str), "s3.endpoint.url": ("endpoint_url", str),
        "s3.path.style.access.enabled": ("path_style", _bool), "key.prefix": ("key_prefix", str),
        "aws.access.key.id": ("access_key_id", str), "aws.secret.access.key": ("secret_access_key", str),
        "aws.session.token": ("session_token", str), "chunk.size": ("chunk_size", int),
        "compression.enabled": ("compression", _bool), "compression.zstd.level": ("compression_level", int),
        "compression.heuristic.enabled": ("compression_heuristic", _bool),
        "s3.multipart.upload.part.size": ("part_size", int),
        "s3.multipart.upload.concurrency": ("upload_concurrency", int),
        "s3.api.call.timeout.ms": ("api_call_timeout_s", lambda v: int(v) / 1000),
        "s3.api.call.attempt.timeout.ms": ("attempt_timeout_s", lambda v: int(v) / 1000),
        "s3.retry.max.attempts": ("max_attempts", int), "s3.retry.backoff.ms": ("backoff_s", lambda v: int(v) / 1000),
        "s3.retry.backoff.max.ms": ("backoff_max_s", lambda v: int(v) / 1000),
        "s3.max.connections": ("max_connections", int), "fetch.chunk.cache.size": ("cache_memory_bytes", int),
        "fetch.chunk.cache.path": ("cache_disk_path", Path), "fetch.chunk.cache.disk.size": ("cache_disk_bytes", int),
        "fetch.chunk.cache.prefetch.max.size": ("prefetch_bytes", int),
        "fetch.manifest.cache.size": ("manifest_cache_entries", int),
        "s3.checksum.check.enabled": ("checksum", _bool),
        "custom.metadata.fields.include": ("custom_metadata_fields",
                                           lambda v: tuple(x.strip().upper() for x in str(v).split(",") if x.strip())),
    }

    @classmethod
    def from_mapping(cls, configs: Mapping[str, Any]) -> S3Config:
        kwargs: dict[str, Any] = {}
        for key, raw in configs.items():
            spec = cls._KEYS.get(key)
            if spec is None or raw is None or (isinstance(raw, str) and raw == "" and key != "key.prefix"):
                continue
            name, conv = spec
            try:
                kwargs[name] = conv(raw)
            except (ValueError, TypeError) as e:
                raise ValueError(f"invalid value {raw!r} for rsm.config.{key}: {e}") from None
        if not kwargs.get("bucket"):
            raise ValueError("rsm.config.s3.bucket.name is required")
        cfg = cls(**kwargs)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("set both rsm.config.aws.access.key.id and aws.secret.access.key, or neither")
        if self.chunk_size <= 0:
            raise ValueError("rsm.config.chunk.size must be positive")
        if self.part_size < S3_MIN_PART_SIZE:
            raise ValueError(f"rsm.config.s3.multipart.upload.part.size must be at least {S3_MIN_PART_SIZE}")
        if self.attempt_timeout_s <= 0 or self.api_call_timeout_s <= 0:
            raise ValueError("S3 call timeouts must be positive")
        if self.max_attempts < 1 or self.upload_concurrency < 1 or self.max_connections < 1:
            raise ValueError("retry attempts, upload concurrency and connections must be at least 1")
        bad = set(self.custom_metadata_fields) - {"REMOTE_SIZE", "OBJECT_PREFIX", "OBJECT_KEY"}
        if bad:
            raise ValueError(f"unknown custom metadata fields {sorted(bad)}")


@dataclass
class S3Stats:
    requests: int = 0
    retries: int = 0
    errors: int = 0
    timeouts: int = 0
    bytes_uploaded: int = 0
    bytes_downloaded: int = 0
    multipart_aborts: int = 0


def _warm_botocore_loader(session: Any) -> None:
    loader = session.get_component("data_loader")
    for load, args in ((loader.load_service_model, ("s3", "service-2")),
                       (loader.load_service_model, ("s3", "endpoint-rule-set-1")),
                       (loader.load_data, ("endpoints",)), (loader.load_data, ("partitions",)),
                       (loader.load_data, ("sdk-default-configuration",)), (loader.load_data, ("_retry",))):
        with contextlib.suppress(Exception):
            load(*args)


def _manifest_from_hint(custom: Mapping[str, Any] | None, segment_size: int) -> SegmentManifest | None:
    """The manifest of an untransformed segment from its custom metadata (written by `copy_log_segment_data`);
    None when the metadata has no usable hint (a compressed segment, one copied before hints existed, or a hint
    whose size is not the segment's: the manifest object decides then, instead of reads cut short or past the end)."""
    hint = custom.get(MANIFEST_HINT) if custom else None
    if not (isinstance(hint, list) and len(hint) == 2 and all(type(v) is int for v in hint)):
        return None
    if hint[1] != segment_size:
        return None
    try:
        return SegmentManifest(hint[0], hint[1])
    except ValueError:
        return None


def _http_timestamp(value: Any) -> datetime.datetime:
    """botocore's timestamp parser for responses, fast for the forms S3 sends: dateutil's general parser (its
    default) took about a tenth of a cold remote read's CPU, for Last-Modified headers nobody here reads."""
    if isinstance(value, str):
        with contextlib.suppress(TypeError, ValueError):
            return email.utils.parsedate_to_datetime(value)         # RFC 7231 (HTTP headers)
        with contextlib.suppress(ValueError):
            return datetime.datetime.fromisoformat(value)            # ISO 8601 (XML bodies)
    return botocore.utils.parse_timestamp(value)


class _ShortRead(Exception):
    """The body ended before the announced length (a dropped connection): retriable."""


_RETRIABLE_CODES = {"InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout", "Throttling", "BadDigest",
                    "ThrottlingException", "RequestTimeTooSkewed", "TooManyRequests", "RequestLimitExceeded",
                    "503", "500", "502", "504"}
_NOT_FOUND_CODES = {"NoSuchKey", "404", "NotFound", "NoSuchUpload"}


# ---------------------------------------------------------------------------------------------------------------------
# the RSM
# ---------------------------------------------------------------------------------------------------------------------
def _plain_content(body: Any) -> aiohttp.StreamReader | None:
    """The aiohttp stream under a plain aiobotocore body, to be read block by block with `readchunk` (aiohttp's
    `read()` joins the received blocks twice, in `readany` and again in `read`); None for any other body (a
    checksum-validating wrapper, httpx), which reads as usual."""
    content = getattr(getattr(body, "raw_stream", None), "content", None)
    if type(body) is not AioStreamingBody or not isinstance(content, aiohttp.StreamReader):
        return None
    return content


async def _read_body(body: Any, joined: bool = True) -> bytes | BufferChain:
    """The whole body of a GET: one buffer, or (not `joined`) the blocks as received."""
    content = _plain_content(body)
    if content is None:
        return await body.read()
    blocks = []
    while True:
        block, end_of_http_chunk = await content.readchunk()
        if block:
            blocks.append(block)
        elif not end_of_http_chunk:      # (b"", False): the end of the body
            break
    if len(blocks) == 1:
        return blocks[0]
    return b"".join(blocks) if joined else BufferChain(blocks)


async def _read_body_into(body: Any, into: memoryview) -> memoryview:
    """The body of a GET written into `into` block by block as it arrives (no joined buffer); returns the part of
    `into` it filled. A body longer than `into` raises _ShortRead (a server that ignored the Range header): retried."""
    content = _plain_content(body)
    if content is None:
        data = await body.read()
        if len(data) > len(into):
            raise _ShortRead(f"got {len(data)} bytes for a range of {len(into)}")
        into[:len(data)] = data
        return into[:len(data)]
    at = 0
    while True:
        block, end_of_http_chunk = await content.readchunk()
        if block:
            end = at + len(block)
            if end > len(into):
                raise _ShortRead(f"got more than the {len(into)} bytes of the range")
            into[at:end] = block
            at = end
        elif not end_of_http_chunk:      # (b"", False): the end of the body
            return into[:at]


class S3RemoteStorageManager(RemoteStorageManager):
    def __init__(self, config: S3Config, *, executor: Executor | None = None, broker_id: int = -1,
                 chunk_cache: ChunkCache | None = None) -> None:
        self.config = config
        self.broker_id = broker_id
        self.stats = S3Stats()
        self._executor = executor
        if chunk_cache is None and (config.cache_memory_bytes > 0 or config.cache_disk_path is not None):
            chunk_cache = ChunkCache(config.cache_memory_bytes, disk_dir=config.cache_disk_path,
                                     disk_max_bytes=config.cache_disk_bytes if config.cache_disk_path else 0,
                                     prefetch_chunks=-(-config.prefetch_bytes // config.chunk_size),
                                     max_run_chunks=max(1, RUN_MAX_BYTES // config.chunk_size), executor=executor)
        self.chunk_cache = chunk_cache
        self._manifests: OrderedDict[str, SegmentManifest] = OrderedDict()
        self._manifest_loads: dict[str, asyncio.Future[SegmentManifest]] = {}
        self._client: Any = None
        self._client_lock: asyncio.Lock | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._get_slots: asyncio.Semaphore | None = None
        self._closed = False
        self._read_aheads: set[asyncio.Task[None]] = set()

    @classmethod
    def from_config(cls, configs: Mapping[str, Any], *, broker_id: int = -1, default_dir: Path | None = None,
                    executor: Executor | None = None) -> S3RemoteStorageManager:
        return cls(S3Config.from_mapping(configs), executor=executor, broker_id=broker_id)

    # -- naming ----------------------------------------------------------------------------------------------------
    def partition_prefix(self, tip: TopicIdPartition) -> str:
        return f"{self.config.key_prefix}{partition_dir_name(tip)}/"

    def object_key(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        return self.partition_prefix(metadata.topic_id_partition) + segment_file_prefix(metadata) + suffix

    # -- client and the retry engine ---------------------------------------------------------------------------------
    async def _get_client(self) -> Any:
        if self._client is not None:
            return self._client
        if self._closed:
            raise RemoteStorageError("the S3 remote storage manager is closed", retriable=False)
        if self._client_lock is None:
            self._client_lock = asyncio.Lock()
        async with self._client_lock:
            if self._client is None:
                cfg = self.config
                aio_cfg = AioConfig(
                    region_name=cfg.region, signature_version="s3v4",
                    # UNSIGNED-PAYLOAD as over https, on http too: SigV4's SHA-256 of every uploaded byte ran on
                    # the event loop (~0.6 s of CPU per GiB); an x-amz-checksum-crc32c header (_checksum) guards
                    # the bytes instead, checked by the server, for about 1/14 of the cost
                    s3={"addressing_style": "path" if cfg.path_style else "auto", "payload_signing_enabled": False},
                    retries={"total_max_attempts": 1, "mode": "standard"},
                    connect_timeout=cfg.attempt_timeout_s, read_timeout=cfg.attempt_timeout_s,
                    max_pool_connections=cfg.max_connections,
                    # S3 clones (older MinIO, SeaweedFS, moto) differ on the new default checksums: only when needed
                    request_checksum_calculation="when_required", response_checksum_validation="when_required")
                kwargs: dict[str, Any] = {"config": aio_cfg, "region_name": cfg.region}
                if cfg.endpoint_url:
                    kwargs["endpoint_url"] = cfg.endpoint_url
                if cfg.access_key_id is not None:
                    kwargs.update(aws_access_key_id=cfg.access_key_id, aws_secret_access_key=cfg.secret_access_key,
                                  aws_session_token=cfg.session_token)
                session = get_session()
                session.get_component("response_parser_factory").set_parser_defaults(
                    timestamp_parser=_http_timestamp)
                # botocore parses its big JSON models synchronously inside create_client (~0.5 s): do that in a
                # thread first so the event loop only sees cache hits
                await self._run(_warm_botocore_loader, session)
                stack = contextlib.AsyncExitStack()
                self._client = await stack.enter_async_context(session.create_client("s3", **kwargs))
                self._stack = stack
                self._get_slots = asyncio.Semaphore(cfg.max_connections)
        return self._client

    async def warm_up(self) -> None:
        """The client (botocore's models take ~0.5 s to load) at broker start, not on the first copy or read; then
        one HeadBucket, so that the aiohttp session (its TLS context is built on the first request, even for an
        http:// endpoint), a pooled connection and botocore's per-operation caches are ready too. That request
        failing changes nothing: the first real request retries as usual."""
        client = await self._get_client()
        try:
            async with asyncio.timeout(self.config.attempt_timeout_s):
                await client.head_bucket(Bucket=self.config.bucket)
        except Exception as e:  # noqa: BLE001 - a warm-up only
            log.info("S3 warm-up request failed", bucket=self.config.bucket, error=repr(e))

    async def _call(self, what: str, op: Callable[[Any], Awaitable[T]]) -> T:
        """Run `op(client)` with a per-attempt timeout, retries with backoff + full jitter, an overall deadline."""
        cfg = self.config
        client = await self._get_client()
        deadline = time.monotonic() + cfg.api_call_timeout_s
        attempt = 0
        while True:
            attempt += 1
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stats.timeouts += 1
                raise RemoteStorageTimeoutError(f"{what}: no success within {cfg.api_call_timeout_s:.1f}s "
                                                f"({attempt - 1} attempts)")
            self.stats.requests += 1
            try:
                async with asyncio.timeout(min(cfg.attempt_timeout_s, remaining)):
                    return await op(client)
            except TimeoutError:
                self.stats.timeouts += 1
                err: RemoteStorageError = RemoteStorageTimeoutError(
                    f"{what}: attempt {attempt} timed out after {min(cfg.attempt_timeout_s, remaining):.1f}s")
            except ClientError as e:
                code = str(e.response.get("Error", {}).get("Code", ""))
                status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0
                if code == "NoSuchBucket":
                    self.stats.errors += 1
                    raise RemoteStorageError(f"{what}: bucket {cfg.bucket!r} does not exist", retriable=False) from e
                if code in _NOT_FOUND_CODES or status == 404:
                    raise RemoteResourceNotFoundError(f"{what}: {code or status}") from e
                retriable = code in _RETRIABLE_CODES or status >= 500 or status == 429
                err = RemoteStorageError(f"{what}: {code or status}: {e}", retriable=retriable)
                if not retriable:
                    self.stats.errors += 1
                    raise err from e
            except RemoteStorageError:
                raise
            except (BotoCoreError, aiohttp.ClientError, _ShortRead, ConnectionError, OSError, EOFError) as e:
                err = RemoteStorageError(f"{what}: {type(e).__name__}: {e}", retriable=True)
            if attempt >= cfg.max_attempts:
                self.stats.errors += 1
                raise err
            self.stats.retries += 1
            backoff = min(cfg.backoff_max_s, cfg.backoff_s * (2 ** (attempt - 1)))
            await asyncio.sleep(min(random.uniform(0, backoff), max(0.0, deadline - time.monotonic())))

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.blocking_executor(self._executor),
                                                                functools.partial(fn, *args))

    def use_executors(self, executors: RemoteExecutors) -> None:
        super().use_executors(executors)
        if self.chunk_cache is not None and self._executor is None:
            self.chunk_cache.use_executor(executors.read)     # chunk loads and disk-tier I/O serve reads

    # -- primitive operations ----------------------------------------------------------------------------------------
    def _checksum(self, body: bytes | memoryview) -> dict[str, str]:
        """The upload's CRC32C for S3 to check (BadDigest on a mismatch, retried), unless switched off for a clone
        that rejects x-amz-checksum-* headers. Kafka's batch CRCs guard the records too, but not indexes or
        manifests, and a bad upload is better refused than found at read time."""
        if not self.config.checksum:
            return {}
        return {"ChecksumCRC32C": base64.b64encode(crc32c.crc32c(body).to_bytes(4, "big")).decode()}

    async def _put(self, key: str, body: bytes) -> None:
        checksum = self._checksum(body)          # once, not per attempt

        async def op(c: Any) -> None:
            await c.put_object(Bucket=self.config.bucket, Key=key, Body=body, **checksum)
        await self._call(f"PUT {key}", op)
        self.stats.bytes_uploaded += len(body)

    async def _get(self, key: str, start: int | None = None, stop: int | None = None, *,
                   joined: bool = True, into: memoryview | None = None) -> bytes | BufferChain | memoryview:
        """The object, or its bytes [start, stop) with a ranged GET (length verified); not `joined`: possibly a
        BufferChain of the received blocks (chunks the read path serves as they are); `into`: written into that
        buffer as the blocks arrive (an attempt that fails part-way is retried from its start), and the part it
        filled returned."""
        async def op(c: Any) -> bytes | BufferChain | memoryview:
            kw: dict[str, Any] = {"Bucket": self.config.bucket, "Key": key}
            if start is not None:
                kw["Range"] = f"bytes={start}-{stop - 1}"  # type: ignore[operator]
            resp = await c.get_object(**kw)
            body = resp["Body"]
            try:
                data = await (_read_body(body, joined) if into is None else _read_body_into(body, into))
            finally:
                body.close()
            expected = resp.get("ContentLength")
            if start is not None:
                expected = stop - start  # type: ignore[operator]
            if expected is not None and len(data) != expected:
                raise _ShortRead(f"got {len(data)} of {expected} bytes")
            return data

        await self._get_client()
        async with self._get_slots:  # type: ignore[union-attr]
            data = await self._call(f"GET {key}" + (f" [{start},{stop})" if start is not None else ""), op)
        self.stats.bytes_downloaded += len(data)
        return data  # type: ignore[return-value]

    async def _delete(self, key: str) -> None:
        async def op(c: Any) -> None:
            await c.delete_object(Bucket=self.config.bucket, Key=key)
        try:
            await self._call(f"DELETE {key}", op)
        except RemoteResourceNotFoundError:
            pass

    # -- copy --------------------------------------------------------------------------------------------------------
    async def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata,
                                    segment_data: LogSegmentData) -> dict[str, Any] | None:
        data = segment_data
        for p in (data.log_segment, data.offset_index, data.time_index, data.producer_snapshot_index,
                  data.transaction_index):
            if p is not None and not await self._run(p.is_file):
                raise RemoteStorageError(f"cannot copy {metadata.remote_log_segment_id}: local file {p} is missing",
                                         retriable=False)
        if self.chunk_cache is not None:  # a retried copy under the same id may carry other bytes
            self.chunk_cache.invalidate_segment(metadata.remote_log_segment_id.id_str)
        self._manifests.pop(metadata.remote_log_segment_id.id_str, None)
        try:
            log_task = asyncio.ensure_future(self._upload_log(metadata, data.log_segment))
            aux = [self._put_file(self.object_key(metadata, IndexType.OFFSET.suffix), data.offset_index),
                   self._put_file(self.object_key(metadata, IndexType.TIMESTAMP.suffix), data.time_index),
                   self._put_file(self.object_key(metadata, IndexType.PRODUCER_SNAPSHOT.suffix),
                                  data.producer_snapshot_index),
                   self._put(self.object_key(metadata, IndexType.LEADER_EPOCH.suffix), data.leader_epoch_index)]
            if data.transaction_index is not None:
                aux.append(self._put_file(self.object_key(metadata, IndexType.TRANSACTION.suffix),
                                          data.transaction_index))
            else:  # a retry without one must not leave an earlier attempt's
                aux.append(self._delete(self.object_key(metadata, IndexType.TRANSACTION.suffix)))
            results = await asyncio.gather(log_task, *aux, return_exceptions=True)
            for r in results:
                if isinstance(r, BaseException):
                    raise r
            manifest: SegmentManifest = results[0]  # type: ignore[assignment]
            await self._put(self.object_key(metadata, MANIFEST_SUFFIX), manifest.to_json())
        except Exception:
            # no orphan objects: remove what this attempt wrote. Best effort and bounded (S3 may be what failed);
            # whatever stays is an orphan the RLM deletes through DELETE_SEGMENT_STARTED later. A cancelled copy
            # (shutdown) skips this and leaves it to the RLM too.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.config.attempt_timeout_s):
                    await self._delete_objects(metadata)
            raise
        self._remember_manifest(metadata, manifest)
        return self._custom_metadata(metadata, manifest)

    def _custom_metadata(self, metadata: RemoteLogSegmentMetadata, manifest: SegmentManifest) -> dict[str, Any] | None:
        fields = self.config.custom_metadata_fields
        out: dict[str, Any] = {}
        if "REMOTE_SIZE" in fields:
            out["remote_size"] = manifest.stored_size
        if "OBJECT_PREFIX" in fields:
            out["object_prefix"] = self.config.key_prefix
        if "OBJECT_KEY" in fields:
            out["object_key"] = self.partition_prefix(metadata.topic_id_partition) + segment_file_prefix(metadata)
        if not manifest.compression:       # the hint only where it keeps the whole within Kafka's default cap
            hinted = {**out, MANIFEST_HINT: [manifest.chunk_size, manifest.original_size]}
            if len(encode_custom_metadata(hinted) or b"") <= CUSTOM_METADATA_DEFAULT_MAX_BYTES:
                out = hinted
        return out or None

    async def _put_file(self, key: str, path: Path) -> None:
        await self._put(key, await self._run(path.read_bytes))

    async def _upload_log(self, metadata: RemoteLogSegmentMetadata, path: Path) -> SegmentManifest:
        cfg = self.config
        size = (await self._run(os.stat, path)).st_size
        compress = cfg.compression and size > 0
        if compress and cfg.compression_heuristic and await self._run(first_batch_is_compressed, path):
            compress = False
        stored_sizes: list[int] = []
        pieces = self._compressed_pieces(path, size, stored_sizes) if compress else self._raw_pieces(path, size)
        key = self.object_key(metadata, LOG_SUFFIX)
        await self._upload_stream(key, pieces)
        if compress:
            return SegmentManifest(cfg.chunk_size, size, COMPRESSION_ZSTD, tuple(stored_sizes))
        return SegmentManifest(cfg.chunk_size, size)

    async def _raw_pieces(self, path: Path, size: int) -> AsyncIterator[bytes]:
        step = self.config.part_size
        fd = await self._run(os.open, path, os.O_RDONLY)
        try:
            for pos in range(0, size, step):
                piece = await self._run(os.pread, fd, min(step, size - pos), pos)
                if len(piece) != min(step, size - pos):
                    raise RemoteStorageError(f"{path} shrank while being copied", retriable=False)
                yield piece
        finally:
            os.close(fd)

    async def _compressed_pieces(self, path: Path, size: int, stored_sizes: list[int]) -> AsyncIterator[bytes]:
        cfg = self.config
        fd = await self._run(os.open, path, os.O_RDONLY)
        try:
            for pos in range(0, size, cfg.chunk_size):
                n = min(cfg.chunk_size, size - pos)
                comp = await self._run(self._read_and_compress, fd, pos, n, cfg.compression_level)
                stored_sizes.append(len(comp))
                yield comp
        finally:
            os.close(fd)

    @staticmethod
    def _read_and_compress(fd: int, pos: int, n: int, level: int) -> bytes:
        raw = os.pread(fd, n, pos)
        if len(raw) != n:
            raise RemoteStorageError("segment file shrank while being copied", retriable=False)
        return compress_chunk(raw, level)

    async def _upload_stream(self, key: str, pieces: AsyncIterator[bytes]) -> None:
        """Upload the concatenation of `pieces`: one PUT when it fits a part, else a multipart upload."""
        cfg = self.config
        pending: list[bytes] = []
        pending_len = 0
        upload_id: str | None = None
        part_no = 0
        parts: dict[int, str] = {}
        inflight: set[asyncio.Task[None]] = set()
        slots = asyncio.Semaphore(cfg.upload_concurrency)

        async def upload_part(n: int, body: bytes) -> None:
            checksum = self._checksum(body)      # once, not per attempt
            try:
                async def op(c: Any) -> str:
                    r = await c.upload_part(Bucket=cfg.bucket, Key=key, UploadId=upload_id, PartNumber=n, Body=body,
                                            **checksum)
                    return r["ETag"]
                parts[n] = await self._call(f"UploadPart {key} #{n}", op)
                self.stats.bytes_uploaded += len(body)
            finally:
                slots.release()

        async def start_part(body: bytes) -> None:
            nonlocal upload_id, part_no
            if upload_id is None:
                async def create(c: Any) -> str:
                    return (await c.create_multipart_upload(Bucket=cfg.bucket, Key=key))["UploadId"]
                upload_id = await self._call(f"CreateMultipartUpload {key}", create)
            for t in [t for t in inflight if t.done()]:
                inflight.discard(t)
                t.result()  # surface a failed part early
            await slots.acquire()
            part_no += 1
            inflight.add(asyncio.ensure_future(upload_part(part_no, body)))

        try:
            async for piece in pieces:
                if not pending_len and len(piece) == cfg.part_size:  # raw reads come part-sized: no copy
                    await start_part(piece)
                    continue
                pending.append(piece)
                pending_len += len(piece)
                if pending_len >= cfg.part_size:
                    joined = b"".join(pending)
                    pos = 0
                    while len(joined) - pos >= cfg.part_size:
                        await start_part(joined[pos: pos + cfg.part_size])
                        pos += cfg.part_size
                    pending = [joined[pos:]] if pos < len(joined) else []
                    pending_len = len(joined) - pos
            rest = b"".join(pending)
            if upload_id is None:
                await self._put(key, rest)
                return
            if rest:
                await start_part(rest)
            await asyncio.gather(*inflight)

            async def complete(c: Any) -> None:
                await c.complete_multipart_upload(
                    Bucket=cfg.bucket, Key=key, UploadId=upload_id,
                    MultipartUpload={"Parts": [{"ETag": parts[n], "PartNumber": n} for n in sorted(parts)]})
            await self._call(f"CompleteMultipartUpload {key}", complete)
        except BaseException:
            for t in inflight:
                t.cancel()
            await asyncio.gather(*inflight, return_exceptions=True)
            if upload_id is not None:
                self.stats.multipart_aborts += 1

                async def abort(c: Any) -> None:
                    await c.abort_multipart_upload(Bucket=cfg.bucket, Key=key, UploadId=upload_id)
                # bounded: a dead endpoint must not hold the caller (S3 lifecycle rules reap what stays)
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(self.config.attempt_timeout_s):
                        await asyncio.shield(self._call(f"AbortMultipartUpload {key}", abort))
            raise
        finally:
            with contextlib.suppress(Exception):
                await pieces.aclose()  # type: ignore[attr-defined]

    # -- fetch -------------------------------------------------------------------------------------------------------
    def _remember_manifest(self, metadata: RemoteLogSegmentMetadata, manifest: SegmentManifest) -> None:
        if self.config.manifest_cache_entries <= 0:
            return
        sid = metadata.remote_log_segment_id.id_str
        self._manifests[sid] = manifest
        self._manifests.move_to_end(sid)
        while len(self._manifests) > self.config.manifest_cache_entries:
            self._manifests.popitem(last=False)

    async def get_manifest(self, metadata: RemoteLogSegmentMetadata) -> SegmentManifest:
        sid = metadata.remote_log_segment_id.id_str
        m = self._manifests.get(sid)
        if m is not None:
            self._manifests.move_to_end(sid)
            return m
        m = _manifest_from_hint(metadata.custom_metadata, metadata.segment_size_in_bytes)
        if m is not None:
            self._remember_manifest(metadata, m)
            return m
        fut = self._manifest_loads.get(sid)
        if fut is None:
            fut = asyncio.ensure_future(self._load_manifest(metadata))
            self._manifest_loads[sid] = fut
            fut.add_done_callback(lambda f: self._manifest_loads.pop(sid, None))
        return await asyncio.shield(fut)

    async def _load_manifest(self, metadata: RemoteLogSegmentMetadata) -> SegmentManifest:
        m = SegmentManifest.from_json(await self._get(self.object_key(metadata, MANIFEST_SUFFIX)))
        self._remember_manifest(metadata, m)
        return m

    async def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                                end_position: int | None = None) -> bytes:
        pieces = await self.fetch_log_segment_pieces(metadata, start_position, end_position)
        if len(pieces) == 1:
            return pieces[0].obj if len(pieces[0]) == len(pieces[0].obj) else bytes(pieces[0])
        out = bytearray()
        for piece in pieces:
            out += piece
        return out  # type: ignore[return-value] - a bytearray: one copy fewer of up to a fetch's max.bytes

    async def fetch_log_segment_into(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                                     buffer: memoryview) -> int:
        resolve_range(start_position, None, 1 << 62)  # argument errors before any I/O
        if not len(buffer):
            return 0
        manifest = await self.get_manifest(metadata)
        if self.chunk_cache is not None or manifest.compression:     # the bytes pass through chunks anyway
            return await super().fetch_log_segment_into(metadata, start_position, buffer)
        start, stop = resolve_range(start_position, start_position + len(buffer) - 1, manifest.original_size)
        if start == stop:
            return 0
        return len(await self._get(self.object_key(metadata, LOG_SUFFIX), start, stop, into=buffer[:stop - start]))

    async def fetch_log_segment_pieces(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                                       end_position: int | None = None) -> list[memoryview]:
        resolve_range(start_position, end_position, 1 << 62)  # argument errors before any I/O
        manifest = await self.get_manifest(metadata)
        start, stop = resolve_range(start_position, end_position, manifest.original_size)
        if start == stop:
            return [memoryview(b"")]
        key = self.object_key(metadata, LOG_SUFFIX)
        if self.chunk_cache is None and not manifest.compression:
            return [memoryview(await self._get(key, start, stop))]  # no cache, no transform: exactly the range
        indices = manifest.chunks_for(start, stop)
        loader = functools.partial(self._load_chunk, key, manifest)
        if self.chunk_cache is not None:
            chunks = await self.chunk_cache.get_chunks(metadata.remote_log_segment_id.id_str, indices, loader,
                                                       chunk_count=manifest.chunk_count,
                                                       run_loader=self._run_loader(key, manifest))
        else:
            chunks = list(await asyncio.gather(*(loader(i) for i in indices)))
        pieces: list[memoryview] = []
        for i, chunk in zip(indices, chunks):
            c0 = i * manifest.chunk_size
            a, b = max(start, c0) - c0, min(stop, c0 + len(chunk)) - c0
            if isinstance(chunk, BufferChain):
                pieces += Pieces(chunk.pieces).views(a, b)
            else:
                pieces.append(memoryview(chunk)[a:b])
        return pieces

    @property
    def read_ahead_bytes(self) -> int:  # type: ignore[override]
        return self.config.prefetch_bytes if self.chunk_cache is not None else 0

    def read_ahead(self, metadata: RemoteLogSegmentMetadata, start_position: int = 0) -> None:
        """Across segment boundaries the chunk cache's prefetch (within a segment) cannot see: without this a
        sequential reader waits for the next segment's manifest and first chunks at every boundary."""
        if self.read_ahead_bytes <= 0 or self._closed:
            return
        task = asyncio.get_running_loop().create_task(self._read_ahead(metadata, start_position))
        self._read_aheads.add(task)
        task.add_done_callback(self._read_aheads.discard)

    async def _read_ahead(self, metadata: RemoteLogSegmentMetadata, start_position: int) -> None:
        cache = self.chunk_cache
        if cache is None:
            return
        try:
            manifest = await self.get_manifest(metadata)
        except Exception as e:  # noqa: BLE001 - a hint: the read itself reports the error
            log.debug("read-ahead failed", segment=metadata.remote_log_segment_id.id_str, error=repr(e))
            return
        stop = min(start_position + self.read_ahead_bytes, manifest.original_size)
        if start_position >= stop:
            return
        key = self.object_key(metadata, LOG_SUFFIX)
        loader = functools.partial(self._load_chunk, key, manifest)
        sid = metadata.remote_log_segment_id.id_str
        ahead = manifest.chunks_for(start_position, stop)
        run_loader = self._run_loader(key, manifest)
        if run_loader is not None:
            cache.load_runs(sid, ahead, run_loader, prefetch=True)
        for i in ahead:
            cache.prefetch(ChunkKey(sid, i), functools.partial(loader, i))

    def _run_loader(self, key: str, manifest: SegmentManifest) -> Callable[[range], Awaitable[list[Any]]] | None:
        """Adjacent chunks of an untransformed `.log` with one ranged GET (stored bytes = original bytes)."""
        if manifest.compression:
            return None
        return functools.partial(self._load_chunk_run, key, manifest)

    async def _load_chunk_run(self, key: str, manifest: SegmentManifest, run: range) -> list[BufferChain]:
        # at most RUN_MAX_BYTES per GET in this segment's own chunk size (it may have been copied with another
        # chunk.size than the one the cache's run length was set from)
        per_get = max(1, RUN_MAX_BYTES // manifest.chunk_size)
        out = []
        for at in range(run.start, run.stop, per_get):
            part = range(at, min(at + per_get, run.stop))
            start = manifest.original_chunk_range(part.start)[0]
            stop = manifest.original_chunk_range(part.stop - 1)[1]
            data = await self._get(key, start, stop, joined=False)
            whole = Pieces(data.pieces if isinstance(data, BufferChain) else [data])
            for i in part:
                a, b = manifest.original_chunk_range(i)
                # views on the received blocks, no copy, except where a block is shared with the next or previous
                # chunk: that part is copied, so that a cached chunk holds exactly its own bytes (the cache counts
                # them)
                out.append(BufferChain([v if len(v) == len(v.obj) else bytes(v)
                                        for v in whole.views(a - start, b - start)]))
        return out

    async def _load_chunk(self, key: str, manifest: SegmentManifest, i: int) -> bytes:
        s0, s1 = manifest.stored_chunk_range(i)
        o0, o1 = manifest.original_chunk_range(i)
        if manifest.compression:
            return await self._run(decompress_chunk, await self._get(key, s0, s1), o1 - o0)
        return await self._get(key, s0, s1, joined=False)    # the received blocks: fetch reads serve views on them

    async def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        return await self._get(self.object_key(metadata, IndexType(index_type).suffix))

    # -- delete ------------------------------------------------------------------------------------------------------
    async def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        sid = metadata.remote_log_segment_id.id_str
        self._manifests.pop(sid, None)
        if self.chunk_cache is not None:
            self.chunk_cache.invalidate_segment(sid)
        await self._delete_objects(metadata)

    async def _delete_objects(self, metadata: RemoteLogSegmentMetadata) -> None:
        # the manifest first: a reader racing the delete fails fast with "not found"
        await self._delete(self.object_key(metadata, MANIFEST_SUFFIX))
        results = await asyncio.gather(*(self._delete(self.object_key(metadata, s)) for s in SEGMENT_FILE_SUFFIXES),
                                       return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r

    async def list_keys(self, prefix: str | None = None) -> list[str]:
        """Every key under `prefix` (default: `key.prefix`), sorted."""
        prefix = self.config.key_prefix if prefix is None else prefix
        keys: list[str] = []
        token: str | None = None
        while True:
            async def op(c: Any, token: str | None = token) -> dict[str, Any]:
                kw: dict[str, Any] = {"Bucket": self.config.bucket, "Prefix": prefix}
                if token:
                    kw["ContinuationToken"] = token
                return await c.list_objects_v2(**kw)
            page = await self._call(f"LIST {prefix}", op)
            keys.extend(o["Key"] for o in page.get("Contents", ()))
            if not page.get("IsTruncated"):
                return sorted(keys)
            token = page.get("NextContinuationToken")

    async def delete_partition(self, topic_id_partition: TopicIdPartition) -> None:
        keys = await self.list_keys(self.partition_prefix(topic_id_partition))
        slots = asyncio.Semaphore(16)

        async def one(k: str) -> None:
            async with slots:
                await self._delete(k)
        results = await asyncio.gather(*(one(k) for k in keys), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r

    # -- lifecycle ---------------------------------------------------------------------------------------------------
    async def close(self) -> None:
        self._closed = True
        for t in list(self._read_aheads):
            t.cancel()
        await asyncio.gather(*self._read_aheads, return_exceptions=True)
        if self.chunk_cache is not None:
            await self.chunk_cache.close()
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()


__all__ = [
    "MANIFEST_SUFFIX",
    "S3Config",
    "S3RemoteStorageManager",
    "S3Stats",
    "SegmentManifest",
    "compress_chunk",
    "decompress_chunk",
    "first_batch_is_compressed",
]
