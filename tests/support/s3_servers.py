"""Test support for the remote storage layer: S3 servers as subprocesses, a fault-injecting HTTP proxy, and
Kafka-format segment files to copy.

* `MotoServer` runs moto's standalone server (`moto_server -H 127.0.0.1 -p PORT`), `SeaweedServer` runs SeaweedFS
  (`weed mini`, every port chosen free). Both wait (bounded, on a condition: a probe object can be written and read
  back) until ready, create the bucket, and are stopped by PID. Their output goes to a log file (`tail()`).
* `FaultProxy`: an asyncio HTTP/1.1 proxy (one request per connection) in front of an S3 endpoint; a test queues
  faults -- an error status, added latency, a connection dropped before or in the middle of the response, or a
  request that is never answered -- which apply to the next matching requests, then traffic passes through.
* `write_segment`: a real segment (`.log`, `.index`, `.timeindex` written by the storage layer's LogSegment, plus
  `.txnindex`, producer snapshot and leader-epoch checkpoint) and the batch positions, for copy/fetch tests.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from scripts.seaweed import free_port_pairs, weed_mini_command
from tests.support.waiting import wait_until

ACCESS_KEY = "strata-test"
SECRET_KEY = "strata-test-secret"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    """`n` distinct free ports (held open together while choosing, so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def sync_s3_client(endpoint: str):
    """A plain (blocking) botocore S3 client for fixtures and assertions."""
    import botocore.session
    from botocore.config import Config

    return botocore.session.get_session().create_client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"total_max_attempts": 1},
            connect_timeout=5,
            read_timeout=30,
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


def _venv_bin(name: str) -> str:
    cand = Path(sys.executable).parent / name
    if cand.exists():
        return str(cand)
    found = shutil.which(name)
    if not found:
        raise FileNotFoundError(f"{name} not found next to {sys.executable} nor on PATH (pip install -e '.[test]')")
    return found


class S3Server:
    """A subprocess S3 server on 127.0.0.1; `endpoint`, `bucket`, `start()`, `stop()`."""

    name = "s3"
    start_timeout = 60.0

    def __init__(self, workdir: Path, bucket: str = "strata-tiered") -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.bucket = bucket
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.log_path = self.workdir / f"{self.name}.log"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        # the servers must not pick up credentials or endpoints from the developer's environment
        return {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "S3_BUCKET"}

    def choose_port(self) -> int:
        return free_port()

    def start(self) -> Self:
        """Start the server on free ports; when another process took one of them between our choice and the
        server's bind (seen with parallel test workers), start again on new ones."""
        chosen = not self.port
        for attempt in range(3):
            self.port = self.port or self.choose_port()
            logged = self.log_path.stat().st_size if self.log_path.exists() else 0
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    self.command(),
                    cwd=self.workdir,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self.env(),
                    start_new_session=True,
                )
            try:
                wait_until(
                    self._ready,
                    timeout=self.start_timeout,
                    interval=0.1,
                    message=lambda: f"{self.name} on {self.endpoint} not ready; log tail:\n{self.tail()}",
                )
                return self
            except BaseException:
                self.stop()
                with open(self.log_path, "rb") as f:
                    f.seek(logged)
                    out = f.read().lower()
                    # moto: "address already in use"; SeaweedFS: "port N for Master ... is not available"
                    lost_port = b"address already in use" in out or b"is not available" in out
                if not (chosen and lost_port and attempt < 2):
                    raise
                self.port = 0
        raise AssertionError("unreachable")

    def _alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited ({self.proc and self.proc.returncode}):\n{self.tail()}")

    def _ready(self) -> bool:
        self._alive()
        c = sync_s3_client(self.endpoint)
        try:
            names = {b["Name"] for b in c.list_buckets().get("Buckets", ())}
            if self.bucket not in names:
                try:
                    c.create_bucket(Bucket=self.bucket)
                except (c.exceptions.BucketAlreadyOwnedByYou, c.exceptions.BucketAlreadyExists):
                    pass
            c.put_object(Bucket=self.bucket, Key="_probe", Body=b"ok")
            ok = c.get_object(Bucket=self.bucket, Key="_probe")["Body"].read() == b"ok"
            c.delete_object(Bucket=self.bucket, Key="_probe")
            return ok
        finally:
            c.close()

    def client(self):
        return sync_s3_client(self.endpoint)

    def keys(self, prefix: str = "") -> list[str]:
        c = self.client()
        try:
            out: list[str] = []
            for page in c.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                out.extend(o["Key"] for o in page.get("Contents", ()))
            return sorted(out)
        finally:
            c.close()

    def multipart_uploads(self) -> list[str]:
        c = self.client()
        try:
            return [u["Key"] for u in c.list_multipart_uploads(Bucket=self.bucket).get("Uploads", ())]
        finally:
            c.close()

    def stop(self) -> None:
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=15)

    def tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def rsm_config(self, **extra: object) -> dict[str, object]:
        """`rsm.config.*` keys (prefix stripped) for an S3RemoteStorageManager on this server."""
        cfg: dict[str, object] = {
            "s3.bucket.name": self.bucket,
            "s3.region": REGION,
            "s3.endpoint.url": self.endpoint,
            "s3.path.style.access.enabled": "true",
            "aws.access.key.id": ACCESS_KEY,
            "aws.secret.access.key": SECRET_KEY,
        }
        cfg.update({k: str(v) for k, v in extra.items()})
        return cfg

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class MotoServer(S3Server):
    name = "moto"

    def command(self) -> list[str]:
        return [_venv_bin("moto_server"), "-H", "127.0.0.1", "-p", str(self.port)]

    def _ready(self) -> bool:
        self._alive()
        with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2) as r:
            if r.status != 200:
                return False
        return super()._ready()


