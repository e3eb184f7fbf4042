"""ReplicaManager: the partitions this broker hosts, and the produce/fetch paths over them.

Handlers speak in wire terms; the ReplicaManager speaks in partitions and offsets. Today every partition has one
replica (this broker, leader at epoch 0, ISR = {self}), so the HW follows the LEO on every append.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import structlog

from config import BrokerConfig, LogConfig
from protocol.errors import ErrorCode, KafkaApiError
from storage.errors import OffsetOutOfRangeError, StorageError
from storage.log import LogAppendInfo, UnifiedLog
from storage.log_manager import LogManager

from .metadata_store import MetadataStore, TopicInfo
from .metrics import BrokerMetrics
from .purgatory import Purgatory

log = structlog.get_logger("strata.replica_manager")

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class Partition:
    """A partition's leader state; `log` is the local UnifiedLog."""

    def __init__(self, topic: TopicInfo, index: int, log: UnifiedLog, leader_epoch: int = 0) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.leader_epoch = leader_epoch

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic.name, self.index)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self.log.high_watermark     # no transactions yet: LSO == HW

    def append_records_to_leader(self, records: bytes | memoryview) -> LogAppendInfo:
        info = self.log.append_as_leader(records, self.leader_epoch)
        # Single-replica ISR: everything in the log is committed as soon as it is written.
        self.log.update_high_watermark(self.log.log_end_offset)
        return info


@dataclass(slots=True)
class ProduceResult:
    error: ErrorCode = ErrorCode.NONE
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None


@dataclass(slots=True)
class FetchSpec:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    remote: bool = False          # set by the read pass: the offset lives in remote storage


@dataclass(slots=True)
class FetchResult:
    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | memoryview = b""


