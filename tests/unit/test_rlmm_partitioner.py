"""RemoteLogMetadataTopicPartitioner: Java's Objects.hash over (lsb, msb, partition), big-endian, Kafka's murmur2,
toPositive, modulo the partition count."""

from __future__ import annotations

import uuid

import pytest

from strata.remote.metadata import TopicIdPartition
from strata.remote.rlmm_partitioner import (
    RemoteLogMetadataTopicPartitioner,
    java_murmur2,
    metadata_partition,
    topic_partition_hash,
)

# Java 17: Objects.hash(u.getLeastSignificantBits(), u.getMostSignificantBits(), partition), computed with jshell.
OBJECTS_HASH_GOLDEN = [
    ("5d6bd7a5-33d2-4a59-9d3b-6c5b2f5a1e0f", 0, 138986295),
    ("5d6bd7a5-33d2-4a59-9d3b-6c5b2f5a1e0f", 7, 138986302),
    ("00000000-0000-0000-0000-000000000001", 3, 30755),
    ("ffffffff-ffff-ffff-8000-000000000000", 2147483647, 29790),
]

# Kafka's UtilsTest.testMurmur2 vectors.
MURMUR2_GOLDEN = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize("topic_id, partition, expected", OBJECTS_HASH_GOLDEN)
def test_hash_input_matches_java_objects_hash(topic_id: str, partition: int, expected: int) -> None:
    assert topic_partition_hash(TopicIdPartition(uuid.UUID(topic_id), "ignored", partition)) == expected


@pytest.mark.parametrize("data, expected", MURMUR2_GOLDEN)
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert java_murmur2(data) == expected


def test_metadata_partition_golden_values() -> None:
    # toPositive(murmur2(bigEndian(hash))) % n, from the two verified pieces above.
    cases = [
        ("5d6bd7a5-33d2-4a59-9d3b-6c5b2f5a1e0f", 0, 50, 30),
        ("5d6bd7a5-33d2-4a59-9d3b-6c5b2f5a1e0f", 7, 50, 1),
        ("00000000-0000-0000-0000-000000000001", 3, 50, 29),
        ("ffffffff-ffff-ffff-8000-000000000000", 2147483647, 50, 20),
        ("5d6bd7a5-33d2-4a59-9d3b-6c5b2f5a1e0f", 0, 7, 5),
    ]
    for topic_id, partition, n, expected in cases:
        tip = TopicIdPartition(uuid.UUID(topic_id), "t", partition)
        assert metadata_partition(tip, n) == expected
        assert RemoteLogMetadataTopicPartitioner(n).metadata_partition(tip) == expected
    # spelled out once: hash 30755 -> bytes 00 00 78 23 -> murmur2 -> positive -> % 50
    assert java_murmur2(bytes.fromhex("00007823")) & 0x7FFFFFFF == metadata_partition(
        TopicIdPartition(uuid.UUID(int=1), "t", 3), 2**31 - 1
    )


def test_topic_name_plays_no_part_and_partitions_spread() -> None:
    tid = uuid.UUID("5d6bd7a5-33d2-4a59-9d3b-6c5b2f5a1e0f")
    assert metadata_partition(TopicIdPartition(tid, "a", 4), 50) == metadata_partition(
        TopicIdPartition(tid, "b", 4), 50
    )
    spread = {metadata_partition(TopicIdPartition(uuid.UUID(int=i * 7919 + 1), "t", i % 5), 50) for i in range(500)}
    assert len(spread) > 40
    with pytest.raises(ValueError):
        RemoteLogMetadataTopicPartitioner(0)
