"""Kafka's primitive wire types in one place: varints, compact strings/bytes, tagged fields, a byte reader.

Every encoder and decoder of Strata that is not a kafka-python schema (request header skipping, the
hand-written Fetch response, `__consumer_offsets` and `__remote_log_metadata` records, record parsing in the
cleaner and the Spark reader) uses these helpers, so the bounds are the same everywhere. They follow Kafka's
ByteUtils:

* UNSIGNED_VARINT: at most 5 bytes, value < 2**32.
* VARINT (zigzag int32): at most 5 bytes; VARLONG (zigzag int64): at most 10 bytes.
* A varint whose last allowed byte still has the continuation bit, or whose value does not fit its type,
  raises `WireFormatError`, as does any read past the end of the input. Java silently drops the bits above
  the type's width; we refuse them instead, since only a corrupt or hostile input has them.

`WireFormatError` is a ValueError; decoders with a domain error of their own (a corrupt segment, an
undecodable metadata record) subclass it and give it to `ByteReader` as its `error`, so callers catch one
type either way. Sans-IO, no imports outside the standard library.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

__all__ = [
    "MAX_STRING_LENGTH",
    "Buffer",
    "ByteReader",
    "WireFormatError",
    "read_uvarint",
    "read_varint",
    "read_varlong",
    "skip_tagged_fields",
    "write_compact_bytes",
    "write_compact_string",
    "write_string",
    "write_tagged_fields",
    "write_uvarint",
    "write_varint",
    "write_varlong",
]

Buffer = bytes | bytearray | memoryview

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32_MAX = (1 << 32) - 1
_U64_MAX = (1 << 64) - 1
MAX_STRING_LENGTH = 0x7FFF  # Kafka's Short.MAX_VALUE: its longest STRING / COMPACT_STRING


class WireFormatError(ValueError):
    """Input that is not a valid encoding: truncated, a too-long varint, a value out of its type's range."""


# -- varints -------------------------------------------------------------------------------------------------


def _read_raw(buf: Buffer, pos: int, max_bytes: int, limit: int, kind: str) -> tuple[int, int]:
    """The unsigned value of the varint at `buf[pos]` (at most `max_bytes` long, at most `limit`) and the
    position after it."""
    start = pos
    value = shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise WireFormatError(f"truncated {kind} at position {start}")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if pos - start == max_bytes:
            raise WireFormatError(f"{kind} at position {start} is longer than {max_bytes} bytes")
    if value > limit:
        raise WireFormatError(f"{kind} at position {start} does not fit in {limit.bit_length()} bits")
    return value, pos


# The readers decode one- and two-byte varints (values below 128 / 16384: nearly every count, length and delta)
# inline and leave longer or malformed ones to _read_raw. Measured (timeit, process time) on the cleaner's record
# parsing, 2,000 records of 50-400 bytes: 2.4 ms with a one-byte fast path only, 1.6 ms with this one, as fast
# as the cleaner's former hand-written reader. `pos` must not be negative.


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Kafka's UNSIGNED_VARINT at `buf[pos]`: (value, position after it)."""
    try:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
        c = buf[pos + 1]
        if c < 0x80:
            return (b & 0x7F) | (c << 7), pos + 2
    except IndexError:
        pass
    return _read_raw(buf, pos, 5, _U32_MAX, "unsigned varint")


def _zigzag_reader(max_bytes: int, limit: int, kind: str) -> Callable[[Buffer, int], tuple[int, int]]:
    """A reader of zigzag varints of at most `max_bytes` (the bounds are used only off the fast path)."""

    def read(buf: Buffer, pos: int) -> tuple[int, int]:
        try:
            b = buf[pos]
            if b < 0x80:
                return (b >> 1) ^ -(b & 1), pos + 1
            c = buf[pos + 1]
            if c < 0x80:
                v = (b & 0x7F) | (c << 7)
                return (v >> 1) ^ -(v & 1), pos + 2
        except IndexError:
            pass
        v, pos = _read_raw(buf, pos, max_bytes, limit, kind)
        return (v >> 1) ^ -(v & 1), pos

    return read


read_varint = _zigzag_reader(5, _U32_MAX, "varint")
"""Kafka's VARINT (zigzag int32) at `buf[pos]`: (value, position after it)."""
read_varlong = _zigzag_reader(10, _U64_MAX, "varlong")
"""Kafka's VARLONG (zigzag int64) at `buf[pos]`: (value, position after it)."""


def write_uvarint(out: bytearray, v: int) -> None:
    """Append `v` (0 <= v < 2**32) as an UNSIGNED_VARINT."""
    if v < 0x80:
        if v < 0:
            raise WireFormatError(f"unsigned varint of negative value {v}")
        out.append(v)
        return
    if v > _U32_MAX:
        raise WireFormatError(f"unsigned varint value {v} does not fit in 32 bits")
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def write_varint(out: bytearray, v: int) -> None:
    """Append the int32 `v` as a zigzag VARINT.

    The range check is the zigzag value's bound and the loop is inline: with a chained range check and a call
    of write_uvarint, rebuilding 2,000 records in the cleaner took 2.35 ms instead of 2.0 ms (timeit)."""
    v = v << 1 if v >= 0 else ~(v << 1)  # zigzag of an unbounded int: out of range iff >= 2**32
    if v > 0xFFFFFFFF:
        raise WireFormatError("varint value is not an int32")
    while v >= 0x80:  # inline, not through write_uvarint: one call per record field
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def write_varlong(out: bytearray, v: int) -> None:
    """Append the int64 `v` as a zigzag VARLONG."""
    v = v << 1 if v >= 0 else ~(v << 1)
    if v > 0xFFFFFFFFFFFFFFFF:
        raise WireFormatError("varlong value is not an int64")
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


