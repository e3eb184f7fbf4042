"""Record-batch compression codecs by Kafka's codec id (the low 3 bits of a batch's attributes), in one place.

0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd. The codecs are kafka-python's (`kafka.codec`), the ones its producer
and consumer use, so what we write any Kafka client reads: snappy in the xerial framing of the Java client
(plain snappy is read too), lz4 as an LZ4 frame with independent blocks, zstd frames read across frame
boundaries.
`kafka.codec` is imported on first use: it is heavy. What the broker inflates from clients goes through
`iter_decompressed`: streaming, in bounded pieces, with a hard limit on the inflated size.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator

from .records import COMPRESSION_NAMES, GZIP, LZ4, NONE, SNAPPY, ZSTD
from .wire import Buffer, WireFormatError, read_uvarint

__all__ = [
    "CODEC_IDS",
    "CorruptPayloadError",
    "InflateLimitError",
    "UnsupportedCodecError",
    "check_zstd_frames",
    "compress",
    "decompress",
    "iter_decompressed",
]

CODEC_IDS = tuple(sorted(COMPRESSION_NAMES))


class UnsupportedCodecError(WireFormatError):
    """A codec id that Kafka does not define (5-7)."""


def _codecs() -> dict[int, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]]:
    """{codec id: (encode, decode)} of kafka.codec, built once."""
    global _CODECS
    if _CODECS is None:
        from kafka import codec as kc  # lazy: heavy import, off the hot path

        _CODECS = {
            GZIP: (kc.gzip_encode, kc.gzip_decode),
            SNAPPY: (kc.snappy_encode, kc.snappy_decode),
            LZ4: (kc.lz4_encode, kc.lz4_decode),
            ZSTD: (kc.zstd_encode, kc.zstd_decode),
        }
    return _CODECS


_CODECS: dict[int, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] | None = None


def _pair(codec: int) -> tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]:
    pair = _codecs().get(codec)
    if pair is None:
        raise UnsupportedCodecError(f"unknown compression codec {codec}")
    return pair


def _as_bytes(data: Buffer) -> bytes:
    return data if isinstance(data, bytes) else bytes(data)


def decompress(codec: int, data: Buffer) -> bytes:
    """The records section `data` of a batch with codec `codec`, decompressed. Each library raises its own
    errors on corrupt input; an unknown codec raises UnsupportedCodecError."""
    if codec == NONE:
        return _as_bytes(data)
    return bytes(_pair(codec)[1](_as_bytes(data)))  # bytes() of a bytes result is that object, no copy


def compress(codec: int, data: Buffer) -> bytes:
    """`data` compressed with codec `codec` as Kafka clients write it."""
    if codec == NONE:
        return _as_bytes(data)
    return _pair(codec)[0](_as_bytes(data))


# ---------------------------------------------------------------------------------------------------------------
# Streaming, bounded inflation (what the broker does with a client's batch)


class CorruptPayloadError(WireFormatError):
    """A compressed record section that does not decompress (bad stream, truncated, trailing garbage)."""


class InflateLimitError(WireFormatError):
    """A compressed record section that inflates beyond the caller's bound (a decompression bomb)."""


XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic, version int32, compatible-version int32
ZSTD_MAX_WINDOW = 1 << 27  # zstd's own default limit (ZSTD_WINDOWLOG_LIMIT_DEFAULT): what Kafka's zstd-jni accepts


def iter_decompressed(codec: int, data: Buffer, limit: int, chunk: int = 256 * 1024) -> Iterator[bytes]:
    """The inflated record section of a batch in pieces of at most `chunk` bytes (snappy: one xerial block,
    bounded by `limit`), never holding more than one piece: a bomb costs `limit` bytes of work, not its size.

    Raises InflateLimitError past `limit` inflated bytes, CorruptPayloadError when the payload does not
    decompress, UnsupportedCodecError for codec ids 5-7. `codec` 0 yields `data` as it is."""
    if codec == NONE:
        if len(data) > limit:
            raise InflateLimitError(f"record section of {len(data)} bytes exceeds {limit}")
        yield _as_bytes(data)
        return
    gen = _INFLATERS.get(codec)
    if gen is None:
        raise UnsupportedCodecError(f"unknown compression codec {codec}")
    total = 0
    try:
        for piece in gen(memoryview(data).cast("B") if not isinstance(data, bytes) else data, chunk, limit):
            total += len(piece)
            if total > limit:
                raise InflateLimitError(f"{COMPRESSION_NAMES[codec]} record section inflates beyond {limit} bytes")
            yield piece
    except (CorruptPayloadError, InflateLimitError):
        raise
    except Exception as e:
        if isinstance(e, (WireFormatError, zlib.error, RuntimeError, ValueError, *_library_errors())):
            raise CorruptPayloadError(f"{COMPRESSION_NAMES[codec]} record section does not decompress: {e}") from None
        raise