@dataclass
class ReplicaManager:
    config: BrokerConfig
    log_manager: LogManager
    store: MetadataStore
    metrics: BrokerMetrics
    partitions: dict[tuple[str, int], Partition] = field(default_factory=dict)
    rlm: Any = None               # RemoteLogManager when remote.log.storage.system.enable
    rlmm: Any = None              # its RemoteLogMetadataManager

    def __post_init__(self) -> None:
        self.fetch_purgatory = Purgatory("Fetch", self._report_purgatory)
        self.produce_purgatory = Purgatory("Produce", self._report_purgatory)

    def _report_purgatory(self, name: str, size: int) -> None:
        self.metrics.purgatory_size.labels(name).set(size)

    # ---- partition lifecycle -------------------------------------------------------------------------------
    def log_config_for(self, topic: str) -> LogConfig:
        info = self.store.topic(topic)
        return self.config.log_config(info.configs if info else None)

    def load_partitions(self) -> None:
        for info in self.store.topics().values():
            self.ensure_partitions(info)

    def ensure_partitions(self, info: TopicInfo) -> None:
        cfg = self.config.log_config(info.configs)
        for i in range(info.partitions):
            if (info.name, i) not in self.partitions:
                ulog = self.log_manager.get_or_create_log(info.name, i, info.topic_id, cfg)
                # Becoming leader with ISR = {self}: the HW is the LEO (Kafka's maybeIncrementLeaderHW), not the
                # checkpointed HW, which lags after a kill -9 and would hide acknowledged records until the next
                # append (and hide the RLMM's latest records from its cache: segments copied twice or skipped).
                ulog.update_high_watermark(ulog.log_end_offset)
                self.partitions[(info.name, i)] = Partition(info, i, ulog)
        self._notify_remote(info)

    def _notify_remote(self, info: TopicInfo) -> None:
        """Leadership (here: always this broker) drives the RemoteLogManager's copy/expiration tasks."""
        if self.rlm is None:
            return
        leaders = [(p.log, p.leader_epoch) for i in range(info.partitions)
                   if (p := self.partitions.get((info.name, i))) is not None]
        from remote.rlm import topic_id_partition
        tiered = [topic_id_partition(lg) for lg, _ in leaders if lg.remote_log_enabled]
        if tiered and self.rlmm is not None:
            self.rlmm.on_partition_leadership_changes(tiered, [])
        self.rlm.on_leadership_change(leaders, [])

    def remove_topic(self, info: TopicInfo) -> None:
        for i in range(info.partitions):
            p = self.partitions.pop((info.name, i), None)
            if p is not None and self.rlm is not None and p.log.remote_log_enabled:
                from remote.rlm import topic_id_partition
                task = asyncio.ensure_future(self.rlm.delete_partition(topic_id_partition(p.log)))
                task.add_done_callback(_consume_exception)
            self.log_manager.delete_log(info.name, i)
            # Wake parked fetches so they notice the partition is gone.
            self.fetch_purgatory.check_and_complete((info.name, i))

    def disable_remote_storage(self, info: TopicInfo) -> None:
        """KIP-950 with remote.log.delete.on.disable=true: delete the remote data; the log then starts locally."""
        for i in range(info.partitions):
            p = self.partitions.get((info.name, i))
            if p is None:
                continue
            p.log.advance_log_start_offset(p.log.local_log_start_offset)
            p.log.highest_offset_in_remote_storage = -1
            if self.rlm is not None:
                from remote.rlm import topic_id_partition
                task = asyncio.ensure_future(self.rlm.delete_partition(topic_id_partition(p.log)))
                task.add_done_callback(_consume_exception)

    def update_topic_config(self, info: TopicInfo) -> None:
        cfg = self.config.log_config(info.configs)
        for i in range(info.partitions):
            p = self.partitions.get((info.name, i))
            if p is not None:
                p.log.update_config(cfg)
        self._notify_remote(info)

    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def all_logs(self) -> Iterable[UnifiedLog]:
        return [p.log for p in self.partitions.values()]

    # ---- produce ---------------------------------------------------------------------------------------------
    async def append_records(self, entries: list[tuple[str, int, bytes | memoryview]], internal: bool = False
                             ) -> list[ProduceResult]:
        """Append to leaders. `internal` is the broker's own writers (coordinators, RLMM); clients may not write
        to internal topics (Kafka answers INVALID_TOPIC_EXCEPTION)."""
        results: list[ProduceResult] = []
        to_flush: dict[int, UnifiedLog] = {}
        for topic, index, records in entries:
            p = self.partitions.get((topic, index))
            if p is None:
                results.append(ProduceResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                self.metrics.failed_produce.labels(topic).inc()
                continue
            if p.topic.internal and not internal:
                results.append(ProduceResult(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                             message=f"Cannot append to internal topic {topic}"))
                self.metrics.failed_produce.labels(topic).inc()
                continue
            self.metrics.produce_requests.labels(topic).inc()
            try:
                info = p.append_records_to_leader(records)
            except StorageError as e:
                results.append(ProduceResult(ErrorCode(e.error_code), message=str(e)))
                self.metrics.failed_produce.labels(topic).inc()
                self.metrics.bytes_rejected.labels(topic).inc(len(records))
                continue
            self.metrics.bytes_in.labels(topic).inc(len(records))
            self.metrics.messages_in.labels(topic).inc(info.record_count)
            results.append(ProduceResult(ErrorCode.NONE, info.first_offset, info.log_append_time,
                                         p.log.log_start_offset))
            if p.log.unflushed_messages >= p.log.config.flush_messages:
                to_flush[id(p.log)] = p.log
            self.fetch_purgatory.check_and_complete((topic, index))
        if to_flush:
            # flush.messages: fsync before the response, so an acknowledged record survives a power loss.
            await asyncio.gather(*(self.flush_log(lg) for lg in to_flush.values()))
        return results

    async def flush_log(self, ulog: UnifiedLog) -> None:
        start = time.perf_counter()
        await asyncio.get_running_loop().run_in_executor(None, ulog.flush)
        self.metrics.log_flush.observe(time.perf_counter() - start)

    # ---- fetch -----------------------------------------------------------------------------------------------
    def _read_once(self, specs: list[FetchSpec], max_bytes: int, isolation: int, replica: bool
                   ) -> tuple[list[FetchResult], int, bool]:
        results: list[FetchResult] = []
        total = 0
        errors = False
        min_one = True
        for s in specs:
            p = self.partitions.get((s.topic, s.partition))
            if p is None:
                results.append(FetchResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                errors = True
                continue
            ulog = p.log
            hw = ulog.high_watermark
            res = FetchResult(high_watermark=hw, last_stable_offset=p.last_stable_offset,
                              log_start_offset=ulog.log_start_offset)
            if s.current_leader_epoch >= 0 and s.current_leader_epoch != p.leader_epoch:
                res.error = (ErrorCode.FENCED_LEADER_EPOCH if s.current_leader_epoch < p.leader_epoch
                             else ErrorCode.UNKNOWN_LEADER_EPOCH)
                results.append(res)
                errors = True
                continue
            limit = min(s.max_bytes, max_bytes - total)
            if limit <= 0 and not min_one:
                results.append(res)
                continue
            max_offset = None if replica else (p.last_stable_offset if isolation == READ_COMMITTED else hw)
            try:
                data = ulog.read(s.fetch_offset, max(limit, 0), max_offset, min_one)
            except OffsetOutOfRangeError:
                if ulog.remote_log_enabled and ulog.log_start_offset <= s.fetch_offset < ulog.local_log_start_offset:
                    if replica:
                        # KIP-405: followers rebuild from remote metadata rather than copy tiered data.
                        res.error = ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE
                        errors = True
                    elif self.rlm is not None:
                        s.remote = True      # read by the RemoteLogReader pool after this pass
                    else:
                        res.error = ErrorCode.OFFSET_OUT_OF_RANGE
                        errors = True
                    results.append(res)
                    continue
                res.error = ErrorCode.OFFSET_OUT_OF_RANGE
                errors = True
                results.append(res)
                continue
            except StorageError as e:
                res.error = ErrorCode(e.error_code)
                errors = True
                results.append(res)
                continue
            n = len(data.records)
            if n:
                res.records = data.records
                total += n
                min_one = False
            results.append(res)
        return results, total, errors

    async def fetch(self, specs: list[FetchSpec], *, max_bytes: int, min_bytes: int, max_wait_ms: int,
                    isolation: int = READ_UNCOMMITTED, replica: bool = False) -> list[FetchResult]:
        """Read now; if fewer than min.bytes are ready, park in the Fetch purgatory until appends or max.wait."""
        max_bytes = min(max_bytes, self.config["fetch.max.bytes"]) if max_bytes > 0 else 0
        deadline = time.monotonic() + max_wait_ms / 1000.0
        keys = [(s.topic, s.partition) for s in specs]
        while True:
            for s in specs:
                s.remote = False
            results, total, errors = self._read_once(specs, max_bytes, isolation, replica)
            if any(s.remote for s in specs):
                total += await self._read_remote(specs, results, max_bytes - total, isolation)
                break
            remaining = deadline - time.monotonic()
            if total >= min_bytes or errors or remaining <= 0 or not specs:
                break
            if not await self.fetch_purgatory.wait(keys, remaining):
                results, total, errors = self._read_once(specs, max_bytes, isolation, replica)
                break
        for s, r in zip(specs, results):
            if r.records:
                self.metrics.bytes_out.labels(s.topic).inc(len(r.records))
            self.metrics.fetch_requests.labels(s.topic).inc()
            if r.error:
                self.metrics.failed_fetch.labels(s.topic).inc()
        return results

    async def _read_remote(self, specs: list[FetchSpec], results: list[FetchResult], budget: int,
                           isolation: int) -> int:
        """DelayedRemoteFetch: read every remote partition of the fetch on the RemoteLogReader pool (several per
        fetch, KAFKA-14915), waiting at most remote.fetch.max.wait.ms. Unfinished reads answer empty (the client
        retries; the chunks they pulled stay cached); failures answer KAFKA_STORAGE_ERROR, which clients retry."""
        jobs: dict[int, asyncio.Task] = {}
        first = True
        for i, s in enumerate(specs):
            if not s.remote:
                continue
            p = self.partitions[(s.topic, s.partition)]
            limit = min(s.max_bytes, budget)
            if limit <= 0 and not first:
                continue
            max_offset = p.last_stable_offset if isolation == READ_COMMITTED else p.high_watermark
            jobs[i] = asyncio.ensure_future(self.rlm.read(p.log, s.fetch_offset, max(limit, 0), first, max_offset))
            budget -= max(limit, 0)
            first = False
        if not jobs:
            return 0
        wait_s = self.config["remote.fetch.max.wait.ms"] / 1000.0
        done, pending = await asyncio.wait(jobs.values(), timeout=wait_s)
        total = 0
        for i, task in jobs.items():
            res = results[i]
            if task in pending:
                self.rlm.metrics.delayed_remote_fetch_expires.labels(specs[i].topic).inc()
                task.add_done_callback(_consume_exception)
                continue
            exc = task.exception()
            if exc is None:
                res.records = task.result()
                total += len(res.records)
            elif isinstance(exc, OffsetOutOfRangeError):
                res.error = ErrorCode.OFFSET_OUT_OF_RANGE
            else:
                log.warning("remote fetch failed", topic=specs[i].topic, partition=specs[i].partition,
                            offset=specs[i].fetch_offset, error=str(exc))
                res.error = ErrorCode.KAFKA_STORAGE_ERROR
        return total

    def require_partition(self, topic: str, partition: int) -> Partition:
        p = self.partitions.get((topic, partition))
        if p is None:
            raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return p


def _consume_exception(task: asyncio.Task) -> None:
    """A remote read that outlived its fetch: retrieve its outcome so asyncio does not log it as lost."""
    if not task.cancelled():
        task.exception()
