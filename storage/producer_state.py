"""Per-partition producer state: what an idempotent (and, later, transactional) producer last wrote.

For every producer id the manager keeps the producer epoch, the coordinator epoch of the last transaction marker,
the first offset of the open transaction (-1: none) and the metadata of the last 5 batches (first/last sequence,
last offset, offset delta, max timestamp). That is enough to

* validate a leader append: an older epoch is INVALID_PRODUCER_EPOCH (47); a sequence that does not follow the
  last one is OUT_OF_ORDER_SEQUENCE_NUMBER (45); a new epoch must start at sequence 0; a producer id the partition
  has never seen (or has expired) may start at any sequence (Kafka >= 2.5, KIP-360: no UNKNOWN_PRODUCER_ID);
* deduplicate retries: a batch whose epoch and sequence range equal one of the last 5 batches is not written again,
  the append answers the original offsets with no error;
* track transactions (Kafka's ProducerStateManager): a producer's first transactional batch opens its transaction
  (`ongoing`: first offset -> producer id), its commit or abort marker completes it. A completed transaction stays
  "unreplicated" until the HW passes its marker; the first unstable offset is the smallest first offset of those
  two sets, and the log's LSO is min(first unstable offset, HW).

Snapshots are Kafka's `<offset 20 digits>.snapshot` files (ProducerSnapshot schema v1, big-endian)::

    Version int16 (1) | Crc uint32 (CRC32C of everything after it) | ProducerEntries int32 count, then per entry:
    ProducerId int64 | Epoch int16 | LastSequence int32 | LastOffset int64 | OffsetDelta int32 | Timestamp int64 |
    CoordinatorEpoch int32 | CurrentTxnFirstOffset int64

A snapshot at offset N holds the state of every batch below N; like Kafka's it keeps only the last batch of each
producer. They are written when a segment rolls (named after the new segment's base offset, fsynced by the next
flush) and at clean shutdown (fsynced), deleted with their segment or when below the log start offset, so there is
at most one per segment plus the shutdown one. Recovery loads the newest readable snapshot at or below the log end
offset and replays the batch headers after it.

Only batch header fields are used; records are never decoded, except the single marker record of a control batch.
The event loop is the only mutator; `take_unflushed_snapshots` may be called by a flushing worker thread.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from strata.config import broker_default
from strata.protocol.errors import ErrorCode
from strata.protocol.records import NO_PRODUCER_EPOCH, NO_SEQUENCE

from .checkpoints import atomic_write, fsync_path
from .errors import StorageError
from .file_cache import as_path

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
INT32_MAX = 2**31 - 1
DEFAULT_PRODUCER_ID_EXPIRATION_MS: int = broker_default("producer.id.expiration.ms")

_VERSION_CRC = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_ENTRIES_OFFSET = _VERSION_CRC.size  # 6: the CRC covers the file from here


class OutOfOrderSequenceError(StorageError):
    error_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    error_code = ErrorCode.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(StorageError):
    error_code = ErrorCode.INVALID_TXN_STATE


class TransactionCoordinatorFencedError(StorageError):
    error_code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class CorruptSnapshotError(ValueError):
    pass


def increment_sequence(seq: int, inc: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: sequences wrap from INT32_MAX to 0."""
    return (seq + inc) & INT32_MAX


def decrement_sequence(seq: int, dec: int) -> int:
    return (seq - dec) & INT32_MAX


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_offset(name: str) -> int | None:
    if not name.endswith(SNAPSHOT_SUFFIX):
        return None
    stem = name[: -len(SNAPSHOT_SUFFIX)]
    return int(stem) if stem.isdigit() else None


