"""KIP-405 remote log metadata records as Kafka writes them on `__remote_log_metadata` (before Kafka 4.3).

Value framing (Kafka's BytesApiMessageSerde over AbstractApiMessageSerde)::

    frame_version  unsigned varint = 1
    api_key        unsigned varint  (0 segment metadata, 1 segment update, 2 partition delete, 3 snapshot entry)
    version        unsigned varint  (we write 0, Kafka's highest version before 4.3; we read 0 and 1)
    message        the record in the flexible ("compact") encoding, every struct ending with its tagged fields

The record key is null. Message layouts (version 0; `S` marks a struct followed by its tagged-field section):

    RemoteLogSegmentMetadataRecord (0):  S RemoteLogSegmentId{S TopicIdPartition{Name compact string, Id uuid,
        Partition int32}, Id uuid}, StartOffset int64, EndOffset int64, BrokerId int32, MaxTimestampMs int64,
        EventTimestampMs int64, SegmentLeaderEpochs compact array of S{LeaderEpoch int32, Offset int64},
        SegmentSizeInBytes int32, CustomMetadata compact nullable bytes, RemoteLogSegmentState int8;
        tagged: 0 TxnIndexEmpty bool (written only when true), 1 BrokerLeaderEpoch int32 (v1, read only)
    RemoteLogSegmentMetadataUpdateRecord (1): RemoteLogSegmentId, BrokerId int32, EventTimestampMs int64,
        CustomMetadata, RemoteLogSegmentState int8; tagged (v1, read only): 0 BrokerLeaderEpoch, 1 EndOffset
    RemotePartitionDeleteMetadataRecord (2): TopicIdPartition, BrokerId int32, EventTimestampMs int64,
        RemotePartitionDeleteState int8; tagged (v1, read only): 0 BrokerLeaderEpoch, 1 EndOffset
    RemoteLogSegmentMetadataSnapshotRecord (3): SegmentId uuid, StartOffset, EndOffset, BrokerId, MaxTimestampMs,
        EventTimestampMs, SegmentLeaderEpochs, SegmentSizeInBytes, CustomMetadata, RemoteLogSegmentState;
        tagged: 0 TxnIndexEmpty, 1 BrokerLeaderEpoch (v1, read only)

A uuid is 16 bytes (most then least significant long), a compact string/array/bytes is an unsigned varint of
length + 1 (0 = null) followed by the content. Tagged fields holding their default are not written; unknown tags are
skipped on read.

Custom metadata: `strata.remote.metadata` keeps KIP-917 custom metadata as a JSON-able dict and stores its compact JSON.
Bytes written by another RemoteStorageManager that are not a JSON object are kept as `{RAW_CUSTOM_METADATA_KEY:
<base64>}` and written back byte for byte.

`format_record` prints a record like Kafka's RemoteLogMetadataFormatter (`kafka-console-consumer --formatter
org.apache.kafka.tools.consumer.RemoteLogMetadataFormatter`): `partition: P, offset: O, value: <toString()>`.
"""

from __future__ import annotations

import base64
import json
import struct
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from strata.protocol.uuids import kafka_uuid_str
from strata.protocol.wire import (
    Buffer,
    ByteReader,
    write_compact_bytes,
    write_compact_string,
    write_tagged_fields,
    write_uvarint,
)

from .metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from .rlmm_types import MetadataDecodeError, RemoteLogSegmentMetadataSnapshot

FRAME_VERSION = 1
SEGMENT_METADATA_API_KEY = 0
SEGMENT_METADATA_UPDATE_API_KEY = 1
PARTITION_DELETE_API_KEY = 2
SEGMENT_METADATA_SNAPSHOT_API_KEY = 3
WRITE_VERSION = 0
MAX_READ_VERSION = 1
RAW_CUSTOM_METADATA_KEY = "__raw_base64__"

RemoteLogMetadata = (
    RemoteLogSegmentMetadata
    | RemoteLogSegmentMetadataUpdate
    | RemotePartitionDeleteMetadata
    | RemoteLogSegmentMetadataSnapshot
)

