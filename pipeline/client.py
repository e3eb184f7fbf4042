"""Kafka-protocol access for the data source: driver-side planning (Metadata, ListOffsets, DescribeTopics, the
``__remote_log_metadata`` topic) and executor-side ranged reads, all through confluent-kafka (librdkafka), which
routes every request to the partition leader, so the same code works against one broker or a cluster.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Self, cast

from strata.protocol.constants import REMOTE_LOG_METADATA_TOPIC

from .options import SourceOptions, Subscription

TP = tuple[str, int]


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (deleted by retention, or the partition disappeared)."""


class ReadTimeoutError(RuntimeError):
    """A ranged read made no progress for ``kafkaConsumer.pollTimeoutMs``."""


class DirectReadRefusedError(PermissionError):
    """read.mode=direct for a topic the principal may not READ: the bucket's credentials must not bypass the
    broker's ACLs."""


def data_loss_message(what: str) -> str:
    return (
        f"{what}. Some data may have been lost because it is not available in the topic any more: it was "
        "deleted by retention, or the topic was deleted/recreated. If you want the query to skip lost data "
        "and go on, set the source option failOnDataLoss to false."
    )


def _admin_conf(opts: SourceOptions) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": opts.bootstrap, "log_level": 3}
    skip = {
        "group.id",
        "enable.auto.commit",
        "auto.offset.reset",
        "enable.partition.eof",
        "isolation.level",
        "fetch.max.bytes",
        "max.partition.fetch.bytes",
        "queued.max.messages.kbytes",
        "fetch.wait.max.ms",
    }
    conf.update({k: v for k, v in opts.kafka_conf.items() if k not in skip and not k.startswith("fetch.")})
    return conf


def _uuid_of(u: Any) -> uuid.UUID | None:
    """confluent-kafka's Uuid -> uuid.UUID (None for the zero id)."""
    if u is None:
        return None
    msb = u.get_most_significant_bits() & 0xFFFFFFFFFFFFFFFF
    lsb = u.get_least_significant_bits() & 0xFFFFFFFFFFFFFFFF
    value = (msb << 64) | lsb
    return uuid.UUID(int=value) if value else None


@dataclass(frozen=True)
class PartitionOffsets:
    earliest: int  # log start offset
    latest: int  # high watermark (or LSO at read_committed)


