"""Files that let the RLMM restart without re-reading `__remote_log_metadata` from the beginning.

Layout under the RLMM's directory::

    _rlmm_committed_offsets                           Kafka's CommittedOffsetsFile text format:
                                                      "0\\n" then "<metadata partition> <offset>\\n" per partition
    <topic>-<partition>-<topicIdBase64>/remote_log_snapshot   one snapshot per user partition

The committed offset of a metadata partition is the position of its apply loop (the next offset to read) when the
snapshots were last written. Every user-partition snapshot carries its own position too, and that one is
authoritative for the partition: the apply loop re-reads from the smallest position of the partitions it serves
and skips, for each user partition, the records below its own position. (Kafka's file holds the last consumed offset;
ours holds the next one.)

`remote_log_snapshot`, version 1 (Kafka's RemoteLogMetadataSnapshotFile, version 0, extended so a restart rebuilds
the cache *identically*, leader-epoch bookkeeping included), big-endian::

    version int16 = 1 | metadata partition int32 | metadata partition offset int64 (next offset to apply)
    | entry count int32
    entry*: length int32 | value of a RemoteLogSegmentMetadataSnapshotRecord (Kafka's serde, see rlmm_serde)
            -- in the cache's insertion order
    epoch count int32
    epoch*: leader epoch int32 | highest copied offset int64 (-1: none)
            | referenced count int32 | (epoch start offset int64 | segment uuid 16 bytes)*
            | unreferenced count int32 | (segment uuid 16 bytes)*
    delete length int32 (-1: none) | value of a RemotePartitionDeleteMetadataRecord
    crc32c uint32 of every byte before it

The user partition is identified by the directory name and checked against the partition delete record when one is
present. Files are replaced atomically (temporary file, fsync, rename, directory fsync).
"""

from __future__ import annotations

import shutil
import struct
import uuid
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

from strata.protocol.wire import ByteReader, WireFormatError
from strata.storage.checkpoints import atomic_write

from .metadata import RemoteLogSegmentId, RemotePartitionDeleteMetadata, TopicIdPartition
from .rlmm_cache import RemoteLogLeaderEpochState, RemoteLogMetadataCache
from .rlmm_serde import deserialize, serialize
from .rlmm_types import RemoteLogSegmentMetadataSnapshot
from .rsm import partition_dir_name

SNAPSHOT_FILE_NAME = "remote_log_snapshot"
COMMITTED_OFFSETS_FILE_NAME = "_rlmm_committed_offsets"
SNAPSHOT_VERSION = 1
COMMITTED_OFFSETS_VERSION = 0

_HEADER = struct.Struct(">hiqi")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_REF = struct.Struct(">q16s")
_EPOCH_HEAD = struct.Struct(">iq")


class SnapshotFormatError(WireFormatError):
    """A snapshot file that does not decode."""


@dataclass
class PartitionSnapshot:
    """What a snapshot file holds for one user partition."""

    metadata_partition: int
    metadata_partition_offset: int
    cache: RemoteLogMetadataCache
    delete_metadata: RemotePartitionDeleteMetadata | None


def snapshot_path(base_dir: Path, tip: TopicIdPartition) -> Path:
    return Path(base_dir) / partition_dir_name(tip) / SNAPSHOT_FILE_NAME


def encode_snapshot(
    metadata_partition: int,
    offset: int,
    cache: RemoteLogMetadataCache,
    delete_metadata: RemotePartitionDeleteMetadata | None,
) -> bytes:
    out = bytearray(_HEADER.pack(SNAPSHOT_VERSION, metadata_partition, offset, len(cache.id_to_segment)))
    for m in cache.id_to_segment.values():
        value = serialize(RemoteLogSegmentMetadataSnapshot.from_metadata(m))
        out += _I32.pack(len(value)) + value
    out += _I32.pack(len(cache.epoch_entries))
    for epoch, state in cache.epoch_entries.items():
        highest = -1 if state.highest_log_offset is None else state.highest_log_offset
        out += _EPOCH_HEAD.pack(epoch, highest)
        refs = state.referenced()
        out += _I32.pack(len(refs))
        for start, sid in refs:
            out += _REF.pack(start, sid.id.bytes)
        out += _I32.pack(len(state.unreferenced))
        for sid in state.unreferenced:
            out += sid.id.bytes
    if delete_metadata is None:
        out += _I32.pack(-1)
    else:
        value = serialize(delete_metadata)
        out += _I32.pack(len(value)) + value
    out += _U32.pack(crc32c(bytes(out)))
    return bytes(out)


class _Reader(ByteReader):
    __slots__ = ()
    error = SnapshotFormatError


