"""``strata remote-log-metadata``: print ``__remote_log_metadata`` like Kafka's RemoteLogMetadataFormatter.

Kafka's way to look at the topic is ``kafka-console-consumer.sh --topic __remote_log_metadata --from-beginning
--formatter org.apache.kafka.tools.consumer.RemoteLogMetadataFormatter``; this command does the same over the Kafka
protocol (Metadata, ListOffsets, Fetch -- no broker runtime, no group): it reads every partition of the topic from
its log start to its high watermark, decodes each record with ``strata.remote.rlmm_serde`` and prints one line per
record, ``partition: P, offset: O, value: <Kafka's toString() of the metadata>``. ``--topic T`` keeps only the
records of user topic T.

The same reader backs ``strata topics describe``'s remote size of a tiered topic (`remote_log_state`), and the
tiered-storage test harness's view of the RLMM.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from strata.protocol.constants import REMOTE_LOG_METADATA_TOPIC
from strata.protocol.registry import REQUEST_CLASSES, ApiKey
from strata.protocol.uuids import parse_kafka_uuid

from .admin_client import (
    EARLIEST,
    LATEST,
    AdminClient,
    AdminError,
    PartitionDescription,
    TopicDescription,
    check_error,
)
from .common import SubParsers, add_bootstrap_option, add_timeout_option, error

NAME = "remote-log-metadata"

FETCH_MAX_VERSION = 12  # v13+ names topics by id; names keep this reader simple
FETCH_MAX_BYTES = 4 << 20


class MetadataReader(AdminClient):
    """AdminClient plus a plain Fetch of one partition (READ_UNCOMMITTED up to the high watermark)."""

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = FETCH_MAX_BYTES) -> tuple[int, bytes]:
        """(high watermark, record bytes) of one Fetch at `offset`, from the partition's leader (in a cluster the
        broker asked may only follow it)."""
        cls = REQUEST_CLASSES[ApiKey.FETCH]
        T = cls.FetchTopic
        [(leader, _)] = self.by_leader(topic, [partition])
        _, resp = leader.call(
            ApiKey.FETCH,
            FETCH_MAX_VERSION,
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            forgotten_topics_data=[],
            rack_id="",
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
        )
        check_error(getattr(resp, "error_code", 0), None, f"Fetch {topic}-{partition}: ")
        part = resp.responses[0].partitions[0]
        check_error(part.error_code, None, f"Fetch {topic}-{partition}@{offset}: ")
        return part.high_watermark, bytes(part.records or b"")


def iter_metadata_records(
    reader: MetadataReader, partitions: list[int] | None = None
) -> Iterator[tuple[int, int, bytes | None]]:
    """(partition, offset, value) of every record of `__remote_log_metadata`, partition by partition."""
    from strata.protocol.records import iter_batches, iter_records

    parts = reader.topic_partitions(REMOTE_LOG_METADATA_TOPIC) if partitions is None else partitions
    if not parts:
        return
    starts = reader.list_offsets(REMOTE_LOG_METADATA_TOPIC, parts, EARLIEST)
    ends = reader.list_offsets(REMOTE_LOG_METADATA_TOPIC, parts, LATEST)
    for p in parts:
        offset, end = starts[p], ends[p]
        while offset < end:
            _hw, data = reader.fetch(REMOTE_LOG_METADATA_TOPIC, p, offset)
            progressed = False
            for pos, h in iter_batches(data):
                if h.last_offset < offset:
                    continue
                for r in iter_records(data, pos):
                    if offset <= r.offset < end:
                        yield p, r.offset, r.value
                offset = max(offset, h.next_offset)
                progressed = True
            if not progressed:
                raise AdminError(
                    f"Fetch {REMOTE_LOG_METADATA_TOPIC}-{p}@{offset} returned no complete batch "
                    f"below the end offset {end}"
                )


def _record_topic(metadata: Any) -> str | None:
    from strata.remote.rlmm_serde import topic_id_partition_of

    try:
        return topic_id_partition_of(metadata).topic
    except TypeError:
        return None


@dataclass
class RemoteSegment:
    """The latest state of one remote segment (one copy attempt), folded from the metadata records."""

    segment_id: uuid.UUID
    topic: str
    topic_id: uuid.UUID
    partition: int
    start_offset: int
    end_offset: int
    size: int
    state: str
    leader_epochs: dict[int, int] = field(default_factory=dict)
    history: list[str] = field(default_factory=list)  # every state seen, in order


@dataclass
class RemoteLogState:
    """What the records say about the user partitions: segments by id and partition-deletion states."""

    segments: dict[uuid.UUID, RemoteSegment] = field(default_factory=dict)
    partition_deletes: dict[tuple[str, int, uuid.UUID], list[str]] = field(default_factory=dict)
    undecodable: list[tuple[int, int, str]] = field(default_factory=list)

    def for_partition(self, topic: str, partition: int, topic_id: uuid.UUID | None = None) -> list[RemoteSegment]:
        return sorted(
            (
                s
                for s in self.segments.values()
                if s.topic == topic and s.partition == partition and (topic_id is None or s.topic_id == topic_id)
            ),
            key=lambda s: (s.start_offset, s.end_offset),
        )

    def remote_size(self, topic: str, partition: int, topic_id: uuid.UUID | None = None) -> int:
        """Bytes of the copied segments not (being) deleted: Kafka's RemoteLogSizeBytes."""
        return sum(s.size for s in self.for_partition(topic, partition, topic_id) if s.state == "COPY_SEGMENT_FINISHED")


