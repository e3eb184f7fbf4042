"""The bounded open-file cache (storage/file_cache.py) under real segments: descriptors stay within the capacity,
readers in other threads never lose a descriptor to eviction, deleted and renamed files keep their semantics, and
a process out of descriptors gives back idle ones instead of failing."""

from __future__ import annotations

import os
import random
import resource
import sys
import threading
from pathlib import Path

import pytest

from strata.storage.file_cache import CachedFile, OpenFileCache
from strata.storage.segment import LogSegment
from tests.support.kafka_wire import build_batch, decode_records
from tests.support.waiting import wait_until

NOW = 1_700_000_000_000


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def append_records(seg: LogSegment, values: list[bytes]) -> None:
    """Append one batch per value at the segment's next offset (as UnifiedLog would after assigning offsets)."""
    for v in values:
        data = bytearray(build_batch([(None, v, [])], timestamp=NOW))
        data[0:8] = seg.next_offset.to_bytes(8, "big")  # base offset (the CRC does not cover it)
        seg.append(bytes(data), [(0, len(data), seg.next_offset, NOW)], seg.next_offset + 1)


def read_values(seg: LogSegment) -> list[bytes]:
    got = seg.read(seg.base_offset, 1 << 20, None, True)
    assert got is not None
    return [r.value for r in decode_records(bytes(got[0]))]  # a copy read (zero_copy_min 0): bytes


def make_segments(tmp_path: Path, cache: OpenFileCache, n: int) -> list[LogSegment]:
    segs = []
    for i in range(n):
        d = tmp_path / f"t-{i}"
        d.mkdir()
        seg = LogSegment(d, 0, index_interval_bytes=64, files=cache)
        append_records(seg, [f"p{i}-r{k}".encode() * 8 for k in range(6)])  # a few index entries each
        segs.append(seg)
    return segs


def test_open_descriptors_stay_within_the_capacity(tmp_path: Path) -> None:
    before = open_fds()
    cache = OpenFileCache(8)
    segs = make_segments(tmp_path, cache, 60)  # 180 files (log, index, time index)
    assert cache.open_files <= 8 and open_fds() - before <= 8
    for i, seg in enumerate(segs):  # every file reopened on use, and read right
        assert read_values(seg)[0] == f"p{i}-r0".encode() * 8
    assert cache.open_files <= 8 and open_fds() - before <= 8
    assert cache.evictions > 0
    for seg in segs:
        seg.close()
    assert cache.open_files == 0 and open_fds() == before


def test_concurrent_readers_never_lose_their_descriptor(tmp_path: Path) -> None:
    """Readers in threads over more segments than the cache holds, while the event-loop thread keeps appending:
    each read evicts another reader's idle file; no read fails or returns wrong bytes."""
    cache = OpenFileCache(3)
    segs = make_segments(tmp_path, cache, 24)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader(seed: int) -> None:
        rnd = random.Random(seed)
        try:
            for _ in range(300):
                i = rnd.randrange(len(segs))
                vals = read_values(segs[i])
                assert vals[:6] == [f"p{i}-r{k}".encode() * 8 for k in range(6)]
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)

    def writer() -> None:
        k = 0
        while not stop.is_set() and k < 200:
            append_records(segs[k % len(segs)], [b"more"])
            k += 1

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(6)] + [threading.Thread(target=writer)]
    for t in threads:
        t.start()
    for t in threads[:-1]:
        t.join(timeout=120)
    stop.set()
    threads[-1].join(timeout=120)
    assert not errors, errors[:3]
    assert cache.open_files <= 3


def test_a_held_descriptor_survives_eviction_and_close(tmp_path: Path) -> None:
    cache = OpenFileCache(1)
    a = cache.file(tmp_path / "a", create=True)
    b = cache.file(tmp_path / "b", create=True)
    a.pwrite_all(b"hello", 0)
    with a.use() as fd:
        b.pwrite_all(b"world", 0)  # would evict a, but a is in use: the cache runs one over instead
        assert os.pread(fd, 5, 0) == b"hello"
        a.close()  # closing a file in use closes it when the user is done
        assert os.pread(fd, 5, 0) == b"hello"
    with pytest.raises(OSError):
        a.pread(5, 0)
    assert b.pread(5, 0) == b"world"