_I8 = struct.Struct(">b")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_EPOCH_ENTRY = struct.Struct(">iq")


# -- custom metadata ------------------------------------------------------------------------------------------------


def custom_metadata_to_bytes(custom: dict[str, Any] | None) -> bytes | None:
    if custom is None:
        return None
    if len(custom) == 1 and RAW_CUSTOM_METADATA_KEY in custom:
        return base64.b64decode(custom[RAW_CUSTOM_METADATA_KEY])
    return json.dumps(dict(custom), separators=(",", ":"), sort_keys=True).encode()


def custom_metadata_from_bytes(raw: bytes | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError):
        value = None
    if isinstance(value, dict) and custom_metadata_to_bytes(value) == raw:
        return value
    return {RAW_CUSTOM_METADATA_KEY: base64.b64encode(raw).decode()}


# -- primitives -----------------------------------------------------------------------------------------------------


def _uuid(out: bytearray, u: uuid.UUID) -> None:
    out += u.bytes


def _i32(v: int) -> bytes:
    return _I32.pack(v)


def _i64(v: int) -> bytes:
    return _I64.pack(v)


class _Reader(ByteReader):
    __slots__ = ()
    error = MetadataDecodeError

    def compact_nullable_bytes(self) -> bytes | None:
        b = super().compact_nullable_bytes()
        return None if b is None else bytes(b)


def _tag_bool(fields: Mapping[int, Buffer], tag: int, default: bool = False) -> bool:
    v = fields.get(tag)
    return default if v is None else v != b"\x00"


def _tag_int(fields: Mapping[int, Buffer], tag: int, st: struct.Struct, default: int) -> int:
    v = fields.get(tag)
    if v is None:
        return default
    if len(v) != st.size:
        raise MetadataDecodeError(f"tagged field {tag} has {len(v)} bytes, expected {st.size}")
    return st.unpack(v)[0]


# -- structs --------------------------------------------------------------------------------------------------------


def _write_tip(out: bytearray, tip: TopicIdPartition) -> None:
    write_compact_string(out, tip.topic)
    _uuid(out, tip.topic_id)
    out += _i32(tip.partition)
    write_uvarint(out, 0)


def _read_tip(r: _Reader) -> TopicIdPartition:
    name = r.compact_string()
    topic_id = r.uuid()
    partition = r.int32()
    r.tagged_fields()
    return TopicIdPartition(topic_id, name, partition)


def _write_segment_id(out: bytearray, sid: RemoteLogSegmentId) -> None:
    _write_tip(out, sid.topic_id_partition)
    _uuid(out, sid.id)
    write_uvarint(out, 0)


def _read_segment_id(r: _Reader) -> RemoteLogSegmentId:
    tip = _read_tip(r)
    sid = r.uuid()
    r.tagged_fields()
    return RemoteLogSegmentId(tip, sid)


def _write_epochs(out: bytearray, epochs: dict[int, int]) -> None:
    write_uvarint(out, len(epochs) + 1)
    for epoch, offset in sorted(epochs.items()):
        out += _EPOCH_ENTRY.pack(epoch, offset)
        write_uvarint(out, 0)


def _read_epochs(r: _Reader) -> dict[int, int]:
    epochs: dict[int, int] = {}
    for _ in range(r.compact_array_len()):
        epoch = r.int32()
        offset = r.int64()
        r.tagged_fields()
        epochs[epoch] = offset
    return epochs


def _segment_state(v: int) -> RemoteLogSegmentState:
    try:
        return RemoteLogSegmentState(v)
    except ValueError:
        raise MetadataDecodeError(f"unknown RemoteLogSegmentState id {v}") from None


def _txn_tag(txn_idx_empty: bool) -> list[tuple[int, bytes]]:
    return [(0, b"\x01")] if txn_idx_empty else []


# -- messages -------------------------------------------------------------------------------------------------------


def _header(api_key: int, version: int = WRITE_VERSION) -> bytearray:
    out = bytearray()
    write_uvarint(out, FRAME_VERSION)
    write_uvarint(out, api_key)
    write_uvarint(out, version)
    return out


