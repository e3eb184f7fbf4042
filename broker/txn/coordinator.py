"""The transaction coordinator (Kafka's TransactionCoordinator + TransactionStateManager, transaction.version 1):
a state machine on a `CoordinatorRuntime` over `__transaction_state`.

A transactional id lives on partition `abs(hash(id)) % transaction.state.log.num.partitions`; the leader of that
partition is its coordinator, loads its state when it becomes leader and drops it when it resigns. Every state
change is written (acks=-1) before it takes effect. Ending a transaction writes PrepareCommit/PrepareAbort, answers
the client, then has every partition of the transaction append the marker (`MarkerWriter`, retried until each
leader has it) and writes CompleteCommit/CompleteAbort. A transaction past its `transaction.timeout.ms` is aborted
with a bumped producer epoch (fencing the producer), as is an Ongoing one when its id's InitProducerId comes again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from strata.config import BrokerConfig
from strata.protocol.errors import ErrorCode

from ..coordinator.runtime import (
    CoordinatorMetadataStore,
    CoordinatorReplicaManager,
    CoordinatorRuntime,
    CoordinatorTopic,
)
from .channel import TxnChannel
from .markers import MarkerWriter, TxnMarker
from .metadata import NO_PRODUCER_EPOCH, TopicPartition, TransactionMetadata, TxnSnapshot, TxnState
from .records import TRANSACTION_STATE_TOPIC, TxnRecordFormatError, decode_key, decode_value, encode_key, encode_value

if TYPE_CHECKING:
    from ..metrics import TxnMetrics

log = structlog.get_logger("strata.txn")

E = ErrorCode
S = TxnState
MARKER_RETRY_BACKOFF_S = (0.05, 1.0)  # first and largest wait between marker attempts


@dataclass(frozen=True, slots=True)
class TxnConfig:
    topic: CoordinatorTopic
    max_timeout_ms: int = 900000
    id_expiration_ms: int = 604800000
    abort_interval_ms: int = 10000
    remove_expired_interval_ms: int = 3600000

    @classmethod
    def from_broker_config(cls, cfg: BrokerConfig) -> TxnConfig:
        return cls(
            CoordinatorTopic(
                TRANSACTION_STATE_TOPIC,
                int(cfg["transaction.state.log.num.partitions"]),
                int(cfg["transaction.state.log.replication.factor"]),
                int(cfg["transaction.state.log.segment.bytes"]),
                int(cfg["transaction.state.log.load.buffer.size"]),
                min_isr=int(cfg["transaction.state.log.min.isr"]),
            ),
            max_timeout_ms=int(cfg["transaction.max.timeout.ms"]),
            id_expiration_ms=int(cfg["transactional.id.expiration.ms"]),
            abort_interval_ms=int(cfg["transaction.abort.timed.out.transaction.cleanup.interval.ms"]),
            remove_expired_interval_ms=int(cfg["transaction.remove.expired.transaction.cleanup.interval.ms"]),
        )


@dataclass(slots=True)
class TxnLoad:
    txns: dict[str, TransactionMetadata] = field(default_factory=dict)


_COORDINATOR_ERRORS = frozenset(
    {E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS, E.CONCURRENT_TRANSACTIONS}
)


def _map_write_error(err: ErrorCode) -> ErrorCode:
    """Kafka's TransactionStateManager.appendTransactionToLog: what the client is told of a failed write."""
    if err in (E.UNKNOWN_TOPIC_OR_PARTITION, E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        return E.COORDINATOR_NOT_AVAILABLE
    if err in (E.REQUEST_TIMED_OUT,):
        return E.COORDINATOR_NOT_AVAILABLE
    if err in (E.NOT_LEADER_OR_FOLLOWER, E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR):
        return E.NOT_COORDINATOR
    if err == E.COORDINATOR_NOT_AVAILABLE:
        return err
    return E.UNKNOWN_SERVER_ERROR


class TransactionCoordinator:
    """The `CoordinatorShard` of `self.runtime` and the logic of InitProducerId (with a transactional id),
    AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, the produce verification and the admin listings."""

    def __init__(
        self,
        config: TxnConfig,
        replica_manager: CoordinatorReplicaManager,
        store: CoordinatorMetadataStore,
        *,
        new_producer_id: Callable[[], Awaitable[int]],
        write_markers: MarkerWriter,
        leader_epoch: Callable[[int], int],
        channel: TxnChannel | None = None,
        clock: Callable[[], int] | None = None,
        metrics: TxnMetrics | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.txns: dict[str, TransactionMetadata] = {}
        self._now = clock or (lambda: int(time.time() * 1000))
        self._new_producer_id = new_producer_id
        self._write_markers = write_markers
        self._leader_epoch = leader_epoch
        self.channel = channel  # other brokers: their coordinators (verification)
        self.coordinator_epochs: dict[int, int] = {}  # partition -> leader epoch it was loaded at
        self.runtime: CoordinatorRuntime[TxnLoad] = CoordinatorRuntime(
            config.topic, self, replica_manager, store, clock=self._now
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._completing: set[str] = set()  # ids whose markers are being written

    # -- lifecycle --------------------------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.runtime.active

    @property
    def markers_pending(self) -> int:
        """Transactions whose markers are being written (Kafka's marker queue)."""
        return len(self._completing)

    async def startup(self) -> None:
        await self.runtime.startup()
        self._tasks.append(
            asyncio.create_task(
                self._every(self.config.abort_interval_ms, self.abort_timed_out), name="txn-abort-timed-out"
            )
        )
        self._tasks.append(
            asyncio.create_task(
                self._every(self.config.remove_expired_interval_ms, self.expire_transactional_ids), name="txn-expire"
            )
        )

    async def shutdown(self, drain_timeout: float = 5.0) -> None:
        self.runtime.deactivate()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.runtime.shutdown(drain_timeout)

    async def _every(self, interval_ms: int, fn: Callable[[], Awaitable[object]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000.0)
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction coordinator task failed", task=getattr(fn, "__name__", "?"))

    # -- partitions (ReplicaManager leadership) and the runtime's callbacks ------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return self.runtime.partition_for(transactional_id)

    async def ensure_topic(self) -> bool:
        return await self.runtime.ensure_topic()

    def topic_exists(self) -> bool:
        return self.runtime.topic_exists()

    def on_become_leader(self, partition: int) -> None:
        self.coordinator_epochs[partition] = self._leader_epoch(partition)
        self.runtime.on_become_leader(partition)

    def on_resign(self, partition: int) -> None:
        self.runtime.on_resign(partition)

    def begin_load(self, partition: int) -> TxnLoad:
        return TxnLoad()

    def replay(self, state: TxnLoad, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        try:
            tid = decode_key(key)
            if tid is None:
                return
            if value is None:
                state.txns.pop(tid, None)
                return
            state.txns[tid] = TransactionMetadata.from_value(tid, decode_value(value))
        except (TxnRecordFormatError, UnicodeDecodeError, ValueError) as e:
            log.warning("skipping an unreadable transaction-state record", error=str(e))

    def complete_load(self, partition: int, state: TxnLoad) -> None:
        for tid, md in state.txns.items():
            self.txns[tid] = md
            if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                # decided before the last coordinator stopped: its markers may not all be written
                self.runtime.spawn(self._complete(md, md.state == S.PREPARE_COMMIT))
        if state.txns:
            log.info("loaded transactions", partition=partition, transactional_ids=len(state.txns))

    def unload(self, partition: int) -> None:
        for tid in [t for t in self.txns if self.partition_for(t) == partition]:
            del self.txns[tid]

    def check(self, transactional_id: str) -> ErrorCode:
        return self.runtime.check(transactional_id)

    # -- writes -------------------------------------------------------------------------------------------------------
    async def _write(self, md: TransactionMetadata, snap: TxnSnapshot) -> ErrorCode:
        """Write a prepared transition; apply it if the write committed and this broker still coordinates the id."""
        tid = md.transactional_id
        err = await self.runtime.write(self.partition_for(tid), [(encode_key(tid), encode_value(snap.to_value()))])
        if self.txns.get(tid) is not md:
            return E.NOT_COORDINATOR  # unloaded (resigned) meanwhile
        if err:
            md.fail()
            log.warning("transaction state write failed", transactional_id=tid, error=ErrorCode(err).name)
            return _map_write_error(ErrorCode(err))
        md.apply(snap)
        return E.NONE

    # -- InitProducerId -----------------------------------------------------------------------------------------------
    async def init_producer_id(
        self, tid: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for a transactional producer starting (Kafka's handleInitProducerId)."""
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return E.INVALID_TRANSACTION_TIMEOUT, -1, -1
        err = self.check(tid)
        if err:
            return err, -1, -1
        md = self.txns.get(tid)
        if md is None:
            pid = await self._new_producer_id()
            err = self.check(tid)
            if err:
                return err, -1, -1
            md = self.txns.setdefault(
                tid,
                TransactionMetadata(tid, pid, -1, NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, timeout_ms, S.EMPTY),
            )
        if md.pending is not None or tid in self._completing:
            return E.CONCURRENT_TRANSACTIONS, -1, -1
        if expected is not None and not self._valid_expected(md, expected):
            return E.PRODUCER_FENCED, -1, -1
        now = self._now()
        if md.state == S.ONGOING:
            # Fence the current producer: abort its transaction with a bumped epoch; the client retries and gets
            # the next epoch once the abort completed (Kafka's PrepareEpochFence).
            err = await self._abort(md, bump=True)
            return (err or E.CONCURRENT_TRANSACTIONS), -1, -1
        if md.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return E.CONCURRENT_TRANSACTIONS, -1, -1
        # Kafka's prepareIncrementProducerEpoch
        if expected is not None and md.producer_epoch != NO_PRODUCER_EPOCH and expected[1] != md.producer_epoch:
            if expected[1] == md.last_producer_epoch and expected[0] == md.producer_id:
                return E.NONE, md.producer_id, md.producer_epoch  # a retry of a bump that succeeded
            return E.PRODUCER_FENCED, -1, -1
        if md.epoch_exhausted:
            new_pid = await self._new_producer_id()
            if md.pending is not None:
                return E.CONCURRENT_TRANSACTIONS, -1, -1
            changes = {"producer_id": new_pid, "last_producer_id": md.producer_id, "producer_epoch": 0}
            changes["last_producer_epoch"] = NO_PRODUCER_EPOCH
        else:
            changes = {"producer_epoch": md.producer_epoch + 1, "last_producer_epoch": md.producer_epoch}
        snap = md.prepare(S.EMPTY, now, timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1, **changes)
        err = await self._write(md, snap)
        if err:
            return err, -1, -1
        log.info(
            "initialized a transactional producer",
            transactional_id=tid,
            producer_id=md.producer_id,
            producer_epoch=md.producer_epoch,
        )
        return E.NONE, md.producer_id, md.producer_epoch

    @staticmethod
    def _valid_expected(md: TransactionMetadata, expected: tuple[int, int]) -> bool:
        """Kafka's isValidProducerId (KIP-360)."""
        if md.producer_epoch == NO_PRODUCER_EPOCH:
            return True
        pid, epoch = expected
        return pid == md.producer_id or (pid == md.last_producer_id and epoch >= 32766)

    # -- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------------------------------
    def _check_producer(self, tid: str, pid: int, epoch: int) -> tuple[ErrorCode, TransactionMetadata | None]:
        err = self.check(tid)
        if err:
            return err, None
        md = self.txns.get(tid)
        if md is None or md.producer_id != pid:
            return E.INVALID_PRODUCER_ID_MAPPING, None
        if md.producer_epoch != epoch:
            return E.PRODUCER_FENCED, None
        return E.NONE, md

    async def add_partitions(self, tid: str, pid: int, epoch: int, partitions: Iterable[TopicPartition]) -> ErrorCode:
        """Kafka's handleAddPartitionsToTransaction: the partitions join the transaction (starting it if needed)."""
        err, md = self._check_producer(tid, pid, epoch)
        if md is None:
            return err
        if md.pending is not None or tid in self._completing or md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return E.CONCURRENT_TRANSACTIONS
        wanted = set(partitions)
        if md.state == S.ONGOING and wanted <= md.partitions:
            return E.NONE
        if md.state not in (S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return E.INVALID_TXN_STATE
        now = self._now()
        start = md.start_ms if md.state == S.ONGOING else now
        snap = md.prepare(S.ONGOING, now, partitions=frozenset(md.partitions | wanted), start_ms=start)
        return await self._write(md, snap)

    def verify(self, tid: str, pid: int, epoch: int, tp: TopicPartition) -> ErrorCode:
        """AddPartitionsToTxn `verify_only` (KIP-890 part 1): is `tp` in `pid`'s ongoing transaction?"""
        err = self.check(tid)
        if err:
            return err
        md = self.txns.get(tid)
        if md is None or md.producer_id != pid:
            return E.INVALID_PRODUCER_ID_MAPPING
        if md.producer_epoch != epoch:
            return E.INVALID_PRODUCER_EPOCH
        if md.state != S.ONGOING or md.pending not in (None, S.ONGOING) or tp not in md.partitions:
            return E.INVALID_TXN_STATE  # (a pending Ongoing only adds partitions; a pending Prepare* ends it)
        return E.NONE

    async def verify_produce(self, tid: str, pid: int, epoch: int, tp: TopicPartition) -> ErrorCode:
        """May `pid` append a transactional batch to `tp` (led here) now? Asks this coordinator, or the id's
        coordinator on another broker; errors as Kafka's produce path answers a failed verification."""
        err = self.verify(tid, pid, epoch, tp)
        if err == E.NOT_COORDINATOR and self.channel is not None:
            leader = self.channel.coordinator_of(self.partition_for(tid))
            if leader >= 0:
                err = await self.channel.verify(leader, tid, pid, epoch, tp)
        if err in _COORDINATOR_ERRORS:
            return E.NOT_ENOUGH_REPLICAS  # retriable for a producer, as Kafka maps coordinator errors
        return err

    # -- EndTxn -------------------------------------------------------------------------------------------------------
    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool) -> ErrorCode:
        """Kafka's handleEndTransaction (client side): PrepareCommit/PrepareAbort written, then the markers."""
        err, md = self._check_producer(tid, pid, epoch)
        if md is None:
            return err
        if md.pending is not None:
            return E.CONCURRENT_TRANSACTIONS
        st = md.state
        if st == S.ONGOING:
            return await self._end(md, commit)
        if st == (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
            return E.CONCURRENT_TRANSACTIONS
        if st == (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT):
            return E.NONE  # a retry of an EndTxn that completed
        return E.INVALID_TXN_STATE

    async def _end(self, md: TransactionMetadata, commit: bool, epoch: int | None = None) -> ErrorCode:
        changes = {} if epoch is None else {"producer_epoch": epoch, "last_producer_epoch": md.producer_epoch}
        snap = md.prepare(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, self._now(), **changes)
        err = await self._write(md, snap)
        if err:
            return err
        self._completing.add(md.transactional_id)
        self.runtime.spawn(self._complete(md, commit))
        return E.NONE

    async def _abort(self, md: TransactionMetadata, bump: bool) -> ErrorCode:
        """The coordinator aborts an Ongoing transaction; `bump` fences its producer (one epoch more)."""
        epoch = md.producer_epoch + 1 if bump and md.producer_epoch < 32767 else md.producer_epoch
        return await self._end(md, False, epoch)

    async def _complete(self, md: TransactionMetadata, commit: bool) -> None:
        """Markers to every partition until each leader has one, then CompleteCommit/CompleteAbort."""
        tid = md.transactional_id
        self._completing.add(tid)
        try:
            remaining = sorted(md.partitions)
            cepoch = self.coordinator_epochs.get(self.partition_for(tid), 0)
            wait = MARKER_RETRY_BACKOFF_S[0]
            started = time.monotonic()
            while remaining:
                if self.txns.get(tid) is not md or not self.active:
                    return  # the next coordinator completes it from the log
                marker = TxnMarker(md.producer_id, md.producer_epoch, commit, cepoch)
                results = await self._write_markers(marker, remaining)
                retry = []
                for tp in remaining:
                    e = results.get(tp, E.UNKNOWN_SERVER_ERROR)
                    if e in (E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_ID):
                        continue  # written, or the partition is gone (Kafka drops it too)
                    retry.append(tp)
                if retry:
                    if self.metrics is not None:
                        self.metrics.marker_retries.inc(len(retry))
                    log.info(
                        "retrying transaction markers",
                        transactional_id=tid,
                        partitions=len(retry),
                        error=ErrorCode(results.get(retry[0], E.UNKNOWN_SERVER_ERROR)).name,
                    )
                    await asyncio.sleep(wait)
                    wait = min(wait * 2, MARKER_RETRY_BACKOFF_S[1])
                remaining = retry
            marker_s = time.monotonic() - started
            while self.txns.get(tid) is md and self.active:
                snap = md.prepare(S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT, self._now())
                if not await self._write(md, snap):
                    if self.metrics is not None:
                        self.metrics.transaction_completed(commit, marker_s)
                    log.info(
                        "transaction completed",
                        transactional_id=tid,
                        committed=commit,
                        partitions=len(md.partitions),
                        marker_ms=round(marker_s * 1000),
                    )
                    return
                await asyncio.sleep(wait)
                wait = min(wait * 2, MARKER_RETRY_BACKOFF_S[1])
        finally:
            self._completing.discard(tid)

    # -- timers -------------------------------------------------------------------------------------------------------
    async def abort_timed_out(self) -> int:
        """Abort, with a bumped epoch, every Ongoing transaction older than its timeout (Kafka's
        abortTimedOutTransactions). Returns how many were started."""
        if not self.active:
            return 0
        now = self._now()
        due = [
            md
            for md in self.txns.values()
            if md.state == S.ONGOING
            and md.pending is None
            and md.transactional_id not in self._completing
            and md.start_ms + md.timeout_ms < now
            and self.partition_for(md.transactional_id) not in self.runtime.loading
        ]
        for md in due:
            log.info(
                "aborting a transaction past its timeout",
                transactional_id=md.transactional_id,
                producer_id=md.producer_id,
                timeout_ms=md.timeout_ms,
            )
            if self.metrics is not None:
                self.metrics.timed_out.inc()
            err = await self._abort(md, bump=True)
            if err:
                log.warning(
                    "cannot abort a timed-out transaction", transactional_id=md.transactional_id, error=err.name
                )
        return len(due)

    async def expire_transactional_ids(self) -> int:
        """Remove ids idle for transactional.id.expiration.ms with no transaction open (tombstones)."""
        if not self.active:
            return 0
        now = self._now()
        expired = [
            md
            for md in self.txns.values()
            if md.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
            and md.pending is None
            and md.transactional_id not in self._completing
            and md.last_update_ms + self.config.id_expiration_ms <= now
        ]
        n = 0
        for md in expired:
            tid = md.transactional_id
            md.pending = S.DEAD
            err = await self.runtime.write(self.partition_for(tid), [(encode_key(tid), None)])
            if self.txns.get(tid) is not md:
                continue
            md.pending = None
            if not err:
                del self.txns[tid]
                n += 1
        if n:
            log.info("expired transactional ids", count=n)
        return n

    # -- admin --------------------------------------------------------------------------------------------------------
    def describe(self, tid: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        err = self.check(tid)
        if err:
            return err, None
        md = self.txns.get(tid)
        if md is None:
            return E.TRANSACTIONAL_ID_NOT_FOUND, None
        return E.NONE, md

    def list(self) -> tuple[ErrorCode, list[TransactionMetadata]]:
        err = E.NONE if self.active else E.COORDINATOR_NOT_AVAILABLE
        if self.runtime.loading:
            err = E.COORDINATOR_LOAD_IN_PROGRESS
        return err, sorted(self.txns.values(), key=lambda m: m.transactional_id)


__all__ = ["MarkerWriter", "TransactionCoordinator", "TxnConfig"]
