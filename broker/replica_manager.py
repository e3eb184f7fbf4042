"""ReplicaManager: the partitions this broker hosts, and the produce/fetch paths over them.

Handlers speak in wire terms; the ReplicaManager speaks in partitions and offsets. Today every partition has one
replica (this broker, leader at epoch 0, ISR = {self}), so the HW follows the LEO on every append.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Iterable

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
                self.partitions[(info.name, i)] = Partition(info, i, ulog)

    def remove_topic(self, info: TopicInfo) -> None:
        for i in range(info.partitions):
            self.partitions.pop((info.name, i), None)
            self.log_manager.delete_log(info.name, i)
            # Wake parked fetches so they notice the partition is gone.
            self.fetch_purgatory.check_and_complete((info.name, i))

    def update_topic_config(self, info: TopicInfo) -> None:
        cfg = self.config.log_config(info.configs)
        for i in range(info.partitions):
            p = self.partitions.get((info.name, i))
            if p is not None:
                p.log.update_config(cfg)

    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def all_logs(self) -> Iterable[UnifiedLog]:
        return [p.log for p in self.partitions.values()]

    # ---- produce ---------------------------------------------------------------------------------------------
    async def append_records(self, entries: list[tuple[str, int, bytes | memoryview]]) -> list[ProduceResult]:
        results: list[ProduceResult] = []
        to_flush: dict[int, UnifiedLog] = {}
        for topic, index, records in entries:
            p = self.partitions.get((topic, index))
            if p is None:
                results.append(ProduceResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
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
            results, total, errors = self._read_once(specs, max_bytes, isolation, replica)
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

    def require_partition(self, topic: str, partition: int) -> Partition:
        p = self.partitions.get((topic, partition))
        if p is None:
            raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return p
