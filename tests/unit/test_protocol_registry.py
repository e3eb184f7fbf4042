"""The advertised ApiVersions table is coherent and every advertised API has a handler."""

import struct

import pytest
from kafka.protocol.metadata import ApiVersionsResponse

from strata.protocol.registry import (
    REQUEST_CLASSES,
    SUPPORTED_VERSIONS,
    ApiKey,
    decode_request,
    is_supported,
    peek_header,
    unsupported_api_versions_response,
)


def test_every_advertised_api_has_a_handler():
    from strata.broker.apis import build_handlers

    assert set(build_handlers()) == set(SUPPORTED_VERSIONS)


def test_advertised_ranges_within_codec_and_kafka_floors():
    for key, (lo, hi) in SUPPORTED_VERSIONS.items():
        assert lo <= hi <= REQUEST_CLASSES[key].max_version, key
    # KAFKA-18659: Produce min 0; magic-v2 floors and kafka-python's Metadata >= 4 inference rule.
    assert SUPPORTED_VERSIONS[ApiKey.PRODUCE][0] == 0
    assert SUPPORTED_VERSIONS[ApiKey.FETCH][0] >= 4
    assert SUPPORTED_VERSIONS[ApiKey.METADATA][1] >= 10  # topic ids
    # never advertise what does not exist yet (telemetry 71); InitProducerId without KIP-939 2PC (v6)
    assert 71 not in SUPPORTED_VERSIONS
    # KIP-848 at Kafka 4.2's ranges (the codec from protocol/extra_messages.py)
    assert SUPPORTED_VERSIONS[ApiKey.CONSUMER_GROUP_HEARTBEAT] == (0, 1)
    assert SUPPORTED_VERSIONS[ApiKey.CONSUMER_GROUP_DESCRIBE] == (0, 1)
    assert SUPPORTED_VERSIONS[ApiKey.INIT_PRODUCER_ID] == (0, 5)
    # the classic group APIs, as Kafka 4.2 advertises them (OffsetCommit/OffsetFetch v10 name topics by id)
    assert {k: SUPPORTED_VERSIONS[k] for k in (8, 9, 10, 11, 12, 13, 14, 15, 16, 42, 47)} == {
        8: (2, 10),
        9: (1, 10),
        10: (0, 6),
        11: (0, 9),
        12: (0, 4),
        13: (0, 5),
        14: (0, 5),
        15: (0, 6),
        16: (0, 5),
        42: (0, 2),
        47: (0, 0),
    }


def test_unsupported_api_versions_is_a_v0_body_with_error_35():
    frame = unsupported_api_versions_response(42)
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    resp = ApiVersionsResponse.decode(frame[4:], version=0, header=True)
    assert resp.header.correlation_id == 42
    assert resp.error_code == 35
    assert [(a.api_key, a.min_version, a.max_version) for a in resp.api_keys] == [
        (18, *SUPPORTED_VERSIONS[ApiKey.API_VERSIONS])
    ]


def test_request_round_trip_through_registry():
    Req = REQUEST_CLASSES[ApiKey.METADATA]
    req = Req(version=12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    req.with_header(correlation_id=7, client_id="t")
    payload = bytes(req.encode(header=True, framed=True))[4:]
    hdr = peek_header(payload)
    assert (hdr.api_key, hdr.api_version, hdr.correlation_id) == (3, 12, 7)
    assert is_supported(hdr.api_key, hdr.api_version)
    decoded = decode_request(payload, hdr.api_key, hdr.api_version)
    assert decoded.client_id == "t" and decoded.body.topics is None


def test_trailing_bytes_and_truncation_are_malformed():
    import pytest

    Req = REQUEST_CLASSES[ApiKey.METADATA]
    for version in (8, 12):  # classic and flexible encodings
        req = Req(
            version=version,
            topics=[Req.MetadataRequestTopic(name="a")],
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )
        req.with_header(correlation_id=1, client_id="c")
        payload = bytes(req.encode(header=True, framed=True))[4:]
        assert decode_request(payload, 3, version).body.topics[0].name == "a"
        # bytes after a well-formed body are ignored, as Kafka does
        assert decode_request(payload + b"\x01\x00\x00", 3, version).body.topics[0].name == "a"
        with pytest.raises(Exception):  # noqa: B017 - which error a truncated body raises is the codec's affair
            decode_request(payload[:-2], 3, version)


def test_librdkafka_all_topics_metadata_v13_with_trailing_bytes():
    """Captured from confluent-kafka 2.16 (AdminClient.list_topics): three bytes follow the body."""
    payload = bytes.fromhex("0003000d00000003000772646b61666b610000000000010000")
    body = decode_request(payload, 3, 13).body
    assert body.topics is None and body.allow_auto_topic_creation is False


def test_negative_array_count_is_malformed():
    import struct as st

    # Produce v7: null transactional id, acks, timeout, then topic_data with a negative (non-nullable) count
    payload = st.pack(">hhih", 0, 7, 1, -1) + st.pack(">hhii", -1, 1, 1000, -5) + b"\xaa" * 16
    with pytest.raises(ValueError):
        decode_request(payload, 0, 7)


def test_unknown_versions_are_not_supported():
    assert not is_supported(ApiKey.API_VERSIONS, 99)
    assert not is_supported(ApiKey.FETCH, 3)
    assert not is_supported(9999, 0)
