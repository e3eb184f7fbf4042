"""use_request_buffer (protocol/produce_records.py): for every Produce version with record batches (3-13), a decoded
request's records become writable views of the request's own buffer holding the same bytes, null records stay null,
and a buffer that does not match the decoded request leaves it untouched."""

from __future__ import annotations

import os
import uuid

import pytest
from kafka.protocol.producer import ProduceRequest

from strata.protocol.produce_records import use_request_buffer
from strata.protocol.registry import decode_request

P = ProduceRequest.TopicProduceData
TID = uuid.UUID("0b7a3f5e-2c1d-4e8f-9a6b-5c4d3e2f1a0b")


def _request(version: int, records: list[list[bytes | None]]) -> tuple[bytearray, list[list[bytes | None]]]:
    topics = []
    for t, parts in enumerate(records):
        pdata = [P.PartitionProduceData(index=i * 3, records=r) for i, r in enumerate(parts)]
        name = {"topic_id": TID} if version >= 13 else {"name": f"topic-{t}" + "x" * 150 * t}  # 2-byte varint
        topics.append(P(partition_data=pdata, **name))
    req = ProduceRequest[version](
        transactional_id="tx" if version >= 3 else None, acks=-1, timeout_ms=500, topic_data=topics
    )
    req.with_header(correlation_id=7, client_id="client-" + "c" * 200)
    frame = bytes(req.encode(header=True, framed=True))
    return bytearray(frame[4:]), records


@pytest.mark.parametrize("version", range(3, 14))
def test_records_point_into_the_request(version: int) -> None:
    big = os.urandom(300_000)
    payload, records = _request(version, [[big, os.urandom(70)], [None, os.urandom(200), b"abcdefgh" * 20]])
    req = decode_request(payload, 0, version, hand_codec=False).body
    assert use_request_buffer(req, payload, version)
    got = [[pd.records for pd in td.partition_data] for td in req.topic_data]
    assert [[None if r is None else bytes(r) for r in parts] for parts in got] == records
    view = got[0][0]
    assert isinstance(view, memoryview) and not view.readonly
    view[0] ^= 0xFF  # the view is the request's own buffer
    assert payload.find(bytes(view[:64])) >= 0 and payload.find(big[:64]) < 0


def test_a_buffer_that_does_not_match_leaves_the_request_alone() -> None:
    payload, _ = _request(9, [[os.urandom(1000)]])
    req = decode_request(payload, 0, 9, hand_codec=False).body
    before = req.topic_data[0].partition_data[0].records
    other, _ = _request(9, [[os.urandom(1000)]])  # same layout, other bytes
    assert not use_request_buffer(req, other, 9)
    assert req.topic_data[0].partition_data[0].records is before
    assert not use_request_buffer(req, payload[:-10], 9)
    assert req.topic_data[0].partition_data[0].records is before
