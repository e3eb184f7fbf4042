"""Kafka's sparse segment indexes: OffsetIndex (`.index`) and TimeIndex (`.timeindex`).

On disk the files use Kafka's binary formats, big-endian, fixed-size entries:

* `.index`: relative offset int32 (offset - segment base offset) + physical position int32 of the batch (8 bytes);
  an entry (last offset of a batch -> start position of that batch) as Kafka's LogSegment writes it.
* `.timeindex`: timestamp int64 + relative offset int32 (12 bytes); timestamps strictly increase.

Unlike Kafka we never preallocate: entries are appended with `os.pwrite` at the end, so the file is valid at every
instant (a torn last entry is dropped on load). Lookups bisect an in-memory `array` copy of the entries.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

from .file_cache import OPEN_FILES, OpenFileCache, as_path

INT32_MAX = 2**31 - 1
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class IndexCorruptError(Exception):
    """An index file that fails its sanity check; the owner rebuilds it from the log."""


class _IndexFile:
    """Shared file handling: append-only writes at the logical end, fsync, truncate, rename, delete.

    Lazy, as Kafka's LazyIndex: nothing is read until the first lookup or append (`_ensure`), and the descriptor
    comes from the open-file cache (storage/file_cache.py) for each write only, so an idle segment's indexes hold
    no descriptor and no memory. `size_hint` (the file's size from the directory scan) lets an empty index skip
    even the read."""

    entry_size = 0

    def __init__(
        self,
        path: Path,
        base_offset: int,
        max_index_size: int,
        *,
        files: OpenFileCache | None = None,
        size_hint: int | None = None,
    ) -> None:
        self.path = as_path(path)
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry_size)
        cache = files if files is not None else OPEN_FILES
        self._file = cache.file(self.path, os.O_RDWR, create=size_hint is None)
        self._closed = False
        self._loaded = False
        # writes and truncations so far, and how many of them the last fsync covered: an index not written since
        # its last fsync is not fsynced again (a clean shutdown of 20,000 logs skips 40,000 needless fsyncs)
        self._writes = 0
        self._synced_writes = 0
        self._size_hint = size_hint
        self._rebuild_old: bytes | None = None  # the file's bytes while a rebuild compares against them

    def _ensure(self) -> None:
        if not self._loaded:
            # marked loaded only once loaded: another thread (the cleaner's grouping) may be loading it meanwhile,
            # and a reader must not see it loaded but empty (both then load the same entries)
            self._load(self._read_all() if self._size_hint != 0 else b"")
            self._loaded = True

    # subclass hooks
    def _load(self, data: bytes) -> None: ...

    def _read_all(self) -> bytes:
        f = self._file
        with f.use() as fd:
            size = os.fstat(fd).st_size
            whole = size - size % self.entry_size
            if whole != size:  # torn last entry (crash mid-write): drop it
                os.ftruncate(fd, whole)
                self._writes += 1
            return os.pread(fd, whole, 0) if whole else b""

    def _write_entry(self, n: int, data: bytes) -> None:
        pos = n * self.entry_size
        old = self._rebuild_old
        if old is not None:
            if old[pos : pos + self.entry_size] == data:
                return  # a rebuild writing what the file holds already
            self._rebuild_old = None  # the file differs from here on: cut it, then write as usual
            self._truncate_entries(n)
        self._file.pwrite_all(data, pos)
        self._writes += 1

    def begin_rebuild(self) -> None:
        """Empty the entries for a rebuild from the log (recovery) but leave the file as it is: entries equal to
        the ones on disk are not written again, the first that differs cuts the file there, and `end_rebuild` cuts
        what the rebuild did not reach. After `kill -9` with 20,000 logs, recovery otherwise truncated and
        rewrote 20,000 unchanged time indexes (each a journal transaction, and a discard on a `discard` mount)."""
        on_disk = self.entries if self._loaded else self._size_hint
        self._rebuild_old = self._read_all() if on_disk != 0 else b""
        self._loaded = True
        self._clear_entries()

    def end_rebuild(self) -> None:
        old, self._rebuild_old = self._rebuild_old, None
        if old is not None and len(old) > self.entries * self.entry_size:
            self._truncate_entries(self.entries)

    def _clear_entries(self) -> None: ...

    def _truncate_entries(self, n: int) -> None:
        self._file.truncate(n * self.entry_size)
        self._writes += 1

    def _reset_file(self) -> None:
        """Empty the file, unless it is known to be empty already (recovery resets thousands of indexes, and a
        needless ftruncate costs a journal write)."""
        on_disk = self.entries if self._loaded else self._size_hint
        self._loaded = True
        if on_disk != 0:
            self._truncate_entries(0)

    @property
    def entries(self) -> int:
        raise NotImplementedError

    def __len__(self) -> int:
        return self.entries

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.entry_size

    def relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            raise ValueError(f"offset {offset} does not fit an index of base offset {self.base_offset}")
        return rel

    def flush(self) -> None:
        """fsync what was written since the last flush (safe from a worker thread: a write racing the fsync is
        counted after the snapshot of the count, so the next flush syncs it)."""
        writes = self._writes
        if not self._closed and writes != self._synced_writes:  # never written (or never loaded): nothing to sync
            self._file.fsync()
            self._synced_writes = writes

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._file.close()

    def mark_closed(self) -> None:
        """Closed together with its segment: from now on `flush` does nothing."""
        self.close()

    def pin(self) -> None:
        """Keep the descriptor open until close (the segment is about to be deleted; see `CachedFile.pin`)."""
        self._file.pin()

    def rename_to(self, path: Path) -> None:
        os.rename(self.path, path)
        self.path = Path(path)
        self._file.rename(self.path)

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class OffsetIndex(_IndexFile):
    """Maps offsets to file positions of batches; `lookup` gives the greatest indexed offset <= target."""

    entry_size = 8

    _offsets: array[int]
    _positions: array[int]

    def _load(self, data: bytes) -> None:
        raw = array("i", data)
        if sys.byteorder == "little":
            raw.byteswap()
        self._offsets = raw[0::2]
        self._positions = raw[1::2]

    def sanity_check(self, log_size: int | None = None) -> None:
        """Cheap checks (as Kafka's): last entry at or above the base, position inside the log."""
        self._ensure()
        if not self._offsets:
            return
        if self._offsets[0] < 0 or self._positions[0] < 0:
            raise IndexCorruptError(f"{self.path}: negative relative offset or position")
        if len(self._offsets) > 1 and (
            self._offsets[-1] <= self._offsets[0] or self._positions[-1] <= self._positions[0]
        ):
            # e.g. a Kafka-preallocated index never trimmed: zero entries at the tail
            raise IndexCorruptError(f"{self.path}: last entry not above the first")
        if log_size is not None and self._positions[-1] >= max(log_size, 1):
            raise IndexCorruptError(f"{self.path}: last position {self._positions[-1]} beyond log size {log_size}")

    def full_check(self) -> None:
        """Every entry strictly increasing (used on recovery, where we can afford a pass)."""
        self._ensure()
        self.sanity_check()
        o, p = self._offsets, self._positions
        for i in range(1, len(o)):
            if o[i] <= o[i - 1] or p[i] < p[i - 1]:
                raise IndexCorruptError(f"{self.path}: entry {i} out of order")

    @property
    def entries(self) -> int:
        self._ensure()
        return len(self._offsets)

    @property
    def is_full(self) -> bool:  # asked on every append (the roll rule): without the property chain
        if not self._loaded:
            self._ensure()
        return len(self._offsets) >= self.max_entries

    @property
    def last_offset(self) -> int:
        self._ensure()
        return self.base_offset + self._offsets[-1] if self._offsets else self.base_offset

    def entry(self, i: int) -> tuple[int, int]:
        self._ensure()
        return self.base_offset + self._offsets[i], self._positions[i]

    def append(self, offset: int, position: int) -> None:
        self._ensure()
        rel = self.relative(offset)
        if self._offsets and rel <= self._offsets[-1]:
            raise ValueError(f"index offset {offset} is not above the last entry {self.last_offset}")
        if self.is_full:
            raise ValueError(f"index {self.path} is full")
        self._write_entry(len(self._offsets), _OFFSET_ENTRY.pack(rel, position))
        self._offsets.append(rel)
        self._positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the greatest entry with offset <= target, else (base offset, 0)."""
        self._ensure()
        i = bisect_right(self._offsets, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._offsets[i], self._positions[i]

    def floor_position(self, position: int) -> int:
        """Greatest indexed batch start position <= `position` (0 if none): a known batch boundary."""
        self._ensure()
        i = bisect_right(self._positions, position) - 1
        return self._positions[i] if i >= 0 else 0

    def truncate_to(self, offset: int) -> None:
        """Drop entries with offset >= `offset`."""
        self._ensure()
        i = bisect_left(self._offsets, offset - self.base_offset)
        if i < len(self._offsets):
            del self._offsets[i:]
            del self._positions[i:]
            self._truncate_entries(i)

    def reset(self) -> None:
        self._reset_file()
        self._clear_entries()

    def _clear_entries(self) -> None:
        self._offsets, self._positions = array("i"), array("i")


class TimeIndex(_IndexFile):
    """Maps timestamps to offsets: entry (T, O) says the largest timestamp among offsets <= O is T."""

    entry_size = 12

    _timestamps: array[int]
    _offsets: array[int]

    def _load(self, data: bytes) -> None:
        self._timestamps = array("q")
        self._offsets = array("i")
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            self._timestamps.append(ts)
            self._offsets.append(rel)

    def sanity_check(self) -> None:
        self._ensure()
        if self._offsets and (
            self._offsets[0] < 0 or self._offsets[-1] < self._offsets[0] or self._timestamps[-1] < self._timestamps[0]
        ):
            raise IndexCorruptError(f"{self.path}: entries out of order")

    def full_check(self) -> None:
        self._ensure()
        self.sanity_check()
        t, o = self._timestamps, self._offsets
        for i in range(1, len(t)):
            if t[i] <= t[i - 1] or o[i] < o[i - 1]:
                raise IndexCorruptError(f"{self.path}: entry {i} out of order")

    @property
    def entries(self) -> int:
        self._ensure()
        return len(self._timestamps)

    @property
    def is_full(self) -> bool:  # asked on every append (the roll rule): without the property chain
        if not self._loaded:
            self._ensure()
        return len(self._timestamps) >= self.max_entries

    def entry(self, i: int) -> tuple[int, int]:
        self._ensure()
        return self._timestamps[i], self.base_offset + self._offsets[i]

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base offset) when empty (Kafka's convention)."""
        self._ensure()
        if not self._timestamps:
            return -1, self.base_offset
        return self._timestamps[-1], self.base_offset + self._offsets[-1]

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append only when `timestamp` exceeds the last entry's, as Kafka does."""
        self._ensure()
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        rel = self.relative(offset)
        if self._offsets and rel < self._offsets[-1]:
            raise ValueError(f"time index offset {offset} below the last entry")
        if not skip_full_check and self.is_full:
            raise ValueError(f"time index {self.path} is full")
        self._write_entry(len(self._timestamps), _TIME_ENTRY.pack(timestamp, rel))
        self._timestamps.append(timestamp)
        self._offsets.append(rel)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the greatest entry with timestamp <= target, else (-1, base offset)."""
        self._ensure()
        i = bisect_right(self._timestamps, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self._timestamps[i], self.base_offset + self._offsets[i]

    def truncate_to(self, offset: int) -> None:
        """Drop entries with offset >= `offset`."""
        self._ensure()
        i = bisect_left(self._offsets, offset - self.base_offset)
        if i < len(self._offsets):
            del self._timestamps[i:]
            del self._offsets[i:]
            self._truncate_entries(i)

    def reset(self) -> None:
        self._reset_file()
        self._clear_entries()

    def _clear_entries(self) -> None:
        self._timestamps, self._offsets = array("q"), array("i")


__all__ = ["OffsetIndex", "TimeIndex", "IndexCorruptError"]