def _serialize_segment(m: RemoteLogSegmentMetadata) -> bytes:
    out = _header(SEGMENT_METADATA_API_KEY)
    _write_segment_id(out, m.remote_log_segment_id)
    out += _I64.pack(m.start_offset) + _I64.pack(m.end_offset) + _I32.pack(m.broker_id)
    out += _I64.pack(m.max_timestamp_ms) + _I64.pack(m.event_timestamp_ms)
    _write_epochs(out, m.segment_leader_epochs)
    out += _I32.pack(m.segment_size_in_bytes)
    write_compact_bytes(out, custom_metadata_to_bytes(m.custom_metadata))
    out += _I8.pack(int(m.state))
    write_tagged_fields(out, _txn_tag(m.txn_idx_empty))
    return bytes(out)


def _serialize_update(u: RemoteLogSegmentMetadataUpdate) -> bytes:
    out = _header(SEGMENT_METADATA_UPDATE_API_KEY)
    _write_segment_id(out, u.remote_log_segment_id)
    out += _I32.pack(u.broker_id) + _I64.pack(u.event_timestamp_ms)
    write_compact_bytes(out, custom_metadata_to_bytes(u.custom_metadata))
    out += _I8.pack(int(u.state))
    write_tagged_fields(out, [])
    return bytes(out)


def _serialize_delete(d: RemotePartitionDeleteMetadata) -> bytes:
    out = _header(PARTITION_DELETE_API_KEY)
    _write_tip(out, d.topic_id_partition)
    out += _I32.pack(d.broker_id) + _I64.pack(d.event_timestamp_ms) + _I8.pack(int(d.state))
    write_tagged_fields(out, [])
    return bytes(out)


def _serialize_snapshot(s: RemoteLogSegmentMetadataSnapshot) -> bytes:
    out = _header(SEGMENT_METADATA_SNAPSHOT_API_KEY)
    _uuid(out, s.segment_id)
    out += _I64.pack(s.start_offset) + _I64.pack(s.end_offset) + _I32.pack(s.broker_id)
    out += _I64.pack(s.max_timestamp_ms) + _I64.pack(s.event_timestamp_ms)
    _write_epochs(out, s.segment_leader_epochs)
    out += _I32.pack(s.segment_size_in_bytes)
    write_compact_bytes(out, s.custom_metadata)
    out += _I8.pack(int(s.state))
    write_tagged_fields(out, _txn_tag(s.txn_idx_empty))
    return bytes(out)


def serialize(metadata: RemoteLogMetadata) -> bytes:
    """The record value Kafka's RemoteLogMetadataSerde.serialize produces for `metadata`."""
    if isinstance(metadata, RemoteLogSegmentMetadata):
        return _serialize_segment(metadata)
    if isinstance(metadata, RemoteLogSegmentMetadataUpdate):
        return _serialize_update(metadata)
    if isinstance(metadata, RemotePartitionDeleteMetadata):
        return _serialize_delete(metadata)
    if isinstance(metadata, RemoteLogSegmentMetadataSnapshot):
        return _serialize_snapshot(metadata)
    raise TypeError(f"no remote log metadata serde for {type(metadata).__name__}")


def _read_segment(r: _Reader, version: int) -> RemoteLogSegmentMetadata:
    sid = _read_segment_id(r)
    start, end, broker = r.int64(), r.int64(), r.int32()
    max_ts, event_ts = r.int64(), r.int64()
    epochs = _read_epochs(r)
    size = r.int32()
    custom = r.compact_nullable_bytes()
    state = _segment_state(r.int8())
    tags = r.tagged_fields()
    try:
        return RemoteLogSegmentMetadata(
            sid,
            start,
            end,
            max_ts,
            broker,
            event_ts,
            size,
            epochs,
            state,
            custom_metadata_from_bytes(custom),
            _tag_bool(tags, 0),
        )
    except ValueError as e:
        raise MetadataDecodeError(f"invalid RemoteLogSegmentMetadataRecord: {e}") from None


