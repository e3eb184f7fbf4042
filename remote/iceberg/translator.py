"""The per-partition translator: committed records of a partition -> Parquet files -> one append commit per round,
with the partition's next offset in the snapshot summary (exactly once: offsets.py, commit.py).

It runs on the partition's leader as an asyncio task. Reads happen on the event loop through a `PartitionSource`
(local segments, or remote storage once local retention has passed them: the broker implements it); decoding,
conversion, Parquet writing and catalog commits run on the translators' own bounded thread pool, within a shared
memory budget, so produce is never blocked. A round starts every `iceberg.target.lag.ms / 2` (at once while a
backlog remains) and reads up to `iceberg.translator.max.file.bytes` below the LSO. Failures of the catalog or the
storage back off exponentially (bounded) and the round is redone; the offsets the table holds say where. A lost
leadership stops the task, and no commit starts after it (the leader epoch is checked before each commit; a commit
racing a new leader is refused by the table's offsets).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import pyarrow as pa
import structlog
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from strata.config.iceberg import PartitionField
from strata.protocol.records import BufferChain
from strata.storage.txn_index import AbortedTxn

from .catalog import TARGET_FILE_SIZE, CatalogSettings, ensure_table, open_catalog
from .commit import OffsetConflictError, commit_files, table_next_offset, write_data_files
from .convert import Converter, Rejected
from .metrics import IcebergMetrics
from .records import RecordChunk, decode_committed

log = structlog.get_logger("strata.iceberg")
T = TypeVar("T")

READ_PIECE_BYTES = 1024 * 1024  # one local read (one segment, one pread) or one remote read


class LeadershipLostError(Exception):
    """This broker no longer leads the partition at the epoch the translator started with."""


class PartitionSource(Protocol):
    """What a translator needs of its partition (the broker's Partition, UnifiedLog and RemoteLogManager)."""

    topic: str
    partition: int
    topic_id: str

    def still_leader(self) -> bool:
        """Leader at the epoch the translator was started for."""
        ...

    def log_start_offset(self) -> int: ...

    def last_stable_offset(self) -> int: ...

    async def read(
        self, offset: int, max_bytes: int, upper: int
    ) -> tuple[bytes | memoryview | BufferChain, list[AbortedTxn]]:
        """Whole batches from the one holding `offset` (local segments, else remote storage), with the aborted
        transactions overlapping them."""
        ...

    def translated(self, next_offset: int) -> None:
        """Everything below `next_offset` is in the table (local retention may delete it)."""
        ...


class RejectSink(Protocol):
    """Where records a converter rejects go with `iceberg.invalid.record.action=dlq_table` (blocking; runs before
    the commit that moves the offsets past them)."""

    def __call__(self, rejected: Rejected) -> None: ...


class MemoryBudget:
    """Record bytes all translators hold at once (`iceberg.translator.memory.bytes`). A round waits for its first
    piece; later pieces are taken only if free (else the round commits what it has), so partitions share the
    budget and none waits on another that holds part of it."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.free = capacity
        self._cond = asyncio.Condition()

    async def acquire(self, n: int) -> int:
        n = min(n, self.capacity)
        async with self._cond:
            await self._cond.wait_for(lambda: self.free >= n)
            self.free -= n
        return n

    def try_acquire(self, n: int) -> bool:
        if self.free < n:
            return False
        self.free -= n
        return True

    def take(self, n: int) -> None:
        """Bytes already read past a reservation (a batch larger than the piece asked for)."""
        self.free -= n

    async def release(self, n: int) -> None:
        async with self._cond:
            self.free += n
            self._cond.notify_all()


class TranslatorRuntime:
    """What the translators of one broker share: the catalog, the thread pool, the memory budget, the metrics."""

    def __init__(
        self, settings: CatalogSettings, executor: Executor, budget: MemoryBudget, metrics: IcebergMetrics
    ) -> None:
        self.settings = settings
        self.executor = executor
        self.budget = budget
        self.metrics = metrics
        self._catalog: Catalog | None = None
        self._lock = threading.Lock()

    def catalog(self) -> Catalog:
        """The catalog, opened on first use by one thread (blocking: call on the executor)."""
        with self._lock:
            if self._catalog is None:
                self._catalog = open_catalog(self.settings)
            return self._catalog

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)


@dataclass(frozen=True)
class TranslatorSettings:
    """A topic's translation settings (its `iceberg.*` configs and the broker's bounds)."""

    target_lag_ms: int
    max_bytes: int
    partition_spec: tuple[PartitionField, ...]
    invalid_record_action: str
    backoff_ms: int
    backoff_max_ms: int
    # the configs the converter is built from (mode, value schema): a change restarts the translator with a new one
    converter_configs: tuple[tuple[str, str], ...] = ()


@dataclass
class TranslatorStatus:
    """For the status CLI and the lag metrics."""

    next_offset: int | None = None
    last_commit_ms: int | None = None
    caught_up_at: float | None = None
    error: str | None = None


class PartitionTranslator:
    def __init__(
        self,
        source: PartitionSource,
        settings: TranslatorSettings,
        runtime: TranslatorRuntime,
        converter: Converter,
        reject_sink: RejectSink | None = None,
    ) -> None:
        self.source = source
        self.settings = settings
        self.runtime = runtime
        self.converter = converter
        self.reject_sink = reject_sink
        self.identifier = (runtime.settings.namespace, source.topic)
        self.status = TranslatorStatus()
        self._expected: int | None = None  # what the table holds for this partition (None: nothing yet)
        self._opened = False
        self._task: asyncio.Task[None] | None = None
        self._labels = (source.topic, str(source.partition))

    # ---- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> asyncio.Task[None]:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"iceberg-translator-{self.source.topic}-{self.source.partition}"
        )
        return self._task

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def stop(self) -> None:
        """At once: the task is cancelled wherever it waits (a commit already running in a thread finishes, and
        the table's offsets keep it exact)."""
        if self._task is not None:
            self._task.cancel()
        self.runtime.metrics.forget(self.source.topic, self.source.partition)

    async def wait_stopped(self) -> None:
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    # ---- the loop -----------------------------------------------------------------------------------------------
    async def _run(self) -> None:
        failures = 0
        interval = max(self.settings.target_lag_ms / 2000.0, 0.05)
        while True:
            if not self.source.still_leader():
                log.info(
                    "iceberg translator stops: leadership lost",
                    topic=self.source.topic,
                    partition=self.source.partition,
                )
                return
            try:
                if not self._opened:
                    await self._open()
                more = await self._round()
                failures = 0
                self.status.error = None
            except LeadershipLostError:
                log.info(
                    "iceberg translator stops: leadership lost",
                    topic=self.source.topic,
                    partition=self.source.partition,
                )
                return
            except OffsetConflictError as e:
                # Another leader translated this range: it (or a later one) carries on. Stop, never re-commit.
                log.warning(
                    "iceberg translator stops", topic=self.source.topic, partition=self.source.partition, reason=str(e)
                )
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - catalog/storage down: back off, then redo the round
                failures += 1
                self._opened = False
                self.status.error = f"{type(e).__name__}: {e}"
                self.runtime.metrics.commit_failures.labels(self.source.topic).inc()
                delay = min(self.settings.backoff_ms * 2 ** min(failures - 1, 20), self.settings.backoff_max_ms)
                delay_s = delay / 1000.0 * random.uniform(0.8, 1.0)
                log.warning(
                    "iceberg translation failed; retrying",
                    topic=self.source.topic,
                    partition=self.source.partition,
                    error=self.status.error,
                    retry_in_s=round(delay_s, 2),
                )
                self._report_lag()
                await asyncio.sleep(delay_s)
                continue
            self._report_lag()
            if not more:
                await asyncio.sleep(interval)

    async def _open(self) -> None:
        """Load (or create) the table and resume from its offsets."""
        schema = self.converter.arrow_schema
        props = {TARGET_FILE_SIZE: str(self.settings.max_bytes), "strata.topic-id": self.source.topic_id}
        spec = list(self.settings.partition_spec)
        column = getattr(self.converter, "column", None)  # value_json: hour(timestamp) means kafka.timestamp
        if column is not None:
            spec = [dataclasses.replace(f, column=column(f.column)) for f in spec]
        bind = getattr(self.converter, "bind", None)  # value_json: evolve the table to the configured schema

        def open_table() -> int | None:
            table = ensure_table(self.runtime.catalog(), self.identifier, schema, spec, props)
            if bind is not None:
                bind(table)
            return table_next_offset(table, self.source.partition, self.source.topic_id)

        expected = await self.runtime.run(open_table)
        self._expected = expected
        self.status.next_offset = self.source.log_start_offset() if expected is None else expected
        self.source.translated(self.status.next_offset)
        self._opened = True
        log.info(
            "iceberg translator started",
            topic=self.source.topic,
            partition=self.source.partition,
            table=".".join(self.identifier),
            next_offset=self.status.next_offset,
        )

    def _report_lag(self) -> None:
        m = self.runtime.metrics
        nxt = self.status.next_offset
        if nxt is None:
            return
        lso = self.source.last_stable_offset()
        behind = max(0, lso - nxt)
        m.lag_records.labels(*self._labels).set(behind)
        m.next_offset.labels(*self._labels).set(nxt)
        now = time.monotonic()
        if behind == 0:
            self.status.caught_up_at = now
        m.lag_seconds.labels(*self._labels).set(
            0.0 if behind == 0 or self.status.caught_up_at is None else now - self.status.caught_up_at
        )

    async def _round(self) -> bool:
        """Translate what lies below the LSO, up to max_bytes, in one commit. True when more is waiting."""
        src, rt = self.source, self.runtime
        nxt = self.status.next_offset
        assert nxt is not None
        start = src.log_start_offset()
        if nxt < start:
            # deleted before it was translated (retention past the hold cap, DeleteRecords): gone for the table too
            rt.metrics.skipped_records.labels(src.topic).inc(start - nxt)
            log.warning(
                "iceberg: offsets deleted before translation",
                topic=src.topic,
                partition=src.partition,
                first=nxt,
                next=start,
            )
            nxt = self.status.next_offset = start
        lso = src.last_stable_offset()
        if nxt >= lso:
            if self.status.caught_up_at is None:
                self.status.caught_up_at = time.monotonic()
            return False
        held = [await rt.budget.acquire(min(READ_PIECE_BYTES, self.settings.max_bytes))]
        try:
            chunks, end = await self._read(nxt, lso, held)
            if end == nxt:
                return False
            rows, rejected = await self._convert(chunks)
            table, files = await rt.run(self._write, rows)
            if rejected:
                await self._reject(rejected)
            if not src.still_leader():
                raise LeadershipLostError
            result = await rt.run(
                commit_files,
                rt.catalog(),
                self.identifier,
                files,
                src.partition,
                self._expected,
                end,
                src.topic_id,
                table,
            )
        finally:
            await rt.budget.release(held[0])
        self._expected = end
        self.status.next_offset = end
        self.status.last_commit_ms = int(time.time() * 1000)
        src.translated(end)
        m = rt.metrics
        m.commits.labels(src.topic).inc()
        if result.attempts > 1:
            m.commit_retries.labels(src.topic).inc(result.attempts - 1)
        m.files.labels(src.topic).inc(len(files))
        m.bytes.labels(src.topic).inc(sum(f.file_size_in_bytes for f in files))
        m.records.labels(src.topic).inc(rows.num_rows)
        return end < src.last_stable_offset()

    async def _read(self, nxt: int, lso: int, held: list[int]) -> tuple[list[RecordChunk], int]:
        """Read and decode from `nxt` towards the LSO, up to max_bytes; `held[0]` is the budget this round holds
        (grown piece by piece while the budget has room)."""
        src, budget = self.source, self.runtime.budget
        chunks: list[RecordChunk] = []
        got = 0
        off = nxt
        while off < lso and got < self.settings.max_bytes:
            want = min(READ_PIECE_BYTES, self.settings.max_bytes - got)
            if got + want > held[0]:
                if not budget.try_acquire(want):
                    break  # the budget is in use: commit what this round has
                held[0] += want
            data, aborted = await src.read(off, want, lso)
            if not len(data):
                break
            if got + len(data) > held[0]:
                budget.take(got + len(data) - held[0])
                held[0] = got + len(data)
            chunk = await self.runtime.run(decode_committed, src.topic, src.partition, data, off, lso, aborted)
            if chunk.next_offset <= off:
                break
            chunks.append(chunk)
            got += len(data)
            off = chunk.next_offset
        return chunks, off

    async def _convert(self, chunks: list[RecordChunk]) -> tuple[pa.Table, Rejected]:
        def convert() -> tuple[pa.Table, Rejected]:
            tables, rejected = [], []
            for c in chunks:
                t, bad = self.converter(c)
                tables.append(t)
                rejected.extend(bad)
            return pa.concat_tables(tables), rejected

        return await self.runtime.run(convert)

    def _write(self, rows: pa.Table) -> tuple[Table, list[DataFile]]:
        table = self.runtime.catalog().load_table(self.identifier)
        return table, write_data_files(table, rows)

    async def _reject(self, rejected: Rejected) -> None:
        """Rejected records go to the DLQ table (`iceberg.invalid.record.action=dlq_table`) before the commit that
        moves past them, or are dropped; counted either way under the action taken."""
        sink = self.reject_sink
        if self.settings.invalid_record_action == "dlq_table" and sink is None:
            sink = self.reject_sink = await self.runtime.run(self._dlq_sink)
        action = "dlq_table" if self.settings.invalid_record_action == "dlq_table" and sink is not None else "drop"
        if action == "dlq_table" and sink is not None:
            await self.runtime.run(sink, rejected)
        self.runtime.metrics.invalid_records.labels(self.source.topic, action).inc(len(rejected))

    def _dlq_sink(self) -> RejectSink | None:
        """The DLQ writer of `remote/iceberg/dlq.py` (`dlq_sink(catalog, table identifier) -> RejectSink`), when
        that module is installed; else None (rejected records are dropped, with a warning)."""
        try:
            dlq = importlib.import_module(f"{__package__}.dlq")
        except ImportError:
            log.warning("no DLQ writer: rejected records are dropped", topic=self.source.topic)
            return None
        sink: RejectSink = dlq.dlq_sink(self.runtime.catalog(), self.identifier)
        return sink


__all__ = [
    "LeadershipLostError",
    "MemoryBudget",
    "PartitionSource",
    "PartitionTranslator",
    "RejectSink",
    "TranslatorRuntime",
    "TranslatorSettings",
    "TranslatorStatus",
]
