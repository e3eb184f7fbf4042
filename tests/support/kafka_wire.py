"""A small blocking raw-socket Kafka client for hand-made (and deliberately malformed) requests.

Encoding and decoding go through kafka-python 3.0.12's ``kafka.protocol`` classes:
``Req[v](...)`` -> ``.with_header(correlation_id=, client_id=)`` -> ``.encode(header=True, framed=True)`` and
``Resp.decode(payload, version=v, header=True)``. Raw bytes can be sent with :meth:`WireClient.send_raw`.
"""

from __future__ import annotations

import itertools
import socket
import struct
import time
from collections.abc import Iterable, Sequence
from typing import Any, Self

from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from . import client_security

# Error codes used by the tests (Kafka's numbering).
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
UNSUPPORTED_VERSION = 35

API_VERSIONS = 18

_RESPONSES = {
    ProduceRequest: ProduceResponse,
    FetchRequest: FetchResponse,
    ListOffsetsRequest: ListOffsetsResponse,
    MetadataRequest: MetadataResponse,
    ApiVersionsRequest: ApiVersionsResponse,
    CreateTopicsRequest: CreateTopicsResponse,
}


class ConnectionClosed(Exception):
    """The broker closed the connection (EOF or reset)."""


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly `n` bytes from a blocking socket; ConnectionError if the peer closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def slow_reader_socket(host: str, port: int, rcvbuf: int = 64 << 10, timeout: float = 30.0) -> socket.socket:
    """A connection with a small receive window (set before connecting: afterwards Linux keeps autotuning it up to
    tcp_rmem's maximum), for clients that stop reading a large response."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.connect((host, port))
    return s


def response_class(request: Any) -> type[Any]:
    cls = type(request)[None]
    if cls in _RESPONSES:
        return _RESPONSES[cls]
    from strata.protocol.registry import RESPONSE_CLASSES

    return RESPONSE_CLASSES[request.API_KEY]


class WireClient:
    """One TCP connection to a broker. Not thread-safe; one request in flight at a time unless using send/recv."""

    def __init__(self, host: str, port: int, client_id: str = "strata-it-raw", timeout: float = 10.0):
        self.host, self.port, self.client_id, self.timeout = host, port, client_id, timeout
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = client_security.secure(self.sock, f"{host}:{port}")  # a secured test cluster's address
        self._corr = itertools.count(1)
        self._versions: dict[int, tuple[int, int]] | None = None

    @classmethod
    def connect(cls, bootstrap: str, **kw: Any) -> WireClient:
        host, port = bootstrap.rsplit(":", 1)
        return cls(host, int(port), **kw)

    # -- plumbing ----------------------------------------------------------------------------------------------
    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except (ConnectionResetError, BrokenPipeError) as exc:
                raise ConnectionClosed(repr(exc)) from exc
            if not chunk:
                raise ConnectionClosed(f"EOF after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes:
        """Read one size-prefixed frame and return its payload (header + body)."""
        (size,) = struct.unpack(">i", self._recv_exact(4))
        return self._recv_exact(size)

    def wait_closed(self, timeout: float = 5.0) -> bool:
        """True when the peer closes the connection within ``timeout`` (any data received first is discarded)."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            finally:
                self.sock.settimeout(self.timeout)
            if not chunk:
                return True

    def next_correlation_id(self) -> int:
        return next(self._corr)

    def send(self, request: Any) -> int:
        corr = self.next_correlation_id()
        request.with_header(correlation_id=corr, client_id=self.client_id)
        self.send_raw(bytes(request.encode(header=True, framed=True)))
        return corr

    def recv(self, response_cls: type[Any], version: int, correlation_id: int) -> Any:
        payload = self.recv_frame()
        resp = response_cls.decode(payload, version=version, header=True)
        got = resp.header.correlation_id
        if got != correlation_id:
            raise AssertionError(f"correlation id mismatch: sent {correlation_id}, got {got}")
        return resp

    def request(self, request: Any) -> Any:
        version = request.API_VERSION
        corr = self.send(request)
        return self.recv(response_class(request), version, corr)

    def call(self, api_key: int, version: int, **fields: Any) -> Any:
        """Any request by api key and version, its fields as keyword arguments; nested structs may be given as
        dicts (kafka-python's generated classes are built from them)."""
        from strata.protocol.registry import REQUEST_CLASSES, RESPONSE_CLASSES

        cls = REQUEST_CLASSES[api_key][version]
        corr = self.send(cls(**_structs(cls, fields)))
        return self.recv(RESPONSE_CLASSES[api_key], version, corr)

    def sasl_plain(self, user: str, password: str) -> None:
        """Authenticate as `user` with SASL PLAIN (SaslHandshake v1, SaslAuthenticate v2), as clients do."""
        hs = self.call(17, 1, mechanism="PLAIN")
        assert hs.error_code == 0, hs
        auth = self.call(36, 2, auth_bytes=b"\0" + user.encode() + b"\0" + password.encode())
        assert auth.error_code == 0, auth

    # -- typed helpers -------------------------------------------------------------------------------------------
    def api_versions(self, version: int = 0) -> Any:
        return self.request(ApiVersionsRequest[version]())

    def versions(self) -> dict[int, tuple[int, int]]:
        if self._versions is None:
            resp = self.api_versions(0)
            assert resp.error_code == 0, resp
            self._versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        return self._versions

    def pick_version(self, api_key: int, preferred: int) -> int:
        lo, hi = self.versions()[api_key]
        v = min(preferred, hi)
        assert v >= lo, f"api {api_key}: broker range {lo}-{hi} excludes {preferred}"
        return v

    def metadata(self, topics: Sequence[str] | None, version: int = 8, allow_auto_create: bool = False) -> Any:
        req_topics = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        return self.request(
            MetadataRequest[version](
                topics=req_topics,
                allow_auto_topic_creation=allow_auto_create,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        )

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: dict[str, str] | None = None,
        version: int = 4,
        timeout_ms: int = 10000,
    ) -> Any:
        T = CreateTopicsRequest.CreatableTopic
        cfgs = [T.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()]
        resp = self.request(
            CreateTopicsRequest[version](
                topics=[T(name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=cfgs)],
                timeout_ms=timeout_ms,
                validate_only=False,
            )
        )
        return resp

    def produce(
        self, topic: str, partition: int, records: bytes, version: int = 7, acks: int = -1, timeout_ms: int = 10000
    ) -> Any:
        P = ProduceRequest.TopicProduceData
        req = ProduceRequest[version](
            transactional_id=None,
            acks=acks,
            timeout_ms=timeout_ms,
            topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=partition, records=records)])],
        )
        return self.request(req)

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        version: int = 11,
        max_wait_ms: int = 100,
        max_bytes: int = 1 << 20,
    ) -> Any:
        return self.request(self.fetch_request(topic, partition, offset, version, max_wait_ms, max_bytes))

    @staticmethod
    def fetch_request(
        topic: str, partition: int, offset: int, version: int = 11, max_wait_ms: int = 100, max_bytes: int = 1 << 20
    ) -> Any:
        T = FetchRequest.FetchTopic
        return FetchRequest[version](
            replica_id=-1,
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_bytes=max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[
                T(
                    topic=topic,
                    partitions=[
                        T.FetchPartition(
                            partition=partition,
                            current_leader_epoch=-1,
                            fetch_offset=offset,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=max_bytes,
                        )
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
        )

    def list_offsets(self, topic: str, partition: int, timestamp: int, version: int = 5) -> Any:
        T = ListOffsetsRequest.ListOffsetsTopic
        req = ListOffsetsRequest[version](
            replica_id=-1,
            isolation_level=0,
            topics=[
                T(
                    name=topic,
                    partitions=[
                        T.ListOffsetsPartition(
                            partition_index=partition, current_leader_epoch=-1, timestamp=timestamp, max_num_offsets=1
                        )
                    ],
                )
            ],
        )
        return self.request(req)


# -- record batches ------------------------------------------------------------------------------------------
def _structs(cls: Any, fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` with every dict standing for a nested struct (or an array of them) made into its generated class."""
    out = {}
    for name, value in fields.items():
        f = cls._struct.fields.get(name)
        if f is not None and value is not None and f.is_struct_array():
            sub = f.data_class
            value = [sub(**_structs(sub, v)) if isinstance(v, dict) else v for v in value]
        elif f is not None and isinstance(value, dict) and f.is_struct():
            value = f.data_class(**_structs(f.data_class, value))
        out[name] = value
    return out


def build_batch(
    records: Iterable[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]],
    compression: int = 0,
    timestamp: int | None = None,
) -> bytes:
    """A magic-v2 record batch (baseOffset 0) with the given (key, value, headers) records."""
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    for i, (k, v, h) in enumerate(records):
        b.append(i, timestamp=ts, key=k, value=v, headers=h)
    return bytes(b.build())


def corrupt_crc(batch: bytes) -> bytes:
    """Flip one bit of the stored CRC (bytes 17..20 of a magic-v2 batch header)."""
    out = bytearray(batch)
    out[17] ^= 0x01
    return bytes(out)


def decode_records(records: bytes | None) -> list[Any]:
    """All records (offset, key, value, headers, timestamp) of a Fetch response's record set."""
    out: list[Any] = []
    if not records:
        return out
    mr = MemoryRecords(bytes(records))
    while True:
        batch = mr.next_batch()
        if batch is None:
            break
        out.extend(batch)
    return out


def api_versions_request_bytes(
    version: int, correlation_id: int, client_id: str = "strata-it-raw", flexible_body: bool = True
) -> bytes:
    """An ApiVersions request of any version (even ones the codec does not know, like 99), built by hand.

    Header v2 (flexible: api_key, api_version, correlation_id, client_id as a classic nullable string, empty
    tagged fields) and a v3-style body (compact client_software_name/version, empty tagged fields) -- what a
    newer-than-broker client would send.
    """
    cid = client_id.encode()
    header = struct.pack(">hhih", API_VERSIONS, version, correlation_id, len(cid)) + cid + b"\x00"
    body = b""
    if flexible_body:
        name, ver = b"strata-it", b"1.0"
        body = bytes([len(name) + 1]) + name + bytes([len(ver) + 1]) + ver + b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def raw_request_bytes(
    api_key: int, version: int, correlation_id: int, body: bytes = b"", client_id: str = "strata-it-raw"
) -> bytes:
    """A frame with a v1 request header (non-flexible) and an arbitrary body."""
    cid = client_id.encode()
    payload = struct.pack(">hhih", api_key, version, correlation_id, len(cid)) + cid + body
    return struct.pack(">i", len(payload)) + payload


def batch_codecs(bootstrap: str, topic: str, partition: int, offset: int = 0, max_bytes: int = 1 << 20) -> set[int]:
    """Compression codec ids (attributes & 7) of the stored batches returned by one raw Fetch at ``offset``."""
    with WireClient.connect(bootstrap) as c:
        v = c.pick_version(1, 11)
        resp = c.fetch(topic, partition, offset, version=v, max_bytes=max_bytes)
        part = resp.responses[0].partitions[0]
        assert part.error_code == 0, f"fetch {topic}[{partition}]@{offset}: error {part.error_code}"
        data = bytes(part.records or b"")
    codecs, pos = set(), 0
    while pos + 61 <= len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        if pos + 12 + length > len(data):
            break  # partial trailing batch
        (attrs,) = struct.unpack_from(">h", data, pos + 21)
        codecs.add(attrs & 0x07)
        pos += 12 + length
    return codecs


CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def assert_stored_codec(bootstrap: str, topic: str, partitions: int, codec: str, hint: str = "") -> None:
    """The broker keeps the producer's batches as they came: the stored batches use the producer's codec.

    Clients send a batch uncompressed when compression does not shrink it (librdkafka, kafka-python), so
    uncompressed batches may appear too; any other codec means the broker rewrote batches.
    """
    want = CODEC_IDS[codec]
    seen: set[int] = set()
    for p in range(partitions):
        seen |= batch_codecs(bootstrap, topic, p)
    assert want in seen and seen <= {0, want}, (
        f"{topic}: stored batch codecs {sorted(seen)}, producer used {codec} ({want}). {hint}"
    )


# librdkafka derives its "broker supports LZ4" feature from ApiVersions: it needs FindCoordinator (key 10)
# advertised (LZ4 arrived with Kafka 0.8.2, like GroupCoordinator); otherwise it logs "Broker does not support
# compression type lz4: not compressing batch" and sends lz4 batches uncompressed.
LIBRDKAFKA_LZ4_HINT = (
    "librdkafka sends lz4 uncompressed unless the broker advertises FindCoordinator (api key 10) "
    "in ApiVersions (rdkafka_feature.c: RD_KAFKA_FEATURE_LZ4 depends on FindCoordinator v0)."
)


def fetch_v17_tagging_every_topic(topics: int) -> Any:
    """A Fetch v17 of `topics` unknown topic ids whose one partition each carries a tagged field
    (replica_directory_id): the request shape that made kafka-python's decoders quadratic (fuzzer finding N6)."""
    import uuid

    T = FetchRequest.FetchTopic
    P = T.FetchPartition
    tagged = [P(partition=0, fetch_offset=0, partition_max_bytes=1024, replica_directory_id=uuid.uuid4())]
    return FetchRequest[17](
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[T(topic_id=uuid.uuid4(), partitions=tagged) for _ in range(topics)],
        forgotten_topics_data=[],
        rack_id="",
    )
