"""Iceberg topics on the broker: one translator (remote/iceberg/translator.py) per partition this broker leads of
a topic with `iceberg.enable=true`, started and stopped with leadership and the topic's configs; the local
retention hold; the metrics. docs/iceberg.md describes the feature."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import structlog

from strata.config import BrokerConfig, ConfigError, parse_bool
from strata.config.iceberg import KEY_VALUE, parse_partition_spec
from strata.protocol.records import BufferChain
from strata.protocol.uuids import kafka_uuid_str
from strata.remote.iceberg.catalog import catalog_settings
from strata.remote.iceberg.convert import Converter, KeyValueConverter
from strata.remote.iceberg.dlq import dlq_table_name
from strata.remote.iceberg.maintenance import MaintenanceScheduler
from strata.remote.iceberg.metrics import IcebergMetrics
from strata.remote.iceberg.translator import (
    MemoryBudget,
    PartitionTranslator,
    TranslatorRuntime,
    TranslatorSettings,
)
from strata.storage.txn_index import AbortedTxn

from .partition import Partition
from .replica_manager import pace

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from strata.remote.rlm import RemoteLogManager

    from .replica_manager import ReplicaManager

log = structlog.get_logger("strata.iceberg")

RECONCILE_INTERVAL_S = 1.0


def _enabled(raw: str | None) -> bool:
    try:
        return raw is not None and parse_bool(raw)
    except ConfigError:
        return False


# mode -> factory(topic configs) -> Converter. A mode not listed is looked up as the module
# strata.remote.iceberg.<mode> with a `converter(configs)` function (value_json's is remote/iceberg/value_json.py).
CONVERTERS: dict[str, Callable[[dict[str, Any]], Converter]] = {KEY_VALUE: lambda configs: KeyValueConverter()}


def converter_factory(mode: str) -> Callable[[dict[str, Any]], Converter] | None:
    factory = CONVERTERS.get(mode)
    if factory is not None:
        return factory
    try:
        module = importlib.import_module(f"strata.remote.iceberg.{mode}")
    except ImportError:
        return None
    found: Callable[[dict[str, Any]], Converter] | None = getattr(module, "converter", None)
    return found


class PartitionLogSource:
    """A translator's view of one partition it leads at `epoch` (remote/iceberg/translator.py PartitionSource)."""

    def __init__(self, p: Partition, epoch: int, rlm: Callable[[], RemoteLogManager | None]) -> None:
        self.p = p
        self.epoch = epoch
        self.topic = p.topic.name
        self.partition = p.index
        self.topic_id = kafka_uuid_str(p.topic.topic_id)
        self._rlm = rlm

    def still_leader(self) -> bool:
        return self.p.is_leader and self.p.leader_epoch == self.epoch

    def log_start_offset(self) -> int:
        return self.p.log.log_start_offset

    def last_stable_offset(self) -> int:
        return self.p.log.last_stable_offset

    async def read(
        self, offset: int, max_bytes: int, upper: int
    ) -> tuple[bytes | memoryview | BufferChain, list[AbortedTxn]]:
        ulog = self.p.log
        if offset < ulog.local_log_start_offset:
            rlm = self._rlm()
            if rlm is None:
                raise RuntimeError(
                    f"offset {offset} of {self.topic}-{self.partition} is in remote storage, not started"
                )
            data = await rlm.read(ulog, offset, max_bytes, True, upper)
            return data, await rlm.aborted_transactions_for(ulog, offset, data)
        info = ulog.read(offset, max_bytes, upper)
        return info.records, ulog.aborted_transactions_for(info)

    def translated(self, next_offset: int) -> None:
        self.p.log.retention_hold_offset = next_offset