def fold(records: Iterator[tuple[int, int, bytes | None]]) -> RemoteLogState:
    """Apply the records in order, as the RLMM's cache does (no transition checks: this is a viewer)."""
    from strata.remote.metadata import (
        RemoteLogSegmentMetadata,
        RemoteLogSegmentMetadataUpdate,
        RemotePartitionDeleteMetadata,
    )
    from strata.remote.rlmm_serde import deserialize
    from strata.remote.rlmm_types import MetadataDecodeError

    st = RemoteLogState()
    for p, off, value in records:
        try:
            m = deserialize(value) if value is not None else None
        except MetadataDecodeError as e:
            st.undecodable.append((p, off, str(e)))
            continue
        if isinstance(m, RemoteLogSegmentMetadata):
            tip = m.topic_id_partition
            st.segments[m.segment_id] = RemoteSegment(
                m.segment_id,
                tip.topic,
                tip.topic_id,
                tip.partition,
                m.start_offset,
                m.end_offset,
                m.segment_size_in_bytes,
                m.state.name,
                dict(m.segment_leader_epochs),
                [m.state.name],
            )
        elif isinstance(m, RemoteLogSegmentMetadataUpdate):
            seg = st.segments.get(m.remote_log_segment_id.id)
            if seg is not None:
                seg.state = m.state.name
                seg.history.append(m.state.name)
        elif isinstance(m, RemotePartitionDeleteMetadata):
            tip = m.topic_id_partition
            st.partition_deletes.setdefault((tip.topic, tip.partition, tip.topic_id), []).append(m.state.name)
    return st


def remote_log_state(bootstrap: str, timeout: float = 30.0) -> RemoteLogState:
    with MetadataReader(bootstrap, timeout=timeout) as r:
        return fold(iter_metadata_records(r))


def remote_log_state_or_none(admin: AdminClient) -> RemoteLogState | None:
    """The folded metadata of the broker `admin` talks to; None when it has no `__remote_log_metadata`."""
    if REMOTE_LOG_METADATA_TOPIC not in admin.list_topics(include_internal=True):
        return None
    with MetadataReader(f"{admin.host}:{admin.port}", timeout=admin.timeout) as r:
        return fold(iter_metadata_records(r))


def tiered_describe_fields(
    topic: TopicDescription, partition: PartitionDescription, state: RemoteLogState | None
) -> str:
    """The extra `strata topics describe` columns of a tiered topic's partition: LocalLogStartOffset (-4),
    LatestTieredOffset (-5) when the broker answers them, LocalSize (DescribeLogDirs on the leader) and RemoteSize
    (bytes of its copied segments)."""
    out = ""
    if partition.local_log_start_offset is not None:
        out += f"\tLocalLogStartOffset: {partition.local_log_start_offset}"
    if partition.latest_tiered_offset is not None:
        out += f"\tLatestTieredOffset: {partition.latest_tiered_offset}"
    if partition.local_size is not None:
        out += f"\tLocalSize: {partition.local_size}"
    if state is not None:
        tid = parse_kafka_uuid(topic.topic_id) if topic.topic_id else None
        out += f"\tRemoteSize: {state.remote_size(topic.name, partition.partition, tid)}"
    return out


def run(args: argparse.Namespace) -> int:
    from strata.remote.rlmm_serde import deserialize, format_record
    from strata.remote.rlmm_types import MetadataDecodeError

    try:
        with MetadataReader(args.bootstrap_server, timeout=args.timeout) as r:
            if REMOTE_LOG_METADATA_TOPIC not in r.list_topics(include_internal=True):
                raise AdminError(
                    f"topic {REMOTE_LOG_METADATA_TOPIC} does not exist: is "
                    "remote.log.storage.system.enable=true on the broker?"
                )
            n = 0
            for p, off, value in iter_metadata_records(r):
                if args.topic is not None:
                    try:
                        if value is None or _record_topic(deserialize(value)) != args.topic:
                            continue
                    except MetadataDecodeError:
                        continue
                print(format_record(p, off, value))
                n += 1
    except AdminError as e:
        error("strata remote-log-metadata", str(e))
        return 1
    except BrokenPipeError:  # `| head`
        return 0
    print(f"Processed a total of {n} messages", file=sys.stderr)
    return 0


def register(sub: SubParsers) -> None:
    p = sub.add_parser(NAME, help="print __remote_log_metadata like Kafka's RemoteLogMetadataFormatter")
    add_bootstrap_option(p)
    p.add_argument("--topic", help="only the records of this user topic")
    add_timeout_option(p)
    p.set_defaults(func=run)


__all__ = [
    "NAME",
    "REMOTE_LOG_METADATA_TOPIC",
    "MetadataReader",
    "RemoteLogState",
    "RemoteSegment",
    "fold",
    "iter_metadata_records",
    "register",
    "remote_log_state",
    "remote_log_state_or_none",
    "run",
    "tiered_describe_fields",
]
