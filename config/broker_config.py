"""Broker configuration: a server.properties file plus ``--override key=value``, with Kafka's property names."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .authorizer import AUTHORIZER_DEFS
from .connection_quotas import ConnectionQuotas
from .defs import ConfigDef, ConfigError, at_least, retention_value
from .defs import ConfigType as T
from .iceberg import CATALOG_PROP_PREFIX, ICEBERG_BROKER_DEFS
from .security import SECURITY_DEFS, check_security, protocol_map
from .topic_config import TOPIC_CONFIG_DEFS, TOPIC_TO_BROKER_SYNONYM, LogConfig


def _check_metrics_listener(url: str) -> None:
    """http://host:port[/path], or empty (disabled): a bad value fails at load, not when the broker binds it."""
    if not url:
        return
    u = urlparse(url if "://" in url else f"http://{url}")
    try:
        _ = u.port  # raises for a port that is not a number in 0..65535
    except ValueError:
        raise ConfigError(f"{url!r} has no valid port (expected http://host:port/metrics)") from None
    if u.scheme != "http" or not u.hostname:
        raise ConfigError(f"{url!r} is not of the form http://host:port/metrics")


def _check_store_connect(spec: str) -> None:
    """Empty (one broker, local metadata) or etcd://host[:port][,host[:port]...]."""
    if not spec:
        return
    if not spec.startswith("etcd://"):
        raise ConfigError(f"{spec!r} must start with etcd://")
    hosts = [h.strip().rstrip("/") for h in spec[len("etcd://") :].split(",") if h.strip().rstrip("/")]
    if not hosts:
        raise ConfigError(f"{spec!r} names no etcd endpoint")
    for h in hosts:
        _, sep, port = h.rpartition(":")
        if sep and not (port.isdigit() and 0 < int(port) <= 65535):
            raise ConfigError(f"{spec!r}: {h!r} has no valid port")