class Cluster:
    """Driver-side view of the cluster for one query. Not thread-safe; close() when done."""

    def __init__(self, opts: SourceOptions, timeout: float = 30.0) -> None:
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        self.opts = opts
        self.timeout = timeout
        if opts.security.protocol != "PLAINTEXT":
            self._check_credentials()
        self.admin = AdminClient(_admin_conf(opts))
        self._consumer = Consumer(opts.consumer_conf(f"strata-spark-driver-{uuid.uuid4().hex[:12]}"))

    def close(self) -> None:
        self._consumer.close()

    def _check_credentials(self) -> None:
        """Authenticate once with the wire client before librdkafka does: a refused password or certificate is
        then the broker's own message at once, not librdkafka's "broker transport failure" after the timeout."""
        from strata.cli.admin_client import AdminClient as WireAdmin
        from strata.cli.admin_client import AdminError

        errors = []
        for server in [s.strip() for s in self.opts.bootstrap.split(",") if s.strip()]:
            try:
                with WireAdmin(server, self.timeout, self.opts.security):
                    return
            except AdminError as e:
                errors.append(f"{server}: {e}")
        raise RuntimeError(f"cannot connect to the cluster: {'; '.join(errors)}")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- metadata ----------------------------------------------------------------------------------------------
    def topic_partitions(self, sub: Subscription) -> dict[str, list[int]]:
        """Topic -> partitions for a subscription. ``subscribe``d topics that do not exist yet have none; an
        ``assign``ed partition that does not exist is an error; a pattern never matches internal topics."""
        out: dict[str, list[int]] = {}
        if sub.kind == "subscribe":
            for t in sub.topics:
                parts = self.partitions_of(t)
                if parts:
                    out[t] = parts
        elif sub.kind == "pattern":
            for t in self.topic_names():
                if not t.startswith("__") and sub.matches(t):
                    parts = self.partitions_of(t)
                    if parts:
                        out[t] = parts
        else:
            for t, wanted in sub.assignment:
                existing = self.partitions_of(t)
                missing = sorted(set(wanted) - set(existing))
                if missing:
                    raise RuntimeError(f"assign: partitions {missing} of topic {t!r} do not exist (it has {existing})")
                out[t] = list(wanted)
        return out

    def partitions_of(self, topic: str) -> list[int]:
        """Partitions of one topic ([] if it does not exist). Metadata for named topics only: librdkafka's
        all-topics Metadata request is avoided (see topic_names)."""
        from confluent_kafka import KafkaException

        try:
            md = self._consumer.list_topics(topic, timeout=self.timeout)
        except KafkaException as e:
            raise RuntimeError(f"cannot read metadata of {topic!r} from {self.opts.bootstrap}: {e}") from None
        t = md.topics.get(topic)
        return [] if t is None or t.error is not None else sorted(t.partitions)

    def topic_names(self) -> list[str]:
        """Every topic name, for subscribePattern. Asked with Strata's own admin client (Metadata v12 with a null
        topic list) from the first bootstrap server that answers: librdkafka's all-topics Metadata v13 request is
        not decoded by the broker yet."""
        from strata.cli.admin_client import AdminClient as WireAdmin
        from strata.cli.admin_client import AdminError

        errors = []
        for server in [s.strip() for s in self.opts.bootstrap.split(",") if s.strip()]:
            try:
                with WireAdmin(server, self.timeout, self.opts.security) as a:
                    return a.list_topics(include_internal=True)
            except (AdminError, OSError) as e:
                errors.append(f"{server}: {e}")
        raise RuntimeError(f"cannot list topics: {'; '.join(errors)}")

    def readable_topic_ids(self, topics: list[str]) -> dict[str, uuid.UUID | None]:
        """Topic ids for read.mode=direct, which reads the bucket with the executors' own credentials: refused
        (DirectReadRefusedError) unless the broker says this principal may READ each topic (Metadata v8+
        authorized operations, KIP-430; a broker without an authorizer allows every operation)."""
        from confluent_kafka import KafkaError, KafkaException, TopicCollection

        if not topics:
            return {}
        futures = self.admin.describe_topics(
            TopicCollection(list(topics)), request_timeout=self.timeout, include_authorized_operations=True
        )
        out: dict[str, uuid.UUID | None] = {}
        for name, f in futures.items():
            try:
                desc = f.result()
            except KafkaException as e:
                if e.args and e.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    raise DirectReadRefusedError(_direct_refusal(name, "the broker denies DESCRIBE")) from None
                raise
            refusal = direct_read_refusal(name, desc.authorized_operations)
            if refusal is not None:
                raise DirectReadRefusedError(refusal)
            out[name] = _uuid_of(desc.topic_id)
        return out

    def num_partitions(self, topic: str) -> int:
        return len(self.partitions_of(topic))

    # -- offsets -----------------------------------------------------------------------------------------------
    def _list_offsets(self, specs: dict[TP, Any]) -> dict[TP, tuple[int, int]]:
        """(offset, timestamp) per partition for confluent OffsetSpecs; offset -1 when none matches."""
        from confluent_kafka import IsolationLevel, TopicPartition

        if not specs:
            return {}
        level = (
            IsolationLevel.READ_COMMITTED
            if self.opts.isolation_level == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        futures = self.admin.list_offsets(
            {TopicPartition(t, p): s for (t, p), s in specs.items()},
            isolation_level=level,
            request_timeout=self.timeout,
        )
        return {(tp.topic, tp.partition): (f.result().offset, f.result().timestamp) for tp, f in futures.items()}

    def offsets(self, tps: list[TP]) -> dict[TP, PartitionOffsets]:
        from confluent_kafka.admin import OffsetSpec

        early = self._list_offsets({tp: OffsetSpec.earliest() for tp in tps})
        late = self._list_offsets({tp: OffsetSpec.latest() for tp in tps})
        return {tp: PartitionOffsets(early[tp][0], late[tp][0]) for tp in tps}

    def offsets_for_times(self, timestamps: dict[TP, int]) -> dict[TP, int | None]:
        """The earliest offset whose timestamp is >= the given one (None: no such record)."""
        from confluent_kafka.admin import OffsetSpec

        found = self._list_offsets({tp: OffsetSpec.for_timestamp(ts) for tp, ts in timestamps.items()})
        return {tp: (off if off >= 0 else None) for tp, (off, _ts) in found.items()}

    def local_log_starts(self, tps: list[TP]) -> dict[TP, int]:
        """The earliest offset each partition's leader still holds locally (ListOffsets -4 EARLIEST_LOCAL, KIP-405,
        v8+, asked of the leader). A broker that cannot answer it gives -1: nothing is then read directly."""
        from strata.cli.admin_client import EARLIEST_LOCAL, AdminClient, AdminError

        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        out = {tp: -1 for tp in tps}
        try:
            with AdminClient(self.opts.bootstrap, self.timeout, self.opts.security) as a:
                for t, ps in by_topic.items():
                    out.update({(t, p): o for p, o in a.list_offsets(t, ps, EARLIEST_LOCAL).items()})
        except AdminError:
            return {tp: -1 for tp in tps}  # broker mode for the whole range
        return out

    def local_aborted_txns(self, local_starts: dict[TP, int]) -> dict[TP, list[Any]]:
        """READ_COMMITTED direct reads: the aborted transactions whose abort markers are in each partition's local
        log, i.e. at or after its local log start. A READ_COMMITTED Fetch at the local log start returns every
        aborted transaction overlapping what it reads, among them those that began in remote storage and ended
        locally (Kafka's collectAbortedTxns: last offset >= the fetch offset). Only (producer id, first offset)
        come back, so the last offset is set to the local log start (the executor drops the producer's records
        from the first offset until the producer's next control batch, as a Kafka consumer does)."""
        from strata.cli.admin_client import AdminClient, check_error
        from strata.protocol.registry import REQUEST_CLASSES, ApiKey
        from strata.storage.txn_index import AbortedTxn

        out: dict[TP, list[Any]] = {tp: [] for tp in local_starts}
        by_topic: dict[str, list[int]] = {}
        for (t, p), start in local_starts.items():
            if start >= 0:
                by_topic.setdefault(t, []).append(p)
        T = REQUEST_CLASSES[ApiKey.FETCH].FetchTopic
        with AdminClient(self.opts.bootstrap, self.timeout, self.opts.security) as admin:
            for topic, parts in by_topic.items():
                for conn, ps in admin.by_leader(topic, parts):
                    fetch_parts = [
                        T.FetchPartition(
                            partition=p,
                            current_leader_epoch=-1,
                            fetch_offset=local_starts[(topic, p)],
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=1,  # the first batch is returned whatever the limit
                        )
                        for p in ps
                    ]
                    _v, resp = conn.call(
                        ApiKey.FETCH,
                        ours_max=12,  # topics by name
                        replica_id=-1,
                        max_wait_ms=0,
                        min_bytes=0,
                        max_bytes=1,
                        isolation_level=1,
                        session_id=0,
                        session_epoch=-1,
                        topics=[T(topic=topic, partitions=fetch_parts)],
                        forgotten_topics_data=[],
                        rack_id="",
                    )
                    for rt in resp.responses:
                        for rp in rt.partitions:
                            check_error(rp.error_code, None, f"Fetch {topic}-{rp.partition_index}: ")
                            start = local_starts[(topic, rp.partition_index)]
                            out[(topic, rp.partition_index)] = [
                                AbortedTxn(a.producer_id, a.first_offset, start, -1)
                                for a in rp.aborted_transactions or []
                            ]
        return out

    # -- remote log metadata -----------------------------------------------------------------------------------
    def remote_segments(self, partitions: dict[TP, uuid.UUID]) -> dict[TP, list[Any]]:
        """Live remote segments (COPY_SEGMENT_FINISHED) per partition, sorted by start offset, read from the
        broker's ``__remote_log_metadata`` (only the metadata partitions that hold the requested partitions)."""
        from strata.remote.metadata import (
            RemoteLogSegmentMetadata,
            RemoteLogSegmentMetadataUpdate,
            RemoteLogSegmentState,
            RemotePartitionDeleteMetadata,
            TopicIdPartition,
        )
        from strata.remote.rlmm_partitioner import metadata_partition
        from strata.remote.rlmm_serde import deserialize
        from strata.remote.rlmm_types import MetadataDecodeError

        n = self.num_partitions(REMOTE_LOG_METADATA_TOPIC)
        if n == 0 or not partitions:
            return {tp: [] for tp in partitions}
        tips = {TopicIdPartition(tid, t, p): (t, p) for (t, p), tid in partitions.items()}
        meta_parts = sorted({metadata_partition(tip, n) for tip in tips})
        bounds = self.offsets([(REMOTE_LOG_METADATA_TOPIC, mp) for mp in meta_parts])
        segments: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        deleted: set[TopicIdPartition] = set()
        conf = self.opts.consumer_conf(f"strata-spark-rlmm-{uuid.uuid4().hex[:12]}")
        conf["isolation.level"] = "read_uncommitted"
        for mp in meta_parts:
            b = bounds[(REMOTE_LOG_METADATA_TOPIC, mp)]
            for batch in consume_range(
                conf, REMOTE_LOG_METADATA_TOPIC, mp, b.earliest, b.latest, self.opts.poll_timeout_s
            ):
                for msg in batch:
                    try:
                        rec = deserialize(msg.value())
                    except MetadataDecodeError:
                        continue
                    if isinstance(rec, RemoteLogSegmentMetadata):
                        if rec.topic_id_partition in tips:
                            segments[rec.segment_id] = rec
                    elif isinstance(rec, RemoteLogSegmentMetadataUpdate):
                        cur = segments.get(rec.remote_log_segment_id.id)
                        if cur is not None:
                            segments[cur.segment_id] = cur.create_with_update(rec)
                    elif isinstance(rec, RemotePartitionDeleteMetadata) and rec.topic_id_partition in tips:
                        deleted.add(rec.topic_id_partition)
        out: dict[TP, list[Any]] = {tp: [] for tp in partitions}
        for seg in segments.values():
            if seg.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED and seg.topic_id_partition not in deleted:
                out[tips[seg.topic_id_partition]].append(seg)
        for segs in out.values():
            segs.sort(key=lambda s: (s.start_offset, -s.end_offset))
        return out


def direct_read_refusal(topic: str, operations: list[Any] | None) -> str | None:
    """Why read.mode=direct may not read `topic` given the authorized operations the broker reported for it
    (confluent-kafka's AclOperation list; None: not reported), or None when READ is among them."""
    from confluent_kafka.admin import AclOperation

    if operations is None:
        return _direct_refusal(topic, "the broker does not report authorized operations (KIP-430)")
    if AclOperation.READ not in operations:
        return _direct_refusal(topic, "the principal lacks READ on it")
    return None


def _direct_refusal(topic: str, why: str) -> str:
    return (
        f"read.mode=direct refused for topic {topic!r}: {why}. Direct mode reads the tiered segments from the "
        "bucket with the executors' credentials, so it needs READ on the topic (ACL); use read.mode=broker "
        "or grant READ"
    )


def consume_range(
    conf: dict[str, Any],
    topic: str,
    partition: int,
    start: int,
    end: int,
    poll_timeout_s: float,
    *,
    batch_size: int = 10_000,
) -> Iterator[list[Any]]:
    """Yield lists of confluent-kafka messages of ``topic-partition`` with offsets in [start, end).

    Stops at the first offset >= end, or when the partition's end (EOF) is at or past ``end`` (offsets may have gaps:
    compaction, transaction markers). Raises DataLossError when the broker says the start is out of range, and
    ReadTimeoutError after ``poll_timeout_s`` without progress."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    if start >= end:
        return
    c = Consumer(conf)
    try:
        c.assign([TopicPartition(topic, partition, start)])
        nxt = start
        last_progress = time.monotonic()
        while nxt < end:
            # consume() returns when it has num_messages or at the timeout: ask for no more than the offsets left,
            # or the last call of every range sits out the whole timeout (or the broker's fetch wait at the high
            # watermark, for the EOF event). With gaps (compaction, markers) the EOF event or a record past `end`
            # completes the count.
            msgs = c.consume(num_messages=min(batch_size, end - nxt), timeout=0.5)
            out = []
            done = False
            for m in msgs:
                err = m.error()
                if err is not None:
                    code = err.code()
                    if code == KafkaError._PARTITION_EOF:
                        # the stubs type offset() Optional; an EOF event carries the partition's end offset
                        if cast(int, m.offset()) >= end:  # everything below `end` has been delivered
                            done = True
                        continue
                    if code in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
                        raise DataLossError(
                            data_loss_message(f"cannot read {topic}-{partition} from offset {nxt}: {err.str()}")
                        )
                    if err.retriable() or code in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
                        continue
                    raise KafkaException(err)
                off = cast(int, m.offset())  # a record's offset is never None
                if off >= end:
                    done = True
                    break
                if off >= nxt:
                    out.append(m)
                    nxt = off + 1
            if out:
                last_progress = time.monotonic()
                yield out
            if done:
                return
            if time.monotonic() - last_progress > poll_timeout_s:
                raise ReadTimeoutError(
                    f"no record of {topic}-{partition} at offsets [{nxt}, {end}) within "
                    f"{poll_timeout_s:.0f}s (kafkaConsumer.pollTimeoutMs)"
                )
    finally:
        c.close()


def log_start_offset(conf: dict[str, Any], topic: str, partition: int) -> int:
    """The partition's current log start offset (ListOffsets earliest), from an executor."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(conf)
    try:
        low, _high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30, cached=False)
        return low
    finally:
        c.close()


__all__ = [
    "REMOTE_LOG_METADATA_TOPIC",
    "Cluster",
    "DataLossError",
    "DirectReadRefusedError",
    "PartitionOffsets",
    "ReadTimeoutError",
    "consume_range",
    "data_loss_message",
    "direct_read_refusal",
    "log_start_offset",
]
