"""confluent-kafka (librdkafka 2.16) against Strata: admin create, produce, group-less read back.

For every codec librdkafka supports (none, gzip, snappy, lz4, zstd): AdminClient creates a 3-partition topic, a
Producer sends 10,000 records with binary keys, values, headers and explicit timestamps to explicit partitions,
delivery reports must show consecutive offsets per partition, and a Consumer using ``assign`` (no group) reads
every partition back from offset 0 and from ``offsets_for_times``: keys, values, headers, timestamps, order and
offsets must match byte for byte. The stored batches must keep the producer's codec.
"""

from __future__ import annotations

import pytest

from tests.support import ck
from tests.support.kafka_wire import LIBRDKAFKA_LZ4_HINT, assert_stored_codec
from tests.support.records import by_partition, check_roundtrip, gen_records, past_ts_base

N = 10_000
PARTITIONS = 3
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_read_back(module_broker, codec):
    bs = module_broker.bootstrap
    topic = f"ck-{codec}"
    ck.create_topic(bs, topic, PARTITIONS)
    assert ck.topic_partitions(bs, topic) == PARTITIONS

    records = gen_records(N, PARTITIONS, seed=CODECS.index(codec), ts_base=past_ts_base(N), tag=codec)
    delivered = ck.produce_all(bs, topic, records, compression=codec)

    # delivery reports: every record landed in its partition at the next offset
    next_off = {p: 0 for p in range(PARTITIONS)}
    for r, (p, off) in zip(records, delivered):
        assert p == r.partition
        assert off == next_off[p], f"partition {p}: delivered at {off}, expected {next_off[p]}"
        next_off[p] += 1

    check_roundtrip(
        records,
        read=lambda p, start, count: ck.read_partition(bs, topic, p, start, count),
        lookup_time=lambda targets: ck.offsets_for_times(bs, topic, targets),
    )

    assert_stored_codec(bs, topic, PARTITIONS, codec, hint=LIBRDKAFKA_LZ4_HINT)
    for p, recs in by_partition(records).items():
        assert ck.watermarks(bs, topic, p) == (0, len(recs)), "ListOffsets earliest/latest"