class BatchMetadata(NamedTuple):
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int = -1  # -1: no open transaction
    batches: deque = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def copy_without_batches(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
        )

    def maybe_update_epoch(self, epoch: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        self.maybe_update_epoch(epoch)
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def update(self, nxt: ProducerStateEntry) -> None:
        """Merge the result of an append (Kafka's ProducerStateEntry.update)."""
        self.maybe_update_epoch(nxt.producer_epoch)
        self.batches.extend(nxt.batches)
        self.coordinator_epoch = nxt.coordinator_epoch
        self.current_txn_first_offset = nxt.current_txn_first_offset
        self.last_timestamp = nxt.last_timestamp

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.last_seq == last_seq and b.first_seq == first_seq:
                return b
        return None


# A producer batch as the append paths see it (header fields only).
#   (producer_id, producer_epoch, base_sequence, last_offset_delta, max_timestamp, base_offset, is_transactional)
ProducerBatch = tuple[int, int, int, int, int, int, bool]


class _AppendInfo:
    """Validates one producer's batches of one append against its state (Kafka's ProducerAppendInfo)."""

    __slots__ = ("pid", "current", "updated", "client", "coordinator", "verified", "started", "completed")

    def __init__(
        self, pid: int, current: ProducerStateEntry, client: bool, coordinator: bool, verified: bool = False
    ) -> None:
        self.pid = pid
        self.current = current
        self.updated = current.copy_without_batches()
        self.client = client
        self.coordinator = coordinator
        self.verified = verified  # a transaction coordinator verified this producer's transaction (KIP-890)
        self.started: list[int] = []  # first offsets of the transactions this append opens
        self.completed: list[CompletedTxn] = []

    def _check_epoch(self, epoch: int, offset: int) -> None:
        if epoch < self.updated.producer_epoch and (self.client or self.coordinator):
            raise InvalidProducerEpochError(
                f"epoch {epoch} of producer {self.pid} at offset {offset} is older than the last seen epoch "
                f"{self.updated.producer_epoch}"
            )

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        upd = self.updated
        if epoch != upd.producer_epoch:
            if first_seq != 0 and upd.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {self.pid} at offset {offset}: new epoch {epoch} starts at sequence {first_seq}, "
                    f"not 0 (current epoch {upd.producer_epoch})"
                )
            return
        if not upd.is_empty:
            last = upd.last_seq
        elif epoch == self.current.producer_epoch:
            last = self.current.last_seq
        else:
            last = NO_SEQUENCE
        # An unknown producer (no epoch yet: new, expired, or its data deleted) may start at any sequence.
        if self.current.producer_epoch != NO_PRODUCER_EPOCH and not (
            first_seq == last + 1 or (first_seq == 0 and last == INT32_MAX)
        ):
            raise OutOfOrderSequenceError(
                f"out of order sequence for producer {self.pid} at offset {offset}: {first_seq} (incoming), "
                f"{last} (current end sequence)"
            )

    def append_data_batch(
        self,
        epoch: int,
        first_seq: int,
        last_seq: int,
        timestamp: int,
        first_offset: int,
        last_offset: int,
        is_transactional: bool,
    ) -> None:
        self._check_epoch(epoch, first_offset)
        upd = self.updated
        if self.client:
            if is_transactional and upd.current_txn_first_offset < 0 and not self.verified:
                # Kafka answers this when the transaction was not verified with its coordinator (KIP-890).
                raise InvalidTxnStateError(
                    f"transactional batch of producer {self.pid} at offset {first_offset} is not part of an ongoing "
                    f"transaction (this broker has no transaction coordinator)"
                )
            self._check_sequence(epoch, first_seq, first_offset)
        upd.add_batch(epoch, last_seq, last_offset, last_offset - first_offset, timestamp)
        if upd.current_txn_first_offset >= 0 and not is_transactional:
            raise InvalidTxnStateError(
                f"non-transactional write from producer {self.pid} at offset {first_offset} while its "
                f"transaction is open"
            )
        if upd.current_txn_first_offset < 0 and is_transactional:
            upd.current_txn_first_offset = first_offset
            self.started.append(first_offset)

    def append_end_marker(
        self, epoch: int, coordinator_epoch: int, offset: int, timestamp: int, is_abort: bool = True
    ) -> None:
        self._check_epoch(epoch, offset)
        upd = self.updated
        if upd.coordinator_epoch > coordinator_epoch and (self.client or self.coordinator):
            raise TransactionCoordinatorFencedError(
                f"coordinator epoch {coordinator_epoch} of the marker at {offset} is older than {upd.coordinator_epoch}"
            )
        upd.maybe_update_epoch(epoch)
        upd.coordinator_epoch = coordinator_epoch
        if upd.current_txn_first_offset >= 0:
            self.completed.append(CompletedTxn(self.pid, upd.current_txn_first_offset, offset, is_abort))
        upd.current_txn_first_offset = -1
        upd.last_timestamp = timestamp