def _read_update(r: _Reader, version: int) -> RemoteLogSegmentMetadataUpdate:
    sid = _read_segment_id(r)
    broker, event_ts = r.int32(), r.int64()
    custom = r.compact_nullable_bytes()
    state = _segment_state(r.int8())
    r.tagged_fields()  # v1: BrokerLeaderEpoch (0), EndOffset (1) -- not part of the pre-4.3 model
    try:
        return RemoteLogSegmentMetadataUpdate(sid, event_ts, custom_metadata_from_bytes(custom), state, broker)
    except ValueError as e:
        raise MetadataDecodeError(f"invalid RemoteLogSegmentMetadataUpdateRecord: {e}") from None


def _read_delete(r: _Reader, version: int) -> RemotePartitionDeleteMetadata:
    tip = _read_tip(r)
    broker, event_ts, state_id = r.int32(), r.int64(), r.int8()
    r.tagged_fields()
    try:
        state = RemotePartitionDeleteState(state_id)
    except ValueError:
        raise MetadataDecodeError(f"unknown RemotePartitionDeleteState id {state_id}") from None
    return RemotePartitionDeleteMetadata(tip, state, event_ts, broker)


def _read_snapshot(r: _Reader, version: int) -> RemoteLogSegmentMetadataSnapshot:
    sid = r.uuid()
    start, end, broker = r.int64(), r.int64(), r.int32()
    max_ts, event_ts = r.int64(), r.int64()
    epochs = _read_epochs(r)
    size = r.int32()
    custom = r.compact_nullable_bytes()
    state = _segment_state(r.int8())
    tags = r.tagged_fields()
    return RemoteLogSegmentMetadataSnapshot(
        sid, start, end, max_ts, broker, event_ts, size, epochs, state, custom, _tag_bool(tags, 0)
    )


_READERS: dict[int, Callable[[_Reader, int], Any]] = {
    SEGMENT_METADATA_API_KEY: _read_segment,
    SEGMENT_METADATA_UPDATE_API_KEY: _read_update,
    PARTITION_DELETE_API_KEY: _read_delete,
    SEGMENT_METADATA_SNAPSHOT_API_KEY: _read_snapshot,
}


def deserialize(data: bytes | bytearray | memoryview) -> RemoteLogMetadata:
    """Kafka's RemoteLogMetadataSerde.deserialize. Raises MetadataDecodeError on anything else."""
    if data is None:
        raise MetadataDecodeError("null remote log metadata value")
    r = _Reader(bytes(data))
    frame = r.uvarint()
    if frame != FRAME_VERSION:
        raise MetadataDecodeError(f"unknown frame version {frame} (only {FRAME_VERSION} is supported)")
    api_key = r.uvarint()
    version = r.uvarint()
    reader = _READERS.get(api_key)
    if reader is None:
        raise MetadataDecodeError(f"unknown remote log metadata api key {api_key}")
    if version > MAX_READ_VERSION:
        raise MetadataDecodeError(f"unsupported version {version} of api key {api_key}")
    try:
        result = reader(r, version)
    except (struct.error, UnicodeDecodeError) as e:
        raise MetadataDecodeError(f"malformed record of api key {api_key}: {e}") from None
    r.done()
    return result


def topic_id_partition_of(metadata: RemoteLogMetadata) -> TopicIdPartition:
    if isinstance(metadata, (RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate)):
        return metadata.remote_log_segment_id.topic_id_partition
    if isinstance(metadata, RemotePartitionDeleteMetadata):
        return metadata.topic_id_partition
    raise TypeError(f"{type(metadata).__name__} has no topic partition")


# -- Kafka's toString() -----------------------------------------------------------------------------------------------


def _java_map(d: dict[int, int]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(d.items())) + "}"


def _java_custom(raw: bytes | None) -> str:
    return "Optional.empty" if raw is None else f"Optional[CustomMetadata{{{len(raw)} bytes}}]"


def _java_bool(b: bool) -> str:
    return "true" if b else "false"


