"""The aborted-transaction index of one segment: `<base offset>.txnindex`, Kafka's TransactionIndex format.

A flat file of fixed-size big-endian entries (Kafka's AbortedTxn, 34 bytes each)::

    Version int16 (0) | ProducerId int64 | FirstOffset int64 | LastOffset int64 | LastStableOffset int64

One entry is appended to the segment holding an abort marker when that marker completes a transaction: the
producer's first offset of the transaction, the marker's offset, and the LSO right after the abort (what lets a
READ_COMMITTED reader stop searching older segments). Entries are in increasing last offset order. The file is
created on the first entry, so most segments have none; a torn tail (a partial entry) is cut on open, as the
entries after the recovery point are rebuilt by replaying the log.

READ_COMMITTED fetches ask for the entries that overlap the range they return (`collect`): clients drop the
records of those producers between the first and the last offset.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from .checkpoints import fsync_path
from .errors import KafkaStorageError
from .file_cache import OPEN_FILES, OpenFileCache, as_path

TXN_INDEX_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            TXN_INDEX_VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


def decode_entries(data: bytes | memoryview) -> list[AbortedTxn]:
    """The readable entries of a transaction index's bytes: up to a torn tail (a crash mid-entry) or the first
    unreadable entry (an unknown version, last offsets going back), so a damaged file never stops a read."""
    out: list[AbortedTxn] = []
    for pos in range(0, len(data) - len(data) % ENTRY_SIZE, ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version != TXN_INDEX_VERSION or first > last or (out and last < out[-1].last_offset):
            break
        out.append(AbortedTxn(pid, first, last, lso))
    return out


def encode_entries(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(e.encode() for e in entries)


class TxnIndexSearchResult(NamedTuple):
    aborted_transactions: list[AbortedTxn]
    is_complete: bool  # an entry's LSO reached the upper bound: no later segment can hold an overlapping one


def search(entries: Iterable[AbortedTxn], fetch_offset: int, upper_bound: int) -> TxnIndexSearchResult:
    """Kafka's collectAbortedTxns: entries overlapping [fetch_offset, upper_bound)."""
    out = []
    for e in entries:
        if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
            out.append(e)
        if e.last_stable_offset >= upper_bound:
            return TxnIndexSearchResult(out, True)
    return TxnIndexSearchResult(out, False)


class TransactionIndex:
    """A segment's `.txnindex`. Entries are kept in memory too (a handful per segment at most in practice, and
    one per aborted transaction in the worst case) so lookups never touch the disk."""

    def __init__(
        self, path: Path, base_offset: int, *, files: OpenFileCache | None = None, exists: bool | None = None
    ) -> None:
        """`exists` (known from the log dir's scan) saves a stat; the descriptor comes from the open-file cache
        (storage/file_cache.py) on writes only."""
        self.path = as_path(path)
        self.base_offset = base_offset
        self.entries: list[AbortedTxn] = []
        self.file = (files if files is not None else OPEN_FILES).file(self.path, os.O_RDWR | os.O_APPEND)
        self._dirty = False
        self._created = False  # the file was created by an append (lazily, as Kafka's): its dir entry needs an fsync
        if exists or (exists is None and self.path.exists()):
            self._load()

    def _load(self) -> None:
        """Read the entries; what follows the readable ones (see `decode_entries`) is cut from the file."""
        data = self.path.read_bytes()
        self.entries = decode_entries(data)
        if len(self.entries) * ENTRY_SIZE != len(data):
            os.truncate(self.path, len(self.entries) * ENTRY_SIZE)

    @property
    def is_empty(self) -> bool:
        return not self.entries

    @property
    def last_offset(self) -> int | None:
        return self.entries[-1].last_offset if self.entries else None

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; last offsets must increase (Kafka refuses anything else)."""
        last = self.last_offset
        if last is not None and txn.last_offset < last:
            raise KafkaStorageError(
                f"{self.path.name}: aborted transaction ending at {txn.last_offset} appended after one ending at {last}"
            )
        new_file = not self.entries and not self.path.exists()
        fd = self.file.acquire(os.O_CREAT)
        try:
            os.write(fd, txn.encode())
        finally:
            self.file.release()
        self.entries.append(txn)
        self._dirty = True
        self._created = self._created or new_file

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after `offset` (log truncation and replay)."""
        keep = [e for e in self.entries if e.last_offset < offset]
        if len(keep) == len(self.entries):
            return
        self.entries = keep
        if self.path.exists():
            os.truncate(self.path, len(keep) * ENTRY_SIZE)
            self._dirty = True

    def reset(self) -> None:
        self.truncate_to(-1)

    def collect(self, fetch_offset: int, upper_bound: int) -> TxnIndexSearchResult:
        return search(self.entries, fetch_offset, upper_bound)

    def flush(self) -> None:
        if self._dirty and not self.file.closed:
            self._dirty = False
            self.file.fsync()
            if self._created:
                self._created = False
                fsync_path(self.path.parent)

    def close(self) -> None:
        self.file.close()

    def delete(self, tomb_suffix: str) -> None:
        """Rename with `tomb_suffix` then unlink (as the segment's other files)."""
        self.close()
        tomb = self.path.with_name(self.path.name + tomb_suffix)
        try:
            os.rename(self.path, tomb)
            os.unlink(tomb)
        except FileNotFoundError:
            pass


__all__ = [
    "AbortedTxn",
    "TransactionIndex",
    "TxnIndexSearchResult",
    "decode_entries",
    "encode_entries",
    "search",
    "ENTRY_SIZE",
    "TXN_INDEX_VERSION",
]
