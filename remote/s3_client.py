"""The S3 client of S3RemoteStorageManager: an aiobotocore client built on first use, the retry engine (per-attempt
timeout, overall deadline, exponential backoff with full jitter, error classification) and the primitive object
operations (PUT, ranged GET read block by block, DELETE), with their counters.

`get` is on the cold-read path: a ranged GET's body is read block by block from aiohttp (`_read_body`), or written
straight into the caller's buffer (`_read_body_into`), never joined twice.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import email.utils
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

import aiohttp
import botocore.utils
import crc32c
import structlog
from aiobotocore.config import AioConfig
from aiobotocore.response import AioStreamingBody
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from strata.protocol.records import BufferChain

from .rsm import RemoteResourceNotFoundError, RemoteStorageError, RemoteStorageTimeoutError
from .s3_config import S3Config

log = structlog.get_logger("strata.remote")

T = TypeVar("T")


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
    for load, args in (
        (loader.load_service_model, ("s3", "service-2")),
        (loader.load_service_model, ("s3", "endpoint-rule-set-1")),
        (loader.load_data, ("endpoints",)),
        (loader.load_data, ("partitions",)),
        (loader.load_data, ("sdk-default-configuration",)),
        (loader.load_data, ("_retry",)),
    ):
        with contextlib.suppress(Exception):
            load(*args)


def _http_timestamp(value: Any) -> datetime.datetime:
    """botocore's timestamp parser for responses, fast for the forms S3 sends: dateutil's general parser (its
    default) took about a tenth of a cold remote read's CPU, for Last-Modified headers nobody here reads."""
    if isinstance(value, str):
        with contextlib.suppress(TypeError, ValueError):
            return email.utils.parsedate_to_datetime(value)  # RFC 7231 (HTTP headers)
        with contextlib.suppress(ValueError):
            return datetime.datetime.fromisoformat(value)  # ISO 8601 (XML bodies)
    return botocore.utils.parse_timestamp(value)


class _ShortRead(Exception):
    """The body ended before the announced length (a dropped connection): retriable."""


_RETRIABLE_CODES = {
    "InternalError",
    "ServiceUnavailable",
    "SlowDown",
    "RequestTimeout",
    "Throttling",
    "BadDigest",
    "ThrottlingException",
    "RequestTimeTooSkewed",
    "TooManyRequests",
    "RequestLimitExceeded",
    "503",
    "500",
    "502",
    "504",
}
_NOT_FOUND_CODES = {"NoSuchKey", "404", "NotFound", "NoSuchUpload"}


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
        elif not end_of_http_chunk:  # (b"", False): the end of the body
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
        into[: len(data)] = data
        return into[: len(data)]
    at = 0
    while True:
        block, end_of_http_chunk = await content.readchunk()
        if block:
            end = at + len(block)
            if end > len(into):
                raise _ShortRead(f"got more than the {len(into)} bytes of the range")
            into[at:end] = block
            at = end
        elif not end_of_http_chunk:  # (b"", False): the end of the body
            return into[:at]