def _library_errors() -> tuple[type[Exception], ...]:
    """What snappy and zstandard raise for a corrupt stream (lz4 raises RuntimeError, zlib zlib.error)."""
    import snappy
    import zstandard

    return (snappy.UncompressError, zstandard.ZstdError)


def _gzip_pieces(data: Buffer, chunk: int, limit: int) -> Iterator[bytes]:
    # Concatenated gzip members are one stream, as Java's GZIPInputStream reads them.
    pending: Buffer = data
    while True:
        d = zlib.decompressobj(31)
        while not d.eof:
            if not pending:
                raise CorruptPayloadError("gzip stream is truncated")
            out = d.decompress(pending, chunk)
            pending = d.unconsumed_tail
            if out:
                yield out
        pending = d.unused_data
        if not pending:
            return


def _lz4_pieces(data: Buffer, chunk: int, limit: int) -> Iterator[bytes]:
    import lz4.frame  # type: ignore[import-untyped]

    d = lz4.frame.LZ4FrameDecompressor()
    out = d.decompress(data, max_length=chunk)
    while True:
        if out:
            yield out
        if d.eof:
            if d.unused_data:
                raise CorruptPayloadError(f"{len(d.unused_data)} bytes after the lz4 frame")
            return
        if d.needs_input:
            raise CorruptPayloadError("lz4 frame is truncated")
        out = d.decompress(b"", max_length=chunk)


_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_FCS_SIZES = (0, 2, 4, 8)
_ZSTD_DICT_ID_SIZES = (0, 1, 2, 4)


def check_zstd_frames(data: Buffer) -> None:
    """Walk the frame and block headers of a zstd payload (no decompression): raise CorruptPayloadError unless it
    is whole frames end to end. The streaming reader alone ends quietly at a truncated frame."""
    mv = memoryview(data)
    end = len(mv)
    pos = 0
    try:
        while pos < end:
            magic = int.from_bytes(mv[pos : pos + 4], "little")
            if 0x184D2A50 <= magic <= 0x184D2A5F:  # skippable frame
                pos += 8 + int.from_bytes(mv[pos + 4 : pos + 8], "little")
                continue
            if magic != _ZSTD_MAGIC:
                raise CorruptPayloadError(f"no zstd frame at byte {pos}")
            fhd = mv[pos + 4]
            single_segment = fhd & 0x20
            fcs = _ZSTD_FCS_SIZES[fhd >> 6] or (1 if single_segment else 0)
            pos += 5 + (0 if single_segment else 1) + _ZSTD_DICT_ID_SIZES[fhd & 3] + fcs
            while True:
                bh = mv[pos] | mv[pos + 1] << 8 | mv[pos + 2] << 16
                kind = (bh >> 1) & 3
                if kind == 3:
                    raise CorruptPayloadError(f"reserved zstd block type at byte {pos}")
                pos += 3 + (1 if kind == 1 else bh >> 3)
                if bh & 1:
                    break
            if fhd & 0x04:
                pos += 4  # content checksum
    except IndexError:
        pos = end + 1
    if pos != end:
        raise CorruptPayloadError("zstd frame is truncated")


def _zstd_pieces(data: Buffer, chunk: int, limit: int) -> Iterator[bytes]:
    import zstandard

    check_zstd_frames(data)
    reader = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW).stream_reader(
        data, read_across_frames=True, read_size=chunk
    )
    while True:
        out = reader.read(chunk)
        if not out:
            return
        yield out


def _snappy_block(block: Buffer, limit: int) -> bytes:
    import snappy

    n, _ = read_uvarint(block, 0)  # a snappy block starts with its inflated length: refuse a bomb unread
    if n > limit:
        raise InflateLimitError(f"snappy block inflates to {n} bytes, beyond {limit}")
    return bytes(snappy.decompress(bytes(block)))


def _snappy_pieces(data: Buffer, chunk: int, limit: int) -> Iterator[bytes]:
    mv = memoryview(data)
    if bytes(mv[:8]) != XERIAL_MAGIC:
        yield _snappy_block(mv, limit)
        return
    pos = _XERIAL_HEADER
    end = len(mv)
    while pos < end:
        if pos + 4 > end:
            raise CorruptPayloadError("truncated xerial snappy block length")
        size = int.from_bytes(mv[pos : pos + 4], "big", signed=True)
        pos += 4
        if size < 0 or pos + size > end:
            raise CorruptPayloadError(f"xerial snappy block of {size} bytes beyond the payload")
        yield _snappy_block(mv[pos : pos + size], limit)
        pos += size


_INFLATERS: dict[int, Callable[[Buffer, int, int], Iterator[bytes]]] = {
    GZIP: _gzip_pieces,
    SNAPPY: _snappy_pieces,
    LZ4: _lz4_pieces,
    ZSTD: _zstd_pieces,
}
