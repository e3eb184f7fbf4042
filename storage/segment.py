"""LogSegment: one `.log` file of whole record batches plus its `.index`, `.timeindex` and `.txnindex`.

All file I/O is fd-level (`os.pwrite`/`os.pread`) with no user-space buffering, so once `append` returns the bytes
are in the page cache and survive a `kill -9` of the broker (durability against power loss is `flush`'s job).
Descriptors come from the bounded open-file cache (storage/file_cache.py): a segment holds one only while it reads
or writes, and its indexes load lazily (storage/index.py), so an idle segment costs no descriptor. `delete` pins
the files' descriptors before it unlinks them, so a reader or a flush thread that holds a segment which retention
has just deleted keeps working on the unlinked inode instead of failing.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

from strata.protocol.records import HEADER_SIZE, LOG_APPEND_TIME, BatchHeader, compute_crc, iter_records

from .file_cache import OPEN_FILES, CachedFile, OpenFileCache, as_path
from .file_region import FileRegion
from .index import INT32_MAX, IndexCorruptError, OffsetIndex, TimeIndex
from .txn_index import TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
_SCAN_CHUNK = 16 * 1024
_RECOVERY_CHUNK = 1024 * 1024


def filename_prefix(offset: int) -> str:
    """Kafka's 20-digit zero-padded base offset file name."""
    return f"{offset:020d}"


def _stat_files(dir: Path, base_offset: int) -> dict[str, os.stat_result]:
    """Name -> stat of a segment's files that exist (what the log dir's scan gives `UnifiedLog.open`)."""
    out = {}
    prefix = filename_prefix(base_offset)
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
        try:
            out[prefix + suffix] = os.stat(dir / (prefix + suffix))
        except FileNotFoundError:
            pass
    return out


def _close_files(files: list[CachedFile]) -> None:
    for f in files:
        f.close()


