"""strata.protocol.compression: each Kafka codec id round-trips, reads what kafka-python's producer writes
(xerial snappy included), and an unknown codec id raises UnsupportedCodecError (a WireFormatError)."""

from __future__ import annotations

import pytest

from strata.protocol.compression import CODEC_IDS, UnsupportedCodecError, compress, decompress
from strata.protocol.records import GZIP, LZ4, NONE, SNAPPY, ZSTD, build_batch, iter_batches, iter_records
from strata.protocol.wire import WireFormatError

# more than one 32 KiB xerial block
PAYLOAD = b"".join(b"record %d of a compressible payload; " % i for i in range(5000))


def test_codec_ids_are_kafkas():
    assert CODEC_IDS == (NONE, GZIP, SNAPPY, LZ4, ZSTD) == (0, 1, 2, 3, 4)


# Not (SNAPPY, b""): kafka.codec writes a bare xerial header for b"" and cannot read it back; a compressed records
# section is never empty.
@pytest.mark.parametrize(
    "codec, data", [(c, d) for c in (GZIP, SNAPPY, LZ4, ZSTD) for d in (b"", b"x", PAYLOAD) if (c, d) != (SNAPPY, b"")]
)
def test_round_trip(codec, data):
    packed = compress(codec, data)
    if len(data) > 1000:
        assert len(packed) < len(data)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(bytearray(packed))) == data
    assert type(decompress(codec, packed)) is bytes


def test_none_is_the_identity():
    assert compress(NONE, b"abc") == b"abc"
    assert decompress(NONE, memoryview(b"abc")) == b"abc"


def test_snappy_uses_the_xerial_framing_of_java_clients():
    packed = compress(SNAPPY, PAYLOAD)
    assert packed[:8] == b"\x82SNAPPY\x00"
    import snappy

    assert decompress(SNAPPY, snappy.compress(PAYLOAD)) == PAYLOAD  # raw snappy is read too


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_reads_the_records_sections_kafka_python_writes(codec):
    buf = build_batch([(b"k", b"value " * 100), (None, b"value " * 50)], compression=codec)
    ((pos, h),) = iter_batches(buf)
    assert h.compression == codec
    section = decompress(codec, buf[pos + 61 : pos + h.size])
    # a records section of two records: each starts with its length varint; both values are in there
    assert section.count(b"value ") == 150
    assert [r.value for r in iter_records(buf, pos)] == [b"value " * 100, b"value " * 50]


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec_ids_raise(codec):
    for f in (compress, decompress):
        with pytest.raises(UnsupportedCodecError, match=f"unknown compression codec {codec}"):
            f(codec, b"abc")
    assert issubclass(UnsupportedCodecError, WireFormatError)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_corrupt_input_raises(codec):
    with pytest.raises(Exception):  # noqa: B017 - each codec library raises its own type
        decompress(codec, b"\x00definitely not compressed data\xff" * 3)
