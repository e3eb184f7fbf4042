"""How an S3 segment's `.log` is stored: the chunk maths and the JSON manifest (`.rsm-manifest`), zstd chunks, and
the manifest hint carried in the segment's custom metadata (KIP-917). Pure: no I/O but a file's first batch header."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zstandard

from .rsm import RemoteStorageError

MANIFEST_SUFFIX = ".rsm-manifest"
MANIFEST_HINT = "c"  # custom metadata key: [chunk size, size] of an untransformed segment
COMPRESSION_ZSTD = "zstd"


@dataclass(frozen=True)
class SegmentManifest:
    """How a segment's `.log` is stored: original size, chunk size, and -- when transformed -- each chunk's stored
    size. JSON on the wire: {"version":1,"chunk_size":C,"original_size":N,"compression":null|"zstd",
    "stored_chunk_sizes":null|[...]}."""

    chunk_size: int
    original_size: int
    compression: str | None = None
    stored_chunk_sizes: tuple[int, ...] | None = None
    version: int = 1
    _stored_offsets: tuple[int, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.version != 1:
            raise ValueError(f"unsupported manifest version {self.version}")
        if self.chunk_size <= 0 or self.original_size < 0:
            raise ValueError(f"invalid manifest sizes: chunk {self.chunk_size}, original {self.original_size}")
        if self.compression not in (None, COMPRESSION_ZSTD):
            raise ValueError(f"unsupported compression {self.compression!r}")
        if self.compression is None:
            if self.stored_chunk_sizes is not None:
                raise ValueError("an untransformed segment has no stored chunk sizes")
            return
        sizes = tuple(int(s) for s in (self.stored_chunk_sizes or ()))
        if len(sizes) != self.chunk_count or any(s <= 0 for s in sizes):
            raise ValueError(f"manifest lists {len(sizes)} stored chunks for {self.chunk_count} chunks")
        offsets = [0]
        for s in sizes:
            offsets.append(offsets[-1] + s)
        object.__setattr__(self, "stored_chunk_sizes", sizes)
        object.__setattr__(self, "_stored_offsets", tuple(offsets))

    @property
    def chunk_count(self) -> int:
        return -(-self.original_size // self.chunk_size)

    @property
    def stored_size(self) -> int:
        return self._stored_offsets[-1] if self.compression else self.original_size

    def original_chunk_range(self, i: int) -> tuple[int, int]:
        """[start, stop) of chunk i in the original `.log`."""
        if not 0 <= i < self.chunk_count:
            raise IndexError(f"chunk {i} of {self.chunk_count}")
        start = i * self.chunk_size
        return start, min(start + self.chunk_size, self.original_size)

    def stored_chunk_range(self, i: int) -> tuple[int, int]:
        """[start, stop) of chunk i in the stored object."""
        if not self.compression:
            return self.original_chunk_range(i)
        if not 0 <= i < self.chunk_count:
            raise IndexError(f"chunk {i} of {self.chunk_count}")
        return self._stored_offsets[i], self._stored_offsets[i + 1]

    def chunks_for(self, start: int, stop: int) -> range:
        """Indices of the chunks covering original bytes [start, stop) (empty for an empty range)."""
        if stop <= start:
            return range(0)
        return range(start // self.chunk_size, (stop - 1) // self.chunk_size + 1)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "version": self.version,
                "chunk_size": self.chunk_size,
                "original_size": self.original_size,
                "compression": self.compression,
                "stored_chunk_sizes": list(self.stored_chunk_sizes) if self.stored_chunk_sizes is not None else None,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> SegmentManifest:
        try:
            d = json.loads(raw)
            sizes = d.get("stored_chunk_sizes")
            return cls(
                chunk_size=int(d["chunk_size"]),
                original_size=int(d["original_size"]),
                compression=d.get("compression"),
                stored_chunk_sizes=tuple(sizes) if sizes is not None else None,
                version=int(d.get("version", 1)),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise RemoteStorageError(f"corrupt segment manifest: {e}", retriable=False) from e


def compress_chunk(data: bytes | memoryview, level: int = 3) -> bytes:
    """One chunk as an independent zstd frame (with the content size, so decompression is bounded)."""
    return zstandard.ZstdCompressor(level=level, write_content_size=True).compress(data)


def decompress_chunk(data: bytes, expected_size: int) -> bytes:
    try:
        out = zstandard.ZstdDecompressor().decompress(data, max_output_size=expected_size)
    except zstandard.ZstdError as e:
        raise RemoteStorageError(f"corrupt compressed chunk: {e}", retriable=False) from e
    if len(out) != expected_size:
        raise RemoteStorageError(f"chunk decompressed to {len(out)} bytes, expected {expected_size}", retriable=False)
    return out


def first_batch_is_compressed(path: Path) -> bool:
    """Whether the first record batch of a `.log` uses a compression codec (attributes bits 0-2)."""
    with open(path, "rb") as f:
        head = f.read(23)
    return len(head) >= 23 and head[16] == 2 and (int.from_bytes(head[21:23], "big") & 0x7) != 0


def manifest_from_hint(custom: Mapping[str, Any] | None, segment_size: int) -> SegmentManifest | None:
    """The manifest of an untransformed segment from its custom metadata (written by `copy_log_segment_data`);
    None when the metadata has no usable hint (a compressed segment, one copied before hints existed, or a hint
    whose size is not the segment's: the manifest object decides then, instead of reads cut short or past the end)."""
    hint = custom.get(MANIFEST_HINT) if custom else None
    if not (isinstance(hint, list) and len(hint) == 2 and all(type(v) is int for v in hint)):
        return None
    if hint[1] != segment_size:
        return None
    try:
        return SegmentManifest(hint[0], hint[1])
    except ValueError:
        return None


__all__ = [
    "COMPRESSION_ZSTD",
    "MANIFEST_HINT",
    "MANIFEST_SUFFIX",
    "SegmentManifest",
    "compress_chunk",
    "decompress_chunk",
    "first_batch_is_compressed",
    "manifest_from_hint",
]