def _tip_str(tip: TopicIdPartition) -> str:
    return f"{kafka_uuid_str(tip.topic_id)}:{tip.topic}-{tip.partition}"


def _sid_str(sid: RemoteLogSegmentId) -> str:
    return f"RemoteLogSegmentId{{topicIdPartition={_tip_str(sid.topic_id_partition)}, id={kafka_uuid_str(sid.id)}}}"


def to_kafka_string(metadata: RemoteLogMetadata) -> str:
    """The text of Kafka's toString() for the metadata object (Kafka 4.x, txnIdxEmpty included)."""
    if isinstance(metadata, RemoteLogSegmentMetadata):
        m = metadata
        return (
            f"RemoteLogSegmentMetadata{{remoteLogSegmentId={_sid_str(m.remote_log_segment_id)}, "
            f"startOffset={m.start_offset}, endOffset={m.end_offset}, brokerId={m.broker_id}, "
            f"maxTimestampMs={m.max_timestamp_ms}, eventTimestampMs={m.event_timestamp_ms}, "
            f"segmentLeaderEpochs={_java_map(m.segment_leader_epochs)}, "
            f"segmentSizeInBytes={m.segment_size_in_bytes}, "
            f"customMetadata={_java_custom(custom_metadata_to_bytes(m.custom_metadata))}, "
            f"state={m.state.name}, txnIdxEmpty={_java_bool(m.txn_idx_empty)}}}"
        )
    if isinstance(metadata, RemoteLogSegmentMetadataUpdate):
        u = metadata
        return (
            f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId={_sid_str(u.remote_log_segment_id)}, "
            f"customMetadata={_java_custom(custom_metadata_to_bytes(u.custom_metadata))}, "
            f"state={u.state.name}, eventTimestampMs={u.event_timestamp_ms}, brokerId={u.broker_id}}}"
        )
    if isinstance(metadata, RemotePartitionDeleteMetadata):
        d = metadata
        return (
            f"RemotePartitionDeleteMetadata{{topicPartition={_tip_str(d.topic_id_partition)}, "
            f"state={d.state.name}, eventTimestampMs={d.event_timestamp_ms}, brokerId={d.broker_id}}}"
        )
    if isinstance(metadata, RemoteLogSegmentMetadataSnapshot):
        s = metadata
        return (
            f"RemoteLogSegmentMetadataSnapshot{{segmentId={kafka_uuid_str(s.segment_id)}, "
            f"startOffset={s.start_offset}, endOffset={s.end_offset}, maxTimestampMs={s.max_timestamp_ms}, "
            f"segmentLeaderEpochs={_java_map(s.segment_leader_epochs)}, "
            f"segmentSizeInBytes={s.segment_size_in_bytes}, customMetadata={_java_custom(s.custom_metadata)}, "
            f"state={s.state.name}}}"
        )
    raise TypeError(f"not remote log metadata: {type(metadata).__name__}")


def format_record(partition: int, offset: int, value: bytes | None) -> str:
    """One line of Kafka's RemoteLogMetadataFormatter (without the trailing newline). Undecodable values are shown
    as `<undecodable: reason>` so a dump of a damaged topic goes on."""
    if value is None:
        text = "<null>"
    else:
        try:
            text = to_kafka_string(deserialize(value))
        except MetadataDecodeError as e:
            text = f"<undecodable: {e}>"
    return f"partition: {partition}, offset: {offset}, value: {text}"


__all__ = [
    "FRAME_VERSION",
    "PARTITION_DELETE_API_KEY",
    "RAW_CUSTOM_METADATA_KEY",
    "SEGMENT_METADATA_API_KEY",
    "SEGMENT_METADATA_SNAPSHOT_API_KEY",
    "SEGMENT_METADATA_UPDATE_API_KEY",
    "RemoteLogMetadata",
    "custom_metadata_from_bytes",
    "custom_metadata_to_bytes",
    "deserialize",
    "format_record",
    "serialize",
    "to_kafka_string",
    "topic_id_partition_of",
]