class LogSegment:
    """A segment of a partition's log starting at `base_offset`.

    State kept in memory (all derived from the files on open): `size` (bytes), `next_offset` (offset after the
    last batch), `max_timestamp_so_far` with the (last) offset of the batch holding it, and the bytes since the last
    index entry. Only the event-loop thread mutates a segment; `flush` may run on another thread.
    """

    __slots__ = (
        "dir",
        "base_offset",
        "index_interval_bytes",
        "log_path",
        "indexes_existed",
        "log_file",
        "size",
        "offset_index",
        "time_index",
        "_finalizer",
        "txn_index",
        "next_offset",
        "max_timestamp_so_far",
        "offset_of_max_timestamp_so_far",
        "bytes_since_last_index_entry",
        "rolling_based_timestamp",
        "created_ms",
        "deleted",
        "truncations",
        "__weakref__",
    )

    def __init__(
        self,
        dir: Path,
        base_offset: int,
        index_interval_bytes: int = 4096,
        max_index_size: int = 10 * 1024 * 1024,
        *,
        created_ms: int | None = None,
        files: OpenFileCache | None = None,
        listing: dict[str, os.stat_result] | None = None,
    ) -> None:
        """`listing` (file name -> stat, from the log dir's scan at load) opens existing files without a stat or
        an open each; without it the files are created if missing (a new segment)."""
        self.dir = as_path(dir)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        cache = files if files is not None else OPEN_FILES
        prefix = filename_prefix(base_offset)
        self.log_path = self.dir / (prefix + LOG_SUFFIX)
        index_path = self.dir / (prefix + INDEX_SUFFIX)
        time_index_path = self.dir / (prefix + TIME_INDEX_SUFFIX)
        if listing is None:
            idx_size = tidx_size = None
            self.indexes_existed = index_path.exists() and time_index_path.exists()
            txn_exists = None
        else:
            idx_st, tidx_st = listing.get(index_path.name), listing.get(time_index_path.name)
            idx_size = None if idx_st is None else idx_st.st_size
            tidx_size = None if tidx_st is None else tidx_st.st_size
            self.indexes_existed = idx_size is not None and tidx_size is not None
            txn_exists = prefix + TXN_INDEX_SUFFIX in listing
        log_st = None if listing is None else listing.get(self.log_path.name)
        log_size = None if log_st is None else log_st.st_size
        self.log_file = cache.file(self.log_path, os.O_RDWR, create=log_size is None)
        # a file that cannot be made (EMFILE, ENOSPC) must not leave the ones before it open
        opened = [self.log_file]
        try:
            self.size = self.log_file.size() if log_size is None else log_size
            self.offset_index = OffsetIndex(index_path, base_offset, max_index_size, files=cache, size_hint=idx_size)
            opened.append(self.offset_index._file)
            self.time_index = TimeIndex(time_index_path, base_offset, max_index_size, files=cache, size_hint=tidx_size)
            opened.append(self.time_index._file)
        except BaseException:
            _close_files(opened)
            raise
        # aborted transactions whose abort marker is in this segment (the file exists once there is one)
        self.txn_index = TransactionIndex(
            self.dir / (prefix + TXN_INDEX_SUFFIX), base_offset, files=cache, exists=txn_exists
        )
        self._finalizer = weakref.finalize(self, _close_files, [*opened, self.txn_index.file])
        self.next_offset = base_offset
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp_so_far = base_offset
        self.bytes_since_last_index_entry = 0
        self.rolling_based_timestamp: int | None = None  # max timestamp of the first batch (Kafka's roll basis)
        if created_ms is None:
            created_ms = int(log_st.st_mtime * 1000) if log_st is not None else int(time.time() * 1000)
        self.created_ms = created_ms
        self.deleted = False
        self.truncations = 0  # bumped by truncate_to: a FileRegion fixed before it is no longer valid

    # -- loading ---------------------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        dir: Path,
        base_offset: int,
        index_interval_bytes: int,
        max_index_size: int,
        *,
        recover: bool = False,
        listing: dict[str, os.stat_result] | None = None,
        files: OpenFileCache | None = None,
    ) -> tuple[LogSegment, int]:
        """Open an existing segment. Returns (segment, bytes truncated by recovery).

        `recover` validates every batch and rebuilds the indexes; otherwise the files are trusted but an index that
        is missing or fails its sanity check is rebuilt (which validates the segment as a side effect).
        """
        if listing is None:
            listing = _stat_files(Path(dir), base_offset)
        seg = cls(dir, base_offset, index_interval_bytes, max_index_size, listing=listing, files=files)
        truncated = 0
        if recover or not seg.indexes_existed:
            truncated = seg.recover()
        else:
            try:
                seg.offset_index.sanity_check(seg.size)
                seg.time_index.sanity_check()
                seg._load_tail()
            except IndexCorruptError:
                truncated = seg.recover()
        if seg.rolling_based_timestamp is None:  # (recovery reads it on its way)
            seg._load_first_batch_timestamp()
        return seg, truncated

    def _load_tail(self) -> None:
        """Derive next offset, max timestamp and bytes-since-last-entry from the last index entries plus a scan of
        the batches after them, re-applying the indexing rule there (so a short index heals itself)."""
        ts, ts_off = self.time_index.last_entry
        self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = ts, ts_off
        self.next_offset = self.base_offset
        self.bytes_since_last_index_entry = 0
        if self.offset_index.entries:
            idx_off, pos = self.offset_index.entry(self.offset_index.entries - 1)
        else:
            idx_off, pos = None, 0
        end = pos
        for p, h in self.iter_headers(pos):
            if idx_off is not None:  # the batch the last entry points at: already indexed
                if h.last_offset != idx_off:
                    raise IndexCorruptError(f"{self.offset_index.path}: last entry does not match the log")
                idx_off = None
                if h.max_timestamp > self.max_timestamp_so_far:
                    self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = h.max_timestamp, h.last_offset
                self.bytes_since_last_index_entry = h.size
            else:
                self._index_batch(p, h.size, h.last_offset, h.max_timestamp)
            self.next_offset = h.last_offset + 1
            end = p + h.size
        if end < self.size or idx_off is not None:
            raise IndexCorruptError(f"{self.log_path}: {self.size - end} unreadable bytes at the tail")

    def _load_first_batch_timestamp(self) -> None:
        if self.size >= HEADER_SIZE:
            self.rolling_based_timestamp = BatchHeader(self.log_file.pread(HEADER_SIZE, 0)).max_timestamp

    def recover(self) -> int:
        """Validate batches from the start, truncate at the first invalid one, rebuild both indexes.

        Checks magic 2, sane length, CRC32C and increasing offsets. Returns the number of bytes truncated.
        """
        self.offset_index.begin_rebuild()  # an index equal to the rebuilt one is not written again
        self.time_index.begin_rebuild()
        try:
            return self._recover()
        finally:
            self.offset_index.end_rebuild()
            self.time_index.end_rebuild()

    def _recover(self) -> int:
        self.bytes_since_last_index_entry = 0
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp_so_far = self.base_offset
        self.next_offset = self.base_offset
        self.rolling_based_timestamp = None
        valid = 0
        for pos, buf, off in self._iter_batch_bytes():
            h = BatchHeader(buf, off)
            if (
                h.magic != 2
                or h.base_offset < self.next_offset
                or h.last_offset_delta < 0
                or h.last_offset - self.base_offset > INT32_MAX
                or compute_crc(buf, off, h.size) != h.crc
            ):
                break
            if not valid:
                self.rolling_based_timestamp = h.max_timestamp
            self._index_batch(pos, h.size, h.last_offset, h.max_timestamp)
            self.next_offset = h.last_offset + 1
            valid = pos + h.size
        truncated = self.size - valid
        if truncated:
            self.log_file.truncate(valid)
            self.size = valid
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, skip_full_check=True
        )
        self.indexes_existed = True
        return truncated

    def _iter_batch_bytes(self) -> Iterator[tuple[int, bytes, int]]:
        """Yield (file position, buffer, offset in buffer) for each complete batch, reading ~1 MB at a time."""
        pread, pos, end = self.log_file.pread, 0, self.size
        buf, buf_start = b"", 0
        while pos + HEADER_SIZE <= end:
            off = pos - buf_start
            if off + HEADER_SIZE > len(buf):
                buf, buf_start, off = pread(min(_RECOVERY_CHUNK, end - pos), pos), pos, 0
            size = BatchHeader(buf, off).size
            if size < HEADER_SIZE or pos + size > end:
                return
            if off + size > len(buf):  # batch straddles the chunk: re-read from its start
                buf, buf_start, off = pread(max(size, min(_RECOVERY_CHUNK, end - pos)), pos), pos, 0
                if len(buf) < size:
                    return
            yield pos, buf, off
            pos += size

    # -- scanning ------------------------------------------------------------------------------------------
    def iter_headers(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """Yield (position, header) of complete batches in [start, end), reading headers in 16 KB chunks."""
        end = self.size if end is None else end
        pread = self.log_file.pread
        buf = b""
        buf_start = start
        pos = start
        while pos + HEADER_SIZE <= end:
            rel = pos - buf_start
            if rel + HEADER_SIZE > len(buf):
                buf = pread(min(_SCAN_CHUNK, end - pos), pos)
                buf_start, rel = pos, 0
                if len(buf) < HEADER_SIZE:
                    return
            h = BatchHeader(buf, rel)
            size = h.size
            if size < HEADER_SIZE or pos + size > end:
                return
            yield pos, h
            pos += size

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset >= `offset`, or None past the end."""
        _, pos = self.offset_index.lookup(offset)
        for p, h in self.iter_headers(max(pos, start_position)):
            if h.last_offset >= offset:
                return p, h
        return None

    # -- writing -------------------------------------------------------------------------------------------
    def _index_batch(self, pos: int, size: int, last_offset: int, max_timestamp: int) -> None:
        if max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = max_timestamp
            self.offset_of_max_timestamp_so_far = last_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(last_offset, pos)
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size

    def append(
        self, data: bytes | bytearray | memoryview, batches: list[tuple[int, int, int, int]], next_offset: int
    ) -> None:
        """Write `data` (whole batches, offsets already assigned) at the end of the segment, then index it.

        `batches` lists (position in data, size, last offset, max timestamp) per batch. The log is written before
        the indexes, so a crash in between leaves indexes that never point past the data.
        """
        start = self.size
        self.log_file.pwrite_all(data, start)
        if self.rolling_based_timestamp is None and batches:
            self.rolling_based_timestamp = batches[0][3]
        for rel, size, last_offset, max_ts in batches:
            self._index_batch(start + rel, size, last_offset, max_ts)
        self.size = start + len(data)
        self.next_offset = next_offset

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_offset: int | None,
        min_one_message: bool,
        zero_copy_min: int = 0,
    ) -> tuple[bytes | FileRegion, int] | None:
        """Whole batches from the batch holding `start_offset`, ending before the batch holding `max_offset`,
        at most `max_size` bytes unless `min_one_message` and the first batch alone is larger. With
        `zero_copy_min`, data of at least that many bytes come as a FileRegion (sent with sendfile), not read.

        Returns (data, base offset of the first batch) -- data may be empty -- or None when `start_offset` is past
        this segment's last batch (the caller moves on to the next segment).
        """
        size = self.size
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        start_pos, first = found
        end = size
        if max_offset is not None and max_offset < self.next_offset:
            if max_offset <= first.last_offset:
                return b"", start_offset
            m = self.translate_offset(max_offset, start_pos)
            if m is not None:
                end = m[0]
        limit = start_pos + max_size
        if limit >= end:
            stop = end
        else:
            stop = max(self.offset_index.floor_position(limit), start_pos)
            for p, h in self.iter_headers(stop, end):
                if p + h.size > limit:
                    break
                stop = p + h.size
            if stop == start_pos and min_one_message:
                stop = start_pos + first.size
        if stop <= start_pos:
            return b"", start_offset
        if zero_copy_min and stop - start_pos >= zero_copy_min:
            generation = self.truncations
            with self.log_file.use() as fd:  # the region holds its own duplicate: the cache may close this one
                region = FileRegion(fd, start_pos, stop - start_pos, lambda: self.truncations == generation)
            return region, first.base_offset
        return self.log_file.pread(stop - start_pos, start_pos), first.base_offset

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record with timestamp >= `timestamp` at or after `start_offset`."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, pos = self.offset_index.lookup(max(ts_offset, start_offset))
        for p, h in self.iter_headers(pos):
            if h.last_offset < start_offset or h.max_timestamp < timestamp:
                continue
            if h.timestamp_type == LOG_APPEND_TIME:
                return h.max_timestamp, max(h.base_offset, start_offset)
            for r in iter_records(self.read_batch(p, h.size), 0):
                if r.timestamp >= timestamp and r.offset >= start_offset:
                    return r.timestamp, r.offset
        return None

    def read_batch(self, position: int, size: int) -> bytes:
        return self.log_file.pread(size, position)

    def truncate_to(self, offset: int) -> int:
        """Remove batches at and after the one holding `offset`; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        pos, h = found
        self.offset_index.truncate_to(h.base_offset)
        self.time_index.truncate_to(h.base_offset)
        self.txn_index.truncate_to(h.base_offset)
        removed = self.size - pos
        self.truncations += 1
        self.log_file.truncate(pos)
        self.size = pos
        self.next_offset = self.base_offset
        self._load_tail()
        if self.size == 0:
            self.rolling_based_timestamp = None
            self.created_ms = int(time.time() * 1000)
        return removed

    def on_become_inactive(self) -> None:
        """On roll: record the final max timestamp so a reopened segment knows it from its time index alone."""
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, skip_full_check=True
        )

    # -- properties ----------------------------------------------------------------------------------------
    def should_roll(
        self,
        incoming_bytes: int,
        max_timestamp_in_messages: int,
        last_offset: int,
        segment_bytes: int,
        segment_ms: int,
        now_ms: int,
    ) -> bool:
        """Kafka's roll rule: size, age (by first batch timestamp, else creation time), full indexes, offset range."""
        if self.size == 0:
            return last_offset - self.base_offset > INT32_MAX
        if self.size > segment_bytes - incoming_bytes:
            return True
        if self.rolling_based_timestamp is not None and self.rolling_based_timestamp >= 0:
            waited = max_timestamp_in_messages - self.rolling_based_timestamp
        else:
            waited = now_ms - self.created_ms
        return (
            waited > segment_ms
            or self.offset_index.is_full
            or self.time_index.is_full
            or last_offset - self.base_offset > INT32_MAX
        )

    @property
    def largest_timestamp(self) -> int:
        """Max timestamp in the segment, or the file's mtime when it holds none (Kafka's retention basis)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        try:
            return int(os.stat(self.log_path).st_mtime * 1000)
        except OSError:
            return self.created_ms

    def __len__(self) -> int:
        return self.size

    def flush(self) -> None:
        """fsync the log and both indexes (safe from a worker thread; no-op once closed)."""
        if self.is_closed():
            return
        try:
            self.log_file.fsync()
            self.offset_index.flush()
            self.time_index.flush()
            self.txn_index.flush()
        except OSError:
            if not self.is_closed() and not self.deleted:
                raise  # a real I/O error; EBADF after a concurrent close/delete is not one

    def is_closed(self) -> bool:
        """Closed (or deleted): its file descriptor is gone. Another thread may close it at any time (a method, not
        a property, so that a type checker does not carry an earlier answer past the fsync)."""
        return not self._finalizer.alive

    def close(self) -> None:
        self.offset_index.mark_closed()
        self.time_index.mark_closed()
        self.txn_index.close()
        self._finalizer()

    def delete(self) -> None:
        """Rename the files with `.deleted` (as Kafka does before the async delete) then unlink them.

        The descriptors are pinned open first and stay open until the object is closed or dropped, so concurrent
        readers/flushers keep a valid inode.
        """
        self.deleted = True
        for f in (self.log_file, self.offset_index, self.time_index):
            try:
                f.pin()
            except FileNotFoundError:
                pass
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            tomb = path.with_name(path.name + DELETED_SUFFIX)
            try:
                os.rename(path, tomb)
                os.unlink(tomb)
            except FileNotFoundError:
                pass
        self.txn_index.delete(DELETED_SUFFIX)

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, next_offset={self.next_offset}, size={self.size}, "
            f"max_ts={self.max_timestamp_so_far})"
        )


__all__ = [
    "LogSegment",
    "filename_prefix",
    "LOG_SUFFIX",
    "INDEX_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "TXN_INDEX_SUFFIX",
    "DELETED_SUFFIX",
]
