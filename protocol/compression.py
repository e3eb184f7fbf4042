"""Record-batch compression codecs by Kafka's codec id (the low 3 bits of a batch's attributes), in one place.

0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd. The codecs are kafka-python's (`kafka.codec`), the ones its producer
and consumer use, so what we write any Kafka client reads: snappy in the xerial framing of the Java client
(plain snappy is read too), lz4 as an LZ4 frame with independent blocks, zstd frames read across frame
boundaries.
`kafka.codec` is imported on first use: it is heavy and the broker's hot paths never decompress.
"""

from __future__ import annotations

from collections.abc import Callable

from .records import COMPRESSION_NAMES, GZIP, LZ4, NONE, SNAPPY, ZSTD
from .wire import Buffer, WireFormatError

__all__ = ["CODEC_IDS", "UnsupportedCodecError", "compress", "decompress"]

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