def decode_snapshot(data: bytes, tip: TopicIdPartition) -> PartitionSnapshot:
    if len(data) < _HEADER.size + 4:
        raise SnapshotFormatError("snapshot file too short")
    body, (crc,) = data[:-4], _U32.unpack(data[-4:])
    if crc32c(body) != crc:
        raise SnapshotFormatError("snapshot CRC mismatch")
    c = _Reader(body)
    version, mpart, offset, count = c.fields(_HEADER)
    if version != SNAPSHOT_VERSION:
        raise SnapshotFormatError(f"unsupported snapshot version {version}")
    cache = RemoteLogMetadataCache()
    by_uuid: dict[uuid.UUID, RemoteLogSegmentId] = {}
    for _ in range(count):
        entry = deserialize(c.take(c.int32()))
        if not isinstance(entry, RemoteLogSegmentMetadataSnapshot):
            raise SnapshotFormatError(f"unexpected {type(entry).__name__} among snapshot entries")
        m = entry.to_metadata(tip)
        cache.id_to_segment[m.remote_log_segment_id] = m
        by_uuid[entry.segment_id] = m.remote_log_segment_id

    def sid_of(u: uuid.UUID) -> RemoteLogSegmentId:
        sid = by_uuid.get(u)
        # DELETE_SEGMENT_FINISHED segments may stay referenced by an epoch in Kafka's structures; they have no entry
        return sid if sid is not None else RemoteLogSegmentId(tip, u)

    for _ in range(c.int32()):
        epoch, highest = c.fields(_EPOCH_HEAD)
        refs = [(start, sid_of(uuid.UUID(bytes=raw))) for start, raw in (c.fields(_REF) for _ in range(c.int32()))]
        unrefs = [sid_of(c.uuid()) for _ in range(c.int32())]
        state = RemoteLogLeaderEpochState()
        state.restore(refs, unrefs, None if highest < 0 else highest)
        cache.epoch_entries[epoch] = state
    dlen = c.int32()
    delete_metadata = None
    if dlen >= 0:
        d = deserialize(c.take(dlen))
        if not isinstance(d, RemotePartitionDeleteMetadata):
            raise SnapshotFormatError(f"unexpected {type(d).__name__} as the partition delete state")
        if d.topic_id_partition != tip:
            raise SnapshotFormatError(f"snapshot of {d.topic_id_partition} found for {tip}")
        delete_metadata = d
    if c.pos != len(body):
        raise SnapshotFormatError(f"{len(body) - c.pos} unexpected trailing bytes")
    return PartitionSnapshot(mpart, offset, cache, delete_metadata)


def write_snapshot_file(base_dir: Path, tip: TopicIdPartition, data: bytes) -> None:
    path = snapshot_path(base_dir, tip)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data)


def read_snapshot_file(base_dir: Path, tip: TopicIdPartition) -> PartitionSnapshot | None:
    try:
        data = snapshot_path(base_dir, tip).read_bytes()
    except FileNotFoundError:
        return None
    return decode_snapshot(data, tip)


def delete_snapshot_file(base_dir: Path, tip: TopicIdPartition) -> None:
    shutil.rmtree(snapshot_path(base_dir, tip).parent, ignore_errors=True)


def encode_committed_offsets(offsets: dict[int, int]) -> bytes:
    lines = [str(COMMITTED_OFFSETS_VERSION)] + [f"{p} {o}" for p, o in sorted(offsets.items())]
    return ("\n".join(lines) + "\n").encode()


def decode_committed_offsets(text: str) -> dict[int, int]:
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise SnapshotFormatError("No version header present.")
    if lines[0].strip() != str(COMMITTED_OFFSETS_VERSION):
        raise SnapshotFormatError(f"Invalid version: {lines[0].strip()}")
    out: dict[int, int] = {}
    for line in lines[1:]:
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise SnapshotFormatError(f"Invalid format in line: {line}")
        try:
            out[int(parts[0])] = int(parts[1])
        except ValueError:
            raise SnapshotFormatError(f"Invalid format in line: {line}") from None
    return out


def write_committed_offsets(base_dir: Path, offsets: dict[int, int]) -> None:
    Path(base_dir).mkdir(parents=True, exist_ok=True)
    atomic_write(Path(base_dir) / COMMITTED_OFFSETS_FILE_NAME, encode_committed_offsets(offsets))


def read_committed_offsets(base_dir: Path) -> dict[int, int]:
    try:
        text = (Path(base_dir) / COMMITTED_OFFSETS_FILE_NAME).read_text()
    except FileNotFoundError:
        return {}
    return decode_committed_offsets(text)


__all__ = [
    "COMMITTED_OFFSETS_FILE_NAME",
    "SNAPSHOT_FILE_NAME",
    "PartitionSnapshot",
    "SnapshotFormatError",
    "decode_committed_offsets",
    "decode_snapshot",
    "delete_snapshot_file",
    "encode_committed_offsets",
    "encode_snapshot",
    "read_committed_offsets",
    "read_snapshot_file",
    "snapshot_path",
    "write_committed_offsets",
    "write_snapshot_file",
]
