"""Options of the ``strata`` Spark data source, named and interpreted like Spark's built-in Kafka source.

Spark's option map is case-insensitive (the Python Data Source API hands us a case-insensitive dict whose keys may
come back lower-cased), so every lookup here goes through lower-cased names.

Reading (batch and streaming):

* ``kafka.bootstrap.servers`` (required); any other ``kafka.<librdkafka property>`` is passed to the consumers and
  producers (``kafka.isolation.level`` ...). Security options take the names of Spark's Kafka source (Kafka's Java
  client): ``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``,
  ``kafka.ssl.truststore.location`` / ``.type`` / ``.password``, ``kafka.ssl.keystore.*``, ``kafka.ssl.key.password``,
  ``kafka.ssl.endpoint.identification.algorithm`` (librdkafka's ``kafka.sasl.username`` / ``kafka.ssl.ca.location``
  too); they are translated for librdkafka and for the driver's wire requests (strata.cli.command_config).
* exactly one of ``subscribe`` (comma-separated topics), ``subscribePattern`` (a regex matched against whole topic
  names) and ``assign`` (JSON ``{"topicA":[0,1]}``).
* ``startingOffsets``: ``earliest`` / ``latest`` / JSON ``{"t":{"0":23,"1":-2}}`` (-2 earliest, -1 latest);
  default ``earliest`` for batch and ``latest`` for streaming. ``startingOffsetsByTimestamp`` (JSON of timestamps)
  and ``startingTimestamp`` (one timestamp for every partition) take precedence, in that order of increasing
  priority; a timestamp with no matching offset fails unless ``startingOffsetsByTimestampStrategy=latest``.
* ``endingOffsets`` (batch only): ``latest`` / JSON (-1 latest; -2 is not allowed); ``endingOffsetsByTimestamp``
  and ``endingTimestamp`` likewise (no matching offset -> latest).
* ``minPartitions``, ``maxRecordsPerPartition``: split offset ranges into more Spark partitions.
* ``includeHeaders`` (default false), ``failOnDataLoss`` (default true).
* ``maxOffsetsPerTrigger`` (streaming): at most this many offsets per micro-batch, shared out between partitions in
  proportion to their backlog.
* Strata extensions: ``read.mode`` = ``broker`` (default) | ``direct``; ``rsm.class.name`` (``s3`` by default, or
  ``local`` / any RemoteStorageManager class) and ``rsm.config.<key>`` (the broker's ``rsm.config.*`` keys) for
  direct mode; ``direct.chunkBytes`` (default 8 MiB) and ``direct.fetchConcurrency`` (default 4) size the ranged
  reads of a segment; ``kafkaConsumer.pollTimeoutMs`` (default 120000).

Writing: ``kafka.bootstrap.servers``, ``topic`` (overrides a ``topic`` column), ``kafka.*`` producer properties;
``exactlyOnce`` (default false: one transaction per task, see ``strata.pipeline.sink``) and
``transactional.id.prefix`` (the task's transactional id is ``<prefix>-<Spark partition id>``; default
``strata-spark-<query id or write id>``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from strata.cli.command_config import SECURITY_KEYS, ClientSecurity, CommandConfigError, client_security
from strata.config import ConfigError, parse_bool
from strata.protocol.constants import EARLIEST_TIMESTAMP as EARLIEST
from strata.protocol.constants import LATEST_TIMESTAMP as LATEST

# Direct mode reads a segment in ranged GETs of this size, this many in flight per task (a task holds one buffer more
# than that). Each GET costs 1-2 ms of CPU in botocore and aiohttp: an executor reading 256 MiB from SeaweedFS spent
# 0.31-0.34 CPU-s with 4 MiB ranges and 0.26-0.28 s with 8 MiB (16 MiB saves little more); S3's guidance for ranged
# GETs is 8-16 MiB too.
DIRECT_CHUNK_BYTES = 8 << 20
DIRECT_FETCH_CONCURRENCY = 4

# librdkafka properties the source sets itself; a user value would break the reading contract
_MANAGED_CONSUMER_KEYS = {
    "enable.auto.commit",
    "auto.offset.reset",
    "enable.partition.eof",
    "group.id",
    "key.deserializer",
    "value.deserializer",
}
_FORCED_PRODUCER = {"enable.idempotence": "true", "acks": "all"}


class OptionError(ValueError):
    """An option is missing, malformed or inconsistent (raised on the driver, before any task runs)."""


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}


def bool_option(name: str, raw: str | None, default: bool) -> bool:
    """A boolean Spark option (true/false, 1/0, yes/no in any case); OptionError names the option otherwise."""
    if raw is None or raw == "":
        return default
    try:
        return parse_bool(raw)
    except ConfigError:
        raise OptionError(f"option {name} must be true or false, not {raw!r}") from None


def _int(name: str, raw: str | None, *, minimum: int | None = None) -> int | None:
    if raw is None or raw.strip() == "":
        return None
    try:
        v = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {name} must be an integer, not {raw!r}") from None
    if minimum is not None and v < minimum:
        raise OptionError(f"option {name} must be at least {minimum}, got {v}")
    return v


@dataclass(frozen=True)
class OffsetSpec:
    """A starting or ending position: ``kind`` is ``earliest``, ``latest``, ``offsets`` (per-partition JSON, values
    may be -2/-1), ``timestamps`` (per-partition JSON of epoch millis) or ``timestamp`` (one for all)."""

    kind: str
    per_partition: dict[tuple[str, int], int] = field(default_factory=dict)
    timestamp: int | None = None

    def to_json(self) -> str:
        return json.dumps(
            {
                "kind": self.kind,
                "pp": [[t, p, o] for (t, p), o in sorted(self.per_partition.items())],
                "ts": self.timestamp,
            }
        )


def parse_partition_json(name: str, raw: str) -> dict[tuple[str, int], int]:
    """``{"topicA":{"0":23,"1":-1}}`` -> {("topicA", 0): 23, ("topicA", 1): -1}."""
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as e:
        raise OptionError(f"option {name}: not valid JSON ({e.msg}): {raw!r}") from None
    if not isinstance(doc, dict):
        raise OptionError(f'option {name}: expected a JSON object like {{"topic":{{"0":23}}}}, got {raw!r}')
    out: dict[tuple[str, int], int] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise OptionError(f"option {name}: topic {topic!r} must map partition numbers to values")
        for p, v in parts.items():
            try:
                out[(str(topic), int(p))] = int(v)
            except (TypeError, ValueError):
                raise OptionError(f"option {name}: bad entry {topic!r}/{p!r}: {v!r}") from None
    return out


def parse_assign(raw: str) -> dict[str, list[int]]:
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as e:
        raise OptionError(f"option assign: not valid JSON ({e.msg}): {raw!r}") from None
    if not isinstance(doc, dict) or not doc:
        raise OptionError(f'option assign: expected a JSON object like {{"topicA":[0,1]}}, got {raw!r}')
    out: dict[str, list[int]] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) for p in parts):
            raise OptionError(f"option assign: topic {topic!r} must map to a list of partition numbers")
        out[str(topic)] = sorted(set(parts))
    return out


@dataclass(frozen=True)
class Subscription:
    """Which topic partitions to read: ``kind`` is ``subscribe`` | ``pattern`` | ``assign``."""

    kind: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "pattern":
            return re.fullmatch(self.pattern or "", topic) is not None
        return any(t == topic for t, _ in self.assignment)


@dataclass(frozen=True)
class SourceOptions:
    bootstrap: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    starting_strategy_latest: bool
    min_partitions: int | None
    max_records_per_partition: int | None
    include_headers: bool
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    read_mode: str
    rsm_class: str
    rsm_config: dict[str, str]
    poll_timeout_s: float
    kafka_conf: dict[str, str] = field(repr=False)  # librdkafka properties (prefix removed): may hold passwords
    isolation_level: str
    security: ClientSecurity = field(default_factory=ClientSecurity)  # for the driver's wire requests
    direct_chunk_bytes: int = DIRECT_CHUNK_BYTES  # direct mode: size of one ranged read of a segment
    direct_fetch_concurrency: int = DIRECT_FETCH_CONCURRENCY  # direct mode: ranged reads in flight per task

    def consumer_conf(self, group_id: str) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
            "isolation.level": self.isolation_level,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
            "queued.max.messages.kbytes": 128 << 10,
            "fetch.wait.max.ms": 100,
            "log_level": 3,
        }
        conf.update({k: v for k, v in self.kafka_conf.items() if k not in _MANAGED_CONSUMER_KEYS})
        return conf


def _kafka_conf(opts: dict[str, str]) -> tuple[dict[str, str], ClientSecurity]:
    """The ``kafka.*`` options as librdkafka properties, the security ones (Kafka's Java names, as Spark's Kafka
    source takes them) translated; and that security for the wire client."""
    conf = {k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.") and k != "kafka.bootstrap.servers"}
    given = {k: v for k, v in conf.items() if k in SECURITY_KEYS}
    try:
        security = client_security(given, "options kafka.*")
    except CommandConfigError as e:
        raise OptionError(str(e)) from None
    out = {k: v for k, v in conf.items() if k not in SECURITY_KEYS}
    if given:
        out.update(security.librdkafka_config())
    return out, security


def _offset_spec(opts: dict[str, str], prefix: str, default: str, *, streaming: bool) -> OffsetSpec:
    """``startingOffsets``/``endingOffsets`` and their timestamp variants (timestamp options win)."""
    ts_all = opts.get(f"{prefix}timestamp")
    if ts_all:
        ts = _int(f"{prefix}Timestamp", ts_all, minimum=0)
        return OffsetSpec("timestamp", timestamp=ts)
    by_ts = opts.get(f"{prefix}offsetsbytimestamp")
    if by_ts:
        return OffsetSpec("timestamps", per_partition=parse_partition_json(f"{prefix}OffsetsByTimestamp", by_ts))
    raw = (opts.get(f"{prefix}offsets") or default).strip()
    low = raw.lower()
    if low in ("earliest", "latest"):
        return OffsetSpec(low)
    return OffsetSpec("offsets", per_partition=parse_partition_json(f"{prefix}Offsets", raw))


def parse_source_options(options: Mapping[str, Any], *, streaming: bool) -> SourceOptions:
    opts = _lower(options)
    bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise OptionError("option kafka.bootstrap.servers is required (host:port[,host:port...])")

    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k, "").strip()]
    if len(given) != 1:
        raise OptionError(
            "exactly one of the options subscribe, subscribePattern and assign must be set"
            + (f" (got {', '.join(given)})" if given else "")
        )
    kind = given[0]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise OptionError("option subscribe: no topic given")
        sub = Subscription("subscribe", topics=topics)
    elif kind == "subscribepattern":
        pattern = opts["subscribepattern"].strip()
        try:
            re.compile(pattern)
        except re.error as e:
            raise OptionError(f"option subscribePattern: invalid regex {pattern!r}: {e}") from None
        sub = Subscription("pattern", pattern=pattern)
    else:
        assignment = parse_assign(opts["assign"])
        sub = Subscription("assign", assignment=tuple((t, tuple(ps)) for t, ps in sorted(assignment.items())))

    starting = _offset_spec(opts, "starting", "latest" if streaming else "earliest", streaming=streaming)
    ending = _offset_spec(opts, "ending", "latest", streaming=streaming)
    if not streaming:
        if starting.kind == "latest" or (starting.kind == "offsets" and LATEST in starting.per_partition.values()):
            raise OptionError("startingOffsets: latest (-1) is not allowed in a batch query")
        if ending.kind == "earliest" or (ending.kind == "offsets" and EARLIEST in ending.per_partition.values()):
            raise OptionError("endingOffsets: earliest (-2) is not allowed in a batch query")
    elif any(k in opts for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")):
        raise OptionError("endingOffsets/endingTimestamp apply to batch queries only, not to readStream")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"option startingOffsetsByTimestampStrategy must be error or latest, not {strategy!r}")

    read_mode = opts.get("read.mode", "broker").strip().lower() or "broker"
    if read_mode not in ("broker", "direct"):
        raise OptionError(f"option read.mode must be broker or direct, not {read_mode!r}")
    kafka_conf, security = _kafka_conf(opts)
    isolation = kafka_conf.pop("isolation.level", "read_uncommitted").strip().lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise OptionError(f"option kafka.isolation.level must be read_uncommitted or read_committed, not {isolation!r}")
    rsm_config = {k[len("rsm.config.") :]: v for k, v in opts.items() if k.startswith("rsm.config.")}
    poll_ms = _int("kafkaConsumer.pollTimeoutMs", opts.get("kafkaconsumer.polltimeoutms"), minimum=1)
    return SourceOptions(
        bootstrap=bootstrap,
        subscription=sub,
        starting=starting,
        ending=ending,
        starting_strategy_latest=strategy == "latest",
        min_partitions=_int("minPartitions", opts.get("minpartitions"), minimum=1),
        max_records_per_partition=_int("maxRecordsPerPartition", opts.get("maxrecordsperpartition"), minimum=1),
        include_headers=bool_option("includeHeaders", opts.get("includeheaders"), False),
        fail_on_data_loss=bool_option("failOnDataLoss", opts.get("failondataloss"), True),
        max_offsets_per_trigger=_int("maxOffsetsPerTrigger", opts.get("maxoffsetspertrigger"), minimum=1),
        read_mode=read_mode,
        rsm_class=(opts.get("rsm.class.name") or opts.get("remote.log.storage.manager.class.name") or "s3").strip(),
        rsm_config=rsm_config,
        poll_timeout_s=(poll_ms if poll_ms is not None else 120_000) / 1000.0,
        kafka_conf=kafka_conf,
        isolation_level=isolation,
        security=security,
        direct_chunk_bytes=_int("direct.chunkBytes", opts.get("direct.chunkbytes"), minimum=64 << 10)
        or DIRECT_CHUNK_BYTES,
        direct_fetch_concurrency=_int("direct.fetchConcurrency", opts.get("direct.fetchconcurrency"), minimum=1)
        or DIRECT_FETCH_CONCURRENCY,
    )


# exactlyOnce: a task's transaction stays open while it sends its rows (up to the 120 s flush deadline and more for a
# big partition); librdkafka's default of 60 s would have the coordinator abort a slow task's transaction. Kafka's
# broker allows up to transaction.max.timeout.ms (15 minutes by default).
TRANSACTION_TIMEOUT_MS = 300_000


@dataclass(frozen=True)
class SinkOptions:
    bootstrap: str
    topic: str | None
    kafka_conf: dict[str, str] = field(repr=False)  # may hold passwords
    exactly_once: bool = False
    transactional_id_prefix: str | None = None

    def connection_conf(self) -> dict[str, Any]:
        """Bootstrap servers and the connection's security, for the sink's other clients (the marker look-up)."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "log_level": 3}
        conf.update({k: v for k, v in self.kafka_conf.items() if k.startswith(("security.", "sasl.", "ssl."))})
        return conf

    def producer_conf(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "compression.type": "none",
            "log_level": 3,
        }
        if self.exactly_once:
            conf["transaction.timeout.ms"] = TRANSACTION_TIMEOUT_MS
        conf.update(self.kafka_conf)
        conf.update(_FORCED_PRODUCER)
        return conf


