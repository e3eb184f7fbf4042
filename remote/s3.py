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
import contextlib
import functools
import os
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, TypeVar

import structlog

from strata.protocol.records import BufferChain

from .chunk_cache import Chunk, ChunkCache, ChunkKey
from .executors import RemoteExecutors
from .metadata import LogSegmentData, RemoteLogSegmentMetadata, TopicIdPartition, encode_custom_metadata
from .pieces import Pieces
from .rsm import (
    LOG_SUFFIX,
    SEGMENT_FILE_SUFFIXES,
    IndexType,
    RemoteStorageError,
    RemoteStorageManager,
    partition_dir_name,
    resolve_range,
    segment_file_prefix,
)
from .s3_client import S3Client, S3Stats
from .s3_config import MIB, S3Config
from .s3_manifest import (
    COMPRESSION_ZSTD,
    MANIFEST_HINT,
    MANIFEST_SUFFIX,
    SegmentManifest,
    compress_chunk,
    decompress_chunk,
    first_batch_is_compressed,
    manifest_from_hint,
)

log = structlog.get_logger("strata.remote")

T = TypeVar("T")
CUSTOM_METADATA_DEFAULT_MAX_BYTES = 128  # Kafka's remote.log.metadata.custom.metadata.max.bytes default
RUN_MAX_BYTES = 16 * MIB  # adjacent chunks per ranged GET at most: one attempt timeout must cover one GET