# -- strings, bytes, tagged fields ---------------------------------------------------------------------------


def _encode_string(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > MAX_STRING_LENGTH:
        raise WireFormatError(f"string of {len(b)} bytes is longer than Kafka's {MAX_STRING_LENGTH}")
    return b


def write_string(out: bytearray, s: str | None) -> None:
    """Append a (nullable) STRING: int16 length (-1 for null), UTF-8 bytes."""
    if s is None:
        out += b"\xff\xff"
        return
    b = _encode_string(s)
    out += _I16.pack(len(b))
    out += b


def write_compact_string(out: bytearray, s: str | None) -> None:
    """Append a (nullable) COMPACT_STRING: unsigned varint length + 1 (0 for null), UTF-8 bytes."""
    if s is None:
        out.append(0)
        return
    b = _encode_string(s)
    write_uvarint(out, len(b) + 1)
    out += b


def write_compact_bytes(out: bytearray, b: Buffer | None) -> None:
    """Append (nullable) COMPACT_BYTES: unsigned varint length + 1 (0 for null), the bytes."""
    if b is None:
        out.append(0)
        return
    write_uvarint(out, len(b) + 1)
    out += b


def write_tagged_fields(out: bytearray, fields: Iterable[tuple[int, bytes]]) -> None:
    """Append a tagged-field section: count, then (tag, size, payload) in ascending tag order, as Kafka
    requires. Callers pass only fields that differ from their default (old clients fail on defaults written
    out)."""
    ordered = sorted(fields)
    write_uvarint(out, len(ordered))
    for tag, payload in ordered:
        write_uvarint(out, tag)
        write_uvarint(out, len(payload))
        out += payload


def skip_tagged_fields(buf: Buffer, pos: int) -> int:
    """The position after the tagged-field section at `buf[pos]`, whose fields are all ignored."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise WireFormatError("tagged fields run past the end of the input")
    return pos


# -- reader --------------------------------------------------------------------------------------------------


class ByteReader:
    """A position in a buffer and bounds-checked reads of Kafka's types from it.

    Every failure raises `self.error` (a `WireFormatError` subclass; set it on a subclass to get a domain
    error), never IndexError or struct.error, so a decoder needs one `except`. `take` returns a slice of the
    buffer's own type (bytes for bytes, a view for a memoryview)."""

    __slots__ = ("buf", "pos")
    error: ClassVar[type[WireFormatError]] = WireFormatError

    def __init__(self, buf: Buffer, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def take(self, n: int) -> Buffer:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise self.error(f"truncated input: need {n} bytes at position {self.pos}, have {len(self.buf) - self.pos}")
        b = self.buf[self.pos : end]
        self.pos = end
        return b

    def fields(self, st: struct.Struct) -> tuple[Any, ...]:
        """Several fixed-size fields in one unpack (`st` a big-endian format such as ">hiq")."""
        pos = self.pos
        if pos + st.size > len(self.buf):
            raise self.error(f"truncated input: need {st.size} bytes at position {pos}, have {len(self.buf) - pos}")
        self.pos = pos + st.size
        return st.unpack_from(self.buf, pos)

    def _unpack(self, st: struct.Struct) -> int:
        value: int = self.fields(st)[0]
        return value

    def int8(self) -> int:
        return self._unpack(_I8)

    def int16(self) -> int:
        return self._unpack(_I16)

    def int32(self) -> int:
        return self._unpack(_I32)

    def int64(self) -> int:
        return self._unpack(_I64)

    def boolean(self) -> bool:
        return self._unpack(_I8) != 0

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self.take(16)))

    def _varint(self, read: Callable[[Buffer, int], tuple[int, int]]) -> int:
        try:
            v, self.pos = read(self.buf, self.pos)
        except WireFormatError as e:
            raise self.error(str(e)) from None
        return v

    def uvarint(self) -> int:
        return self._varint(read_uvarint)

    def varint(self) -> int:
        return self._varint(read_varint)

    def varlong(self) -> int:
        return self._varint(read_varlong)

    def nullable_string(self) -> str | None:
        """Kafka's classic NULLABLE_STRING: int16 length (-1: null), then UTF-8."""
        n = self.int16()
        if n < -1:
            raise self.error(f"string length {n}")
        return None if n == -1 else self._decode(self.take(n))

    def string(self) -> str:
        """Kafka's classic STRING: int16 length, then UTF-8."""
        s = self.nullable_string()
        if s is None:
            raise self.error("null string in a non-nullable field")
        return s

    def compact_nullable_bytes(self) -> Buffer | None:
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1)

    def compact_nullable_string(self) -> str | None:
        b = self.compact_nullable_bytes()
        return None if b is None else self._decode(b)

    def compact_string(self) -> str:
        s = self.compact_nullable_string()
        if s is None:
            raise self.error("null string in a non-nullable field")
        return s

    def compact_array_len(self) -> int:
        """The element count of a non-nullable COMPACT_ARRAY."""
        n = self.uvarint()
        if n == 0:
            raise self.error("null array in a non-nullable field")
        return n - 1

    def tagged_fields(self) -> dict[int, Buffer]:
        """The tagged-field section as {tag: payload}; the caller picks the tags it knows."""
        fields: dict[int, Buffer] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = self.take(self.uvarint())
        return fields

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())

    def done(self) -> None:
        """Raise unless the whole buffer was read."""
        if self.pos != len(self.buf):
            raise self.error(f"{len(self.buf) - self.pos} byte(s) of garbage after the end")

    def _decode(self, b: Buffer) -> str:
        try:
            return str(b, "utf-8")
        except UnicodeDecodeError as e:
            raise self.error(f"invalid UTF-8 in a string: {e}") from None