class IcebergManager:
    """Keeps a translator running for every partition led here of an Iceberg topic."""

    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        registry: CollectorRegistry,
        rlm: Callable[[], RemoteLogManager | None],
    ) -> None:
        self.config = config
        self.replicas = replicas
        self._rlm = rlm
        self.metrics = IcebergMetrics(registry)
        threads = config["iceberg.translator.threads"]
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="iceberg-translator")
        self.runtime = TranslatorRuntime(
            catalog_settings(config.values, config.log_dirs[0]),
            self.executor,
            MemoryBudget(config["iceberg.translator.memory.bytes"]),
            self.metrics,
        )
        self.translators: dict[tuple[str, int], tuple[PartitionTranslator, int, TranslatorSettings]] = {}
        self._task: asyncio.Task[None] | None = None
        self._refused: dict[
            tuple[str, int], str
        ] = {}  # partitions whose translator cannot start, and why (logged once)
        replicas.leadership_listeners.append(self._on_leadership)
        self.maintenance = MaintenanceScheduler(config["iceberg.maintenance.interval.ms"], self._maintained_tables)

    def start(self) -> None:
        log.info("iceberg topics enabled", catalog=self.runtime.settings.describe())
        self._task = asyncio.get_running_loop().create_task(self._reconcile_loop(), name="iceberg-reconcile")
        self.maintenance.start()

    async def close(self) -> None:
        await self.maintenance.stop()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for t, _, _ in list(self.translators.values()):
            t.stop()
        await asyncio.gather(*(t.wait_stopped() for t, _, _ in self.translators.values()))
        self.translators.clear()
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def _maintained_tables(self) -> list[Any]:
        """The tables this broker maintains (remote/iceberg/maintenance.py): those of the Iceberg topics whose
        partition 0 it leads, one maintainer per table, and their DLQ tables."""
        topics = sorted(
            {
                p.topic.name
                for p in list(self.replicas.partitions.values())
                if p.index == 0 and p.is_leader and not p.topic.internal and p.log.config.values.get("iceberg.enable")
            }
        )
        ns = self.runtime.settings.namespace

        def load() -> list[Any]:
            from pyiceberg.exceptions import NoSuchTableError

            catalog, out = self.runtime.catalog(), []
            for name in (n for t in topics for n in (t, dlq_table_name(t))):
                try:
                    out.append(catalog.load_table((ns, name)))
                except NoSuchTableError:
                    pass
            return out

        return await self.runtime.run(load) if topics else []

    # ---- which partitions translate ----------------------------------------------------------------------------
    def _on_leadership(self, p: Partition, leader: bool) -> None:
        if self._task is not None:
            self.reconcile(p)  # at once: a deposed leader's translator stops before its next commit

    async def _reconcile_loop(self) -> None:
        """Leadership changes arrive through the listener; configs (iceberg.enable, lag, spec) and epoch bumps are
        picked up here, once a second, looking only at Iceberg topics and the partitions translated now."""
        while True:
            try:
                await self._reconcile_all()
            except Exception:  # logged; the next pass tries again
                log.exception("iceberg reconcile failed")
            await asyncio.sleep(RECONCILE_INTERVAL_S)

    async def _reconcile_all(self) -> None:
        parts = self.replicas.partitions
        n = 0
        for info in list(self.replicas.store.topics().values()):
            if info.internal or not _enabled(info.configs.get("iceberg.enable")):
                continue
            for i in range(info.partitions):
                p = parts.get((info.name, i))
                if p is not None:
                    self.reconcile(p)
                await pace(n)
                n += 1
        for key in list(self.translators):  # also those of topics no longer enabled, or gone
            p = parts.get(key)
            if p is None:
                self._stop(key)
            else:
                self.reconcile(p)

    def _settings(self, values: dict[str, Any]) -> TranslatorSettings:
        cfg = self.config
        return TranslatorSettings(
            target_lag_ms=int(values["iceberg.target.lag.ms"]),
            max_bytes=min(cfg["iceberg.translator.max.file.bytes"], cfg["iceberg.translator.memory.bytes"]),
            partition_spec=tuple(parse_partition_spec(str(values["iceberg.partition.spec"]))),
            invalid_record_action=str(values["iceberg.invalid.record.action"]),
            backoff_ms=cfg["iceberg.translator.backoff.ms"],
            backoff_max_ms=cfg["iceberg.translator.backoff.max.ms"],
            converter_configs=tuple(
                (k, str(values.get(k) or ""))
                for k in ("iceberg.mode", "iceberg.value.schema", "iceberg.value.schema.file")
            ),
        )

    def reconcile(self, p: Partition) -> None:
        key = p.key
        if not p.log.config.values.get("iceberg.enable") or p.topic.internal:
            if key in self.translators:
                self._stop(key)
            p.log.retention_hold_offset = None
            return
        values = dict(p.log.config.values)
        current = self.translators.get(key)
        if not p.is_leader:
            # followers do not know the table's offsets: their retention does not wait (docs/iceberg.md, limits)
            p.log.retention_hold_offset = None
            if current is not None:
                self._stop(key)
            return
        p.log.retention_hold_max_bytes = self.config["iceberg.max.local.retention.hold.bytes"]
        if p.log.retention_hold_offset is None:
            p.log.retention_hold_offset = p.log.log_start_offset  # all of it, until the table says more
        self.metrics.hold_bytes.labels(p.topic.name, str(p.index)).set(p.log.untranslated_bytes())
        settings = self._settings(values)
        if current is not None:
            t, epoch, old = current
            if t.running and epoch == p.leader_epoch and old == settings:
                return
            self._stop(key)
        mode = str(values.get("iceberg.mode") or KEY_VALUE)
        factory = converter_factory(mode)
        try:
            if factory is None:
                raise ValueError(f"iceberg.mode {mode} is not available on this broker")
            converter = factory(values)
        except Exception as e:  # noqa: BLE001 - a topic's bad settings must not stop the other translators
            if self._refused.get(key) != str(e):
                self._refused[key] = str(e)
                log.warning("iceberg translator not started", topic=p.topic.name, partition=p.index, reason=str(e))
            return
        self._refused.pop(key, None)
        source = PartitionLogSource(p, p.leader_epoch, self._rlm)
        t = PartitionTranslator(source, settings, self.runtime, converter)
        self.translators[key] = (t, p.leader_epoch, settings)
        t.start()

    def _stop(self, key: tuple[str, int]) -> None:
        entry = self.translators.pop(key, None)
        if entry is not None:
            entry[0].stop()


__all__ = ["CONVERTERS", "IcebergManager", "PartitionLogSource", "converter_factory"]