def parse_sink_options(options: Mapping[str, Any]) -> SinkOptions:
    opts = _lower(options)
    bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise OptionError("option kafka.bootstrap.servers is required (host:port[,host:port...])")
    kafka_conf, _ = _kafka_conf(opts)
    for k, forced in _FORCED_PRODUCER.items():
        given = kafka_conf.get(k)
        if given is not None and given.strip().lower() not in (forced, "-1" if k == "acks" else forced):
            raise OptionError(
                f"option kafka.{k}={given} is not allowed: the strata sink always produces with "
                f"{k}={forced} (idempotent, fully acknowledged writes)"
            )
    for k in ("key.serializer", "value.serializer"):
        if k in kafka_conf:
            raise OptionError(f"option kafka.{k} is not supported by the strata sink")
    if "transactional.id" in kafka_conf:
        raise OptionError(
            "option kafka.transactional.id is not supported: each task needs its own transactional id; set "
            "exactlyOnce=true (and transactional.id.prefix to name them)"
        )
    exactly_once = bool_option("exactlyOnce", opts.get("exactlyonce"), False)
    prefix = opts.get("transactional.id.prefix", "").strip() or None
    if prefix is not None and not exactly_once:
        raise OptionError("option transactional.id.prefix needs exactlyOnce=true")
    topic = opts.get("topic", "").strip() or None
    return SinkOptions(
        bootstrap=bootstrap,
        topic=topic,
        kafka_conf=kafka_conf,
        exactly_once=exactly_once,
        transactional_id_prefix=prefix,
    )


__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "OptionError",
    "SinkOptions",
    "SourceOptions",
    "Subscription",
    "parse_assign",
    "parse_partition_json",
    "parse_sink_options",
    "parse_source_options",
]