_BROKER_DEFS: list[ConfigDef] = [
    ConfigDef("broker.id", T.INT, 0, "this broker's id (node.id is a synonym)", at_least(0)),
    ConfigDef("node.id", T.INT, -1, "synonym of broker.id"),
    ConfigDef("cluster.id", T.STRING, "", "cluster id; generated and kept in meta.properties when empty"),
    ConfigDef("broker.rack", T.STRING, "", "rack of this broker"),
    ConfigDef("listeners", T.LIST, ["PLAINTEXT://127.0.0.1:9092"], "listeners to bind"),
    ConfigDef("advertised.listeners", T.LIST, [], "listeners given to clients; defaults to listeners"),
    ConfigDef("log.dirs", T.LIST, [], "log directories (log.dir is used when empty)"),
    ConfigDef("log.dir", T.STRING, "./strata-data", "log directory when log.dirs is unset"),
    ConfigDef("num.partitions", T.INT, 1, "default partition count of new topics", at_least(1)),
    ConfigDef("default.replication.factor", T.INT, 1, "", at_least(1)),
    ConfigDef("auto.create.topics.enable", T.BOOLEAN, True, "create topics on Metadata/Produce requests"),
    ConfigDef("delete.topic.enable", T.BOOLEAN, True, ""),
    ConfigDef("log.cleanup.policy", T.LIST, ["delete"], "", choices=("delete", "compact")),
    ConfigDef("log.segment.bytes", T.INT, 1024**3, "", at_least(14)),
    ConfigDef("log.roll.ms", T.LONG, -1, "takes precedence over log.roll.hours"),
    ConfigDef("log.roll.hours", T.INT, 168, "", at_least(1)),
    ConfigDef("log.roll.jitter.ms", T.LONG, 0, ""),
    ConfigDef("log.retention.ms", T.LONG, None, "takes precedence over minutes/hours"),
    ConfigDef("log.retention.minutes", T.INT, None, ""),
    ConfigDef("log.retention.hours", T.INT, 168, ""),
    ConfigDef("log.retention.bytes", T.LONG, -1, "", retention_value),
    ConfigDef("log.retention.check.interval.ms", T.LONG, 300000, "", at_least(1)),
    ConfigDef("log.index.size.max.bytes", T.INT, 10 * 1024 * 1024, "", at_least(4)),
    ConfigDef("log.index.interval.bytes", T.INT, 4096, "", at_least(0)),
    ConfigDef("log.flush.interval.messages", T.LONG, 2**63 - 1, "fsync after this many messages", at_least(1)),
    ConfigDef("log.flush.interval.ms", T.LONG, None, "fsync after this many ms (default: the scheduler interval)"),
    ConfigDef("log.flush.scheduler.interval.ms", T.LONG, 2**63 - 1, ""),
    ConfigDef("log.flush.offset.checkpoint.interval.ms", T.INT, 60000, "", at_least(0)),
    ConfigDef("log.flush.start.offset.checkpoint.interval.ms", T.INT, 60000, "", at_least(0)),
    ConfigDef("log.segment.delete.delay.ms", T.LONG, 60000, "", at_least(0)),
    ConfigDef(
        "num.recovery.threads.per.data.dir", T.INT, 1, "threads loading (and recovering) logs at startup", at_least(1)
    ),
    ConfigDef(
        "log.open.files.cache.size",
        T.INT,
        4096,
        "Strata only: segment files kept open at most (an LRU; at most half the soft RLIMIT_NOFILE)",
        at_least(1),
    ),
    ConfigDef("log.message.timestamp.type", T.STRING, "CreateTime", "", choices=("CreateTime", "LogAppendTime")),
    ConfigDef("log.message.timestamp.before.max.ms", T.LONG, 2**63 - 1, ""),
    ConfigDef("log.message.timestamp.after.max.ms", T.LONG, 3600 * 1000, ""),
    ConfigDef("log.cleaner.delete.retention.ms", T.LONG, 24 * 3600 * 1000, ""),
    ConfigDef("log.cleaner.min.compaction.lag.ms", T.LONG, 0, ""),
    ConfigDef("log.cleaner.max.compaction.lag.ms", T.LONG, 2**63 - 1, ""),
    ConfigDef("log.cleaner.min.cleanable.ratio", T.DOUBLE, 0.5, ""),
    ConfigDef("log.cleaner.enable", T.BOOLEAN, True, "run the log cleaner (compaction of cleanup.policy=compact)"),
    ConfigDef("log.cleaner.threads", T.INT, 1, "log cleaner threads", at_least(0)),
    ConfigDef("log.cleaner.backoff.ms", T.LONG, 15000, "sleep when no log needs cleaning", at_least(0)),
    ConfigDef(
        "log.cleaner.dedupe.buffer.size",
        T.LONG,
        128 * 1024 * 1024,
        "memory of the cleaners' key -> offset maps, shared by the threads",
        at_least(0),
    ),
    ConfigDef("log.cleaner.io.buffer.size", T.INT, 512 * 1024, "cleaner read/write buffer", at_least(0)),
    ConfigDef("log.cleaner.io.buffer.load.factor", T.DOUBLE, 0.9, "fill ratio of the dedupe map"),
    ConfigDef(
        "log.cleaner.io.max.bytes.per.second",
        T.DOUBLE,
        1.7976931348623157e308,
        "cleaner I/O throttle (read + written bytes)",
    ),
    ConfigDef("log.preallocate", T.BOOLEAN, False, ""),
    ConfigDef("log.local.retention.ms", T.LONG, -2, ""),
    ConfigDef("log.local.retention.bytes", T.LONG, -2, ""),
    ConfigDef("message.max.bytes", T.INT, 1024 * 1024 + 12, "largest record batch a topic accepts", at_least(0)),
    ConfigDef("min.insync.replicas", T.INT, 1, "", at_least(1)),
    ConfigDef(
        "compression.type",
        T.STRING,
        "producer",
        "",
        choices=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
    ),
    ConfigDef("unclean.leader.election.enable", T.BOOLEAN, False, ""),
    ConfigDef("socket.request.max.bytes", T.INT, 100 * 1024 * 1024, "largest request frame", at_least(1)),
    ConfigDef("socket.send.buffer.bytes", T.INT, 102400, ""),
    ConfigDef("socket.receive.buffer.bytes", T.INT, 102400, ""),
    ConfigDef("connections.max.idle.ms", T.LONG, 600000, "close connections idle this long"),
    ConfigDef(
        "queued.max.requests", T.INT, 500, "requests in progress at once; beyond it no socket is read", at_least(1)
    ),
    ConfigDef(
        "queued.max.request.bytes",
        T.LONG,
        -1,
        "bytes of requests in progress; at the limit no request body is read (-1: unbounded)",
    ),
    ConfigDef(
        "connection.failed.authentication.delay.ms",
        T.INT,
        100,
        "delay of the answer and close after a failed authentication",
        at_least(0),
    ),
    ConfigDef("max.connections", T.INT, 2**31 - 1, "broker-wide; at the limit new connections wait", at_least(0)),
    ConfigDef("max.connections.per.ip", T.INT, 2**31 - 1, "beyond it a new connection is closed", at_least(0)),
    ConfigDef("max.connections.per.ip.overrides", T.STRING, "", "host:count,... overriding max.connections.per.ip"),
    ConfigDef("fetch.max.bytes", T.INT, 55 * 1024 * 1024, "broker cap on a fetch response", at_least(0)),
    ConfigDef(
        "max.incremental.fetch.session.cache.slots", T.INT, 1000, "KIP-227 fetch sessions the broker keeps", at_least(0)
    ),
    ConfigDef(
        "min.incremental.fetch.session.eviction.ms",
        T.LONG,
        120000,
        "a fetch session idle (or, for the size rule, existing) this long may be evicted (Kafka's fixed 120 s)",
        at_least(0),
    ),
    ConfigDef(
        "fetch.zero.copy.enable",
        T.BOOLEAN,
        True,
        "Strata: Fetch sends local segment bytes with sendfile on plaintext listeners",
    ),
    ConfigDef(
        "fetch.zero.copy.send.buffer.bytes",
        T.INT,
        4 << 20,
        "Strata: SO_SNDBUF of a connection once it sends a zero-copy Fetch response; -1 keeps the OS's autotuning",
        at_least(-1),
    ),
    # replication (Kafka's ReplicationConfigs)
    ConfigDef(
        "replica.lag.time.max.ms",
        T.LONG,
        30000,
        "a follower that has not caught up for this long is removed from the ISR",
        at_least(1),
    ),
    ConfigDef(
        "replica.fetch.max.bytes", T.INT, 1024 * 1024, "bytes per partition a follower fetch asks for", at_least(0)
    ),
    ConfigDef(
        "replica.fetch.response.max.bytes", T.INT, 10 * 1024 * 1024, "bytes per follower fetch response", at_least(0)
    ),
    ConfigDef("replica.fetch.wait.max.ms", T.INT, 500, "long-poll time of a follower fetch", at_least(0)),
    ConfigDef("replica.fetch.min.bytes", T.INT, 1, "bytes a follower fetch waits for", at_least(1)),
    ConfigDef("replica.fetch.backoff.ms", T.INT, 1000, "pause after a follower fetch error", at_least(0)),
    ConfigDef("replica.socket.timeout.ms", T.INT, 30000, "socket timeout of follower requests", at_least(1)),
    # cluster: metadata store (etcd), liveness, controller (docs/cluster.md)
    ConfigDef(
        "metadata.store.connect",
        T.STRING,
        "",
        "etcd://host:port[,host:port] selects the etcd metadata store; empty: one broker, local file store",
        _check_store_connect,
    ),
    ConfigDef("metadata.store.prefix", T.STRING, "/strata", "etcd key prefix; keys live under <prefix>/<cluster.id>/"),
    ConfigDef(
        "broker.session.timeout.ms",
        T.INT,
        9000,
        "TTL of the broker's etcd lease: a broker is declared dead this long after its last keep-alive",
        at_least(1),
    ),
    ConfigDef("broker.heartbeat.interval.ms", T.INT, 2000, "how often the broker keeps its lease alive", at_least(1)),
    ConfigDef(
        "broker.liveness.connection.check.enable",
        T.BOOLEAN,
        True,
        "revoke a peer's lease at once when its connection closes and its listener refuses connections "
        "(a killed process), instead of waiting for broker.session.timeout.ms (docs/cluster.md)",
    ),
    ConfigDef(
        "controlled.shutdown.enable",
        T.BOOLEAN,
        True,
        "on SIGTERM, ask the controller to move leadership away before stopping",
    ),
    ConfigDef(
        "controlled.shutdown.max.retries", T.INT, 3, "controlled-shutdown attempts before stopping anyway", at_least(0)
    ),
    ConfigDef(
        "controlled.shutdown.retry.backoff.ms", T.LONG, 5000, "pause between controlled-shutdown attempts", at_least(0)
    ),
    ConfigDef(
        "auto.leader.rebalance.enable",
        T.BOOLEAN,
        True,
        "the controller moves leadership back to preferred replicas when brokers are imbalanced",
    ),
    ConfigDef(
        "leader.imbalance.check.interval.seconds",
        T.LONG,
        300,
        "how often the controller checks the balance",
        at_least(1),
    ),
    ConfigDef(
        "leader.imbalance.per.broker.percentage",
        T.INT,
        10,
        "share of a broker's preferred partitions it may not lead before a rebalance",
        at_least(0),
    ),
    ConfigDef(
        "listener.security.protocol.map",
        T.LIST,
        ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"],
        "listener name -> security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)",
    ),
    ConfigDef(
        "inter.broker.listener.name",
        T.STRING,
        "",
        "listener other brokers use to reach this one (default: the first listener)",
    ),
    # group coordinator (classic protocol) and __consumer_offsets
    ConfigDef(
        "group.initial.rebalance.delay.ms",
        T.INT,
        3000,
        "wait for more members before the first rebalance of an empty group",
        at_least(0),
    ),
    ConfigDef(
        "group.min.session.timeout.ms", T.INT, 6000, "smallest session timeout a member may ask for", at_least(0)
    ),
    ConfigDef(
        "group.max.session.timeout.ms", T.INT, 1800000, "largest session timeout a member may ask for", at_least(0)
    ),
    ConfigDef("group.max.size", T.INT, 2**31 - 1, "members per group", at_least(1)),
    # consumer protocol (KIP-848) group settings: the defaults and bounds of the GROUP config resources
    ConfigDef("group.consumer.session.timeout.ms", T.INT, 45000, "default consumer.session.timeout.ms", at_least(1)),
    ConfigDef("group.consumer.min.session.timeout.ms", T.INT, 45000, "", at_least(1)),
    ConfigDef("group.consumer.max.session.timeout.ms", T.INT, 60000, "", at_least(1)),
    ConfigDef(
        "group.consumer.heartbeat.interval.ms", T.INT, 5000, "default consumer.heartbeat.interval.ms", at_least(1)
    ),
    ConfigDef("group.consumer.min.heartbeat.interval.ms", T.INT, 5000, "", at_least(1)),
    ConfigDef("group.consumer.max.heartbeat.interval.ms", T.INT, 15000, "", at_least(1)),
    ConfigDef(
        "group.consumer.max.size", T.INT, 2**31 - 1, "members per consumer group (consumer protocol)", at_least(1)
    ),
    ConfigDef(
        "group.consumer.assignors",
        T.LIST,
        ["uniform", "range"],
        "server-side assignors, the first being the default (consumer protocol)",
    ),
    ConfigDef(
        "group.consumer.migration.policy",
        T.STRING,
        "bidirectional",
        "conversion between classic and consumer groups",
        choices=("disabled", "upgrade", "downgrade", "bidirectional"),
    ),
    ConfigDef("offsets.topic.num.partitions", T.INT, 50, "partitions of __consumer_offsets (set once)", at_least(1)),
    ConfigDef("offsets.topic.replication.factor", T.SHORT, 1, "replication factor of __consumer_offsets", at_least(1)),
    ConfigDef(
        "offsets.topic.segment.bytes", T.INT, 100 * 1024 * 1024, "segment size of __consumer_offsets", at_least(1)
    ),
    ConfigDef("offsets.load.buffer.size", T.INT, 5 * 1024 * 1024, "read size when loading groups", at_least(1)),
    ConfigDef(
        "offsets.retention.minutes", T.INT, 10080, "committed offsets of empty groups expire after this", at_least(1)
    ),
    ConfigDef(
        "offsets.retention.check.interval.ms", T.LONG, 600000, "how often offsets are checked for expiry", at_least(1)
    ),
    ConfigDef("offset.metadata.max.bytes", T.INT, 4096, "largest metadata string of a committed offset"),
    # transactions (names and defaults from Kafka's TransactionLogConfig and TransactionStateManagerConfig)
    ConfigDef(
        "transaction.state.log.num.partitions", T.INT, 50, "partitions of __transaction_state (set once)", at_least(1)
    ),
    ConfigDef(
        "transaction.state.log.replication.factor",
        T.SHORT,
        3,
        "replication factor of __transaction_state (capped by the live brokers)",
        at_least(1),
    ),
    ConfigDef("transaction.state.log.min.isr", T.INT, 2, "min.insync.replicas of __transaction_state", at_least(1)),
    ConfigDef(
        "transaction.state.log.segment.bytes",
        T.INT,
        100 * 1024 * 1024,
        "segment size of __transaction_state",
        at_least(1),
    ),
    ConfigDef(
        "transaction.state.log.load.buffer.size",
        T.INT,
        5 * 1024 * 1024,
        "read size when loading transactions",
        at_least(1),
    ),
    ConfigDef(
        "transaction.max.timeout.ms",
        T.INT,
        900000,
        "largest transaction.timeout.ms a producer may ask for",
        at_least(1),
    ),
    ConfigDef(
        "transactional.id.expiration.ms", T.INT, 604800000, "idle transactional ids are removed after this", at_least(1)
    ),
    ConfigDef(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        T.INT,
        10000,
        "how often transactions past their timeout are looked for and aborted",
        at_least(1),
    ),
    ConfigDef(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        T.INT,
        3600000,
        "how often expired transactional ids are removed",
        at_least(1),
    ),
    # KIP-405 tiered storage (names and defaults from Kafka's RemoteLogManagerConfig)
    ConfigDef("remote.log.storage.system.enable", T.BOOLEAN, False, "enable tiered storage on this broker"),
    ConfigDef(
        "remote.log.storage.manager.class.name",
        T.STRING,
        "local",
        "RemoteStorageManager: local (LocalTieredStorage), s3, or module:Class",
    ),
    ConfigDef(
        "remote.log.metadata.manager.class.name",
        T.STRING,
        "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager",
        "only the topic-based RLMM is implemented",
    ),
    ConfigDef("remote.log.metadata.manager.listener.name", T.STRING, "", ""),
    ConfigDef("remote.log.manager.task.interval.ms", T.LONG, 30000, "", at_least(1)),
    ConfigDef("remote.partition.remover.task.interval.ms", T.LONG, 3600000, "", at_least(1)),
    ConfigDef("remote.log.manager.task.retry.backoff.ms", T.LONG, 500, "", at_least(1)),
    ConfigDef("remote.log.manager.task.retry.backoff.max.ms", T.LONG, 30000, "", at_least(1)),
    ConfigDef("remote.log.manager.thread.pool.size", T.INT, 2, "", at_least(1)),
    ConfigDef("remote.log.manager.copier.thread.pool.size", T.INT, 10, "", at_least(1)),
    ConfigDef("remote.log.manager.expiration.thread.pool.size", T.INT, 10, "", at_least(1)),
    ConfigDef("remote.log.reader.threads", T.INT, 10, "", at_least(1)),
    ConfigDef("remote.log.reader.max.pending.tasks", T.INT, 100, "", at_least(1)),
    ConfigDef("remote.log.index.file.cache.total.size.bytes", T.LONG, 1024**3, "", at_least(1)),
    ConfigDef("quota.window.num", T.INT, 11, "samples of a client quota's rate (KIP-13)", at_least(1)),
    ConfigDef("quota.window.size.seconds", T.INT, 1, "time span of one client quota sample", at_least(1)),
    ConfigDef("remote.log.manager.copy.max.bytes.per.second", T.LONG, 2**63 - 1, "KIP-956", at_least(1)),
    ConfigDef("remote.log.manager.copy.quota.window.num", T.INT, 11, "", at_least(1)),
    ConfigDef("remote.log.manager.copy.quota.window.size.seconds", T.INT, 1, "", at_least(1)),
    ConfigDef("remote.log.manager.fetch.max.bytes.per.second", T.LONG, 2**63 - 1, "KIP-956", at_least(1)),
    ConfigDef("remote.log.manager.fetch.quota.window.num", T.INT, 11, "", at_least(1)),
    ConfigDef("remote.log.manager.fetch.quota.window.size.seconds", T.INT, 1, "", at_least(1)),
    ConfigDef("remote.fetch.max.wait.ms", T.INT, 500, "KIP-1018", at_least(1)),
    ConfigDef("remote.list.offsets.request.timeout.ms", T.LONG, 30000, "KIP-1075", at_least(1)),
    ConfigDef("remote.log.metadata.topic.num.partitions", T.INT, 50, "", at_least(1)),
    ConfigDef("remote.log.metadata.topic.replication.factor", T.SHORT, 3, "", at_least(1)),
    ConfigDef("remote.log.metadata.topic.retention.ms", T.LONG, -1, ""),
    ConfigDef("remote.log.metadata.consume.wait.ms", T.LONG, 120000, "", at_least(0)),
    ConfigDef(
        "remote.log.metadata.initialization.retry.max.timeout.ms",
        T.LONG,
        120000,
        "how long a broker creating __remote_log_metadata waits for enough brokers for its replication factor",
        at_least(0),
    ),
    ConfigDef("remote.log.metadata.initialization.retry.interval.ms", T.LONG, 100, "", at_least(1)),
    ConfigDef("follower.fetch.last.tiered.offset.enable", T.BOOLEAN, False, "KIP-1023"),
    # bucket manifests (issue 24; Strata's own names)
    ConfigDef(
        "remote.manifest.upload.interval.ms",
        T.LONG,
        10000,
        "at most one partition manifest write per partition per interval (after copies and remote deletions)",
        at_least(0),
    ),
    ConfigDef(
        "remote.cluster.manifest.interval.ms",
        T.LONG,
        60000,
        "how often the controller (or single broker) writes the cluster manifest; 0 disables it",
        at_least(0),
    ),
    ConfigDef("remote.manifest.retained.revisions", T.INT, 3, "manifest revisions kept per directory", at_least(1)),
    ConfigDef(
        "remote.readreplica.sync.interval.ms",
        T.LONG,
        30000,
        "how often a read-replica topic reads its origin's partition manifests",
        at_least(1),
    ),
    ConfigDef(
        "cluster.restore.enable",
        T.BOOLEAN,
        False,
        "restore a new, empty cluster from the bucket's manifests: topics, group offsets, ACLs, SCRAM users, quotas",
    ),
    ConfigDef(
        "cluster.restore.exclude.topics",
        T.LIST,
        [],
        "topics a cluster restore leaves in the bucket (to recover later, e.g. with a retention window)",
    ),
    ConfigDef(
        "producer.id.expiration.ms",
        T.INT,
        86400000,
        "forget an idle producer id's state after this long (idempotent-producer dedupe)",
        at_least(1),
    ),
    ConfigDef(
        "producer.id.expiration.check.interval.ms",
        T.INT,
        600000,
        "how often idle producer ids are expired",
        at_least(1),
    ),
    ConfigDef(
        "metrics.listener",
        T.STRING,
        "http://127.0.0.1:9464/metrics",
        "Prometheus endpoint; empty disables it",
        _check_metrics_listener,
    ),
    ConfigDef("log.format", T.STRING, "console", "console or json", choices=("console", "json")),
    ConfigDef("log.level", T.STRING, "INFO", "", choices=("DEBUG", "INFO", "WARNING", "ERROR")),
]