class SeaweedServer(S3Server):
    """`weed mini`: master, volume, filer and S3 gateway in one process; every listening port is chosen free."""

    name = "seaweedfs"
    start_timeout = 90.0

    def __init__(self, workdir: Path, bucket: str = "strata-tiered", table_bucket: str = "") -> None:
        """``table_bucket``: also serve SeaweedFS's Iceberg REST catalog (``iceberg_uri``) with this S3 Tables
        bucket as its warehouse."""
        super().__init__(workdir, bucket)
        self.table_bucket = table_bucket
        self.iceberg_port = 0

    @property
    def iceberg_uri(self) -> str:
        return f"http://127.0.0.1:{self.iceberg_port}"

    def choose_port(self) -> int:
        return free_port_pairs(1)[0]

    def command(self) -> list[str]:
        if self.table_bucket:
            self.iceberg_port = free_port_pairs(1, avoid={self.port, self.port + 10000})[0]
        return weed_mini_command(_venv_bin("weed"), self.workdir, self.port, self.iceberg_port, self.table_bucket)

    def env(self) -> dict[str, str]:
        # the clients' identity: without one SeaweedFS accepts signed PUTs but refuses signed multipart uploads
        # (UploadPart: INVALID_ACCESS_KEY_ID), which pyarrow's S3 writer uses for Parquet and Iceberg metadata files;
        # the Iceberg catalog's OAuth2 client credential is this identity too
        return {**super().env(), "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}

    def _ready(self) -> bool:
        if not super()._ready():
            return False
        if not self.iceberg_port:
            return True
        return self._table_bucket_ready()

    def _table_bucket_ready(self) -> bool:
        """The catalog answers for the table bucket (it is made a moment after the catalog starts listening)."""
        import json
        import urllib.parse

        form = urllib.parse.urlencode(
            {"grant_type": "client_credentials", "client_id": ACCESS_KEY, "client_secret": SECRET_KEY}
        ).encode()
        try:
            with urllib.request.urlopen(f"{self.iceberg_uri}/v1/oauth/tokens", data=form, timeout=2) as r:
                token = json.loads(r.read())["access_token"]
            req = urllib.request.Request(
                f"{self.iceberg_uri}/v1/{self.table_bucket}/namespaces", headers={"Authorization": f"Bearer {token}"}
            )
            with urllib.request.urlopen(req, timeout=2) as r:
                return r.status == 200
        except (OSError, ValueError, KeyError):
            return False

    def iceberg_catalog_config(self) -> dict[str, str]:
        """The broker's ``iceberg.catalog.*`` settings for this catalog: pyiceberg's RestCatalog with an OAuth2 client
        credential (SeaweedFS takes the S3 access key and secret), the Parquet files through the S3 gateway."""
        return {
            "iceberg.catalog.type": "rest",
            "iceberg.catalog.uri": self.iceberg_uri,
            "iceberg.catalog.warehouse": f"s3://{self.table_bucket}",
            "iceberg.catalog.credential": f"{ACCESS_KEY}:{SECRET_KEY}",
            "iceberg.catalog.prop.s3.endpoint": self.endpoint,
            "iceberg.catalog.prop.s3.region": REGION,
            "iceberg.catalog.prop.s3.access-key-id": ACCESS_KEY,
            "iceberg.catalog.prop.s3.secret-access-key": SECRET_KEY,
            "iceberg.catalog.prop.s3.path-style-access": "true",
        }


# ---------------------------------------------------------------------------------------------------------------------
# fault-injecting proxy
# ---------------------------------------------------------------------------------------------------------------------
@dataclass
class Fault:
    """What to do with one request. kind: "status" (answer `status` without forwarding), "delay" (wait `delay`
    seconds, then forward), "drop_request" (close without answering), "drop_response" (forward, send half of the
    response, then close), "hang" (never answer; closed when the proxy stops), "corrupt_body" (forward the request
    with one byte of its body flipped, as a faulty link would), "ignore_range" (forward a GET without its Range
    header: the whole object comes back, as from a server that ignores ranges)."""

    kind: str
    status: int = 503
    delay: float = 0.0
    method: str | None = None  # only requests with this method match (None: any)
    path_contains: str | None = None


@dataclass
class ProxyLog:
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path) of every request seen
    faults_applied: list[str] = field(default_factory=list)