class S3RemoteStorageManager(RemoteStorageManager):
    def __init__(
        self,
        config: S3Config,
        *,
        executor: Executor | None = None,
        broker_id: int = -1,
        chunk_cache: ChunkCache | None = None,
    ) -> None:
        self.config = config
        self.broker_id = broker_id
        self._executor = executor
        self.s3 = S3Client(config, self._run)
        self.stats: S3Stats = self.s3.stats
        if chunk_cache is None and (config.cache_memory_bytes > 0 or config.cache_disk_path is not None):
            chunk_cache = ChunkCache(
                config.cache_memory_bytes,
                disk_dir=config.cache_disk_path,
                disk_max_bytes=config.cache_disk_bytes if config.cache_disk_path else 0,
                prefetch_chunks=-(-config.prefetch_bytes // config.chunk_size),
                max_run_chunks=max(1, RUN_MAX_BYTES // config.chunk_size),
                executor=executor,
            )
        self.chunk_cache = chunk_cache
        self._manifests: OrderedDict[str, SegmentManifest] = OrderedDict()
        self._manifest_loads: dict[str, asyncio.Future[SegmentManifest]] = {}
        self._closed = False
        self._read_aheads: set[asyncio.Task[None]] = set()

    @classmethod
    def from_config(
        cls,
        configs: Mapping[str, Any],
        *,
        broker_id: int = -1,
        default_dir: Path | None = None,
        executor: Executor | None = None,
    ) -> S3RemoteStorageManager:
        return cls(S3Config.from_mapping(configs), executor=executor, broker_id=broker_id)

    # -- naming ----------------------------------------------------------------------------------------------------
    def partition_prefix(self, tip: TopicIdPartition) -> str:
        return f"{self.config.key_prefix}{partition_dir_name(tip)}/"

    def object_key(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        return self.partition_prefix(metadata.topic_id_partition) + segment_file_prefix(metadata) + suffix

    # -- the client (s3_client.S3Client), the executor ---------------------------------------------------------------
    async def warm_up(self) -> None:
        await self.s3.warm_up()

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(
            self.blocking_executor(self._executor), functools.partial(fn, *args)
        )

    def use_executors(self, executors: RemoteExecutors) -> None:
        super().use_executors(executors)
        if self.chunk_cache is not None and self._executor is None:
            self.chunk_cache.use_executor(executors.read)  # chunk loads and disk-tier I/O serve reads

    async def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> dict[str, Any] | None:
        data = segment_data
        for p in (
            data.log_segment,
            data.offset_index,
            data.time_index,
            data.producer_snapshot_index,
            data.transaction_index,
        ):
            if p is not None and not await self._run(p.is_file):
                raise RemoteStorageError(
                    f"cannot copy {metadata.remote_log_segment_id}: local file {p} is missing", retriable=False
                )
        if self.chunk_cache is not None:  # a retried copy under the same id may carry other bytes
            self.chunk_cache.invalidate_segment(metadata.remote_log_segment_id.id_str)
        self._manifests.pop(metadata.remote_log_segment_id.id_str, None)
        try:
            log_task = asyncio.ensure_future(self._upload_log(metadata, data.log_segment))
            aux = [
                self._put_file(self.object_key(metadata, IndexType.OFFSET.suffix), data.offset_index),
                self._put_file(self.object_key(metadata, IndexType.TIMESTAMP.suffix), data.time_index),
                self._put_file(
                    self.object_key(metadata, IndexType.PRODUCER_SNAPSHOT.suffix), data.producer_snapshot_index
                ),
                self.s3.put(self.object_key(metadata, IndexType.LEADER_EPOCH.suffix), data.leader_epoch_index),
            ]
            if data.transaction_index is not None:
                aux.append(
                    self._put_file(self.object_key(metadata, IndexType.TRANSACTION.suffix), data.transaction_index)
                )
            else:  # a retry without one must not leave an earlier attempt's
                aux.append(self.s3.delete(self.object_key(metadata, IndexType.TRANSACTION.suffix)))
            results = await asyncio.gather(log_task, *aux, return_exceptions=True)
            for r in results:
                if isinstance(r, BaseException):
                    raise r
            manifest: SegmentManifest = results[0]  # type: ignore[assignment]
            await self.s3.put(self.object_key(metadata, MANIFEST_SUFFIX), manifest.to_json())
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
        if not manifest.compression:  # the hint only where it keeps the whole within Kafka's default cap
            hinted = {**out, MANIFEST_HINT: [manifest.chunk_size, manifest.original_size]}
            if len(encode_custom_metadata(hinted) or b"") <= CUSTOM_METADATA_DEFAULT_MAX_BYTES:
                out = hinted
        return out or None

    async def _put_file(self, key: str, path: Path) -> None:
        await self.s3.put(key, await self._run(path.read_bytes))

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
            checksum = self.s3.checksum(body)  # once, not per attempt
            try:

                async def op(c: Any) -> str:
                    r = await c.upload_part(
                        Bucket=cfg.bucket, Key=key, UploadId=upload_id, PartNumber=n, Body=body, **checksum
                    )
                    return r["ETag"]

                parts[n] = await self.s3.call(f"UploadPart {key} #{n}", op)
                self.stats.bytes_uploaded += len(body)
            finally:
                slots.release()

        async def start_part(body: bytes) -> None:
            nonlocal upload_id, part_no
            if upload_id is None:

                async def create(c: Any) -> str:
                    return (await c.create_multipart_upload(Bucket=cfg.bucket, Key=key))["UploadId"]

                upload_id = await self.s3.call(f"CreateMultipartUpload {key}", create)
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
                        await start_part(joined[pos : pos + cfg.part_size])
                        pos += cfg.part_size
                    pending = [joined[pos:]] if pos < len(joined) else []
                    pending_len = len(joined) - pos
            rest = b"".join(pending)
            if upload_id is None:
                await self.s3.put(key, rest)
                return
            if rest:
                await start_part(rest)
            await asyncio.gather(*inflight)

            async def complete(c: Any) -> None:
                await c.complete_multipart_upload(
                    Bucket=cfg.bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": [{"ETag": parts[n], "PartNumber": n} for n in sorted(parts)]},
                )

            await self.s3.call(f"CompleteMultipartUpload {key}", complete)
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
                        await asyncio.shield(self.s3.call(f"AbortMultipartUpload {key}", abort))
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
        m = manifest_from_hint(metadata.custom_metadata, metadata.segment_size_in_bytes)
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
        m = SegmentManifest.from_json(await self.s3.get(self.object_key(metadata, MANIFEST_SUFFIX)))
        self._remember_manifest(metadata, m)
        return m

    async def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> bytes:
        pieces = await self.fetch_log_segment_pieces(metadata, start_position, end_position)
        if len(pieces) == 1:
            whole = pieces[0].obj
            return whole if isinstance(whole, bytes) and len(whole) == len(pieces[0]) else bytes(pieces[0])
        out = bytearray()
        for piece in pieces:
            out += piece
        return out  # type: ignore[return-value]  # a bytearray: one copy fewer of up to a fetch's max.bytes

    async def fetch_log_segment_into(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, buffer: memoryview
    ) -> int:
        resolve_range(start_position, None, 1 << 62)  # argument errors before any I/O
        if not len(buffer):
            return 0
        manifest = await self.get_manifest(metadata)
        if self.chunk_cache is not None or manifest.compression:  # the bytes pass through chunks anyway
            return await super().fetch_log_segment_into(metadata, start_position, buffer)
        start, stop = resolve_range(start_position, start_position + len(buffer) - 1, manifest.original_size)
        if start == stop:
            return 0
        return len(await self.s3.get(self.object_key(metadata, LOG_SUFFIX), start, stop, into=buffer[: stop - start]))

    async def fetch_log_segment_pieces(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> list[memoryview]:
        resolve_range(start_position, end_position, 1 << 62)  # argument errors before any I/O
        manifest = await self.get_manifest(metadata)
        start, stop = resolve_range(start_position, end_position, manifest.original_size)
        if start == stop:
            return [memoryview(b"")]
        key = self.object_key(metadata, LOG_SUFFIX)
        if self.chunk_cache is None and not manifest.compression:
            return [memoryview(await self.s3.get(key, start, stop))]  # no cache, no transform: exactly the range
        indices = manifest.chunks_for(start, stop)
        loader = functools.partial(self._load_chunk, key, manifest)
        if self.chunk_cache is not None:
            chunks = await self.chunk_cache.get_chunks(
                metadata.remote_log_segment_id.id_str,
                indices,
                loader,
                chunk_count=manifest.chunk_count,
                run_loader=self._run_loader(key, manifest),
            )
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
            data = await self.s3.get(key, start, stop, joined=False)
            whole = Pieces(data.pieces if isinstance(data, BufferChain) else [data])
            for i in part:
                a, b = manifest.original_chunk_range(i)
                # views on the received blocks, no copy, except where a block is shared with the next or previous
                # chunk: that part is copied, so that a cached chunk holds exactly its own bytes (the cache counts
                # them)
                out.append(
                    BufferChain(
                        [
                            v if isinstance(v.obj, bytes) and len(v) == len(v.obj) else bytes(v)
                            for v in whole.views(a - start, b - start)
                        ]
                    )
                )
        return out

    async def _load_chunk(self, key: str, manifest: SegmentManifest, i: int) -> Chunk:
        s0, s1 = manifest.stored_chunk_range(i)
        o0, o1 = manifest.original_chunk_range(i)
        if manifest.compression:
            return await self._run(decompress_chunk, await self.s3.get(key, s0, s1), o1 - o0)
        return await self.s3.get(key, s0, s1, joined=False)  # the received blocks: fetch reads serve views on them

    async def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        return await self.s3.get(self.object_key(metadata, IndexType(index_type).suffix))

    # -- delete ------------------------------------------------------------------------------------------------------
    async def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        sid = metadata.remote_log_segment_id.id_str
        self._manifests.pop(sid, None)
        if self.chunk_cache is not None:
            self.chunk_cache.invalidate_segment(sid)
        await self._delete_objects(metadata)

    async def _delete_objects(self, metadata: RemoteLogSegmentMetadata) -> None:
        # the manifest first: a reader racing the delete fails fast with "not found"
        await self.s3.delete(self.object_key(metadata, MANIFEST_SUFFIX))
        results = await asyncio.gather(
            *(self.s3.delete(self.object_key(metadata, s)) for s in SEGMENT_FILE_SUFFIXES), return_exceptions=True
        )
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

            page = await self.s3.call(f"LIST {prefix}", op)
            keys.extend(o["Key"] for o in page.get("Contents", ()))
            if not page.get("IsTruncated"):
                return sorted(keys)
            token = page.get("NextContinuationToken")

    async def delete_partition(self, topic_id_partition: TopicIdPartition) -> None:
        keys = await self.list_keys(self.partition_prefix(topic_id_partition))
        slots = asyncio.Semaphore(16)

        async def one(k: str) -> None:
            async with slots:
                await self.s3.delete(k)

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
        await self.s3.close()


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