BROKER_CONFIG_DEFS: dict[str, ConfigDef] = {
    d.name: d for d in _BROKER_DEFS + SECURITY_DEFS + AUTHORIZER_DEFS + ICEBERG_BROKER_DEFS
}

# Keys under these prefixes belong to plugins (Kafka's remote.log.storage.manager.impl.prefix and
# remote.log.metadata.manager.impl.prefix defaults) or to one listener: not reported as unknown.
PLUGIN_PREFIXES = ("rsm.config.", "rlmm.config.", "listener.name.", CATALOG_PROP_PREFIX)


def broker_default(key: str) -> Any:
    """The default of broker property `key`, from its ConfigDef: components that take plain mappings (or build
    their config objects in tests) read defaults here, so each default is written once."""
    return BROKER_CONFIG_DEFS[key].default


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties subset: key=value or key: value, # and ! comments, trailing-backslash continuation."""
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        line, pending = pending + line, ""
        for i, ch in enumerate(line):
            if ch in "=:":
                out[line[:i].strip()] = line[i + 1 :].strip()
                break
        else:
            out[line] = ""
    return out


@dataclass
class Listener:
    name: str
    host: str
    port: int

    @classmethod
    def parse(cls, spec: str) -> Listener:
        try:
            name, rest = spec.split("://", 1)
            host, port = rest.rsplit(":", 1)
            listener = cls(name.upper(), host.strip("[]"), int(port))
        except ValueError:
            raise ConfigError(f"listener {spec!r} is not of the form NAME://host:port") from None
        if not 0 <= listener.port <= 65535:
            raise ConfigError(f"listener {spec!r}: port {listener.port} is not between 0 and 65535")
        return listener