class FaultProxy:
    """An HTTP/1.1 proxy for S3 traffic; faults queued with `add` apply to the next matching requests in order."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.faults: deque[Fault] = deque()
        self.log = ProxyLog()
        self.default_delay = 0.0
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task] = set()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, *faults: Fault) -> None:
        self.faults.extend(faults)

    async def start(self) -> Self:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._conns):
            w.close()
        for t in list(self._handlers):
            t.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _next_fault(self, method: str, path: str) -> Fault | None:
        for f in list(self.faults):
            if (f.method is None or f.method == method) and (f.path_contains is None or f.path_contains in path):
                self.faults.remove(f)
                return f
        return None

    @staticmethod
    async def _read_message(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[bytes, dict[str, str], bytes] | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for ln in lines[1:]:
            if ":" in ln:
                k, v = ln.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        if headers.get("expect", "").lower() == "100-continue":  # botocore asks before sending PUT bodies
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await writer.drain()
            head = "\r\n".join(ln for ln in lines if not ln.lower().startswith("expect:")).encode("latin-1")
        body = b""
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                chunk = await reader.readexactly(size + 2)
                parts.append(size_line + chunk)
                if size == 0:
                    break
            body = b"".join(parts)
        return head, headers, body

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None, "asyncio.start_server runs each connection handler in its own task"
        self._handlers.add(task)
        self._conns.add(writer)
        try:
            msg = await self._read_message(reader, writer)
            if msg is None:
                return
            head, _headers, body = msg
            method, path = head.split(b" ", 2)[:2]
            m, p = method.decode(), path.decode()
            self.log.requests.append((m, p))
            fault = self._next_fault(m, p)
            if fault is not None:
                self.log.faults_applied.append(fault.kind)
            if self.default_delay:
                await asyncio.sleep(self.default_delay)
            if fault is not None and fault.kind == "delay":
                await asyncio.sleep(fault.delay)
            if fault is not None and fault.kind == "status":
                code = {403: "AccessDenied", 404: "NoSuchKey", 429: "SlowDown", 503: "ServiceUnavailable"}.get(
                    fault.status, "InternalError"
                )
                payload = (
                    f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                    f"<Message>injected</Message></Error>"
                ).encode()
                writer.write(
                    f"HTTP/1.1 {fault.status} Injected\r\nContent-Type: application/xml\r\n"
                    f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                    + payload
                )
                await writer.drain()
                return
            if fault is not None and fault.kind == "drop_request":
                return
            if fault is not None and fault.kind == "hang":
                await asyncio.Event().wait()
            if fault is not None and fault.kind == "corrupt_body" and body:
                i = len(body) // 2
                body = body[:i] + bytes([body[i] ^ 0xFF]) + body[i + 1 :]
            # forward with Connection: close both ways (one request per connection keeps framing trivial)
            up_r, up_w = await asyncio.open_connection(*self.upstream)
            try:
                lines = head.decode("latin-1").split("\r\n")
                dropped = (
                    ("connection:", "range:")
                    if fault is not None and fault.kind == "ignore_range"
                    else ("connection:",)
                )
                out = [lines[0]] + [ln for ln in lines[1:] if ln and not ln.lower().startswith(dropped)]
                up_w.write(("\r\n".join(out) + "\r\nConnection: close\r\n\r\n").encode("latin-1") + body)
                await up_w.drain()
                resp = await up_r.read()  # upstream closes after the response
            finally:
                up_w.close()
            if fault is not None and fault.kind == "drop_response":
                writer.write(resp[: max(1, len(resp) // 2)])
                await writer.drain()
                return
            sep = resp.find(b"\r\n\r\n")
            rhead = resp[:sep].decode("latin-1").split("\r\n")
            rhead = [rhead[0]] + [ln for ln in rhead[1:] if not ln.lower().startswith("connection:")]
            writer.write(("\r\n".join(rhead) + "\r\nConnection: close\r\n\r\n").encode("latin-1") + resp[sep + 4 :])
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._conns.discard(writer)
            writer.close()
            self._handlers.discard(task)


# ---------------------------------------------------------------------------------------------------------------------
# segment files
# ---------------------------------------------------------------------------------------------------------------------
@dataclass
class SegmentFiles:
    dir: Path
    base_offset: int
    next_offset: int
    log: Path
    offset_index: Path
    time_index: Path
    txn_index: Path | None
    producer_snapshot: Path
    leader_epoch: bytes
    batches: list[tuple[int, int, int, int, int]]  # (base offset, last offset, position, size, max timestamp)
    max_timestamp: int

    @property
    def size(self) -> int:
        return self.log.stat().st_size

    def log_bytes(self) -> bytes:
        return self.log.read_bytes()

    def segment_data(self):
        from strata.remote.metadata import LogSegmentData

        return LogSegmentData(
            self.log, self.offset_index, self.time_index, self.txn_index, self.producer_snapshot, self.leader_epoch
        )

    def metadata(self, tip=None, segment_id: uuid.UUID | None = None, epochs: dict[int, int] | None = None):
        from strata.remote.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

        tip = tip or TopicIdPartition(uuid.UUID(int=0x1234_5678_9ABC), "tiered-topic", 3)
        return RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tip, segment_id or uuid.uuid4()),
            self.base_offset,
            self.next_offset - 1,
            self.max_timestamp,
            broker_id=0,
            event_timestamp_ms=int(time.time() * 1000),
            segment_size_in_bytes=self.size,
            segment_leader_epochs=epochs or {0: self.base_offset},
        )


TXN_ENTRY = struct.Struct(">hqqqq")


def write_segment(
    dir: Path,
    base_offset: int = 0,
    *,
    batches: int = 50,
    records_per_batch: int = 10,
    value_size: int = 200,
    seed: int = 1,
    ts_base: int = 1_700_000_000_000,
    index_interval_bytes: int = 1024,
    compressible: bool = True,
    aborted_txns: list[tuple[int, int, int, int]] | None = None,
) -> SegmentFiles:
    """Write a closed segment of `batches` magic-v2 batches with the storage layer's LogSegment (real `.index` and
    `.timeindex`), a `.txnindex` holding `aborted_txns` (producer id, first, last, last stable offset) when given,
    a producer snapshot file (opaque bytes) and a leader-epoch checkpoint text."""
    from strata.protocol.records import build_batch
    from strata.storage.segment import LogSegment

    dir = Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(seed)
    seg = LogSegment(dir, base_offset, index_interval_bytes=index_interval_bytes)
    offset = base_offset
    out_batches = []
    max_ts = -1
    words = [b"alpha", b"beta", b"gamma", b"delta", b"epsilon", b"zeta", b"eta", b"theta"]
    for _b in range(batches):
        recs = []
        for r in range(records_per_batch):
            if compressible:
                v = b" ".join(rnd.choice(words) for _ in range(value_size // 6))[:value_size]
            else:
                v = rnd.randbytes(value_size)
            recs.append((f"k{offset + r}".encode(), v, None, ts_base + (offset + r) * 10))
        batch = build_batch(recs, base_offset=offset, timestamp=ts_base)
        last = offset + records_per_batch - 1
        ts = ts_base + last * 10
        pos = seg.size
        seg.append(batch, [(0, len(batch), last, ts)], last + 1)
        out_batches.append((offset, last, pos, len(batch), ts))
        max_ts = max(max_ts, ts)
        offset = last + 1
    seg.on_become_inactive()
    seg.flush()
    log, oi, ti = seg.log_path, seg.offset_index.path, seg.time_index.path
    seg.close()
    prefix = f"{base_offset:020d}"
    txn = None
    if aborted_txns is not None:
        txn = dir / f"{prefix}.txnindex"
        txn.write_bytes(b"".join(TXN_ENTRY.pack(0, *t) for t in aborted_txns))
    snap = dir / f"{offset:020d}.snapshot"
    snap.write_bytes(b"producer-snapshot:" + rnd.randbytes(64))
    epochs = f"0\n1\n0 {base_offset}\n".encode()
    return SegmentFiles(dir, base_offset, offset, log, oi, ti, txn, snap, epochs, out_batches, max_ts)


def write_random_log(path: Path, size: int, seed: int = 7) -> bytes:
    """An opaque `.log` of `size` random bytes (for multipart/chunk tests that do not need real batches)."""
    data = random.Random(seed).randbytes(size)
    Path(path).write_bytes(data)
    return data


def run(coro_fn: Callable, *args, **kwargs):
    """Run an async test body on a fresh event loop."""
    return asyncio.run(coro_fn(*args, **kwargs))


__all__ = [
    "ACCESS_KEY",
    "REGION",
    "SECRET_KEY",
    "Fault",
    "FaultProxy",
    "MotoServer",
    "S3Server",
    "SeaweedServer",
    "SegmentFiles",
    "free_port",
    "free_ports",
    "run",
    "sync_s3_client",
    "write_random_log",
    "write_segment",
]
