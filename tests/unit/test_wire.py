"""strata.protocol.wire at its bounds: Kafka's UNSIGNED_VARINT / VARINT / VARLONG limits, truncated and
overlong input, compact strings/bytes, tagged fields and the ByteReader's single error type."""

from __future__ import annotations

import struct
import uuid

import pytest

from strata.protocol.wire import (
    MAX_STRING_LENGTH,
    ByteReader,
    WireFormatError,
    read_uvarint,
    read_varint,
    read_varlong,
    skip_tagged_fields,
    write_compact_bytes,
    write_compact_string,
    write_string,
    write_tagged_fields,
    write_uvarint,
    write_varint,
    write_varlong,
)

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


def _enc(writer, v) -> bytes:
    out = bytearray()
    writer(out, v)
    return bytes(out)


# Kafka's ByteUtilsTest vectors: value -> encoding
@pytest.mark.parametrize(
    "v, enc",
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (16383, b"\xff\x7f"),
        (16384, b"\x80\x80\x01"),
        ((1 << 32) - 1, b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_uvarint_encodings(v, enc):
    assert _enc(write_uvarint, v) == enc
    assert read_uvarint(enc, 0) == (v, len(enc))
    assert read_uvarint(memoryview(b"\x00" + enc), 1) == (v, len(enc) + 1)


@pytest.mark.parametrize(
    "v, enc",
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (I32_MAX, b"\xfe\xff\xff\xff\x0f"),
        (I32_MIN, b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_varint_zigzag_encodings(v, enc):
    assert _enc(write_varint, v) == enc
    assert read_varint(enc, 0) == (v, len(enc))


@pytest.mark.parametrize("v", [0, -1, 1, 63, -64, 64, I32_MAX, I32_MIN, 1 << 40, I64_MAX, I64_MIN])
def test_varlong_round_trip_and_max_length(v):
    enc = _enc(write_varlong, v)
    assert read_varlong(enc, 0) == (v, len(enc))
    assert len(enc) <= 10
    if v in (I64_MAX, I64_MIN):
        assert len(enc) == 10


def test_random_round_trips_match_the_zigzag_definition():
    import random

    rnd = random.Random(405)
    for bits, writer, reader in ((32, write_varint, read_varint), (64, write_varlong, read_varlong)):
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        values = [rnd.randint(lo, hi) for _ in range(2000)] + [rnd.randint(-20000, 20000) for _ in range(500)]
        for v in values + [lo, hi, lo + 1, hi - 1, -8192, 8191, -8193, 8192]:
            enc = _enc(writer, v)
            zz = 2 * v if v >= 0 else -2 * v - 1
            assert len(enc) == max(1, -(-zz.bit_length() // 7))  # 7 bits a byte, minimal
            if bits == 32:
                assert enc == _enc(write_uvarint, zz)
            assert reader(enc + b"\xff", 0) == (v, len(enc))


def test_varint_and_varlong_agree_on_int32_values():
    for v in (0, -1, 300, -300, I32_MAX, I32_MIN):
        assert _enc(write_varint, v) == _enc(write_varlong, v)


@pytest.mark.parametrize("reader, max_bytes", [(read_uvarint, 5), (read_varint, 5), (read_varlong, 10)])
def test_too_long_varints_are_rejected(reader, max_bytes):
    overlong = b"\x80" * max_bytes + b"\x00"
    with pytest.raises(WireFormatError, match=f"longer than {max_bytes} bytes"):
        reader(overlong, 0)
    # the longest legal form of zero (non-minimal, as Java accepts it) still reads
    assert reader(b"\x80" * (max_bytes - 1) + b"\x00", 0) == (0, max_bytes)


@pytest.mark.parametrize(
    "reader, enc",
    [
        (read_uvarint, b"\xff\xff\xff\xff\x10"),  # 2**32: the fifth byte may hold only 4 bits
        (read_varint, b"\xff\xff\xff\xff\x7f"),
        (read_varlong, b"\xff" * 9 + b"\x02"),  # the tenth byte may hold only 1 bit
    ],
)
def test_values_beyond_the_type_are_rejected(reader, enc):
    with pytest.raises(WireFormatError, match="does not fit"):
        reader(enc, 0)


@pytest.mark.parametrize("reader", [read_uvarint, read_varint, read_varlong])
@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff", b"\x81\x81\x81"])
def test_truncated_varints_are_rejected(reader, data):
    with pytest.raises(WireFormatError, match="truncated"):
        reader(data, 0)
    with pytest.raises(WireFormatError, match="truncated"):
        reader(b"\x01" + data, 1)


def test_writers_reject_values_outside_their_type():
    for writer, v in [
        (write_uvarint, -1),
        (write_uvarint, 1 << 32),
        (write_varint, I32_MAX + 1),
        (write_varint, I32_MIN - 1),
        (write_varlong, I64_MAX + 1),
        (write_varlong, I64_MIN - 1),
    ]:
        with pytest.raises(WireFormatError):
            _enc(writer, v)


def test_wire_format_error_is_a_value_error():
    assert issubclass(WireFormatError, ValueError)


def test_strings_and_bytes():
    assert _enc(write_string, None) == b"\xff\xff"
    assert _enc(write_string, "ab") == b"\x00\x02ab"
    assert _enc(write_compact_string, None) == b"\x00"
    assert _enc(write_compact_string, "é") == b"\x03\xc3\xa9"
    assert _enc(write_compact_bytes, None) == b"\x00"
    assert _enc(write_compact_bytes, b"") == b"\x01"
    assert _enc(write_compact_bytes, memoryview(b"xyz")) == b"\x04xyz"
    long = "x" * 200
    assert _enc(write_compact_string, long) == b"\xc9\x01" + long.encode()
    assert len(_enc(write_string, "x" * MAX_STRING_LENGTH)) == MAX_STRING_LENGTH + 2
    for writer in (write_string, write_compact_string):
        with pytest.raises(WireFormatError, match="longer than"):
            _enc(writer, "x" * (MAX_STRING_LENGTH + 1))


def test_tagged_fields_are_written_in_tag_order_and_skipped():
    out = bytearray()
    write_tagged_fields(out, [(5, b"\x01\x02"), (0, b"")])
    assert bytes(out) == b"\x02\x00\x00\x05\x02\x01\x02"
    assert skip_tagged_fields(bytes(out) + b"rest", 0) == len(out)
    assert ByteReader(bytes(out)).tagged_fields() == {0: b"", 5: b"\x01\x02"}
    assert _enc(write_tagged_fields, []) == b"\x00"
    with pytest.raises(WireFormatError, match="run past"):
        skip_tagged_fields(b"\x01\x00\x05\x01", 0)


def test_byte_reader_reads_every_type():
    u = uuid.uuid4()
    out = bytearray(struct.pack(">bhiq", -1, -2, -3, -4) + b"\x01" + u.bytes)
    write_uvarint(out, 300)
    write_varint(out, -5)
    write_varlong(out, I64_MIN)
    write_compact_string(out, "topic")
    write_compact_string(out, None)
    write_compact_bytes(out, b"\x00\x01")
    out += b"\x03"  # compact array of 2
    out += b"\x00"  # no tagged fields
    r = ByteReader(bytes(out))
    assert (r.int8(), r.int16(), r.int32(), r.int64(), r.boolean(), r.uuid()) == (-1, -2, -3, -4, True, u)
    assert (r.uvarint(), r.varint(), r.varlong()) == (300, -5, I64_MIN)
    assert (r.compact_string(), r.compact_nullable_string()) == ("topic", None)
    assert r.compact_nullable_bytes() == b"\0\1"
    assert r.compact_array_len() == 2
    r.skip_tagged_fields()
    assert r.remaining() == 0
    r.done()


@pytest.mark.parametrize(
    "read",
    [
        lambda r: r.int8(),
        lambda r: r.int16(),
        lambda r: r.int32(),
        lambda r: r.int64(),
        lambda r: r.uuid(),
        lambda r: r.uvarint(),
        lambda r: r.varint(),
        lambda r: r.varlong(),
        lambda r: r.take(1),
        lambda r: r.fields(struct.Struct(">iq")),
        lambda r: r.string(),
        lambda r: r.nullable_string(),
    ],
)
def test_byte_reader_raises_its_error_on_truncated_input(read):
    class DomainError(WireFormatError):
        pass

    class Reader(ByteReader):
        __slots__ = ()
        error = DomainError

    with pytest.raises(DomainError, match="truncated"):
        read(Reader(b""))
    with pytest.raises(WireFormatError):
        read(ByteReader(memoryview(b"")))


def test_byte_reader_rejects_nulls_garbage_negative_takes_and_bad_utf8():
    with pytest.raises(WireFormatError, match="null string"):
        ByteReader(b"\x00").compact_string()
    with pytest.raises(WireFormatError, match="null array"):
        ByteReader(b"\x00").compact_array_len()
    with pytest.raises(WireFormatError, match="garbage"):
        ByteReader(b"\x00\x00", 1).done()
    with pytest.raises(WireFormatError):
        ByteReader(b"abc").take(-1)
    with pytest.raises(WireFormatError, match="UTF-8"):
        ByteReader(b"\x02\xff").compact_string()
    with pytest.raises(WireFormatError, match="longer than 5 bytes"):
        ByteReader(b"\xff" * 6).uvarint()


def test_classic_strings_and_fixed_fields():
    out = bytearray()
    write_string(out, "grüße")
    write_string(out, None)
    write_string(out, "")
    out += struct.pack(">hiq", 7, -8, 9)
    r = ByteReader(bytes(out))
    assert (r.string(), r.nullable_string(), r.string()) == ("grüße", None, "")
    assert r.fields(struct.Struct(">hiq")) == (7, -8, 9)
    r.done()
    with pytest.raises(WireFormatError, match="null string"):
        ByteReader(b"\xff\xff").string()
    with pytest.raises(WireFormatError, match="string length -2"):
        ByteReader(b"\xff\xfeab").nullable_string()
    with pytest.raises(WireFormatError, match="truncated"):
        ByteReader(b"\x00\x05abc").string()  # length past the end
    with pytest.raises(WireFormatError, match="UTF-8"):
        ByteReader(b"\x00\x01\xff").string()
    with pytest.raises(WireFormatError, match="truncated"):
        ByteReader(b"\x00" * 13, 2).fields(struct.Struct(">hiq"))


def test_take_returns_a_slice_of_the_buffer_type():
    assert ByteReader(b"abcd", 1).take(2) == b"bc"
    assert isinstance(ByteReader(memoryview(b"abcd")).take(2), memoryview)
