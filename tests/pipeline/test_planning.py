"""Partition planning and data loss: minPartitions / maxRecordsPerPartition splits, empty partitions and topics,
offsets deleted by retention (failOnDataLoss true -> clear error, false -> skip), remote segments gone between
planning and reading, and the option rules."""

from __future__ import annotations

import itertools
import struct
from types import SimpleNamespace

import pytest

from strata.cli.admin_client import AdminClient
from strata.pipeline.client import DataLossError
from strata.pipeline.options import OptionError, parse_sink_options, parse_source_options
from strata.pipeline.planning import OffsetRange, assign_pieces, plan_batch, split_ranges
from strata.pipeline.reading import byte_range, index_positions, read_range
from strata.pipeline.source import rate_limit, source_schema
from tests.pipeline.support import consume_all, create_topic, produce, wait_offloaded


# -- pure planning ------------------------------------------------------------------------------------------------
def _covers(parts: list[OffsetRange], tp: tuple[str, int], start: int, end: int) -> bool:
    mine = sorted((r.start, r.end) for r in parts if r.tp == tp)
    return mine[0][0] == start and mine[-1][1] == end and all(a[1] == b[0] for a, b in itertools.pairwise(mine))


def test_split_ranges_follows_spark_rules():
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 5, 5), OffsetRange("t", 2, 0, 100)]
    assert [(r.partition, r.start, r.end) for r in split_ranges(ranges, None, None)] == [(0, 0, 1000), (2, 0, 100)]
    assert len(split_ranges(ranges, 2, None)) == 2  # not more than the non-empty ranges: no split
    by_min = split_ranges(ranges, 6, None)
    assert len(by_min) == 7 and _covers(by_min, ("t", 0), 0, 1000) and _covers(by_min, ("t", 2), 0, 100)
    by_max = split_ranges(ranges, None, 300)
    assert sorted(r.size for r in by_max) == [100, 250, 250, 250, 250]
    both = split_ranges(ranges, 3, 600)  # the larger demand wins per range
    assert len([r for r in both if r.partition == 0]) == 3


def test_direct_pieces_cover_the_range_without_overlap():
    segs = [
        SimpleNamespace(start_offset=0, end_offset=99),
        SimpleNamespace(start_offset=100, end_offset=199),
        SimpleNamespace(start_offset=250, end_offset=299),
    ]
    r = assign_pieces(OffsetRange("t", 0, 50, 400), segs)
    assert [(p.start, p.end, p.segment is not None) for p in r.pieces] == [
        (50, 100, True),
        (100, 200, True),
        (200, 250, False),
        (250, 300, True),
        (300, 400, False),
    ]
    assert [(p.start, p.end) for p in assign_pieces(OffsetRange("t", 0, 120, 130), segs).pieces] == [(120, 130)]


def test_direct_pieces_keep_to_offsets_only_one_segment_holds_below_the_local_start():
    # D is another lineage's copy of 30-71 (an unclean election); L1, L2 the leader's. The leader holds 80+ locally.
    D = SimpleNamespace(start_offset=30, end_offset=71)
    L0, L1, L2 = (SimpleNamespace(start_offset=a, end_offset=b) for a, b in ((0, 29), (30, 50), (51, 90)))
    r = assign_pieces(OffsetRange("t", 0, 0, 120), [L0, D, L1, L2], local_start=80)
    assert [(p.start, p.end, p.segment) for p in r.pieces] == [
        (0, 30, L0),  # the only copy
        (30, 72, None),  # two copies (D and L1/L2): the broker knows which is the lineage's
        (72, 80, L2),  # only L2 below the local start
        (80, 120, None),
    ]  # the leader's local log (a not yet copied lineage may differ from any segment)
    # a broker that cannot tell its local start (-1): everything through the broker
    assert [(p.start, p.end, p.segment) for p in assign_pieces(OffsetRange("t", 0, 0, 120), [L0, L1], -1).pieces] == [
        (0, 120, None)
    ]