class CompletedTxn(NamedTuple):
    """A transaction a marker ended (Kafka's CompletedTxn): from the producer's first transactional offset to the
    marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class PendingProducerUpdate:
    """Validated producer state of an append, applied once the batches are written. `fast` is the one-batch case
    (pid, epoch, last seq, last offset, offset delta, timestamp, txn first offset); else `infos` per producer."""

    __slots__ = ("infos", "fast")

    def __init__(self, fast: tuple | None = None) -> None:
        self.infos: dict[int, _AppendInfo] = {}
        self.fast = fast


# ---------------------------------------------------------------------------------------------------------------
# snapshot files


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """Kafka's ProducerSnapshot v1 bytes for `entries` (written in producer id order)."""
    items = sorted(entries, key=lambda e: e.producer_id)
    body = bytearray(_COUNT.pack(len(items)))
    for e in items:
        body += _ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            e.last_seq,
            e.last_data_offset,
            e.last_offset_delta,
            e.last_timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
    return _VERSION_CRC.pack(SNAPSHOT_VERSION, crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """Parse and verify a snapshot (CorruptSnapshotError on a bad version, CRC or layout)."""
    if len(data) < _ENTRIES_OFFSET + _COUNT.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is too short")
    version, crc = _VERSION_CRC.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot has unknown version {version}")
    computed = crc32c(memoryview(data)[_ENTRIES_OFFSET:])
    if computed != crc:
        raise CorruptSnapshotError(f"snapshot CRC mismatch: stored {crc}, computed {computed}")
    (count,) = _COUNT.unpack_from(data, _ENTRIES_OFFSET)
    pos = _ENTRIES_OFFSET + _COUNT.size
    if count < 0 or pos + count * _ENTRY.size != len(data):
        raise CorruptSnapshotError(f"snapshot claims {count} entries in {len(data)} bytes")
    out = []
    for _ in range(count):
        pid, epoch, last_seq, last_offset, delta, ts, coord_epoch, txn_first = _ENTRY.unpack_from(data, pos)
        pos += _ENTRY.size
        e = ProducerStateEntry(pid, epoch, coord_epoch, ts, txn_first if txn_first >= 0 else -1)
        if last_offset >= 0:
            e.batches.append(BatchMetadata(last_seq, last_offset, delta, ts))
        out.append(e)
    return out


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    return decode_snapshot(Path(path).read_bytes())


def write_snapshot(path: Path, entries: Iterable[ProducerStateEntry], sync: bool) -> None:
    """Write `<path>.tmp` then rename it over `path` (a crash leaves the old file or none, never a torn one);
    `sync`: durably, directory included."""
    atomic_write(path, encode_snapshot(entries), sync=sync)


CONTROL_ABORT = 0
CONTROL_COMMIT = 1


def read_end_marker(batch: bytes | bytearray | memoryview, pos: int) -> tuple[bool, int] | None:
    """(is abort, coordinator epoch) of a control batch's transaction marker record (Kafka's EndTransactionMarker:
    key version int16 + type int16, 0 ABORT / 1 COMMIT; value version int16 + coordinatorEpoch int32), or None when
    the batch holds no readable marker (it is then skipped, as Kafka does with an empty control batch)."""
    from strata.protocol.records import iter_records  # off the hot path: control batches only

    try:
        for r in iter_records(batch, pos):
            if r.key is None or len(r.key) < 4 or r.value is None or len(r.value) < 6:
                return None
            ctype = struct.unpack_from(">h", r.key, 2)[0]
            if ctype not in (CONTROL_ABORT, CONTROL_COMMIT):
                return None
            return ctype == CONTROL_ABORT, struct.unpack_from(">i", r.value, 2)[0]
    except Exception:  # noqa: BLE001 - an unreadable marker keeps the previous coordinator epoch
        return None
    return None


# ---------------------------------------------------------------------------------------------------------------


class ProducerStateManager:
    """Producer state of one partition, its open and unreplicated transactions, and its snapshot files (Kafka's
    ProducerStateManager)."""

    fast_path = True  # tests switch it off to compare the one-batch shortcut with the general validation

    def __init__(self, dir: Path, names: Iterable[str] | None = None) -> None:
        """`names`: the dir's file names when the caller has listed it already (one listing per log load)."""
        self.dir = as_path(dir)
        self.producers: dict[int, ProducerStateEntry] = {}
        # open transactions, first offset -> producer id, in first offset order (appends come in offset order)
        self.ongoing_txns: dict[int, int] = {}
        # completed transactions whose marker the HW has not passed yet: first offset -> completed transaction
        self.unreplicated_txns: dict[int, CompletedTxn] = {}
        self.map_end_offset = 0  # the state covers every batch below this offset
        self.last_snap_offset = 0
        self._snapshots: dict[int, Path] = {}
        self._unflushed: list[Path] = []
        self._load_snapshot_files(names)

    # -- snapshot files ---------------------------------------------------------------------------------------
    def _load_snapshot_files(self, names: Iterable[str] | None = None) -> None:
        self._snapshots = {}
        if names is None:
            try:
                names = os.listdir(self.dir)
            except FileNotFoundError:
                return
        for name in names:
            off = parse_snapshot_offset(name)
            if off is not None:
                self._snapshots[off] = self.dir / name

    @property
    def snapshot_offsets(self) -> list[int]:
        return sorted(self._snapshots)

    def snapshot_file(self, offset: int) -> Path | None:
        """The snapshot taken at `offset` (for a segment: at the next segment's base offset), if any."""
        return self._snapshots.get(offset)

    @property
    def latest_snapshot_offset(self) -> int | None:
        return max(self._snapshots) if self._snapshots else None

    @property
    def oldest_snapshot_offset(self) -> int | None:
        return min(self._snapshots) if self._snapshots else None

    def remove_snapshot(self, offset: int) -> None:
        path = self._snapshots.pop(offset, None)
        if path is not None:
            path.unlink(missing_ok=True)

    def delete_snapshots_before(self, offset: int) -> None:
        for off in [o for o in self._snapshots if o < offset]:
            self.remove_snapshot(off)

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """Delete snapshots without a segment of the same base offset, except the newest one when it lies past
        the last segment's base (the clean-shutdown snapshot at the log end offset)."""
        bases = set(segment_base_offsets)
        strays = sorted(o for o in self._snapshots if o not in bases)
        if not strays:
            return
        keep = strays[-1] if bases and strays[-1] > max(bases) else None
        for off in strays:
            if off != keep:
                self.remove_snapshot(off)

    def take_snapshot(self, sync: bool = False) -> Path | None:
        """Write a snapshot at `map_end_offset` unless one is already there. Unsynced ones are fsynced by the
        log's next flush (`take_unflushed_snapshots`)."""
        if self.map_end_offset <= self.last_snap_offset:
            return None
        path = self.dir / snapshot_file_name(self.map_end_offset)
        write_snapshot(path, self.producers.values(), sync)
        if not sync:
            self._unflushed.append(path)
        self._snapshots[self.map_end_offset] = path
        self.last_snap_offset = self.map_end_offset
        return path

    def take_unflushed_snapshots(self) -> list[Path]:
        """Snapshot files written without fsync since the last call (the flusher fsyncs them)."""
        out, self._unflushed = self._unflushed, []
        return out

    @staticmethod
    def fsync_snapshots(paths: Iterable[Path]) -> None:
        for p in paths:
            try:
                fsync_path(p)
            except FileNotFoundError:
                pass  # deleted meanwhile (retention, truncation)

    # -- loading and truncation ---------------------------------------------------------------------------------
    def _load_from_snapshot(self, log_start_offset: int) -> None:
        while self._snapshots:
            off = max(self._snapshots)
            try:
                entries = read_snapshot(self._snapshots[off])
            except (CorruptSnapshotError, OSError):
                self.remove_snapshot(off)  # fall back to an older snapshot and a longer replay
                continue
            for e in entries:
                self.producers[e.producer_id] = e
            self._reset_txns()
            self.last_snap_offset = self.map_end_offset = off
            return
        self._reset_txns()
        self.last_snap_offset = self.map_end_offset = log_start_offset

    def _reset_txns(self) -> None:
        """The open transactions are those of the producers' current state (after a load or a restore)."""
        open_txns = sorted((e.current_txn_first_offset, pid) for pid, e in self.producers.items())
        self.ongoing_txns = {first: pid for first, pid in open_txns if first >= 0}
        self.unreplicated_txns = {}

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int) -> None:
        """Drop snapshots outside (log start, log end] and, unless the state is already at the log end, reload the
        newest remaining one. The caller replays the batches from `map_end_offset` to the log end."""
        for off in [o for o in self._snapshots if o > log_end_offset or o <= log_start_offset]:
            self.remove_snapshot(off)
        if log_end_offset != self.map_end_offset:
            self.producers.clear()
            self._load_from_snapshot(log_start_offset)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """The log was truncated fully to restart at `offset`: no producers, no snapshots."""
        self.producers.clear()
        self._reset_txns()
        for off in list(self._snapshots):
            self.remove_snapshot(off)
        self.last_snap_offset = 0
        self.map_end_offset = offset

    def restore_from_snapshot(self, offset: int, entries: Iterable[ProducerStateEntry]) -> Path:
        """A follower rebuilding its aux state from remote storage (Kafka's buildProducerSnapshotFile followed by
        reloadSnapshots and loadProducerState): the state becomes `entries` -- a remote segment's producer snapshot
        -- as of `offset`, written (synced) as the snapshot at `offset`. Call on a log just truncated fully to start
        at `offset`."""
        entries = list(entries)
        path = self.dir / snapshot_file_name(offset)
        write_snapshot(path, entries, True)
        self.producers = {e.producer_id: e for e in entries}
        self._reset_txns()
        self._snapshots[offset] = path
        self.last_snap_offset = self.map_end_offset = offset
        return path

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        for first in [f for f, t in self.unreplicated_txns.items() if t.last_offset < log_start_offset]:
            del self.unreplicated_txns[first]
        if self.map_end_offset < log_start_offset:
            self.map_end_offset = log_start_offset
        latest = self.latest_snapshot_offset
        self.last_snap_offset = latest if latest is not None else log_start_offset

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    # -- appends ------------------------------------------------------------------------------------------------
    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def prepare_append(
        self,
        batches: list[ProducerBatch],
        *,
        client: bool,
        coordinator: bool = False,
        control_epochs: dict[int, tuple[int, int, bool] | None] | None = None,
        verified: Collection[int] = (),
    ) -> tuple[BatchMetadata | None, PendingProducerUpdate | None]:
        """Validate a leader append's producer batches (in log order, offsets as they will be assigned).

        Returns (duplicate, None) when a client batch repeats one of its producer's last 5 batches (nothing may be
        written; answer the duplicate's offsets), else (None, update) to `apply` after the write.
        `control_epochs` maps the base offset of a control batch to (coordinator epoch, timestamp, is abort), or to
        None when its marker record is missing (the batch is then skipped). `verified`: producer ids whose
        transaction a transaction coordinator verified, so a client batch may open it (Kafka's VerificationGuard).
        Raises InvalidProducerEpochError / OutOfOrderSequenceError / InvalidTxnStateError.
        """
        if len(batches) == 1 and not control_epochs and self.fast_path:
            return self._prepare_one(batches[0], client, coordinator, verified)
        pending = PendingProducerUpdate()
        infos = pending.infos
        producers = self.producers
        for pid, epoch, base_seq, delta, ts, base_offset, txn in batches:
            last_seq = (base_seq + delta) & INT32_MAX if base_seq >= 0 else NO_SEQUENCE
            if client:
                cur = producers.get(pid)
                if cur is not None:
                    dup = cur.find_duplicate(epoch, base_seq, last_seq)
                    if dup is not None:
                        return dup, None
            info = infos.get(pid)
            if info is None:
                cur = producers.get(pid)
                info = infos[pid] = _AppendInfo(
                    pid, cur if cur is not None else ProducerStateEntry(pid), client, coordinator, pid in verified
                )
            if control_epochs is not None and base_offset in control_epochs:
                marker = control_epochs[base_offset]
                if marker is not None:  # None: a control batch without its marker record, nothing to apply
                    info.append_end_marker(epoch, marker[0], base_offset, marker[1], marker[2])
            else:
                info.append_data_batch(epoch, base_seq, last_seq, ts, base_offset, base_offset + delta, txn)
        return None, pending

    def _prepare_one(
        self, batch: ProducerBatch, client: bool, coordinator: bool, verified: Collection[int] = ()
    ) -> tuple[BatchMetadata | None, PendingProducerUpdate | None]:
        """`prepare_append` for the common one-data-batch append: the same rules without the per-append copies
        (a unit test checks it against the general path)."""
        pid, epoch, base_seq, delta, ts, base_offset, txn = batch
        last_seq = (base_seq + delta) & INT32_MAX if base_seq >= 0 else NO_SEQUENCE
        cur = self.producers.get(pid)
        if cur is not None:
            cur_epoch = cur.producer_epoch
            if client and epoch == cur_epoch:
                for m in cur.batches:
                    if m.last_seq == last_seq and m.first_seq == base_seq:
                        return m, None
            if epoch < cur_epoch and (client or coordinator):
                raise InvalidProducerEpochError(
                    f"epoch {epoch} of producer {pid} at offset {base_offset} is older than the last seen epoch "
                    f"{cur_epoch}"
                )
            txn_first = cur.current_txn_first_offset
        else:
            cur_epoch, txn_first = NO_PRODUCER_EPOCH, -1
        if client:
            if txn and txn_first < 0 and pid not in verified:
                raise InvalidTxnStateError(
                    f"transactional batch of producer {pid} at offset {base_offset} is not part of an ongoing "
                    f"transaction (this broker has no transaction coordinator)"
                )
            if epoch != cur_epoch:
                if base_seq != 0 and cur_epoch != NO_PRODUCER_EPOCH:
                    raise OutOfOrderSequenceError(
                        f"producer {pid} at offset {base_offset}: new epoch {epoch} starts at sequence {base_seq}, "
                        f"not 0 (current epoch {cur_epoch})"
                    )
            elif cur is not None and cur_epoch != NO_PRODUCER_EPOCH:
                last = cur.last_seq
                if not (base_seq == last + 1 or (base_seq == 0 and last == INT32_MAX)):
                    raise OutOfOrderSequenceError(
                        f"out of order sequence for producer {pid} at offset {base_offset}: {base_seq} (incoming), "
                        f"{last} (current end sequence)"
                    )
        if txn_first >= 0 and not txn:
            raise InvalidTxnStateError(
                f"non-transactional write from producer {pid} at offset {base_offset} while its transaction is open"
            )
        if txn and txn_first < 0:
            txn_first = base_offset
        return None, PendingProducerUpdate((pid, epoch, last_seq, base_offset + delta, delta, ts, txn_first))

    def apply(self, pending: PendingProducerUpdate) -> list[CompletedTxn]:
        """Apply a validated append (after its write). Returns the transactions its markers completed, in marker
        order: the log writes their aborted-transaction index entries, then calls `complete_txn` for each."""
        producers = self.producers
        fast = pending.fast
        if fast is not None:
            pid, epoch, last_seq, last_offset, delta, ts, txn_first = fast
            cur = producers.get(pid)
            if cur is None:
                cur = producers[pid] = ProducerStateEntry(pid)
            if epoch != cur.producer_epoch:
                cur.batches.clear()
                cur.producer_epoch = epoch
            cur.batches.append(BatchMetadata(last_seq, last_offset, delta, ts))
            cur.last_timestamp = ts
            if txn_first >= 0 and cur.current_txn_first_offset < 0:
                self.ongoing_txns[txn_first] = pid
            cur.current_txn_first_offset = txn_first
            return []
        completed: list[CompletedTxn] = []
        for pid, info in pending.infos.items():
            cur = producers.get(pid)
            if cur is None:
                producers[pid] = info.updated
            else:
                cur.update(info.updated)
            for first in info.started:
                self.ongoing_txns[first] = pid
            completed.extend(info.completed)
        if len(completed) > 1:
            completed.sort(key=lambda t: t.last_offset)
        return completed

    def replay(
        self, batches: list[ProducerBatch], control_epochs: dict[int, tuple[int, int, bool] | None] | None = None
    ) -> list[CompletedTxn]:
        """Replicated or recovered batches: update without sequence/epoch validation (Kafka's REPLICATION).
        Returns the completed transactions, as `apply`."""
        _dup, pending = self.prepare_append(batches, client=False, control_epochs=control_epochs)
        if pending is not None:
            return self.apply(pending)
        return []

    # -- transactions -------------------------------------------------------------------------------------------
    def last_stable_offset_of(self, txn: CompletedTxn) -> int:
        """The LSO right after `txn` completes (Kafka's lastStableOffset(completedTxn)): the first offset of the
        earliest other open transaction, else the offset after the marker. Recorded in the abort's index entry."""
        for first, pid in self.ongoing_txns.items():
            if pid != txn.producer_id:
                return first
        return txn.last_offset + 1

    def complete_txn(self, txn: CompletedTxn) -> None:
        """The transaction's marker is written: it is no longer open, only unreplicated until the HW passes it."""
        if self.ongoing_txns.get(txn.first_offset) == txn.producer_id:
            del self.ongoing_txns[txn.first_offset]
        self.unreplicated_txns[txn.first_offset] = txn

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest open transaction, or of a completed one whose marker is not yet below
        `high_watermark`; None when every transaction is decided and replicated."""
        unrep = self.unreplicated_txns
        if unrep:
            for first in [f for f, t in unrep.items() if t.last_offset < high_watermark]:
                del unrep[first]
        best = next(iter(self.ongoing_txns), None)
        if unrep:
            m = min(unrep)
            if best is None or m < best:
                best = m
        return best

    @property
    def has_ongoing_txns(self) -> bool:
        return bool(self.ongoing_txns)

    # -- expiry -------------------------------------------------------------------------------------------------
    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle (by their last batch timestamp) for `producer.id.expiration.ms`; producers with an
        open transaction never expire. Returns how many were removed."""
        expired = [
            pid
            for pid, e in self.producers.items()
            if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def __len__(self) -> int:
        return len(self.producers)

    def __repr__(self) -> str:
        return (
            f"ProducerStateManager({self.dir.name}, producers={len(self.producers)}, "
            f"map_end={self.map_end_offset}, snapshots={self.snapshot_offsets})"
        )


__all__ = [
    "ProducerStateManager",
    "ProducerStateEntry",
    "BatchMetadata",
    "PendingProducerUpdate",
    "CompletedTxn",
    "read_end_marker",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "ProducerBatch",
    "OutOfOrderSequenceError",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "TransactionCoordinatorFencedError",
    "CorruptSnapshotError",
    "encode_snapshot",
    "decode_snapshot",
    "read_snapshot",
    "write_snapshot",
    "snapshot_file_name",
    "parse_snapshot_offset",
    "increment_sequence",
    "decrement_sequence",
    "NUM_BATCHES_TO_RETAIN",
    "SNAPSHOT_SUFFIX",
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
]
