"""FileRegion: a byte range of a segment file, fixed when a Fetch is answered and sent later with `os.sendfile`.

Kafka's zero-copy fetch hands the socket a slice of the segment's FileChannel. Here the region holds its own
duplicate of the segment's file descriptor, so the bytes stay readable while the response waits for a slow reader:
retention may delete the segment (the inode lives on while the descriptor is open) and an fd cache may close the
segment's own descriptor. What a duplicate cannot protect against is a truncation of the same file (a leader that
becomes a follower truncates its log, then appends other batches at the same positions): `valid()` tells whether
the segment was truncated since the region was fixed, and the sender checks it before each write, so a region is
either sent as it was when the response was built or not at all (the connection is closed, as Kafka closes one
whose FileRecords shrank during the write).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable

__all__ = ["FileRegion", "RegionTruncatedError"]


class RegionTruncatedError(OSError):
    """The file no longer holds the region's bytes (truncated since the region was fixed)."""


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


class FileRegion:
    """`size` bytes at `position` of a file; `len()` is the size (the Fetch encoder frames it like bytes)."""

    __slots__ = ("fd", "position", "size", "_valid", "_finalizer", "__weakref__")

    def __init__(self, fd: int, position: int, size: int, valid: Callable[[], bool]) -> None:
        self.fd = os.dup(fd)
        self.position = position
        self.size = size
        self._valid = valid
        self._finalizer = weakref.finalize(self, _close, self.fd)

    def __len__(self) -> int:
        return self.size

    def valid(self) -> bool:
        """False once the file was truncated since the region was fixed (its bytes may have changed)."""
        return self._finalizer.alive and self._valid()

    def __bytes__(self) -> bytes:
        """The region's bytes (the copy path: TLS listeners, the codec)."""
        if not self.valid():
            raise RegionTruncatedError(f"file region at {self.position} (+{self.size}) was truncated")
        data = os.pread(self.fd, self.size, self.position)
        while len(data) < self.size:  # pread of a regular file returns less only at its end
            more = os.pread(self.fd, self.size - len(data), self.position + len(data))
            if not more:
                raise RegionTruncatedError(f"file region at {self.position} (+{self.size}) was truncated")
            data += more
        return data

    def close(self) -> None:
        """Release the descriptor now (after the send), not when the object is collected."""
        self._finalizer()

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, position={self.position}, size={self.size})"