def test_offset_index_lookup_finds_byte_ranges():
    # entries: (largest offset of an append, its position), relative to base 1000; zero-filled tail ignored
    raw = b"".join(struct.pack(">ii", rel, pos) for rel, pos in [(9, 0), (19, 500), (29, 1000), (39, 1500)])
    offsets, positions = index_positions(raw + b"\0" * 16, 1000)
    assert offsets == [1009, 1019, 1029, 1039] and positions == [0, 500, 1000, 1500]
    assert byte_range(offsets, positions, 1000, 1005) == (0, 499)
    assert byte_range(offsets, positions, 1019, 1020) == (500, 1499)  # 1019 ends the append at 500
    assert byte_range(offsets, positions, 1021, 1031) == (500, None)  # 1030 may sit in the append at 1500
    assert byte_range(offsets, positions, 1035, 1100) == (1000, None)


def test_rate_limit_shares_by_backlog_and_always_progresses():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 7}
    latest = {("t", 0): 900, ("t", 1): 200, ("t", 2): 7}
    end = rate_limit(start, latest, 100)
    assert sum(end[tp] - start[tp] for tp in end) == 100 and end[("t", 0)] == 90 and end[("t", 1)] == 110
    assert end[("t", 2)] == 7
    tiny = rate_limit(start, latest, 1)
    assert sum(tiny[tp] - start[tp] for tp in tiny) == 1
    assert rate_limit(start, latest, 10_000) == latest


@pytest.mark.parametrize(
    "opts, message",
    [
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "exactly one of"),
        ({}, "exactly one of"),
        ({"subscribe": "a", "startingOffsets": "latest"}, "not allowed in a batch"),
        ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, "not allowed in a batch"),
        ({"subscribe": "a", "read.mode": "direct", "kafka.isolation.level": "serializable"}, "read_committed"),
        ({"subscribe": "a", "minPartitions": "0"}, "at least 1"),
        ({"assign": "[1,2]"}, "JSON object"),
    ],
)
def test_option_errors(opts, message):
    with pytest.raises(OptionError, match=message):
        parse_source_options({"kafka.bootstrap.servers": "127.0.0.1:1", **opts}, streaming=False)


# -- against a broker ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def plan_topics(tiered):
    bs = tiered.bootstrap
    create_topic(bs, "plan", 3)
    create_topic(bs, "nothing", 2)
    create_topic(bs, "trunc", 1)
    produce(
        bs,
        "plan",
        [{"value": b"%d" % i, "partition": 0} for i in range(1000)]
        + [{"value": b"%d" % i, "partition": 2} for i in range(100)],
    )
    produce(bs, "trunc", [{"value": b"t%d" % i} for i in range(500)])
    with AdminClient(bs) as a:
        assert a.delete_records("trunc", {0: 200}) == {0: 200}  # as retention would: the log now starts at 200
    return bs


def _load(spark, bs, **opts):
    r = spark.read.format("strata").option("kafka.bootstrap.servers", bs)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def test_min_partitions_splits_and_empty_partitions_are_skipped(spark, plan_topics):
    from pyspark.sql.functions import spark_partition_id

    df = _load(spark, plan_topics, subscribe="plan", minPartitions="6")
    assert df.rdd.getNumPartitions() == 7  # 6 pieces of p0, 1 of p2, none for empty p1
    rows = df.select("partition", "offset", spark_partition_id().alias("sp")).collect()
    assert sorted((r.partition, r.offset) for r in rows) == [(p, o) for p, o, *_ in consume_all(plan_topics, "plan")]
    per_task: dict[int, list[int]] = {}
    for r in rows:
        per_task.setdefault(r.sp, []).append(r.offset)
    assert all(sorted(v) == list(range(min(v), max(v) + 1)) for v in per_task.values())  # contiguous slices
    assert _load(spark, plan_topics, subscribe="plan", maxRecordsPerPartition="300").rdd.getNumPartitions() == 5


def test_empty_topic_reads_as_empty(spark, plan_topics):
    df = _load(spark, plan_topics, subscribe="nothing", includeHeaders="true")
    assert df.count() == 0
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]


def test_deleted_offsets_fail_or_are_skipped(spark, plan_topics):
    start = '{"trunc":{"0":50}}'
    with pytest.raises(Exception, match="failOnDataLoss") as e:
        _load(spark, plan_topics, subscribe="trunc", startingOffsets=start).collect()
    assert "log starts at 200" in str(e.value)
    rows = _load(spark, plan_topics, subscribe="trunc", startingOffsets=start, failOnDataLoss="false").collect()
    assert sorted(r.offset for r in rows) == list(range(200, 500))
    assert sorted(r.offset for r in _load(spark, plan_topics, subscribe="trunc").collect()) == list(range(200, 500))


