"""LeaderEpochFileCache: leader epoch -> start offset, persisted as Kafka's `leader-epoch-checkpoint`.

File format (text): "0\\n<count>\\n<epoch> <startOffset>\\n...". Followers truncate by these entries
(OffsetsForLeaderEpoch, KIP-101/279), so the file is rewritten atomically on every change; changes are rare (one
per leader election), so the fsync cost does not matter.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from .checkpoints import (
    CheckpointFormatError,
    parse_checkpoint_lines,
    read_checkpoint_lines,
    write_checkpoint_lines,
)
from .file_cache import as_path

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


def _parse_entries(lines: list[str]) -> list[EpochEntry]:
    """ "<epoch> <startOffset>" lines -> entries (ValueError on a malformed line)."""
    entries = []
    for ln in lines:
        e, o = ln.split()
        entries.append(EpochEntry(int(e), int(o)))
    return entries


def decode_checkpoint(data: bytes, source: str = "leader-epoch checkpoint") -> list[EpochEntry]:
    """Entries of checkpoint bytes, e.g. the one shipped with a remote segment, which a follower restores with
    `assign_entries`. Raises CheckpointFormatError when the text is malformed."""
    try:
        return _parse_entries(parse_checkpoint_lines(data.decode(), source))
    except (UnicodeDecodeError, ValueError) as e:  # CheckpointFormatError is a ValueError
        raise CheckpointFormatError(f"{source}: {e}") from e


class LeaderEpochFileCache:
    """Entries ordered by both epoch and start offset (monotonic), as Kafka maintains them."""

    def __init__(self, path: Path | None, entries: list[EpochEntry] | None = None) -> None:
        self.path = None if path is None else as_path(path)
        self._entries: list[EpochEntry] = list(entries or [])

    @classmethod
    def load(cls, path: Path) -> LeaderEpochFileCache:
        """Read the checkpoint; a missing or malformed file yields an empty cache (rebuilt by later appends)."""
        try:
            entries = _parse_entries(read_checkpoint_lines(path) or [])
        except (CheckpointFormatError, ValueError):
            entries = []
        cache = cls(path)
        for e in entries:  # re-apply so a hand-edited, non-monotonic file cannot break invariants
            cache._assign(e)
        return cache

    # -- queries -------------------------------------------------------------------------------------------
    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """Epoch of the leader that wrote `offset`: the entry with the greatest start offset <= offset."""
        i = bisect_right([e.start_offset for e in self._entries], offset) - 1
        return self._entries[i].epoch if i >= 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch answer (epoch, end offset), with Kafka's semantics.

        The end offset of an epoch is the start offset of the next higher epoch, or the LEO for the latest epoch;
        the returned epoch is the greatest known epoch <= requested.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._entries[-1].epoch:
            return requested_epoch, log_end_offset
        epochs = [e.epoch for e in self._entries]
        hi = bisect_right(epochs, requested_epoch)  # first entry with epoch > requested
        if hi == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if hi == 0:
            return requested_epoch, self._entries[0].start_offset
        return self._entries[hi - 1].epoch, self._entries[hi].start_offset

    # -- updates -------------------------------------------------------------------------------------------
    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            return False
        last = self._entries[-1] if self._entries else None
        if last is not None and last.epoch == entry.epoch and last.start_offset <= entry.start_offset:
            return False
        # keep both orders monotonic: drop entries that the new one supersedes
        self._entries = [e for e in self._entries if e.epoch < entry.epoch and e.start_offset < entry.start_offset]
        self._entries.append(entry)
        return True

    def assign(self, epoch: int, start_offset: int, sync: bool = True) -> None:
        """`sync=False`: the caller fsyncs the file and its dir itself (many new partitions' together)."""
        if self._assign(EpochEntry(epoch, start_offset)):
            self.flush(sync)

    def assign_entries(self, entries: Iterable[EpochEntry]) -> None:
        """Assign several entries, then write the file once (Kafka's assign(entries)): a follower restoring the
        leader's lineage from a remote segment's checkpoint."""
        for e in entries:
            self._assign(e)
        self.flush()

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after `end_offset` (log truncated to it)."""
        if self._entries and self._entries[-1].start_offset >= end_offset >= 0:
            self._entries = [e for e in self._entries if e.start_offset < end_offset]
            self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Log start moved to `start_offset`: entries below it collapse into one starting there."""
        keep = [e for e in self._entries if e.start_offset >= start_offset]
        below = [e for e in self._entries if e.start_offset < start_offset]
        if not below:
            return
        if not keep or keep[0].start_offset > start_offset:
            keep.insert(0, EpochEntry(below[-1].epoch, start_offset))
        self._entries = keep
        self.flush()

    def clear_and_flush(self) -> None:
        """Forget every entry (the log was truncated fully) and persist the empty file."""
        self._entries = []
        self.flush()

    def flush(self, sync: bool = True) -> None:
        if self.path is not None:
            write_checkpoint_lines(self.path, [f"{e.epoch} {e.start_offset}" for e in self._entries], sync)

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self._entries})"


__all__ = [
    "LeaderEpochFileCache",
    "EpochEntry",
    "LEADER_EPOCH_CHECKPOINT",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "decode_checkpoint",
]
