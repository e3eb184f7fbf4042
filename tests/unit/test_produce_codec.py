"""protocol/produce_codec.py against kafka-python's codec on the same bytes: every Produce request version the broker
decodes with records (v3-v13) decodes to the same values (and mutated frames either decode the same or go to the
generic codec), and every response version (v0-v13) encodes to the same bytes."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from strata.protocol.produce_codec import PartitionAnswer, ProduceAnswer, ProduceRequestData, decode_produce_request
from strata.protocol.registry import decode_request
from strata.protocol.wire import WireFormatError, skip_tagged_fields

P = ProduceRequest.TopicProduceData
R = ProduceResponse.TopicProduceResponse
PR = R.PartitionProduceResponse


def _request(rng: random.Random, version: int) -> bytes:
    topics = []
    for t in range(rng.randint(0, 3)):
        parts = [
            P.PartitionProduceData(
                index=rng.randint(0, 2**31 - 1),
                records=None if rng.random() < 0.1 else rng.randbytes(rng.choice((0, 1, 61, 100, 200, 20_000))),
            )
            for _ in range(rng.randint(0, 4))
        ]
        key = (
            {"topic_id": uuid.UUID(int=rng.getrandbits(128))}
            if version >= 13
            else {"name": f"t{t}-é" * rng.randint(1, 80)}
        )
        topics.append(P(partition_data=parts, **key))
    tid = None if rng.random() < 0.5 else "tx-" + "ü" * rng.randint(0, 100)
    req = ProduceRequest[version](
        transactional_id=tid, acks=rng.choice((-1, 0, 1, 7)), timeout_ms=rng.randint(0, 99999), topic_data=topics
    )
    req.with_header(correlation_id=rng.randint(0, 2**31 - 1), client_id=rng.choice((None, "c", "client" * 30)))
    return bytes(req.encode(header=True, framed=True))[4:]


def _values(req: Any) -> tuple:
    return (
        req.transactional_id,
        req.acks,
        req.timeout_ms,
        [
            (
                td.name if not isinstance(req, ProduceRequestData) or td.topic_id is None else None,
                getattr(td, "topic_id", None),
                [(pd.index, None if pd.records is None else bytes(pd.records)) for pd in td.partition_data],
            )
            for td in req.topic_data
        ],
    )


def _generic(payload: bytes, version: int) -> Any:
    return decode_request(payload, 0, version, hand_codec=False)


@pytest.mark.parametrize("version", range(3, 14))
def test_requests_decode_as_kafka_python_decodes_them(version: int) -> None:
    rng = random.Random(version)
    for _ in range(60):
        payload = _request(rng, version)
        fast = decode_request(payload, 0, version)
        assert isinstance(fast.body, ProduceRequestData)
        generic = _generic(payload, version)
        assert fast.client_id == generic.client_id
        got, want = _values(fast.body), _values(generic.body)
        if version >= 13:
            want = (*want[:3], [(None, tid, parts) for _name, tid, parts in want[3]])
        assert got == want
        for td in fast.body.topic_data:  # writable views into the frame: the append stamps headers in place
            for pd in td.partition_data:
                assert pd.records is None or not pd.records.readonly


@pytest.mark.parametrize("version", range(3, 14))
def test_mutated_requests_decode_the_same_or_go_to_the_generic_codec(version: int) -> None:
    rng = random.Random(1000 + version)
    fast_taken = 0
    for _ in range(400):
        data = bytearray(_request(rng, version))
        kind = rng.random()
        if kind < 0.4 and len(data) > 10:
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(10, len(data))] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        elif kind < 0.7:
            del data[rng.randrange(10, len(data)) :]
        else:
            data += rng.randbytes(rng.randint(1, 5))
        hdr_end = _generic_body_start(bytes(data), version)
        if hdr_end is None:
            continue  # a broken header: decode_request never reaches the Produce codec
        fast = decode_produce_request(bytes(data), hdr_end, version)
        if fast is None:
            continue
        fast_taken += 1
        generic = _generic(bytes(data), version)  # must not raise: the hand codec took only what is canonical
        got, want = _values(fast), _values(generic.body)
        if version >= 13:
            want = (*want[:3], [(None, tid, parts) for _name, tid, parts in want[3]])
        assert got == want
    assert fast_taken > 0


def _generic_body_start(payload: bytes, version: int) -> int | None:
    n = int.from_bytes(payload[8:10], "big", signed=True)
    if n < -1 or 10 + max(n, 0) > len(payload):
        return None
    pos = 10 + max(n, 0)
    try:
        return skip_tagged_fields(payload, pos) if version >= 9 else pos
    except WireFormatError:
        return None


def test_versions_below_3_and_uncanonical_bodies_go_to_the_generic_codec() -> None:
    rng = random.Random(5)
    assert decode_produce_request(_request(rng, 9), 0, 2) is None
    payload = bytearray(_request(rng, 9))
    body = _generic_body_start(bytes(payload), 9)
    assert body is not None
    assert decode_produce_request(payload, body, 9) is not None
    assert decode_produce_request(payload + b"\x00", body, 9) is None  # a byte after the body
    payload[-1] = 1  # a tagged field announced in the request's own section
    assert decode_produce_request(payload, body, 9) is None


def _answer(rng: random.Random, version: int) -> tuple[ProduceAnswer, Any]:
    ours, theirs = [], []
    for t in range(rng.randint(0, 3)):
        parts, rparts = [], []
        for _ in range(rng.randint(0, 4)):
            err = rng.choice((0, 0, 6, 87, 19))
            rec_errs = [(rng.randint(0, 9), rng.choice((None, "bad", "ü" * 3))) for _ in range(rng.randint(0, 2))]
            leader = rng.choice((None, (3, 7), (-1, -1), (-1, 4)))
            msg = rng.choice((None, "", "message é"))
            a = PartitionAnswer(
                rng.randint(0, 1000),
                err,
                rng.randint(-1, 2**40),
                rng.randint(-1, 2**41),
                rng.randint(-1, 2**40),
                msg,
                rec_errs if err else None,
                leader,
            )
            parts.append(a)
            r = PR(
                index=a.index,
                error_code=a.error_code,
                base_offset=a.base_offset,
                log_append_time_ms=a.log_append_time_ms,
                log_start_offset=a.log_start_offset,
                error_message=msg,
            )
            if version >= 8 and a.record_errors:
                r.record_errors = [
                    PR.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m) for i, m in rec_errs
                ]
            if version >= 10 and leader is not None and leader != (-1, -1):  # Kafka writes a tagged field
                # only when it differs from its default; kafka-python writes whatever is set
                r.current_leader = PR.LeaderIdAndEpoch(leader_id=leader[0], leader_epoch=leader[1])
            rparts.append(r)
        tid = uuid.UUID(int=rng.getrandbits(128))
        name = f"topic-{t}" * rng.randint(1, 30)
        ours.append((name if version < 13 else None, tid if version >= 13 else None, parts))
        theirs.append(
            R(name=name if version < 13 else None, topic_id=tid if version >= 13 else None, partition_responses=rparts)
        )
    endpoints = [
        (b, f"host-{b}", 9092 + b, rng.choice((None, "rack-a")))
        for b in sorted(rng.sample(range(5), rng.randint(0, 2)))
    ]
    answer = ProduceAnswer(version, ours, endpoints if version >= 10 else ())
    answer.throttle_time_ms = rng.choice((0, 250))
    resp = ProduceResponse(version=version, responses=theirs, throttle_time_ms=answer.throttle_time_ms)
    if version >= 10 and endpoints:
        resp.node_endpoints = [
            ProduceResponse.NodeEndpoint(node_id=b, host=h, port=p, rack=r) for b, h, p, r in endpoints
        ]
    return answer, resp


@pytest.mark.parametrize("version", range(0, 14))
def test_responses_encode_as_kafka_python_encodes_them(version: int) -> None:
    rng = random.Random(77 + version)
    for _ in range(80):
        answer, resp = _answer(rng, version)
        cid = rng.randint(0, 2**31 - 1)
        resp.with_header(correlation_id=cid)
        assert answer.encode(cid) == bytes(resp.encode(header=True, framed=True))
        assert answer.partition_count() == sum(len(t.partition_responses) for t in resp.responses)
