"""Walking record batches laid over several buffers (a remote read's chunks) without joining them.

A cold remote read of a few MiB spans two or more chunks of the segment; joining them into one buffer cost a fifth of
the broker's CPU on cold reads. Batches may straddle a chunk boundary: only their 61-byte headers are ever copied,
and the chosen byte range goes to the Fetch response as views on the chunks (strata.protocol.records.BufferChain).
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator, Sequence

from strata.protocol.records import HEADER_SIZE, Buffer, BufferChain

_BASE_AND_LENGTH = struct.Struct(">qi")
_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_AT = 23


class Pieces:
    """Consecutive buffers read as one byte sequence."""

    def __init__(self, pieces: Sequence[Buffer]) -> None:
        self.pieces = [memoryview(p) for p in pieces if len(p)]
        self.starts: list[int] = []
        total = 0
        for p in self.pieces:
            self.starts.append(total)
            total += len(p)
        self.total = total

    def __len__(self) -> int:
        return self.total

    def _at(self, pos: int, n: int) -> tuple[Buffer, int]:
        """A buffer and an offset in it holding bytes [pos, pos + n) (a copy only across a piece boundary)."""
        i = bisect.bisect_right(self.starts, pos) - 1
        off = pos - self.starts[i]
        piece = self.pieces[i]
        if off + n <= len(piece):
            return piece, off
        out = bytearray()
        while len(out) < n and i < len(self.pieces):
            out += self.pieces[i][off : off + n - len(out)]
            i, off = i + 1, 0
        return out, 0

    def batches(self, complete: bool = True) -> Iterator[tuple[int, int, int, int]]:
        """(position, base offset, last offset, size) of each batch; with `complete`, stop at one that is cut off
        (as strata.protocol.records.iter_batches does), else yield it too."""
        pos = 0
        while pos + HEADER_SIZE <= self.total:
            buf, off = self._at(pos, HEADER_SIZE)
            base, length = _BASE_AND_LENGTH.unpack_from(buf, off)
            size = length + 12
            if size < HEADER_SIZE or (complete and pos + size > self.total):
                return
            yield pos, base, base + _LAST_DELTA.unpack_from(buf, off + _LAST_DELTA_AT)[0], size
            pos += size

    def first_batch(self, target: int) -> tuple[int, int] | None:
        """(position, size) of the first batch, possibly cut off, whose last offset >= `target`."""
        return next(((pos, size) for pos, _base, last, size in self.batches(complete=False) if last >= target), None)

    def views(self, start: int, stop: int) -> list[memoryview]:
        """Bytes [start, stop) as views on the pieces that hold them."""
        out = []
        i = bisect.bisect_right(self.starts, start) - 1
        while i < len(self.pieces) and self.starts[i] < stop:
            p0 = self.starts[i]
            out.append(self.pieces[i][max(start, p0) - p0 : min(stop, p0 + len(self.pieces[i])) - p0])
            i += 1
        return out

    def view(self, start: int, stop: int) -> memoryview | BufferChain:
        """Bytes [start, stop): a view when one piece holds them, else a chain of views."""
        out = self.views(start, stop)
        return out[0] if len(out) == 1 else BufferChain(out)
