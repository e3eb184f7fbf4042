"""The hand-written FetchResponse encoder (strata.protocol.fetch_response) against kafka-python's codec: byte-for-byte
equal for every Fetch version the broker advertises, records passed through without copies, codec fallback otherwise."""

from __future__ import annotations

import os
import uuid

import pytest

from strata.protocol.fetch_response import INLINE_RECORDS_MAX, encode_fetch_response
from strata.protocol.records import BufferChain
from strata.protocol.registry import SUPPORTED_VERSIONS, ApiKey, encode_response, response_class

Resp = response_class(ApiKey.FETCH)
TopicResp = Resp.FetchableTopicResponse
PartData = TopicResp.PartitionData
Aborted = PartData.AbortedTransaction

LO, HI = SUPPORTED_VERSIONS[ApiKey.FETCH]
VERSIONS = list(range(LO, HI + 1))

BIG = os.urandom(INLINE_RECORDS_MAX * 3 + 17)
SMALL = os.urandom(200)  # > 127: a two-byte varint length in flexible versions


def part(index, records, *, error=0, hw=100, lso=100, ls=0, aborted=None, preferred=-1):
    return PartData(
        partition_index=index,
        error_code=error,
        high_watermark=hw,
        last_stable_offset=lso,
        log_start_offset=ls,
        aborted_transactions=aborted,
        preferred_read_replica=preferred,
        records=records,
    )


def response(v, topics, *, throttle=0, error=0, session=0):
    out = []
    for name, tid, parts in topics:
        out.append(TopicResp(topic=name if v < 13 else None, topic_id=tid if v >= 13 else None, partitions=parts))
    return Resp(version=v, throttle_time_ms=throttle, error_code=error, session_id=session, responses=out)


def cases(v):
    tid = uuid.UUID("3f2b8c1e-8d7a-4b7e-9c1a-0123456789ab")
    yield "empty", response(v, [])
    yield "one big partition", response(v, [("topic-a", tid, [part(0, BIG)])])
    yield "one empty partition", response(v, [("topic-a", tid, [part(3, b"")])])
    yield "null records", response(v, [("topic-a", tid, [part(3, None)])])
    yield "memoryview records", response(v, [("t", tid, [part(0, memoryview(BIG)), part(1, memoryview(SMALL))])])
    yield (
        "mixed",
        response(
            v,
            [
                (
                    "topic-a",
                    tid,
                    [
                        part(0, BIG, hw=1 << 40, lso=1 << 39, ls=5),
                        part(1, b""),
                        part(2, SMALL),
                        part(7, b"", error=1, hw=-1, lso=-1, ls=-1),
                    ],
                ),
                ("x" * 200, uuid.uuid4(), [part(i, BIG if i % 3 == 0 else SMALL) for i in range(5)]),
            ],
            throttle=17,
            error=0,
            session=0,
        ),
    )
    yield (
        "read committed",
        response(
            v,
            [
                (
                    "topic-a",
                    tid,
                    [
                        part(0, BIG, aborted=[]),
                        part(
                            1,
                            SMALL,
                            aborted=[Aborted(producer_id=42, first_offset=7), Aborted(producer_id=-1, first_offset=0)],
                        ),
                    ],
                )
            ],
        ),
    )
    yield "top-level error", response(v, [], error=70, session=0)
    yield "many partitions", response(v, [("t", tid, [part(i, SMALL if i % 2 else b"") for i in range(300)])])


def codec_bytes(resp, corr):
    return encode_response(resp, corr)


@pytest.mark.parametrize("v", VERSIONS)
def test_same_bytes_as_codec_for_every_advertised_version(v):
    for name, resp in cases(v):
        parts = encode_fetch_response(resp, v, 123456)
        assert parts is not None, name
        fast = b"".join(bytes(p) for p in parts)
        assert fast == codec_bytes(resp, 123456), f"v{v} {name}"


@pytest.mark.parametrize("v", VERSIONS)
def test_large_records_are_not_copied(v):
    data = os.urandom(INLINE_RECORDS_MAX + 1)
    mv = memoryview(os.urandom(INLINE_RECORDS_MAX * 2))
    resp = response(v, [("t", uuid.uuid4(), [part(0, data), part(1, b"x"), part(2, mv)])])
    parts = encode_fetch_response(resp, v, 1)
    assert any(p is data for p in parts)
    assert any(p is mv for p in parts)


@pytest.mark.parametrize("v", [v for v in VERSIONS if v >= 12])
@pytest.mark.parametrize("field", ["diverging_epoch", "current_leader", "snapshot_id"])
def test_tagged_partition_fields_fall_back_to_the_codec(v, field):
    resp = response(v, [("t", uuid.uuid4(), [part(0, SMALL)])])
    p = resp.responses[0].partitions[0]
    sub = {
        "diverging_epoch": PartData.EpochEndOffset(epoch=3, end_offset=10),
        "current_leader": PartData.LeaderIdAndEpoch(leader_id=1, leader_epoch=4),
        "snapshot_id": PartData.SnapshotId(end_offset=5, epoch=1),
    }[field]
    setattr(p, field, sub)
    assert encode_fetch_response(resp, v, 1) is None


@pytest.mark.parametrize("v", [v for v in VERSIONS if v >= 16])
def test_node_endpoints_fall_back_to_the_codec(v):
    resp = response(v, [])
    resp.node_endpoints = [Resp.NodeEndpoint(node_id=1, host="h", port=9092, rack=None)]
    assert encode_fetch_response(resp, v, 1) is None


def test_versions_outside_the_encoder_fall_back():
    assert encode_fetch_response(response(4, []), 3, 1) is None
    assert encode_fetch_response(response(4, []), 19, 1) is None


@pytest.mark.parametrize("v", VERSIONS)
def test_a_record_chain_goes_out_as_its_pieces_with_the_bytes_of_its_join(v):
    """A remote read's chunks (BufferChain): each piece is written as it is, and the response equals the codec's
    for the joined bytes."""
    pieces = [memoryview(BIG)[:1000], memoryview(BIG)[1000:], memoryview(SMALL)]
    chain, small = BufferChain(pieces), BufferChain([memoryview(SMALL)[:10], memoryview(SMALL)[10:]])
    resp = response(v, [("t", uuid.uuid4(), [part(0, chain), part(1, small)])])
    parts = encode_fetch_response(resp, v, 7)
    assert all(any(p is piece for p in parts) for piece in pieces)
    joined = response(v, [("t", resp.responses[0].topic_id, [part(0, bytes(chain)), part(1, bytes(small))])])
    if v < 13:
        joined.responses[0].topic = "t"
    assert b"".join(bytes(p) for p in parts) == codec_bytes(joined, 7)
