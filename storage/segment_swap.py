"""Crash-safe replacement of a log's segments by a cleaned one, and its completion at startup (Kafka's
`.cleaned` / `.swap` protocol of LogCleaner and LogLoader).

The replacement (`swap_in_cleaned_files`; `UnifiedLog.replace_segments` calls it, then splices its segment
list): indexes then log `.cleaned` -> `.swap` (the `.log.swap` rename is the commit point), dir fsync, old
segments renamed `.deleted` and unlinked (readers keep their fds), indexes then log `.swap` -> final names, dir
fsync. `complete_interrupted_swaps` (called by `UnifiedLog.open`) deletes `.cleaned` files and completes any
committed `.swap`, as Kafka's LogLoader does. Both live here: the recovery depends on the protocol's exact order.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from strata.protocol.records import HEADER_SIZE, BatchHeader

from .checkpoints import fsync_path
from .segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    filename_prefix,
)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_SEGMENT_FILE_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_INDEX_FILE_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

_crash_hook: Callable[[str], None] | None = None  # tests: raise at a named step to simulate a crash


def _step(name: str) -> None:
    if _crash_hook is not None:
        _crash_hook(name)


def _rename_suffix(dir: Path, base: int, suffixes: tuple[str, ...], old: str, new: str) -> None:
    prefix = filename_prefix(base)
    for suffix in suffixes:
        src = dir / (prefix + suffix + old)
        if src.exists():
            os.rename(src, dir / (prefix + suffix + new))


def swap_in_cleaned_files(dir: Path, base: int, old: list[LogSegment]) -> None:
    """On disk, replace the segments `old` by the `<base>.*.cleaned` files, crash-safely (see the module
    docstring). The caller has checked that `old` is still what was cleaned and updates its segment list after."""
    _step("before-swap")
    # .cleaned -> .swap: indexes first, the log last (the commit point of this replacement)
    _rename_suffix(dir, base, _INDEX_FILE_SUFFIXES, CLEANED_SUFFIX, SWAP_SUFFIX)
    _step("swap-indexes-renamed")
    _rename_suffix(dir, base, (LOG_SUFFIX,), CLEANED_SUFFIX, SWAP_SUFFIX)
    fsync_path(dir)
    _step("swap-committed")
    for k, s in enumerate(old):
        s.delete()
        _step(f"old-deleted-{k}")
    # .swap -> final: indexes first, the log last, so a `.log.swap` means "not finished"
    _rename_suffix(dir, base, _INDEX_FILE_SUFFIXES, SWAP_SUFFIX, "")
    _step("final-indexes-renamed")
    _rename_suffix(dir, base, (LOG_SUFFIX,), SWAP_SUFFIX, "")
    fsync_path(dir)
    _step("swapped")


def _scan_next_offset(path: Path, base: int) -> int:
    """Offset after the last complete batch of a segment file (headers only)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        end = os.fstat(fd).st_size
        pos, nxt = 0, base
        while pos + HEADER_SIZE <= end:
            h = BatchHeader(os.pread(fd, HEADER_SIZE, pos))
            if h.size < HEADER_SIZE or pos + h.size > end or h.magic != 2:
                break
            nxt = h.next_offset
            pos += h.size
        return nxt
    finally:
        os.close(fd)


def _split_name(name: str) -> tuple[int, str] | None:
    """`<20 digits><suffix>` -> (offset, suffix)."""
    if len(name) > 20 and name[:20].isdigit():
        return int(name[:20]), name[20:]
    return None


def complete_interrupted_swaps(dir: Path) -> list[int]:
    """Startup: finish or roll back a cleaning interrupted by a crash (Kafka's LogLoader rules).

    `.cleaned` files are deleted (the swap never started). A replacement whose `<base>.log.swap` exists was
    committed: the segment files it replaces -- offsets in [base, its next offset) -- are deleted and its `.swap`
    files renamed to the final names. `.swap` indexes without their `.log.swap`, or at or above the lowest
    `.cleaned` offset (KAFKA-12977), were never committed and are deleted. Returns the completed base offsets."""
    dir = Path(dir)
    if not dir.is_dir():
        return []
    files = [f for f in dir.iterdir() if f.is_file()]
    min_cleaned: int | None = None
    swaps: dict[int, list[Path]] = {}
    for f in files:
        parsed = _split_name(f.name)
        if parsed is None:
            continue
        off, suffix = parsed
        if suffix.endswith(CLEANED_SUFFIX):
            min_cleaned = off if min_cleaned is None else min(min_cleaned, off)
            f.unlink(missing_ok=True)
        elif suffix.endswith(SWAP_SUFFIX) and suffix[: -len(SWAP_SUFFIX)] in _SEGMENT_FILE_SUFFIXES:
            swaps.setdefault(off, []).append(f)
    ranges: list[tuple[int, int]] = []
    for base, paths in sorted(swaps.items()):
        log_swap = dir / (filename_prefix(base) + LOG_SUFFIX + SWAP_SUFFIX)
        if log_swap not in paths or (min_cleaned is not None and base >= min_cleaned):
            for p in paths:
                p.unlink(missing_ok=True)
            continue
        ranges.append((base, _scan_next_offset(log_swap, base)))
    if not ranges:
        return []
    for f in dir.iterdir():
        parsed = _split_name(f.name)
        if parsed is None or parsed[1] not in _SEGMENT_FILE_SUFFIXES:
            continue
        if any(lo <= parsed[0] < hi for lo, hi in ranges):
            f.unlink(missing_ok=True)  # a segment the committed swap replaces (or its half-renamed index)
    for base, _ in ranges:
        _rename_suffix(dir, base, _INDEX_FILE_SUFFIXES, SWAP_SUFFIX, "")
        _rename_suffix(dir, base, (LOG_SUFFIX,), SWAP_SUFFIX, "")
    fsync_path(dir)
    return [b for b, _ in ranges]


__all__ = ["CLEANED_SUFFIX", "SWAP_SUFFIX", "complete_interrupted_swaps", "swap_in_cleaned_files"]
