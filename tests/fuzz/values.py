"""Valid requests of any advertised (api key, version), built through kafka-python's request classes.

The fuzzer needs requests that get past the decoder and into the handlers, so each field is filled from its name
and type in the message schema (kafka-python's parsed copy of Kafka's JSON specs): topic names and ids from the
fuzzer's own topics (never the canary's), group ids from a small pool, timeouts short enough that a legitimate
wait cannot pass for a hang, record batches from ``batches.valid_batch``. Values are drawn from a seeded
``random.Random``, so one seed gives one request.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from strata.protocol.registry import REQUEST_CLASSES

from . import batches

INT_EXTREMES = {
    "int8": (-128, -1, 0, 1, 127),
    "int16": (-32768, -2, -1, 0, 1, 32767),
    "uint16": (0, 1, 65535),
    "int32": (-(2**31), -2, -1, 0, 1, 2**31 - 1, 1 << 24),
    "int64": (-(2**63), -1, 0, 1, 2**63 - 1, 2**31),
}

FRESH_GROUP_PREFIX = "fz-own-"

# Fields that make the broker wait on purpose: kept short in valid requests (see Fuzzer.hang_s).
WAIT_FIELDS = ("timeout_ms", "max_wait_ms", "rebalance_timeout_ms", "timeout")

CONFIG_NAMES = (
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "segment.bytes",
    "segment.ms",
    "min.insync.replicas",
    "max.message.bytes",
    "compression.type",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "unknown.config.fz",
    "",
)
CONFIG_VALUES = ("compact", "delete", "1", "0", "-1", "1000", "86400000", "zstd", "bogus", "", "9" * 30)


@dataclass
class FuzzContext:
    """What the fuzzer may name: its own topics (name -> (topic id, partitions)) and group ids."""

    topics: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    groups: tuple[str, ...] = ("fz-group-0", "fz-group-1")
    compacted: str = "fz-compact"

    def topic(self, rnd: random.Random) -> str:
        if not self.topics or rnd.random() < 0.05:
            return f"fz-new-{rnd.randrange(8)}"  # at most 8 topics the fuzzer may create besides its own
        return rnd.choice(sorted(self.topics))

    def topic_id(self, rnd: random.Random) -> uuid.UUID:
        if self.topics and rnd.random() < 0.9:
            return self.topics[rnd.choice(sorted(self.topics))][0]
        return rnd.choice((uuid.UUID(int=0), uuid.UUID(int=rnd.getrandbits(128))))


def _short_text(rnd: random.Random) -> str:
    return "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz0123456789-._") for _ in range(rnd.randrange(1, 12)))


class RequestBuilder:
    """Fills a request's fields from the schema: ``build(api_key, version)`` -> a kafka-python request object."""

    def __init__(self, ctx: FuzzContext, rnd: random.Random):
        self.ctx, self.rnd = ctx, rnd
        self.api_key = -1
        self.version = -1

    def build(self, api_key: int, version: int) -> Any:
        self.api_key, self.version = api_key, version
        cls = REQUEST_CLASSES[api_key]
        kwargs = self._fields(cls._struct._fields, "")
        return cls[version](**kwargs)

    # -- structure ---------------------------------------------------------------------------------------------
    def _fields(self, fields: Any, parent: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields:
            if not f.for_version_q(self.version):
                continue
            out[f.name] = self._value(f, parent)
        return out

    def _value(self, f: Any, parent: str) -> Any:
        rnd = self.rnd
        nullable = f.nullable_for_version_q(self.version)
        if nullable and rnd.random() < 0.1:
            return None
        if f.is_struct_array():
            n = rnd.choice((0, 1, 1, 1, 2, 2, 3)) if f.name != "topic_data" else rnd.choice((1, 1, 2))
            inner = f.array_of
            return [inner.data_class(**self._fields(inner._fields, inner.type_str)) for _ in range(n)]
        if f.is_struct():
            return f.data_class(**self._fields(f._fields, f.type_str))
        if f.is_array():
            n = rnd.choice((0, 1, 1, 2, 3))
            return [self._simple(f.name, f.array_of.type_str, parent, in_array=True) for _ in range(n)]
        return self._simple(f.name, f.type_str, parent)

    # -- leaves ------------------------------------------------------------------------------------------------
    def _simple(self, name: str, type_str: str, parent: str, in_array: bool = False) -> Any:
        rnd = self.rnd
        if type_str == "string":
            return self._string(name, parent)
        if type_str in INT_EXTREMES:
            return self._int(name, type_str, parent)
        if type_str == "bool":
            return rnd.random() < 0.5
        if type_str == "uuid":
            return self.ctx.topic_id(rnd) if "topic" in name or "Topic" in parent else uuid.UUID(int=0)
        if type_str == "float64":
            return rnd.choice((0.0, 0.5, 1.0))
        if type_str == "records":
            return batches.valid_records(rnd, zstd=self.api_key != 0 or self.version >= 7)
        if type_str == "bytes":
            if name in ("metadata", "assignment") or "Protocol" in parent or "Assignment" in parent:
                return batches.consumer_protocol_bytes(rnd, self.ctx)
            return rnd.randbytes(rnd.choice((0, 1, 8, 32)))
        raise ValueError(f"no generator for type {type_str} ({name})")

    def _string(self, name: str, parent: str) -> str:
        rnd, ctx = self.rnd, self.ctx
        topicish = "topic" in name or ("Topic" in parent and name == "name") or name == "topics"
        if topicish:
            return ctx.topic(rnd)
        if name in ("group_id", "groups", "group_ids", "key") and self.api_key != 44:
            if rnd.random() < 0.3:  # a group of its own: a JoinGroup to it has nobody to wait for
                return f"{FRESH_GROUP_PREFIX}{rnd.getrandbits(40):x}"
            return rnd.choice(ctx.groups)
        if name == "resource_name":
            topic = ctx.topic(rnd)
            if self.api_key in (33, 44) and topic == ctx.compacted:
                # the refused-batch oracle relies on the compacted topic staying compacted: a config alter (the legacy
                # AlterConfigs replaces the whole set) may name it only in byte-mutated inputs
                topic = "fz-plain"
            return rnd.choice((topic, "0", ""))
        if name in ("name", "config_names", "configuration_keys") and (
            "Config" in parent or "Resource" in parent or "config" in name or self.api_key in (32, 44)
        ):
            return rnd.choice(CONFIG_NAMES)
        if name == "value":
            return rnd.choice(CONFIG_VALUES)
        if name == "protocol_type":
            return rnd.choice(("consumer", "consumer", ""))
        if name in ("protocol_name", "name") and "Protocol" in parent:
            return rnd.choice(("range", "roundrobin", "cooperative-sticky"))
        if name == "protocol_name":
            return rnd.choice(("range", "roundrobin"))
        if name == "client_software_name":
            return "strata-fuzz"
        if name == "client_software_version":
            return "1.0"
        if name in ("member_id", "group_instance_id"):
            return rnd.choice(("", "", f"fz-member-{rnd.randrange(4)}"))
        if name == "transactional_id":
            return rnd.choice(("", "fz-txn"))
        if name == "rack_id":
            return ""
        return _short_text(rnd)

    def _int(self, name: str, type_str: str, parent: str) -> int:
        rnd = self.rnd
        if rnd.random() < 0.03:  # an extreme value here and there, in range for the type
            return rnd.choice(INT_EXTREMES[type_str])
        if name in ("timeout_ms", "max_wait_ms", "timeout"):
            return rnd.choice((0, 10, 100, 500))
        if name == "rebalance_timeout_ms":
            return rnd.choice((100, 500, 1000))
        if name == "session_timeout_ms":
            return rnd.choice((6000, 10000, 45000, 100))
        if name in ("partition", "partition_index", "partitions", "partition_id"):
            return rnd.choice((0, 0, 1, 2, 3, -1))
        if name == "acks":
            return rnd.choice((-1, 1, 0))
        if name == "num_partitions":
            return rnd.choice((1, 2, 3, -1, 0))
        if name == "count":
            return rnd.choice((2, 3, 4, 5, 1))
        if name == "replication_factor":
            return rnd.choice((1, 1, -1, 2))
        if name in ("generation_id", "generation_id_or_member_epoch"):
            return rnd.choice((-1, 0, 1, 2))
        if name in ("producer_id",):
            return rnd.choice((-1, 0, 1000))
        if name in ("producer_epoch", "leader_epoch", "current_leader_epoch", "last_fetched_epoch"):
            return rnd.choice((-1, 0, 1))
        if name in ("replica_id", "broker_id", "leader_id"):
            return rnd.choice((-1, 0, 1))
        if name == "resource_type":
            return rnd.choice((2, 2, 4, 8, 0, 1, 32))
        if name == "isolation_level":
            return rnd.choice((0, 1))
        if name == "timestamp":
            return rnd.choice((-1, -2, -3, -4, -5, -6, 0, batches.TIMESTAMP, 2**62))
        if name == "key_type":
            return rnd.choice((0, 1, 2))
        if name == "config_operation":
            return rnd.choice((0, 1, 2, 3))
        if name in ("max_bytes", "partition_max_bytes", "min_bytes"):
            return rnd.choice((0, 1, 1024, 1 << 20, 50 << 20))
        if name in ("session_id", "session_epoch"):
            return rnd.choice((0, -1, 0))
        if type_str == "int64" or "offset" in name:
            return rnd.choice((0, 1, 5, 100, -1))
        if type_str == "uint16":
            return rnd.randrange(0, 100)
        return rnd.choice((0, 1, 2, -1, 100))
