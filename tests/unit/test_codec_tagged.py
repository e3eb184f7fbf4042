"""Tagged fields decode without copying the rest of the frame (fuzzer finding N6), with the same result."""

from __future__ import annotations

import io

from kafka.protocol.schemas.fields import struct as kp_struct

from strata.protocol import codec_tagged
from strata.protocol.registry import ApiKey, decode_request
from tests.support.kafka_wire import fetch_v17_tagging_every_topic


def fetch_v17(topics: int) -> bytes:
    body = fetch_v17_tagging_every_topic(topics)
    header = b"\x00\x01\x00\x11\x00\x00\x00\x07\x00\x02c1\x00"  # api 1 v17, correlation 7, client "c1", no tags
    return header + bytes(body.encode(version=17))


def test_the_library_emitter_is_replaced() -> None:
    codec_tagged.install()  # idempotent
    assert kp_struct.StructField._emit_tagged_decode is codec_tagged._emit_tagged_decode


def test_decoding_tagged_structs_reads_the_callers_buffer(monkeypatch) -> None:
    """Every tagged section is read through TaggedFieldsReader over the frame itself: count the readers and the
    bytes they hand out; the old path copied the rest of the frame into a BytesIO for each."""
    frame = fetch_v17(200)
    made: list[int] = []
    real_init = codec_tagged.TaggedFieldsReader.__init__

    def counting_init(self, data, start):
        assert isinstance(data, memoryview)
        made.append(start)
        real_init(self, data, start)

    monkeypatch.setattr(codec_tagged.TaggedFieldsReader, "__init__", counting_init)
    monkeypatch.setattr(io, "BytesIO", None)  # the old path would fail here
    decoded = decode_request(frame, ApiKey.FETCH, 17)
    assert len(made) == 200  # one reader per partition carrying replica_directory_id
    assert len(decoded.body.topics) == 200
    assert all(t.partitions[0].replica_directory_id is not None for t in decoded.body.topics)


def test_decoded_tags_re_encode_to_the_same_bytes() -> None:
    frame = fetch_v17(3)
    body = decode_request(frame, ApiKey.FETCH, 17).body
    assert bytes(body.encode()) == frame[13:]  # the body after the 13-byte v2 header


def test_reader_semantics_match_bytesio() -> None:
    data = memoryview(b"0123456789")
    r, b = codec_tagged.TaggedFieldsReader(data, 3), io.BytesIO(b"3456789")
    for n in (2, 0, 3, 10, 5):
        assert r.read(n) == b.read(n)
        assert r.tell() == b.tell()