def test_remote_segment_gone_after_planning(plan_topics, tiered):
    """Retention (or anyone) removes a remote segment between planning and reading: direct reads fail clearly, or
    with failOnDataLoss=false skip that segment and read on."""
    from strata.pipeline.source import _arrow_schema

    bs = tiered.bootstrap
    create_topic(
        bs, "gone", 1, remote_storage_enable="true", segment_bytes=4096, local_retention_bytes=1, retention_ms=-1
    )
    produce(bs, "gone", [{"value": b"g" * 100} for _ in range(300)], batch_size=1024)
    wait_offloaded(bs, "gone", 0, at_least=100)
    base = {"kafka.bootstrap.servers": bs, "subscribe": "gone", **tiered.direct_options()}
    opts = parse_source_options(base, streaming=False)
    [plan] = plan_batch(opts)
    remote = [p for p in plan.pieces if p.segment is not None]
    assert remote and remote[0].start == 0
    victim = remote[0].segment
    c = tiered.moto.client()
    try:
        for key in tiered.moto.keys(tiered.prefix):
            if victim.remote_log_segment_id.id_str in key:
                c.delete_object(Bucket=tiered.moto.bucket, Key=key)
    finally:
        c.close()
    schema = _arrow_schema(source_schema(False))
    with pytest.raises(DataLossError, match="gone from remote storage"):
        list(read_range(opts, plan, schema))
    lenient = parse_source_options({**base, "failOnDataLoss": "false"}, streaming=False)
    offsets = [o for b in read_range(lenient, plan, schema) for o in b.column("offset").to_pylist()]
    lost = set(range(remote[0].start, remote[0].end))
    assert offsets == [o for o in range(plan.start, plan.end) if o not in lost]


@pytest.mark.parametrize(
    "opts, message",
    [
        ({"kafka.transactional.id": "t"}, "exactlyOnce=true"),
        ({"transactional.id.prefix": "p"}, "needs exactlyOnce=true"),
        ({"exactlyOnce": "maybe"}, "true or false"),
    ],
)
def test_sink_option_errors(opts, message):
    with pytest.raises(OptionError, match=message):
        parse_sink_options({"kafka.bootstrap.servers": "127.0.0.1:1", **opts})


def test_exactly_once_sink_options():
    on = parse_sink_options({"kafka.bootstrap.servers": "h:1", "exactlyOnce": "true", "transactional.id.prefix": "j"})
    assert (on.exactly_once, on.transactional_id_prefix) == (True, "j")
    assert on.producer_conf()["transaction.timeout.ms"] == 300_000
    off = parse_sink_options({"kafka.bootstrap.servers": "h:1"})
    assert not off.exactly_once and "transaction.timeout.ms" not in off.producer_conf()


def test_aborted_filter_drops_an_aborted_producer_until_its_marker():
    from strata.pipeline.reading import AbortedFilter
    from strata.protocol.records import BatchHeader, build_batch
    from strata.protocol.txn_markers import build_end_txn_marker
    from strata.storage.txn_index import AbortedTxn

    def header(batch: bytes, offset: int) -> BatchHeader:
        b = bytearray(batch)
        b[0:8] = offset.to_bytes(8, "big")
        return BatchHeader(bytes(b))

    def data(pid: int, offset: int) -> BatchHeader:
        return header(
            build_batch([b"v"], producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True), offset
        )

    f = AbortedFilter([AbortedTxn(7, 2, 5, 6)])
    seen = [
        f.skip(header(build_batch([b"plain"]), 0)),
        f.skip(data(7, 1)),  # before the aborted transaction's first offset: an earlier, committed one
        f.skip(data(7, 2)),
        f.skip(data(8, 3)),  # another producer's records in between
        f.skip(data(7, 4)),
        f.skip(header(build_end_txn_marker(7, 0, commit=False, coordinator_epoch=0), 5)),
        f.skip(data(7, 6)),  # the producer's next transaction
    ]
    assert seen == [False, False, True, False, True, True, False]
