"""OffsetForLeaderEpoch (API 23, v2-4) and the leader-epoch checks of Fetch/ListOffsets/Produce against one broker
process: a single broker leads every partition at leader epoch 0, so epoch 0 ends at the log end, newer epochs are
unknown, and requests naming a newer current_leader_epoch are told UNKNOWN_LEADER_EPOCH."""

from __future__ import annotations

from typing import Any

import pytest

from strata.protocol.records import build_batch, iter_batches
from strata.protocol.registry import REQUEST_CLASSES, RESPONSE_CLASSES
from tests.support import ck
from tests.support.kafka_wire import WireClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PRODUCE, FETCH, LIST_OFFSETS, API_VERSIONS, OFFSET_FOR_LEADER_EPOCH = 0, 1, 2, 18, 23
NONE, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC, NOT_ENOUGH_REPLICAS, UNKNOWN_LEADER_EPOCH = 0, 1, 3, 19, 75
TOPIC = "ofle"


def call(c: WireClient, api_key: int, version: int, **fields: Any) -> Any:
    req = REQUEST_CLASSES[api_key](version=version, **fields)
    corr = c.send(req)
    return c.recv(RESPONSE_CLASSES[api_key], version, corr)


def ofle(c: WireClient, version: int, parts: list[tuple[str, int, int, int]], replica_id: int = -1) -> dict:
    """{(topic, partition): (error, leader_epoch, end_offset)} for (topic, partition, current epoch, epoch)."""
    T = REQUEST_CLASSES[OFFSET_FOR_LEADER_EPOCH].OffsetForLeaderTopic
    by_topic: dict[str, list] = {}
    for t, p, current, epoch in parts:
        by_topic.setdefault(t, []).append(
            T.OffsetForLeaderPartition(partition=p, current_leader_epoch=current, leader_epoch=epoch)
        )
    fields: dict[str, Any] = {"topics": [T(topic=t, partitions=ps) for t, ps in by_topic.items()]}
    if version >= 3:
        fields["replica_id"] = replica_id
    r = call(c, OFFSET_FOR_LEADER_EPOCH, version, **fields)
    return {
        (t.topic, p.partition): (p.error_code, p.leader_epoch, p.end_offset) for t in r.topics for p in t.partitions
    }


@pytest.fixture(scope="module")
def prepared(module_broker):
    ck.create_topic(module_broker.bootstrap, TOPIC, 2, {"min.insync.replicas": "2"})
    with WireClient.connect(module_broker.bootstrap) as c:
        for n in (3, 2, 5):
            r = c.produce(TOPIC, 0, build_batch([b"v%d" % i for i in range(n)]), version=9, acks=-1)
            # min.insync.replicas=2 on a one-replica partition is capped by the replication factor (Kafka 3.7+)
            assert r.responses[0].partition_responses[0].error_code == NONE, r
    return module_broker


def test_advertised_versions(prepared) -> None:
    with WireClient.connect(prepared.bootstrap) as c:
        assert c.versions()[OFFSET_FOR_LEADER_EPOCH] == (2, 4)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_end_offset_of_the_current_epoch_is_the_log_end(prepared, version) -> None:
    with WireClient.connect(prepared.bootstrap) as c:
        got = ofle(c, version, [(TOPIC, 0, -1, 0), (TOPIC, 1, 0, 0), ("nope", 0, -1, 0)])
    assert got[(TOPIC, 0)] == (NONE, 0, 10)  # epoch 0 (the only one) ends at the LEO
    assert got[(TOPIC, 1)] == (NONE, 0, 0)  # an empty partition: epoch 0 assigned at 0 by becoming leader
    assert got[("nope", 0)] == (UNKNOWN_TOPIC, -1, -1)


def test_a_duplicate_key_in_one_request_is_answered_per_entry(prepared) -> None:
    with WireClient.connect(prepared.bootstrap) as c:
        T = REQUEST_CLASSES[OFFSET_FOR_LEADER_EPOCH].OffsetForLeaderTopic
        r = call(
            c,
            OFFSET_FOR_LEADER_EPOCH,
            4,
            replica_id=-1,
            topics=[
                T(
                    topic=TOPIC,
                    partitions=[
                        T.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=7),
                        T.OffsetForLeaderPartition(partition=0, current_leader_epoch=1, leader_epoch=0),
                    ],
                )
            ],
        )
    parts = r.topics[0].partitions
    assert [(p.error_code, p.leader_epoch, p.end_offset) for p in parts] == [
        (NONE, -1, -1),  # an epoch newer than any known: undefined
        (UNKNOWN_LEADER_EPOCH, -1, -1),
    ]  # a caller that knows a newer leader epoch than this broker


def test_a_follower_replica_id_is_answered_too(prepared) -> None:
    with WireClient.connect(prepared.bootstrap) as c:
        assert ofle(c, 4, [(TOPIC, 0, 0, 0)], replica_id=5)[(TOPIC, 0)] == (NONE, 0, 10)


def _fetch(c: WireClient, version: int, offset: int, last_fetched_epoch: int, current_epoch: int = -1) -> Any:
    T = REQUEST_CLASSES[FETCH].FetchTopic
    r = call(
        c,
        FETCH,
        version,
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            T(
                topic=TOPIC,
                partitions=[
                    T.FetchPartition(
                        partition=0,
                        current_leader_epoch=current_epoch,
                        fetch_offset=offset,
                        last_fetched_epoch=last_fetched_epoch,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    return r.responses[0].partitions[0]


def test_fetch_reports_a_diverging_epoch_past_the_end_of_the_fetchers_epoch(prepared) -> None:
    with WireClient.connect(prepared.bootstrap) as c:
        ok = _fetch(c, 12, 5, 0)
        assert ok.error_code == NONE and ok.diverging_epoch is None
        assert [h.base_offset for _, h in iter_batches(bytes(ok.records))] == [5]
        past = _fetch(c, 12, 12, 0)  # epoch 0 ends at 10: offsets 10..11 are not ours
        assert past.error_code == NONE and not past.records
        assert (past.diverging_epoch.epoch, past.diverging_epoch.end_offset) == (0, 10)
        unknown = _fetch(c, 12, 5, 4)  # an epoch this log never had
        assert unknown.error_code == OFFSET_OUT_OF_RANGE
        assert _fetch(c, 11, 12, -1).error_code == OFFSET_OUT_OF_RANGE  # before v12: no epoch, plain range check
        assert _fetch(c, 12, 0, -1, current_epoch=1).error_code == UNKNOWN_LEADER_EPOCH


def test_list_offsets_checks_the_current_leader_epoch(prepared) -> None:
    with WireClient.connect(prepared.bootstrap) as c:
        T = REQUEST_CLASSES[LIST_OFFSETS].ListOffsetsTopic
        r = call(
            c,
            LIST_OFFSETS,
            7,
            replica_id=-1,
            isolation_level=0,
            topics=[
                T(
                    name=TOPIC,
                    partitions=[
                        T.ListOffsetsPartition(partition_index=0, current_leader_epoch=0, timestamp=-1),
                        T.ListOffsetsPartition(partition_index=1, current_leader_epoch=2, timestamp=-1),
                    ],
                )
            ],
        )
        got = {p.partition_index: (p.error_code, p.offset, p.leader_epoch) for p in r.topics[0].partitions}
    assert got == {0: (NONE, 10, 0), 1: (UNKNOWN_LEADER_EPOCH, -1, -1)}
