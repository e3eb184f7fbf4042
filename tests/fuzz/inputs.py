"""The fuzzer's inputs: ``make_input(seed, index, ctx, ...)`` -> one ``FuzzInput``, a function of its arguments.

Every advertised (api key, version) of ``SUPPORTED_VERSIONS`` is drawn (API first, then version, so each API gets
its share), a valid request is built (``values.RequestBuilder``) and then, by strategy:

- ``valid``: sent as built;
- ``bytes``: its body mutated byte-wise (``mutate.mutate_bytes``: flips, lying lengths and counts, ...);
- ``null`` / ``extreme`` / ``huge``: a field set to null, an int to an extreme, an array repeated thousands of times;
- ``records``: a Produce carrying one bad record batch (``batches.bad_batch``: CRC, magic, counts, bombs, ...);
- ``header``: an unknown api key, an unadvertised version or a lying client id length;
- ``frame``: truncated, oversized, negative or tiny frames.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field
from typing import Any

from strata.protocol.registry import REQUEST_CLASSES, SUPPORTED_VERSIONS, api_name

from . import batches, mutate
from .values import WAIT_FIELDS, FuzzContext, RequestBuilder

STRATEGIES = (
    ("valid", 14),
    ("bytes", 40),
    ("null", 10),
    ("extreme", 8),
    ("huge", 2),
    ("records", 12),
    ("header", 7),
    ("frame", 7),
)
PING_CORRELATION_ID = 0x7EADBEEF
_SIZE = struct.Struct(">i")


@dataclass
class FuzzInput:
    index: int
    strategy: str
    api_key: int  # -1 for frame-level inputs
    version: int
    detail: str
    data: bytes  # exactly the bytes sent
    framed: bool = True  # ends on a frame boundary: a ping request can follow it on the connection
    correlation_id: int | None = None  # what a response must carry (None: header mutated or no response)
    half_close: bool = False  # shut down our side after sending (a truncated frame: the broker must close)
    tags: dict[str, Any] = field(default_factory=dict)

    @property
    def api(self) -> str:
        return api_name(self.api_key) if self.api_key >= 0 else "frame"

    def describe(self) -> str:
        return f"#{self.index} {self.strategy} {self.api} v{self.version}: {self.detail}"


def ping_frame() -> bytes:
    """ApiVersions v0 (always supported): what the fuzzer sends after an input to see the connection is served."""
    cid = b"strata-fuzz-ping"
    payload = struct.pack(">hhih", 18, 0, PING_CORRELATION_ID, len(cid)) + cid
    return _SIZE.pack(len(payload)) + payload


def _pick(rnd: random.Random, weighted: tuple[tuple[str, int], ...]) -> str:
    names, weights = zip(*weighted)
    return rnd.choices(names, weights)[0]


def _header_len(api_key: int, version: int, client_id: bytes) -> int:
    flexible = REQUEST_CLASSES[api_key].flexible_version_q(version)
    return 10 + len(client_id) + (1 if flexible else 0)


def make_input(
    seed: int, index: int, ctx: FuzzContext, *, bomb_bytes: int, max_items: int, max_request_bytes: int
) -> FuzzInput:
    rnd = random.Random(f"{seed}:{index}")
    strategy = _pick(rnd, STRATEGIES)
    if strategy == "frame":
        return _frame_input(rnd, index)
    api_key = rnd.choice(sorted(SUPPORTED_VERSIONS))
    if strategy == "records":
        api_key = 0
    lo, hi = SUPPORTED_VERSIONS[api_key]
    version = rnd.randint(max(lo, 3) if api_key == 0 else lo, hi)
    corr = index & 0x3FFFFFFF
    client_id = f"fz-{index}".encode()
    req = RequestBuilder(ctx, rnd).build(api_key, version)
    detail = "as built"
    refuse = False
    if strategy == "null":
        detail = mutate.set_null(rnd, req, version) or "no nullable slot"
    elif strategy == "extreme":
        detail = mutate.extreme_int(rnd, req, version) or "no int field"
    elif strategy == "huge":
        detail = mutate.huge_array(rnd, req, version, max_items) or "no array"
    elif strategy == "records":
        what, batch = batches.bad_batch(rnd, bomb_bytes)
        topic = req.topic_data[0]
        topic.name = ctx.compacted if rnd.random() < 0.4 else ctx.topic(rnd)
        if version >= 13:
            topic.topic_id = ctx.topics.get(topic.name, (topic.topic_id, 0))[0]
        part = type(topic).PartitionProduceData(index=rnd.choice((0, 0, 1)), records=batch)
        topic.partition_data = [part]
        req.topic_data = req.topic_data[:1]
        req.acks = rnd.choice((-1, 1))
        detail = f"{what} -> {topic.name}"
        keyless_compacted = what == "keyless" and topic.name == ctx.compacted
        refuse = keyless_compacted or not what.startswith(("corrupt-compressed", "timestamp", "keyless"))
    req.with_header(correlation_id=corr, client_id=client_id.decode())
    try:
        frame = bytes(req.encode(header=True, framed=True))
    except Exception as e:  # noqa: BLE001 - a mutation the encoder cannot write: send the valid request instead
        req = RequestBuilder(ctx, random.Random(f"{seed}:{index}:retry")).build(api_key, version)
        req.with_header(correlation_id=corr, client_id=client_id.decode())
        frame = bytes(req.encode(header=True, framed=True))
        detail = f"unencodable mutation ({type(e).__name__}), sent valid"
    payload = frame[4:]
    if len(payload) > max_request_bytes:
        detail += f" (frame {len(payload)} bytes > socket.request.max.bytes)"
    correlation: int | None = corr
    if strategy == "bytes":
        hl = _header_len(api_key, version, client_id)
        ops, body = mutate.mutate_bytes(rnd, payload[hl:])
        payload = payload[:hl] + body
        detail = ops
    elif strategy == "header":
        payload, detail, correlation = _mutate_header(rnd, payload, api_key, version, client_id)
    expects_answer = not (api_key == 0 and getattr(req, "acks", 1) == 0)
    # what the request asks the broker to wait for, known here without decoding (the fuzzer's own decoder would
    # meet the same traps as the broker's): the longest wait field, and a JoinGroup's group
    wait_ms = max((getattr(req, f, 0) or 0 for f in WAIT_FIELDS if isinstance(getattr(req, f, 0), int)), default=0)
    group_id = getattr(req, "group_id", None) if api_key == 11 else None
    return FuzzInput(
        index,
        strategy,
        api_key,
        version,
        detail,
        _SIZE.pack(len(payload)) + payload,
        correlation_id=correlation if expects_answer else None,
        tags={
            "acks0": not expects_answer,
            "refuse": strategy == "records" and refuse,
            "wait_ms": wait_ms,
            "group_id": group_id,
        },
    )


def _mutate_header(
    rnd: random.Random, payload: bytes, api_key: int, version: int, client_id: bytes
) -> tuple[bytes, str, int | None]:
    buf = bytearray(payload)
    kind = rnd.choice(("unknown-key", "bad-version", "client-id-lie", "tagged-lie"))
    if kind == "unknown-key":
        k = rnd.choice((-1, 5, 6, 7, 33, 57, 67, 68, 71, 1000, 32767))
        struct.pack_into(">h", buf, 0, k)
        return bytes(buf), f"api key {k}", None
    if kind == "bad-version":
        lo, hi = SUPPORTED_VERSIONS[api_key]
        v = rnd.choice((hi + 1, lo - 1, -1, 32767, hi + 5))
        struct.pack_into(">h", buf, 2, v)
        return bytes(buf), f"version {v}", None
    if kind == "client-id-lie":
        n = rnd.choice((-2, -1, len(client_id) + 1, len(client_id) + 100, 0x7FFF))
        struct.pack_into(">h", buf, 8, n)
        return bytes(buf), f"client id length {n}", None
    # a flexible header's tagged fields: a count or a size that lies
    pos = 10 + len(client_id)
    if not REQUEST_CLASSES[api_key].flexible_version_q(version):
        struct.pack_into(">h", buf, 8, -1)
        return bytes(buf), "null client id", None
    lie = mutate.uvarint(rnd.choice((1, 2, 0x7F, 0xFFFFFFFF)))
    buf[pos : pos + 1] = lie + (
        mutate.uvarint(rnd.randrange(0, 5)) + mutate.uvarint(1 << 30) if rnd.random() < 0.5 else b""
    )
    return bytes(buf), f"tagged fields {lie.hex()}", None


def _frame_input(rnd: random.Random, index: int) -> FuzzInput:
    kind = rnd.choice(("truncated", "oversized", "negative", "tiny", "zero", "short-size"))
    ping = ping_frame()
    if kind == "truncated":  # a size that promises more than is sent, then our side shuts down
        cut = rnd.randrange(0, len(ping) - 4)
        return FuzzInput(index, "frame", -1, -1, f"truncated to {cut}", ping[: 4 + cut], framed=False, half_close=True)
    if kind == "oversized":
        size = rnd.choice((100 * 1024 * 1024 + 1, 0x7FFFFFFF, 1 << 30))
        return FuzzInput(index, "frame", -1, -1, f"size {size}", _SIZE.pack(size) + ping[4:], framed=False)
    if kind == "negative":
        size = rnd.choice((-1, -(2**31), -4))
        return FuzzInput(index, "frame", -1, -1, f"size {size}", _SIZE.pack(size) + ping[4:], framed=False)
    if kind == "tiny":
        n = rnd.randrange(1, 10)
        return FuzzInput(index, "frame", -1, -1, f"{n}-byte frame", _SIZE.pack(n) + rnd.randbytes(n))
    if kind == "zero":
        return FuzzInput(index, "frame", -1, -1, "empty frame", _SIZE.pack(0))
    return FuzzInput(index, "frame", -1, -1, "2 bytes of a size", b"\x00\x00", framed=False, half_close=True)