@dataclass
class BrokerConfig:
    """Validated broker properties. ``values`` holds every known key's effective value, ``originals`` what the
    properties file and overrides set (the static layer), ``dynamic_default`` and ``dynamic_broker`` the dynamic
    configs of the cluster-wide default and of this broker (config/dynamic.py), which take precedence in that
    order: broker, default, static."""

    values: dict[str, Any]
    originals: dict[str, str] = field(default_factory=dict)
    dynamic_default: dict[str, str] = field(default_factory=dict)
    dynamic_broker: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | os.PathLike | None = None, overrides: Iterable[str] = ()) -> BrokerConfig:
        raw: dict[str, str] = {}
        if path is not None:
            try:
                raw.update(parse_properties(Path(path).read_text()))
            except OSError as e:
                raise ConfigError(f"cannot read {path}: {e.strerror}") from None
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"--override {item!r} is not of the form key=value")
            k, v = item.split("=", 1)
            raw[k.strip()] = v.strip()
        return cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> BrokerConfig:
        values = {name: d.default for name, d in BROKER_CONFIG_DEFS.items()}
        originals: dict[str, str] = {}
        for key, v in raw.items():
            d = BROKER_CONFIG_DEFS.get(key)
            if d is None:
                # Kafka logs unknown keys and carries on; we keep them for later layers (rsm.config.* etc.).
                values[key] = v
                originals[key] = str(v)
                continue
            try:
                values[key] = d.parse(v)
            except ConfigError as e:
                raise ConfigError(f"Invalid value {v!r} for configuration {key}: {e}") from None
            originals[key] = str(v)
        if values["node.id"] >= 0 and "broker.id" not in raw:
            values["broker.id"] = values["node.id"]
        ConnectionQuotas.from_values(values)  # KafkaConfig's checks, at load: a bad value fails with exit code 2
        if 0 < values["queued.max.request.bytes"] < values["socket.request.max.bytes"]:
            raise ConfigError("queued.max.request.bytes must be larger or equal to socket.request.max.bytes")
        return cls(values, originals)

    def apply_dynamic(self, cluster_default: Mapping[str, str], per_broker: Mapping[str, str]) -> set[str]:
        """Make the given dynamic layers current and return the keys whose effective value changed. ``values`` is
        updated in place: every component holds this one object. Raises ConfigError (nothing changed) if a value
        does not parse."""
        merged = {**self.originals, **cluster_default, **per_broker}
        new = BrokerConfig.from_dict(merged).values
        changed = {k for k in new.keys() | self.values.keys() if new.get(k) != self.values.get(k)}
        self.values.clear()
        self.values.update(new)
        self.dynamic_default, self.dynamic_broker = dict(cluster_default), dict(per_broker)
        return changed

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def unknown_keys(self) -> list[str]:
        """Keys the user set that no broker config defines (Kafka logs them as unused; typos end up here)."""
        return sorted(k for k in self.originals if k not in BROKER_CONFIG_DEFS and not k.startswith(PLUGIN_PREFIXES))

    @property
    def broker_id(self) -> int:
        return self.values["broker.id"]

    @property
    def listeners(self) -> list[Listener]:
        return [Listener.parse(s) for s in self.values["listeners"]]

    @property
    def advertised_listeners(self) -> list[Listener]:
        adv = self.values["advertised.listeners"]
        return [Listener.parse(s) for s in adv] if adv else self.listeners

    def check_listeners(self) -> None:
        """What Kafka's KafkaConfig checks of the listener settings, with its reasons: distinct listener names, each
        with a security protocol in listener.security.protocol.map (config/security.py checks the protocols and
        SASL mechanisms), advertised listeners and inter.broker.listener.name among them."""
        protocols = protocol_map(self.values)
        names = [lst.name for lst in self.listeners]
        if len(set(names)) != len(names):
            raise ConfigError(f"listeners: each listener must have a different name, got {', '.join(names)}")
        for lst in self.listeners:
            if lst.name not in protocols:
                raise ConfigError(f"listeners: listener {lst.name} is not in listener.security.protocol.map")
        for adv in self.advertised_listeners:
            if adv.name not in names:
                raise ConfigError(f"advertised.listeners: {adv.name} is not a listener name in listeners")
        inter = self.inter_broker_listener_name.upper()
        if inter and inter not in {a.name for a in self.advertised_listeners}:
            raise ConfigError(
                f"inter.broker.listener.name must be a listener name defined in advertised.listeners: {inter} is not "
                f"one of {', '.join(a.name for a in self.advertised_listeners)}"
            )
        check_security(self.values, {n: protocols[n] for n in names}, inter or names[0])

    def security_protocol(self, listener: str) -> str:
        """The protocol of a listener (listener.security.protocol.map)."""
        return protocol_map(self.values).get(listener.upper(), "PLAINTEXT")

    @property
    def inter_broker_listener_name(self) -> str:
        """The listener brokers reach each other on; empty: each broker's first endpoint."""
        return self.values.get("inter.broker.listener.name") or ""

    @property
    def connection_quotas(self) -> ConnectionQuotas:
        return ConnectionQuotas.from_values(self.values)

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.values["log.dirs"] or [self.values["log.dir"]]
        return [Path(d).expanduser().resolve() for d in dirs]

    def _retention_ms(self) -> int:
        if self.values["log.retention.ms"] is not None:
            return self.values["log.retention.ms"]
        if self.values["log.retention.minutes"] is not None:
            return self.values["log.retention.minutes"] * 60_000
        return self.values["log.retention.hours"] * 3_600_000

    def _roll_ms(self) -> int:
        if self.values["log.roll.ms"] > 0:
            return self.values["log.roll.ms"]
        return self.values["log.roll.hours"] * 3_600_000

    def _flush_ms(self) -> int:
        if self.values["log.flush.interval.ms"] is not None:
            return self.values["log.flush.interval.ms"]
        return self.values["log.flush.scheduler.interval.ms"]

    def topic_defaults(self) -> dict[str, Any]:
        """Topic config values as the broker's settings make them (the STATIC_BROKER_CONFIG layer)."""
        out: dict[str, Any] = {}
        for topic_key, broker_key in TOPIC_TO_BROKER_SYNONYM.items():
            if broker_key == "log.retention.ms":
                out[topic_key] = self._retention_ms()
            elif broker_key == "log.roll.ms":
                out[topic_key] = self._roll_ms()
            elif broker_key == "log.flush.interval.ms":
                out[topic_key] = self._flush_ms()
            elif broker_key in self.values and self.values[broker_key] is not None:
                out[topic_key] = self.values[broker_key]
        return out

    def broker_set_topic_keys(self) -> set[str]:
        """Topic keys whose broker synonym the user set explicitly (statically or dynamically)."""
        keys = set()
        set_keys = set(self.originals) | set(self.dynamic_default) | set(self.dynamic_broker)
        for topic_key, broker_key in TOPIC_TO_BROKER_SYNONYM.items():
            fam = {broker_key}
            if broker_key == "log.retention.ms":
                fam |= {"log.retention.minutes", "log.retention.hours"}
            if broker_key == "log.roll.ms":
                fam |= {"log.roll.hours"}
            if fam & set_keys:
                keys.add(topic_key)
        return keys

    def log_config(self, overrides: Mapping[str, Any] | None = None) -> LogConfig:
        return LogConfig.from_defaults(self.topic_defaults(), overrides)

    def prefixed(self, prefix: str) -> dict[str, Any]:
        return {k[len(prefix) :]: v for k, v in self.values.items() if k.startswith(prefix)}


__all__ = ["BrokerConfig", "BROKER_CONFIG_DEFS", "TOPIC_CONFIG_DEFS", "Listener", "parse_properties", "ConfigError"]