def test_deleted_segment_stays_readable_after_eviction(tmp_path: Path) -> None:
    """Retention deletes a segment that a reader still holds: its files are pinned before the unlink, so reading
    it later works even though the cache evicted its descriptors meanwhile."""
    cache = OpenFileCache(2)
    segs = make_segments(tmp_path, cache, 4)
    victim = segs[0]
    victim.delete()
    assert not victim.log_path.exists()
    for seg in segs[1:]:  # churn the cache
        read_values(seg)
    assert read_values(victim)[0] == b"p0-r0" * 8
    assert victim.translate_offset(3) is not None  # the lazy index loads from the pinned descriptor
    victim.close()


def test_evicted_file_is_reopened_by_its_new_name_and_never_recreated(tmp_path: Path) -> None:
    cache = OpenFileCache(1)
    f = cache.file(tmp_path / "x.cleaned", create=True)
    f.pwrite_all(b"data", 0)
    os.rename(tmp_path / "x.cleaned", tmp_path / "x")
    f.rename(tmp_path / "x")
    cache.file(tmp_path / "other", create=True)  # evicts f
    assert not f.is_open
    assert f.pread(4, 0) == b"data"
    cache.file(tmp_path / "other2", create=True)
    os.unlink(tmp_path / "x")  # gone while evicted: an error, not a new empty file
    with pytest.raises(FileNotFoundError):
        f.pread(4, 0)
    assert not (tmp_path / "x").exists()


def test_out_of_descriptors_gives_back_idle_ones(tmp_path: Path) -> None:
    """A cache sized above what the process may open: at EMFILE it closes idle files and retries, so creating
    segments keeps working under a low `ulimit -n`."""
    cache = OpenFileCache(10_000)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    files: list[CachedFile] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_fds() + 40, hard))
    try:
        for i in range(200):
            files.append(cache.file(tmp_path / f"f{i}", create=True))
        assert cache.open_files < 40
        assert all(f.pread(1, 0) == b"" for f in files)
    finally:
        for f in files:
            f.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_lazy_indexes_are_not_read_until_used(tmp_path: Path) -> None:
    cache = OpenFileCache(16)
    (seg,) = make_segments(tmp_path, cache, 1)
    entries = seg.offset_index.entries
    assert entries > 0
    seg.close()
    listing = {p.name: p.stat() for p in (tmp_path / "t-0").iterdir()}
    reopened = LogSegment(tmp_path / "t-0", 0, index_interval_bytes=64, files=cache, listing=listing)
    assert not reopened.offset_index._loaded and not reopened.time_index._loaded
    assert cache.open_files == 0  # nothing opened: the sizes came from the listing
    assert reopened.offset_index.entries == entries  # loaded on first use
    reopened.close()


def in_function(t: threading.Thread, name: str) -> bool:
    """Thread `t` is inside a function called `name` (e.g. waiting for a lock there)."""
    frame = sys._current_frames().get(t.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == name:
            return True
        frame = frame.f_back
    return False


def test_an_index_loading_in_another_thread_is_not_used_half_loaded(tmp_path: Path) -> None:
    """The cleaner's thread may load a closed segment's lazy index (grouping reads its size) while the event loop
    reads the segment: the loop must never see an index marked loaded whose entries are not there yet."""
    cache = OpenFileCache(16)
    (seg,) = make_segments(tmp_path, cache, 1)
    expected = seg.offset_index.lookup(4)
    seg.close()
    listing = {p.name: p.stat() for p in (tmp_path / "t-0").iterdir()}
    reopened = LogSegment(tmp_path / "t-0", 0, index_interval_bytes=64, files=cache, listing=listing)
    idx = reopened.offset_index
    errors: list[BaseException] = []

    def load() -> None:
        try:
            idx.size_in_bytes  # noqa: B018 - the cleaner's grouping: loads the index
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    with cache._lock:  # the loader blocks opening the index file, after it started loading
        t = threading.Thread(target=load)
        t.start()
        wait_until(lambda: in_function(t, "acquire"), timeout=10, message="the loader never reached the cache")
        got = idx.lookup(4)  # the event loop's read meanwhile (the lock is reentrant for this thread)
    t.join(10)
    assert not t.is_alive() and not errors
    assert got == expected == idx.lookup(4)
    reopened.close()
