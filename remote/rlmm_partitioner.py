"""User partition -> `__remote_log_metadata` partition, exactly as Kafka's RemoteLogMetadataTopicPartitioner.

Kafka hashes `Objects.hash(topicId.leastSignificantBits, topicId.mostSignificantBits, partition)` (Java's
Arrays.hashCode over a Long, a Long and an Integer), writes that int big-endian into 4 bytes, and takes
`Utils.toPositive(Utils.murmur2(bytes)) % numPartitions`. The topic name plays no part.
"""

from __future__ import annotations

from kafka.partitioner.default import murmur2  # Java-compatible (Kafka's Utils.murmur2)

from .metadata import TopicIdPartition

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


def _to_int32(v: int) -> int:
    v &= _MASK32
    return v - (1 << 32) if v & 0x80000000 else v


def _long_hash(v: int) -> int:
    """Java Long.hashCode: (int)(v ^ (v >>> 32)) on the two's complement 64-bit value."""
    v &= _MASK64
    return _to_int32(v ^ (v >> 32))


def java_objects_hash(*values: tuple[str, int]) -> int:
    """Java's Objects.hash over ("long" | "int", value) pairs."""
    result = 1
    for kind, v in values:
        h = _long_hash(v) if kind == "long" else _to_int32(v)
        result = _to_int32(31 * result + h)
    return result


def topic_partition_hash(tip: TopicIdPartition) -> int:
    bits = tip.topic_id.int
    msb, lsb = bits >> 64, bits & _MASK64
    return java_objects_hash(("long", lsb), ("long", msb), ("int", tip.partition))


def java_murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 as a signed 32-bit int."""
    return _to_int32(murmur2(data))


def metadata_partition(tip: TopicIdPartition, num_partitions: int) -> int:
    if num_partitions <= 0:
        raise ValueError(f"number of metadata partitions must be positive: {num_partitions}")
    key = (topic_partition_hash(tip) & _MASK32).to_bytes(4, "big")
    return (java_murmur2(key) & 0x7FFFFFFF) % num_partitions


class RemoteLogMetadataTopicPartitioner:
    def __init__(self, num_partitions: int) -> None:
        if num_partitions <= 0:
            raise ValueError(f"number of metadata partitions must be positive: {num_partitions}")
        self.num_partitions = num_partitions

    def metadata_partition(self, tip: TopicIdPartition) -> int:
        return metadata_partition(tip, self.num_partitions)


__all__ = [
    "RemoteLogMetadataTopicPartitioner",
    "java_murmur2",
    "java_objects_hash",
    "metadata_partition",
    "topic_partition_hash",
]
