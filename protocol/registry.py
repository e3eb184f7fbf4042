"""api_key -> kafka-python request/response classes, and the version table Strata advertises.

kafka-python (pinned 3.0.12) ships Apache Kafka's message JSON and a generated codec, but only a response-class
registry; this module builds the request side by walking its ApiMessage subclasses once at import.
"""

from __future__ import annotations

import importlib
import pkgutil
import struct
from dataclasses import dataclass
from typing import Any

import kafka.protocol as _kp
from kafka.protocol.api_message import ApiMessage

from . import codec_tagged, extra_messages
from .errors import ErrorCode
from .produce_codec import decode_produce_request
from .request_nulls import NullFieldError, first_null, has_top_level_error
from .wire import skip_tagged_fields

codec_tagged.install()  # before any decoder is compiled: tagged fields read without copying the frame


def _load_all() -> tuple[dict[int, type[ApiMessage]], dict[int, type[ApiMessage]]]:
    for mod in pkgutil.walk_packages(_kp.__path__, "kafka.protocol."):
        if ".old" in mod.name or "generate_stubs" in mod.name:
            continue
        importlib.import_module(mod.name)
    importlib.import_module(extra_messages.__name__)  # APIs kafka-python lacks (KIP-848's 68 and 69)
    requests: dict[int, type[ApiMessage]] = {}
    responses: dict[int, type[ApiMessage]] = {}
    stack = list(ApiMessage.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is not None or getattr(cls, "_json", None) is None:
            continue
        key = cls._json.get("apiKey")
        if key is None:
            continue
        (requests if cls.is_request() else responses)[key] = cls
    return requests, responses


REQUEST_CLASSES, RESPONSE_CLASSES = _load_all()


class ApiKey:
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


def api_name(api_key: int) -> str:
    cls = REQUEST_CLASSES.get(api_key)
    return cls.name.removesuffix("Request") if cls is not None else f"Unknown{api_key}"


# What Strata advertises: the version ranges of one Kafka release (4.2: ListOffsets v11 is its marker, which is what
# kafka-python's broker-version inference reads). Only APIs implemented end to end belong here; a test checks that
# each one has a handler. Produce advertises min 0 because of KAFKA-18659 (librdkafka), but v0-2 are refused.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 13),
    ApiKey.FETCH: (4, 18),
    ApiKey.LIST_OFFSETS: (1, 11),
    ApiKey.METADATA: (0, 13),
    ApiKey.OFFSET_COMMIT: (2, 10),  # v10: topics by id (Kafka 4.2, KIP-848)
    ApiKey.OFFSET_FETCH: (1, 10),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.INIT_PRODUCER_ID: (0, 5),  # v6 is KIP-939 2PC
    # transactions at transaction.version 1 (no KIP-890 part 2); AddPartitionsToTxn v4+ is the brokers' batched
    # verification (KIP-890 part 1)
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 4),  # v5: KIP-890 part 2 (epoch bump per transaction)
    ApiKey.WRITE_TXN_MARKERS: (1, 1),  # v2: transaction version in the marker (TV2)
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),  # v5: KIP-890 part 2
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 2),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.SASL_HANDSHAKE: (0, 1),  # v0: the legacy flow (raw tokens after the handshake)
    ApiKey.SASL_AUTHENTICATE: (0, 2),  # v1: session_lifetime_ms (KIP-368)
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),  # the legacy, non-incremental alter (kafka-python's alter_configs)
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DESCRIBE_CLUSTER: (0, 2),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),  # v1: allow_replication_factor_change (KIP-860)
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),  # KIP-554
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),  # KIP-546
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.DESCRIBE_ACLS: (1, 3),  # Kafka 4 removed v0; v3: the USER resource type
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),  # KIP-848 (protocol/extra_messages.py); v1: subscribed_topic_regex
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),  # v1: member_type (KIP-1099)
}


@dataclass(slots=True)
class RawHeader:
    """The fixed prefix of every request header (v1 and v2 share it)."""

    api_key: int
    api_version: int
    correlation_id: int


_HDR = struct.Struct(">hhi")
_I16 = struct.Struct(">h")


def peek_header(payload: bytes | bytearray | memoryview) -> RawHeader:
    """Read api key, version and correlation id without decoding the body (ValueError on a short frame)."""
    if len(payload) < _HDR.size:
        raise ValueError(f"request of {len(payload)} bytes is shorter than a request header")
    k, v, c = _HDR.unpack_from(payload, 0)
    return RawHeader(k, v, c)