class S3Client:
    """One bucket's client for one RSM. `run` runs a blocking function off the event loop (the RSM's executor);
    `client`: a ready client instead of one built on first use (a fake, in tests)."""

    def __init__(self, config: S3Config, run: Callable[..., Awaitable[Any]], *, client: Any = None) -> None:
        self.config = config
        self.stats = S3Stats()
        self._run = run
        self._client: Any = client
        self._client_lock: asyncio.Lock | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._get_slots: asyncio.Semaphore | None = (
            asyncio.Semaphore(config.max_connections) if client is not None else None
        )
        self._closed = False

    async def get_client(self) -> Any:
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
                    region_name=cfg.region,
                    signature_version="s3v4",
                    # UNSIGNED-PAYLOAD as over https, on http too: SigV4's SHA-256 of every uploaded byte ran on
                    # the event loop (~0.6 s of CPU per GiB); an x-amz-checksum-crc32c header (_checksum) guards
                    # the bytes instead, checked by the server, for about 1/14 of the cost
                    s3={"addressing_style": "path" if cfg.path_style else "auto", "payload_signing_enabled": False},
                    retries={"total_max_attempts": 1, "mode": "standard"},
                    connect_timeout=cfg.attempt_timeout_s,
                    read_timeout=cfg.attempt_timeout_s,
                    max_pool_connections=cfg.max_connections,
                    # S3 clones (older MinIO, SeaweedFS, moto) differ on the new default checksums: only when needed
                    request_checksum_calculation="when_required",
                    response_checksum_validation="when_required",
                )
                kwargs: dict[str, Any] = {"config": aio_cfg, "region_name": cfg.region}
                if cfg.endpoint_url:
                    kwargs["endpoint_url"] = cfg.endpoint_url
                if cfg.access_key_id is not None:
                    kwargs.update(
                        aws_access_key_id=cfg.access_key_id,
                        aws_secret_access_key=cfg.secret_access_key,
                        aws_session_token=cfg.session_token,
                    )
                session = get_session()
                session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=_http_timestamp)
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
        client = await self.get_client()
        try:
            async with asyncio.timeout(self.config.attempt_timeout_s):
                await client.head_bucket(Bucket=self.config.bucket)
        except Exception as e:  # noqa: BLE001 - a warm-up only
            log.info("S3 warm-up request failed", bucket=self.config.bucket, error=repr(e))

    async def call(self, what: str, op: Callable[[Any], Awaitable[T]]) -> T:
        """Run `op(client)` with a per-attempt timeout, retries with backoff + full jitter, an overall deadline."""
        cfg = self.config
        client = await self.get_client()
        deadline = time.monotonic() + cfg.api_call_timeout_s
        attempt = 0
        while True:
            attempt += 1
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stats.timeouts += 1
                raise RemoteStorageTimeoutError(
                    f"{what}: no success within {cfg.api_call_timeout_s:.1f}s ({attempt - 1} attempts)"
                )
            self.stats.requests += 1
            try:
                async with asyncio.timeout(min(cfg.attempt_timeout_s, remaining)):
                    return await op(client)
            except TimeoutError:
                self.stats.timeouts += 1
                err: RemoteStorageError = RemoteStorageTimeoutError(
                    f"{what}: attempt {attempt} timed out after {min(cfg.attempt_timeout_s, remaining):.1f}s"
                )
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

    # -- primitive operations ----------------------------------------------------------------------------------------
    def checksum(self, body: bytes | memoryview) -> dict[str, str]:
        """The upload's CRC32C for S3 to check (BadDigest on a mismatch, retried), unless switched off for a clone
        that rejects x-amz-checksum-* headers. Kafka's batch CRCs guard the records too, but not indexes or
        manifests, and a bad upload is better refused than found at read time."""
        if not self.config.checksum:
            return {}
        return {"ChecksumCRC32C": base64.b64encode(crc32c.crc32c(body).to_bytes(4, "big")).decode()}

    async def put(self, key: str, body: bytes) -> None:
        checksum = self.checksum(body)  # once, not per attempt

        async def op(c: Any) -> None:
            await c.put_object(Bucket=self.config.bucket, Key=key, Body=body, **checksum)

        await self.call(f"PUT {key}", op)
        self.stats.bytes_uploaded += len(body)

    @overload
    async def get(
        self,
        key: str,
        start: int | None = None,
        stop: int | None = None,
        *,
        joined: Literal[True] = True,
        into: None = None,
    ) -> bytes: ...
    @overload
    async def get(
        self, key: str, start: int | None = None, stop: int | None = None, *, joined: bool, into: None = None
    ) -> bytes | BufferChain: ...
    @overload
    async def get(
        self, key: str, start: int | None = None, stop: int | None = None, *, joined: bool = True, into: memoryview
    ) -> memoryview: ...

    async def get(
        self,
        key: str,
        start: int | None = None,
        stop: int | None = None,
        *,
        joined: bool = True,
        into: memoryview | None = None,
    ) -> bytes | BufferChain | memoryview:
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

        await self.get_client()
        async with self._get_slots:  # type: ignore[union-attr]
            data = await self.call(f"GET {key}" + (f" [{start},{stop})" if start is not None else ""), op)
        self.stats.bytes_downloaded += len(data)
        return data

    async def delete(self, key: str) -> None:
        async def op(c: Any) -> None:
            await c.delete_object(Bucket=self.config.bucket, Key=key)

        try:
            await self.call(f"DELETE {key}", op)
        except RemoteResourceNotFoundError:
            pass

    # -- copy --------------------------------------------------------------------------------------------------------

    async def close(self) -> None:
        self._closed = True
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()


__all__ = ["S3Client", "S3Stats"]
