"""A bounded cache of open file descriptors for segment files (`log.open.files.cache.size`, Strata's own).

Kafka keeps every segment's `.log` and indexes open (three descriptors per segment) and asks operators for a
large `ulimit -n`. Strata opens a segment file when it is used and keeps at most `capacity` of them open, closing
the least recently used idle ones (an LRU), so 20,000 partitions fit a default descriptor limit.

A `CachedFile` is one file. `use()` (a context manager) or `acquire`/`release` pin its descriptor while a read or
write is in progress, so eviction never closes a descriptor under a reader (another thread included); an evicted
file is reopened on its next use, without O_CREAT, so a file renamed away or deleted meanwhile is an error rather
than a new empty file. `pin()` keeps the descriptor open outside the cache's count until `close()`: a segment about
to be deleted pins its files first, so readers that still hold it keep reading the unlinked inode (POSIX semantics,
as Kafka's open channels). When the process runs out of descriptors (EMFILE), the cache closes its idle files and
retries once.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict
from pathlib import Path
from types import TracebackType

DEFAULT_CAPACITY = 4096
_NO_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)


def as_path(path: Path | str) -> Path:
    """`path` as a Path without re-parsing one that is already (pathlib's parsing shows at 20,000 logs)."""
    return path if isinstance(path, Path) else Path(path)


def effective_capacity(configured: int) -> int:
    """The configured size, but at most half the process's soft RLIMIT_NOFILE (sockets need the rest)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return max(1, configured)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return max(1, configured)
    return max(1, min(configured, soft // 2))


class OpenFileCache:
    """LRU of open descriptors, thread-safe. Only idle files (no user inside `use()`) are ever closed by it."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = max(1, capacity)
        self._open: OrderedDict[CachedFile, None] = OrderedDict()  # open, unpinned files; least recent first
        # reentrant: a segment's finalizer (garbage collection) may close its files while this thread holds it
        self._lock = threading.RLock()
        self.opens = 0  # descriptors opened (first opens and reopens after eviction)
        self.evictions = 0  # descriptors closed to stay within capacity

    @property
    def open_files(self) -> int:
        return len(self._open)

    def resize(self, capacity: int) -> None:
        with self._lock:
            self.capacity = max(1, capacity)
            self._evict(self.capacity)

    def file(self, path: Path, flags: int = os.O_RDWR, *, create: bool = False) -> CachedFile:
        """A cached file for `path`; `create` makes it now (opened with O_CREAT, and left open in the cache)."""
        f = CachedFile(self, as_path(path), flags)
        if create:
            f.acquire(os.O_CREAT)
            f.release()
        return f

    # -- internals (called with self._lock held) -------------------------------------------------------------
    def _evict(self, limit: int) -> None:
        """Close least recently used idle files until at most `limit` are open (files in use move to the back)."""
        lru = self._open
        tries = len(lru)
        while len(lru) > limit and tries > 0:
            tries -= 1
            f = next(iter(lru))
            if f._users:
                lru.move_to_end(f)
                continue
            del lru[f]
            f._close_fd()
            self.evictions += 1

    def _opened(self, f: CachedFile) -> None:
        self.opens += 1
        self._open[f] = None
        self._evict(self.capacity)

    def _forget(self, f: CachedFile) -> None:
        self._open.pop(f, None)

    def _os_open(self, path: Path, flags: int) -> int:
        try:
            return os.open(path, flags, 0o644)
        except OSError as e:
            if e.errno not in _NO_DESCRIPTORS or not self._open:
                raise
            self._evict(len(self._open) // 2)  # the process is out of descriptors: give back idle ones, retry
            return os.open(path, flags, 0o644)


class CachedFile:
    """One file whose descriptor the `OpenFileCache` opens on use and may close when idle."""

    __slots__ = ("path", "flags", "_cache", "_fd", "_users", "_pinned", "_closed", "__weakref__")

    def __init__(self, cache: OpenFileCache, path: Path, flags: int) -> None:
        self.path = path
        self.flags = flags & ~os.O_CREAT
        self._cache = cache
        self._fd: int | None = None
        self._users = 0
        self._pinned = False
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def is_open(self) -> bool:
        """Its descriptor is open right now (in the cache or pinned)."""
        return self._fd is not None

    def acquire(self, extra_flags: int = 0) -> int:
        """The open descriptor, held until `release` (eviction skips it)."""
        cache = self._cache
        with cache._lock:
            if self._closed:
                raise OSError(errno.EBADF, f"{self.path}: file closed")
            fd = self._fd
            if fd is None:
                fd = self._fd = cache._os_open(self.path, self.flags | extra_flags)
                self._users += 1
                if not self._pinned:
                    cache._opened(self)
            else:
                self._users += 1
                if not self._pinned:
                    cache._open.move_to_end(self)
            return fd

    def release(self) -> None:
        with self._cache._lock:
            self._users -= 1
            if self._users == 0 and self._closed:
                self._close_fd()

    def use(self) -> _Use:
        """`with f.use() as fd:` -- the descriptor, pinned for the block."""
        return _Use(self)

    # -- I/O helpers (each holds the descriptor for one call) ------------------------------------------------
    def pread(self, n: int, pos: int) -> bytes:
        fd = self.acquire()
        try:
            return os.pread(fd, n, pos)
        finally:
            self.release()

    def pwrite_all(self, data: bytes | bytearray | memoryview, pos: int) -> None:
        fd = self.acquire()
        try:
            view = memoryview(data)
            while view:
                n = os.pwrite(fd, view, pos)
                pos += n
                view = view[n:]
        finally:
            self.release()

    def write(self, data: bytes) -> None:
        """os.write (for files opened with O_APPEND)."""
        fd = self.acquire()
        try:
            os.write(fd, data)
        finally:
            self.release()

    def truncate(self, size: int) -> None:
        fd = self.acquire()
        try:
            os.ftruncate(fd, size)
        finally:
            self.release()

    def size(self) -> int:
        fd = self.acquire()
        try:
            return os.fstat(fd).st_size
        finally:
            self.release()

    def fsync(self) -> None:
        """fsync if the descriptor is open. One that was evicted was closed, and close(2) does not lose written
        data: the caller's fsync of a reopened descriptor would sync the same inode, so reopen and sync it."""
        fd = self.acquire()
        try:
            os.fsync(fd)
        finally:
            self.release()

    # -- lifecycle --------------------------------------------------------------------------------------------
    def pin(self) -> None:
        """Open (if needed) and keep open outside the cache's count until `close` (a file about to be unlinked)."""
        cache = self._cache
        with cache._lock:
            if self._closed or self._pinned:
                return
            if self._fd is None:
                self._fd = cache._os_open(self.path, self.flags)
            else:
                cache._forget(self)
            self._pinned = True

    def rename(self, path: Path) -> None:
        """The file was renamed on disk: reopen by the new name (an open descriptor is unaffected)."""
        self.path = Path(path)

    def close(self) -> None:
        """Close now, or when the last user releases it."""
        with self._cache._lock:
            if self._closed:
                return
            self._closed = True
            self._cache._forget(self)
            if self._users == 0:
                self._close_fd()

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def __repr__(self) -> str:
        return f"CachedFile({self.path}, open={self._fd is not None}, users={self._users})"


class _Use:
    __slots__ = ("_f", "_fd")

    def __init__(self, f: CachedFile) -> None:
        self._f = f
        self._fd = -1

    def __enter__(self) -> int:
        self._fd = self._f.acquire()
        return self._fd

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._f.release()


# The process's cache: every segment file goes through it; `LogManager` sizes it from the broker config.
OPEN_FILES = OpenFileCache(DEFAULT_CAPACITY)


__all__ = ["CachedFile", "OpenFileCache", "OPEN_FILES", "DEFAULT_CAPACITY", "as_path", "effective_capacity"]
