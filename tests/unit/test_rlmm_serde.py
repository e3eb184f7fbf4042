"""KIP-405 metadata record values: golden bytes derived by hand from Kafka's message JSON schemas and its
BytesApiMessageSerde framing, round trips, version-1 tagged fields, and the RemoteLogMetadataFormatter text."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from strata.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from strata.remote.rlmm_serde import RAW_CUSTOM_METADATA_KEY, deserialize, format_record, serialize, to_kafka_string
from strata.remote.rlmm_types import MetadataDecodeError, RemoteLogSegmentMetadataSnapshot

TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
SEG_ID = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")
TIP = TopicIdPartition(TOPIC_ID, "foo", 3)
SID = RemoteLogSegmentId(TIP, SEG_ID)
MAX_TS = 1_700_000_000_000  # 0x0000018bcfe56800
EVENT_TS = 1_700_000_001_000  # 0x0000018bcfe56be8


def h(*parts: str) -> bytes:
    return bytes.fromhex("".join(p.replace(" ", "") for p in parts))


# The pieces every record shares, annotated.
TIP_STRUCT = h(
    "04 666f6f",  # Name: compact string, length 3 + 1
    "00112233445566778899aabbccddeeff",  # Id: uuid (msb, lsb)
    "00000003",  # Partition int32
    "00",
)  # TopicIdPartitionEntry tagged fields: none
SEGMENT_ID_STRUCT = TIP_STRUCT + h(
    "0102030405060708090a0b0c0d0e0f10",  # Id: segment uuid
    "00",
)  # RemoteLogSegmentIdEntry tagged fields
EPOCHS = h(
    "03",  # compact array of 2 entries
    "00000000 0000000000000064 00",  # epoch 0 from offset 100, tagged fields
    "00000002 0000000000000096 00",
)  # epoch 2 from offset 150, tagged fields


def segment(**kw) -> RemoteLogSegmentMetadata:
    args: dict[str, Any] = {
        "remote_log_segment_id": SID,
        "start_offset": 100,
        "end_offset": 199,
        "max_timestamp_ms": MAX_TS,
        "broker_id": 1,
        "event_timestamp_ms": EVENT_TS,
        "segment_size_in_bytes": 4096,
        "segment_leader_epochs": {2: 150, 0: 100},
    }
    args.update(kw)
    return RemoteLogSegmentMetadata(**args)


SEGMENT_GOLDEN = (
    h("01 00 00")  # frame version 1, api key 0, version 0
    + SEGMENT_ID_STRUCT
    + h(
        "0000000000000064",  # StartOffset 100
        "00000000000000c7",  # EndOffset 199
        "00000001",  # BrokerId 1
        "0000018bcfe56800",  # MaxTimestampMs
        "0000018bcfe56be8",
    )  # EventTimestampMs
    + EPOCHS
    + h(
        "00001000",  # SegmentSizeInBytes 4096
        "00",  # CustomMetadata null
        "00",  # RemoteLogSegmentState COPY_SEGMENT_STARTED
        "00",
    )
)  # tagged fields: TxnIndexEmpty false is not written


def test_segment_metadata_record_golden_bytes() -> None:
    assert serialize(segment()) == SEGMENT_GOLDEN
    assert deserialize(SEGMENT_GOLDEN) == segment()


def test_segment_metadata_with_txn_index_empty_and_custom_metadata() -> None:
    m = segment(txn_idx_empty=True, custom_metadata={"a": 1}, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED)
    expected = (
        SEGMENT_GOLDEN[:-3]
        + h("08 7b2261223a317d")  # CustomMetadata: 7 bytes {"a":1}
        + h("00")  # state
        + h("01 00 01 01")
    )  # 1 tagged field: tag 0 (TxnIndexEmpty), size 1, true
    assert serialize(m) == expected
    back = deserialize(expected)
    assert back == m and back.txn_idx_empty is True and back.custom_metadata == {"a": 1}


def test_segment_update_record_golden_bytes() -> None:
    u = RemoteLogSegmentMetadataUpdate(SID, EVENT_TS, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 2)
    golden = (
        h("01 01 00")  # frame, api key 1, version 0
        + SEGMENT_ID_STRUCT
        + h(
            "00000002",  # BrokerId
            "0000018bcfe56be8",  # EventTimestampMs
            "00",  # CustomMetadata null
            "01",  # COPY_SEGMENT_FINISHED
            "00",
        )
    )  # no tagged fields
    assert serialize(u) == golden
    assert deserialize(golden) == u


def test_partition_delete_record_golden_bytes() -> None:
    d = RemotePartitionDeleteMetadata(TIP, RemotePartitionDeleteState.DELETE_PARTITION_STARTED, EVENT_TS, 7)
    golden = (
        h("01 02 00")  # frame, api key 2, version 0
        + TIP_STRUCT
        + h(
            "00000007",  # BrokerId
            "0000018bcfe56be8",  # EventTimestampMs
            "01",  # DELETE_PARTITION_STARTED
            "00",
        )
    )
    assert serialize(d) == golden
    assert deserialize(golden) == d


def test_snapshot_record_golden_bytes() -> None:
    s = RemoteLogSegmentMetadataSnapshot(
        SEG_ID,
        100,
        199,
        MAX_TS,
        1,
        EVENT_TS,
        4096,
        {0: 100, 2: 150},
        RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
        None,
        True,
    )
    golden = (
        h("01 03 00")  # frame, api key 3, version 0
        + h(
            "0102030405060708090a0b0c0d0e0f10",  # SegmentId
            "0000000000000064 00000000000000c7",  # StartOffset, EndOffset
            "00000001",  # BrokerId
            "0000018bcfe56800 0000018bcfe56be8",
        )  # MaxTimestampMs, EventTimestampMs
        + EPOCHS
        + h(
            "00001000 00",  # size, custom metadata null
            "02",  # DELETE_SEGMENT_STARTED
            "01 00 01 01",
        )
    )  # TxnIndexEmpty true
    assert serialize(s) == golden
    assert deserialize(golden) == s
    assert s.to_metadata(TIP) == segment(state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED, txn_idx_empty=True)


@pytest.mark.parametrize("state", list(RemoteLogSegmentState))
def test_round_trip_every_segment_state_and_odd_values(state: RemoteLogSegmentState) -> None:
    m = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TopicIdPartition(uuid.uuid4(), "t\u00e9st-" + "x" * 200, 2**31 - 1), uuid.uuid4()),
        0,
        2**62,
        -1,
        -1,
        0,
        2**31 - 1,
        {e: e * 1000 for e in range(300)},
        state,
        {"k": [1, "v"]},
        False,
    )
    assert deserialize(serialize(m)) == m


def test_raw_custom_metadata_from_another_rsm_is_kept_byte_for_byte() -> None:
    raw = b"\x00\xffnot json"
    value = SEGMENT_GOLDEN[:-3] + h("0b") + raw + h("00 00")
    m = deserialize(value)
    assert isinstance(m, RemoteLogSegmentMetadata)
    assert m.custom_metadata == {RAW_CUSTOM_METADATA_KEY: "AP9ub3QganNvbg=="}
    assert serialize(m) == value


def test_version_1_records_with_tagged_fields_are_read() -> None:
    # Kafka 4.3 writes version 1: BrokerLeaderEpoch (tag 1) on segment records, BrokerLeaderEpoch (0) and EndOffset
    # (1) on updates; and an unknown tag must be skipped.
    v1 = h("01 00 01") + SEGMENT_GOLDEN[3:-1] + h("02", "01 04 00000005", "07 02 abcd")
    assert deserialize(v1) == segment()
    upd = (
        h("01 01 01")
        + SEGMENT_ID_STRUCT
        + h("00000002 0000018bcfe56be8 00 02")
        + h("02 00 04 00000009 01 08 00000000000000c7")
    )
    u = deserialize(upd)
    assert u.state == RemoteLogSegmentState.DELETE_SEGMENT_STARTED and u.broker_id == 2


@pytest.mark.parametrize(
    "value, message",
    [
        (h("00 00 00"), "frame version"),
        (h("01 09 00"), "api key"),
        (h("01 00 05"), "version"),
        (SEGMENT_GOLDEN[:-5], "truncated"),
        (SEGMENT_GOLDEN + h("00"), "garbage"),
        (SEGMENT_GOLDEN[:-2] + h("07 00"), "RemoteLogSegmentState"),
        (h("01 01 00") + SEGMENT_ID_STRUCT + h("00000002 0000018bcfe56be8 00 00 00"), "COPY_SEGMENT_STARTED"),
    ],
)
def test_malformed_values_raise_decode_errors(value: bytes, message: str) -> None:
    with pytest.raises(MetadataDecodeError, match=message):
        deserialize(value)


def test_formatter_matches_kafka_remote_log_metadata_formatter() -> None:
    # Kafka's RemoteLogMetadataFormatterTest, with our ids: Uuid prints as URL-safe base64, epochs as a TreeMap,
    # custom metadata as Optional[CustomMetadata{N bytes}], plus Kafka 4's txnIdxEmpty.
    m = segment(
        start_offset=0,
        end_offset=100,
        max_timestamp_ms=-1,
        event_timestamp_ms=123,
        segment_size_in_bytes=1024,
        segment_leader_epochs={0: 0, 1: 20, 2: 80},
        custom_metadata={RAW_CUSTOM_METADATA_KEY: "AAAAAAAAAAAAAA=="},
    )
    line = format_record(0, 0, serialize(m))
    assert line == (
        "partition: 0, offset: 0, value: RemoteLogSegmentMetadata{remoteLogSegmentId=RemoteLogSegmentId"
        "{topicIdPartition=ABEiM0RVZneImaq7zN3u_w:foo-3, id=AQIDBAUGBwgJCgsMDQ4PEA}, startOffset=0, "
        "endOffset=100, brokerId=1, maxTimestampMs=-1, eventTimestampMs=123, "
        "segmentLeaderEpochs={0=0, 1=20, 2=80}, segmentSizeInBytes=1024, "
        "customMetadata=Optional[CustomMetadata{10 bytes}], state=COPY_SEGMENT_STARTED, "
        "txnIdxEmpty=false}"
    )
    u = RemoteLogSegmentMetadataUpdate(SID, 5, None, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, 3)
    assert to_kafka_string(u) == (
        "RemoteLogSegmentMetadataUpdate{remoteLogSegmentId=RemoteLogSegmentId{topicIdPartition="
        "ABEiM0RVZneImaq7zN3u_w:foo-3, id=AQIDBAUGBwgJCgsMDQ4PEA}, customMetadata=Optional.empty, "
        "state=DELETE_SEGMENT_FINISHED, eventTimestampMs=5, brokerId=3}"
    )
    d = RemotePartitionDeleteMetadata(TIP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 6, 4)
    assert format_record(7, 42, serialize(d)) == (
        "partition: 7, offset: 42, value: RemotePartitionDeleteMetadata{topicPartition=ABEiM0RVZneImaq7zN3u_w:foo-3, "
        "state=DELETE_PARTITION_MARKED, eventTimestampMs=6, brokerId=4}"
    )
    assert (
        format_record(1, 2, b"\x05") == "partition: 1, offset: 2, value: <undecodable: unknown frame version 5 "
        "(only 1 is supported)>"
    )
