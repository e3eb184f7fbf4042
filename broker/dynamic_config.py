"""Dynamic broker configs at runtime (Kafka's DynamicBrokerConfig): keeps the broker's `BrokerConfig` equal to the
dynamic configs in the metadata store and reconfigures the components that copied a value at construction.

The store holds them as config resources of type BROKER: name "" is the cluster-wide default, name "<id>" one
broker's own. Every broker follows the store (a single broker its local file, a cluster the etcd watch), so a change
made through any broker, or before a restart, reaches this one.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import structlog

from strata.config import BrokerConfig, ConfigError
from strata.config.dynamic import validate_dynamic_broker_configs
from strata.config.topic_config import TOPIC_TO_BROKER_SYNONYM
from strata.storage.cleaner_manager import CleanerConfig

from .metadata_store import MetadataStore

if TYPE_CHECKING:
    from strata.storage.cleaner_manager import LogCleaner

    from .replica_manager import ReplicaManager

log = structlog.get_logger("strata.dynamic_config")

RESOURCE_BROKER = 4  # ConfigResource.Type.BROKER
_LOG_CONFIG_KEYS = frozenset(TOPIC_TO_BROKER_SYNONYM.values())


def _valid_layer(raw: dict[str, str], per_broker: bool, what: str) -> dict[str, str]:
    """The stored layer without entries that no longer validate (logged, never fatal: a broker must start)."""
    out: dict[str, str] = {}
    for k, v in raw.items():
        try:
            validate_dynamic_broker_configs({k: v}, per_broker)
        except ConfigError as e:
            log.warning("ignoring stored dynamic broker config", resource=what, config=k, error=str(e))
            continue
        out[k] = v
    return out


class DynamicBrokerConfig:
    def __init__(self, config: BrokerConfig, store: MetadataStore, broker_id: int) -> None:
        self.config = config
        self.store = store
        self.broker_id = broker_id
        self.replica_manager: ReplicaManager | None = None
        self.log_cleaner: LogCleaner | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def attach(
        self,
        replica_manager: ReplicaManager,
        log_cleaner: LogCleaner | None,
    ) -> None:
        """The components to reconfigure when a value changes (built after the first `load`)."""
        self.replica_manager, self.log_cleaner = replica_manager, log_cleaner

    def load(self) -> set[str]:
        """Make the store's dynamic configs current; returns the keys whose effective value changed."""
        default = _valid_layer(self.store.config_overrides(RESOURCE_BROKER, ""), False, "<default>")
        mine = _valid_layer(self.store.config_overrides(RESOURCE_BROKER, str(self.broker_id)), True, "broker")
        try:
            changed = self.config.apply_dynamic(default, mine)
        except ConfigError as e:  # e.g. a static value that only a dynamic layer made parse: keep what we have
            log.warning("cannot apply dynamic broker configs", error=str(e))
            return set()
        if changed:
            log.info("dynamic broker configs applied", changed=sorted(changed))
            self._reconfigure(changed)
        return changed

    def on_metadata_change(self, kind: str, key: Any) -> None:
        """MetadataStore listener: a change of the default's or this broker's configs."""
        if kind == "config" and key[0] == RESOURCE_BROKER and key[1] in ("", str(self.broker_id)):
            self.load()

    def _reconfigure(self, changed: set[str]) -> None:
        rm = self.replica_manager
        if rm is None:
            return
        if changed & _LOG_CONFIG_KEYS:
            # DynamicLogConfig: every topic's defaults moved; logs whose effective config changed are updated
            for info in list(self.store.topics().values()):
                rm.on_topic_change(info)
        rlm = rm.tiered.rlm if rm.tiered is not None else None
        if rlm is not None:  # DynamicRemoteLogConfig
            v = self.config.values
            rlm.copy_quota.limit = v["remote.log.manager.copy.max.bytes.per.second"]
            rlm.fetch_quota.limit = v["remote.log.manager.fetch.max.bytes.per.second"]
            rlm.config.list_offsets_timeout_ms = v["remote.list.offsets.request.timeout.ms"]
            rlm.config.index_cache_bytes = v["remote.log.index.file.cache.total.size.bytes"]
            rlm.index_cache.max_bytes = v["remote.log.index.file.cache.total.size.bytes"]  # evicts on next insert
        if self.log_cleaner is not None and any(k.startswith("log.cleaner.") for k in changed):
            self._spawn(self._restart_cleaner())

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _restart_cleaner(self) -> None:
        """LogCleaner.reconfigure: stop the cleaner threads (aborting a cleaning) and start them again with the
        new settings, as Kafka's LogCleaner does on a change of log.cleaner.*."""
        cleaner = self.log_cleaner
        if cleaner is None:
            return
        await cleaner.reconfigure(CleanerConfig.from_broker_config(self.config))
        log.info("log cleaner reconfigured", threads=len(cleaner.cleaners))

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


__all__ = ["DynamicBrokerConfig", "RESOURCE_BROKER"]