def rewrite_request_header(
    payload: bytes | bytearray | memoryview, correlation_id: int, client_id: str | None
) -> bytes:
    """The same request with another correlation id and client id (a broker forwarding it to the controller).

    Request headers v1 and v2 share the prefix up to and including the client id (a legacy int16-length string,
    even in flexible versions), so the body and any tagged header fields are carried over byte for byte."""
    k, v, _ = _HDR.unpack_from(payload, 0)
    (n,) = _I16.unpack_from(payload, _HDR.size)
    rest = _HDR.size + 2 + max(n, 0)
    if rest > len(payload):
        raise ValueError("client id runs past the end of the request")
    cid = client_id.encode() if client_id is not None else None
    head = _HDR.pack(k, v, correlation_id) + (_I16.pack(-1) if cid is None else _I16.pack(len(cid)) + cid)
    return head + bytes(payload[rest:])


def is_supported(api_key: int, version: int) -> bool:
    rng = SUPPORTED_VERSIONS.get(api_key)
    return rng is not None and rng[0] <= version <= rng[1]


@dataclass(slots=True)
class DecodedRequest:
    client_id: str | None
    body: Any


def decode_request(
    payload: bytes | bytearray | memoryview, api_key: int, version: int, *, hand_codec: bool = True
) -> DecodedRequest:
    """Decode header + body without copying the payload (kafka-python's own decode copies the whole frame to
    parse the header). A body followed by extra bytes must re-encode exactly to what it was read from; otherwise
    the request is malformed (ValueError). Produce goes through its own codec (`produce_codec`) unless
    `hand_codec` is False (the tests compare the two)."""
    cls = REQUEST_CLASSES[api_key]
    data = payload if isinstance(payload, memoryview) else memoryview(payload)
    (client_id_len,) = struct.unpack_from(">h", data, 8)
    pos = 10
    client_id = None
    if client_id_len < -1:
        raise ValueError(f"client id length {client_id_len}")
    if client_id_len >= 0:
        if pos + client_id_len > len(data):
            raise ValueError("client id runs past the end of the request")
        client_id = bytes(data[pos : pos + client_id_len]).decode("utf-8", "replace")
        pos += client_id_len
    flexible = cls.flexible_version_q(version)
    if flexible:
        pos = skip_tagged_fields(data, pos)
    if api_key == ApiKey.PRODUCE and hand_codec:
        produce = decode_produce_request(payload, pos, version)  # the hot path's own codec; None: not canonical
        if produce is not None:
            return DecodedRequest(client_id, produce)
    fast_decode = cls._struct.compiled_decode_from(version, compact=flexible, tagged=flexible, data_class=cls)
    body, end = fast_decode(data, pos)
    if end != len(data) and bytes(body.encode()) != bytes(data[pos:end]):
        # Kafka ignores bytes after a well-formed body (librdkafka 2.16 sends three after an all-topics Metadata
        # v13), but a body that does not re-encode to the bytes it came from was read leniently by the codec
        # (kafka-python turns a negative array count into []), which Kafka's parser refuses.
        raise ValueError(f"malformed request body ({len(data) - end} bytes after a non-canonical body)")
    null = first_null(api_key, version, body)
    if null is not None:
        raise NullFieldError(null, client_id)
    return DecodedRequest(client_id, body)


def response_class(api_key: int) -> Any:  # kafka-python builds the nested message classes at import: untyped
    return RESPONSE_CLASSES[api_key]


def encode_response(resp: Any, correlation_id: int) -> bytes:
    """Frame a response; ApiVersions always uses response header v0, kafka-python handles that."""
    resp.with_header(correlation_id=correlation_id)
    return bytes(resp.encode(header=True, framed=True))


def invalid_request_response(api_key: int, version: int, correlation_id: int) -> bytes | None:
    """INVALID_REQUEST (42) in the response's top-level error code, every other field at its default; None when
    that version of the response has no top-level error code (the caller closes the connection)."""
    if not has_top_level_error(api_key, version):
        return None
    resp = RESPONSE_CLASSES[api_key](version=version, error_code=ErrorCode.INVALID_REQUEST)
    return encode_response(resp, correlation_id)


def unsupported_api_versions_response(correlation_id: int) -> bytes:
    """Error 35 in a v0-format body listing ApiVersions' own range, as clients expect (KIP-511)."""
    body = struct.pack(">ihih hh", correlation_id, 35, 1, ApiKey.API_VERSIONS, *SUPPORTED_VERSIONS[ApiKey.API_VERSIONS])
    return struct.pack(">i", len(body)) + body
