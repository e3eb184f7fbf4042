"""KafkaServer: wires config, storage, replica manager, APIs and sockets; owns startup and clean shutdown.

The entry point, and the only module that knows it: every subsystem is built here, in dependency order,
and given what it needs through its constructor; the request handlers get a BrokerServices
(broker/services.py)."""

from __future__ import annotations

import asyncio
import errno
import signal
import sys
import time
import uuid
from typing import TYPE_CHECKING, Any

import structlog

from strata.config import BrokerConfig, ConfigError
from strata.protocol.constants import REMOTE_LOG_METADATA_TOPIC
from strata.protocol.errors import ErrorCode
from strata.protocol.uuids import kafka_uuid_str
from strata.storage.cleaner_manager import CleanerConfig, LogCleaner
from strata.storage.file_cache import OPEN_FILES
from strata.storage.log_manager import LogManager

from . import diagnostics, loggers
from .apis import KafkaApis
from .cluster.broker_client import inter_broker_security
from .cluster.epoch_flusher import EpochCheckpointFlusher
from .cluster.model import BrokerInfo
from .cluster.new_replicas import NewReplicaMaker
from .cluster_restore import ClusterRestore, start_cluster_restore
from .dynamic_config import DynamicBrokerConfig
from .endpoints import BrokerEndpoints
from .fetch_session import FetchSessionCache
from .gc_pauses import GcPauses, collector_paused, freeze_new_objects, freeze_startup_objects
from .group import GroupCoordinator
from .group.records import OFFSETS_TOPIC
from .metadata_store import LocalMetadataStore, MetadataStore
from .metrics import BrokerMetrics
from .network import ListenerBindError, SocketServer, os_error_text
from .partition import Partition
from .producer_ids import ProducerIdManager
from .replica_manager import ReplicaManager
from .security.authorizer import AclSync, build_authorizer
from .security.listener_security import build_listener_security
from .services import BrokerServices
from .topic_manager import TopicManager
from .txn import TRANSACTION_STATE_TOPIC, TransactionCoordinator, TxnConfig
from .txn.channel import TxnChannel
from .txn.markers import TxnMarker, append_markers

if TYPE_CHECKING:
    from strata.remote.metadata import TopicIdPartition

    from .cluster.controller import Controller
    from .cluster.etcd_store import EtcdMetadataStore
    from .cluster.forwarding import ControllerChannel
    from .cluster.liveness import PeerWatch
    from .iceberg import IcebergManager
    from .tiered import TieredStorage

log = structlog.get_logger("strata.server")


def configure_logging(fmt: str = "console", level: str = "INFO") -> None:
    """structlog to stderr: console renderer by default, one JSON object per line with log.format=json."""
    loggers.LEVELS.reset(level)  # per-logger levels: the BROKER_LOGGER config resource (broker/loggers.py)
    renderer = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            loggers.filter_by_level,
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(loggers.MIN_LEVEL),
        logger_factory=loggers.NamedPrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


class StartupError(Exception):
    """A startup failure the operator fixes in the configuration: reported as one line naming the setting (and
    the address or path), exit code 2, no traceback."""


def check_log_dirs(config: BrokerConfig) -> None:
    """Every log dir exists (created if missing) and takes a file: found here, not as a traceback halfway through
    loading the logs."""
    setting = "log.dirs" if config["log.dirs"] else "log.dir"
    for d in config.log_dirs:
        try:
            if d.exists() and not d.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, "not a directory")
            d.mkdir(parents=True, exist_ok=True)
            probe = d / ".strata-write-check"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise StartupError(f"{setting}: cannot use {d}: {os_error_text(e)}") from None


def check_remote_storage(config: BrokerConfig) -> None:
    """The configured RemoteStorageManager class loads (with tiered storage on)."""
    if not config["remote.log.storage.system.enable"]:
        return
    from strata.remote.rsm import load_rsm_class

    name = config["remote.log.storage.manager.class.name"]
    try:
        load_rsm_class(name)
    except (ImportError, ValueError) as e:
        raise StartupError(f"remote.log.storage.manager.class.name: cannot load {name!r}: {e}") from None


def warn_unknown_configs(config: BrokerConfig) -> None:
    """Kafka's AbstractConfig.logUnused wording (the value is not logged: it may be a secret)."""
    for key in config.unknown_keys():
        log.warning(f"The configuration '{key}' was supplied but isn't a known config.")


class KafkaServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id: int = config.broker_id
        self.metrics = BrokerMetrics()
        self.gc_pauses = GcPauses()
        self.log_dirs = config.log_dirs
        for d in self.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
        me = BrokerInfo(
            self.broker_id,
            {a.name: (a.host, a.port) for a in config.advertised_listeners},
            config["broker.rack"] or None,
            uuid.uuid4().hex,
        )
        self.me = me
        self.cluster_mode = bool(config["metadata.store.connect"])
        self._etcd_store: EtcdMetadataStore | None = None
        if self.cluster_mode:
            from .cluster.etcd_store import EtcdMetadataStore

            # The cluster id: configured, else the one this log dir already belongs to, else etcd's.
            self._etcd_store = EtcdMetadataStore.from_config(
                config, cluster_id=config["cluster.id"] or self._meta_properties().get("cluster.id")
            )
            self.store: MetadataStore = self._etcd_store
        else:
            self.store = LocalMetadataStore(self.log_dirs[0], config["cluster.id"] or None, me)
            self._write_meta_properties()
        self.dynamic_config = DynamicBrokerConfig(config, self.store, self.broker_id)
        self.store.add_listener(self.dynamic_config.on_metadata_change)  # from the start: no change is missed
        if not self.cluster_mode:
            self.dynamic_config.load()  # before any component reads its settings (etcd's: once the store started)
        # Cluster mode, built at start once the broker is registered: they subscribe to the store's changes
        # when built, after the replica manager's own subscription.
        self.controller: Controller | None = None
        self.peer_watch: PeerWatch | None = None
        self.restore: ClusterRestore | None = None
        self.log_manager = LogManager(
            self.log_dirs,
            self._log_config_for,
            recovery_threads=config["num.recovery.threads.per.data.dir"],
            open_files=config["log.open.files.cache.size"],
        )
        cleaner_config = CleanerConfig.from_broker_config(config)
        self.log_cleaner: LogCleaner | None = None
        if cleaner_config.enable:
            self.log_cleaner = LogCleaner(
                cleaner_config,
                self.log_dirs,
                self.log_manager.all_logs,
                is_live=lambda lg: self.log_manager.get_log(lg.topic, lg.partition) is lg,
            )
        self.endpoints = BrokerEndpoints(config, self.store, lambda: self.socket_server.bound)
        tiered_storage_factory = None
        if config["remote.log.storage.system.enable"]:
            from .tiered import build_tiered_storage

            def tiered_storage_factory(rm: ReplicaManager) -> TieredStorage:
                return build_tiered_storage(rm, self.store, self.endpoints, self.metrics)

        self.replica_manager = ReplicaManager(
            config,
            self.log_manager,
            self.store,
            self.metrics,
            log_cleaner=self.log_cleaner,
            tiered_storage_factory=tiered_storage_factory,
        )
        self.tiered: TieredStorage | None = self.replica_manager.tiered  # started by start_tiered_storage
        # cluster mode: admin requests go to the controller
        self.controller_channel: ControllerChannel | None = None
        if self._etcd_store is not None:
            from .cluster.forwarding import ControllerChannel

            self.controller_channel = ControllerChannel(
                self._etcd_store,
                self.endpoints,
                self.metrics,
                broker_id=self.broker_id,
                socket_timeout_s=config["replica.socket.timeout.ms"] / 1000.0,
                is_controller=self._is_controller,
            )
            self.topic_manager = TopicManager(
                config,
                self.store,
                self.replica_manager,
                is_controller=self.controller_channel.is_controller,
                auto_create=self.controller_channel.create_topic,
            )
        else:
            self.topic_manager = TopicManager(config, self.store, self.replica_manager)
        self.group_coordinator = GroupCoordinator.from_broker_config(config, self.replica_manager, self.store)
        producer_ids = ProducerIdManager(self.store)
        self.txn_coordinator = self._build_txn_coordinator(producer_ids)
        self.replica_manager.leadership_listeners.append(self._on_leadership_change)
        self.new_replicas = NewReplicaMaker(self.replica_manager)
        if self.cluster_mode:
            self.replica_manager.epoch_flusher = EpochCheckpointFlusher()
        self.iceberg: IcebergManager | None = self._build_iceberg()
        self.dynamic_config.attach(self.replica_manager, self.log_cleaner)
        self.services = BrokerServices(
            config=config,
            broker_id=self.broker_id,
            store=self.store,
            endpoints=self.endpoints,
            metrics=self.metrics,
            log_manager=self.log_manager,
            replica_manager=self.replica_manager,
            topic_manager=self.topic_manager,
            group_coordinator=self.group_coordinator,
            txn_coordinator=self.txn_coordinator,
            producer_ids=producer_ids,
            remote_log_manager=self.tiered.rlm if self.tiered is not None else None,
            controller_channel=self.controller_channel,
            fetch_sessions=FetchSessionCache(
                config["max.incremental.fetch.session.cache.slots"],
                config["min.incremental.fetch.session.eviction.ms"],
                self.metrics,
            ),
        )
        # authorizer.class.name: ACLs from the metadata store (a local broker's file now, etcd's once started)
        self.authorizer = build_authorizer(config.values)
        self.acl_sync = AclSync(self.authorizer, self.store) if self.authorizer is not None else None
        if self.authorizer is not None:
            self.metrics.authorizer_acls.set_function(self.authorizer.acl_count)
        if self.acl_sync is not None and not self.cluster_mode:
            self.acl_sync.load()
        self.apis = KafkaApis(self.services, self.authorizer)
        scram_lookup = self.store.scram_credential  # SCRAM credentials: the metadata store (local file, etcd)
        inter_broker_security(config)  # a bad inter-broker TLS/SASL setting fails the startup, not each fetch
        self.socket_server = SocketServer(
            config.listeners,
            self.apis.handle,
            max_request_bytes=config["socket.request.max.bytes"],
            idle_ms=config["connections.max.idle.ms"],
            metrics=self.metrics,
            quotas=config.connection_quotas,
            inter_broker_listener=config.inter_broker_listener_name or config.listeners[0].name,
            security=build_listener_security(config, scram_lookup),
            sasl_max_receive=config["sasl.server.max.receive.size"],
            queued_max_request_bytes=config["queued.max.request.bytes"],
            failed_authentication_delay_ms=config["connection.failed.authentication.delay.ms"],
            zero_copy_send_buffer=config["fetch.zero.copy.send.buffer.bytes"],
        )
        # partitions of tiered topics deleted while this broker was down
        self._deleted_while_down: list[TopicIdPartition] = []
        self._tasks: list[asyncio.Task] = []
        self.metrics_address: tuple[str, int] | None = None

    def _build_iceberg(self) -> IcebergManager | None:
        """Iceberg topics (docs/iceberg.md): built when pyiceberg is installed (the `iceberg` extra); its
        translators start for the partitions led here of topics with iceberg.enable=true."""
        try:
            from .iceberg import IcebergManager
        except ImportError as e:
            log.info("iceberg topics unavailable (pip install 'strata-broker[iceberg]')", error=str(e))
            return None
        return IcebergManager(
            self.config, self.replica_manager, self.metrics.registry, lambda: self.replica_manager.rlm
        )

    def _log_config_for(self, topic: str):
        return self.replica_manager.log_config_for(topic)

    def _meta_properties(self) -> dict[str, str]:
        p = self.log_dirs[0] / "meta.properties"
        if not p.exists():
            return {}
        return dict(
            line.split("=", 1) for line in p.read_text().splitlines() if "=" in line and not line.startswith("#")
        )

    def _write_meta_properties(self) -> None:
        """meta.properties as Kafka writes it, so a log dir is never mounted under another cluster by mistake."""
        for d in self.log_dirs:
            p = d / "meta.properties"
            if p.exists():
                props = dict(
                    line.split("=", 1)
                    for line in p.read_text().splitlines()
                    if "=" in line and not line.startswith("#")
                )
                if props.get("cluster.id") and props["cluster.id"] != self.store.cluster_id:
                    raise StartupError(
                        f"log.dirs: {d} belongs to cluster {props['cluster.id']}, not {self.store.cluster_id}"
                    )
                if props.get("node.id") and int(props["node.id"]) != self.broker_id:
                    raise StartupError(f"log.dirs: {d} belongs to node {props['node.id']}, not {self.broker_id}")
                continue
            p.write_text(
                f"#\n#{time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())}\n"
                f"cluster.id={self.store.cluster_id}\nnode.id={self.broker_id}\nversion=1\n"
            )

    def _offline(self) -> int:
        """Partitions whose leader is none (-1) or a broker that is not registered: nobody can serve them."""
        live = set(self.store.brokers())
        offline = 0
        for name, info in list(self.store.topics().items()):
            for p in range(info.partitions):
                state = self.store.partition_state(name, p)
                offline += state is None or state.leader not in live
        return offline

    def _is_controller(self) -> bool:
        """Whether this broker is the cluster's active controller now."""
        return self.controller is not None and self.controller.active

    async def bind(self) -> None:
        """Bind the metrics listener and every Kafka listener (not accepting yet): the first thing start() does,
        so a taken port ends the startup before the broker registers with etcd or leads any partition."""
        url = self.config["metrics.listener"]
        try:
            self.metrics_address = self.metrics.start_http(url)
        except OSError as e:
            raise StartupError(f"metrics.listener: cannot bind {url}: {os_error_text(e)}") from None
        try:
            await self.socket_server.bind()
        except ListenerBindError as e:
            self.metrics.stop_http()
            raise StartupError(str(e)) from None

    async def unbind(self) -> None:
        """Undo bind() when the startup fails before serving."""
        await self.socket_server.stop()
        self.metrics.stop_http()

    def _bound_identity(self) -> BrokerInfo:
        """This broker's registration with the advertised endpoints as bound (ephemeral ports resolved)."""
        bound = {a.name: self.endpoints.advertised_endpoint(a.name) for a in self.config.advertised_listeners}
        return BrokerInfo(self.broker_id, bound, self.me.rack, self.me.incarnation)

    async def start(self) -> None:
        start = time.monotonic()
        await self.bind()
        if self.cluster_mode:
            try:
                await self.store.start()  # cluster id and the metadata image
            except Exception as e:  # noqa: BLE001 - whatever the etcd client raises: one line, not a traceback
                await self.unbind()
                raise StartupError(
                    f"metadata.store.connect: cannot reach etcd at {self.config['metadata.store.connect']}: {e}"
                ) from None
            self.me = self._bound_identity()  # registered below with the ports actually bound
            self.dynamic_config.load()
            self.apis.quotas.load()  # client quotas of the first image (which notifies no listener)
            if self.acl_sync is not None:  # the image is complete: later changes come through the listener
                self.acl_sync.load()
            self._write_meta_properties()
            if (offsets := self.store.topic(OFFSETS_TOPIC)) is not None:
                self.group_coordinator.num_partitions = offsets.partitions
            if (txn_state := self.store.topic(TRANSACTION_STATE_TOPIC)) is not None:
                self.txn_coordinator.runtime.num_partitions = txn_state.partitions
        # Loading 20,000 logs, and their partitions, makes millions of objects: without this each full collection
        # would rescan them and everything imported so far (clean restarts of 5,000 logs took 20 s instead of 8;
        # the partitions of 20,000 logs another 3-5 s of collections). The one full collection runs now, over
        # what start-up imported and built, not over the loaded logs at the end (1.5 s with 20,000).
        freeze_startup_objects()
        with collector_paused():
            await asyncio.get_running_loop().run_in_executor(None, self.log_manager.startup)
            if self._etcd_store is not None:  # (cluster mode)
                self._delete_stray_logs(self._etcd_store)
            self.store.add_listener(self.on_metadata_change)  # no await before the load: no change is missed
            self.replica_manager.load_partitions()
        self.replica_manager.start()  # replica fetchers for the partitions this broker follows
        if self._etcd_store is not None:
            await self.store.register(self.me)
            from .cluster.controller import Controller

            controller = self.controller = Controller(self._etcd_store, self.config)
            controller.start()
            if self.config["broker.liveness.connection.check.enable"]:
                from .cluster.liveness import PeerWatch

                peer_watch = self.peer_watch = PeerWatch(
                    self._etcd_store,
                    self.broker_id,
                    self.config.inter_broker_listener_name,
                    self._is_controller,
                    lambda b: self.metrics.peers_gone.inc(),
                )
                controller.role_listeners.append(peer_watch.wake)
                self.metrics.peers_watched.set_function(lambda: len(peer_watch.connected))
        if self.tiered is not None:
            # RSM + topic-based RLMM + RemoteLogManager; then every tiered partition gets its copy/expiration
            # tasks
            await self.replica_manager.start_tiered_storage()
            log.info("tiered storage enabled", rsm=type(self.tiered.rlm.rsm).__name__)
            if self._deleted_while_down:
                # DELETE_PARTITION_MARKED again (a no-op if recorded): the broker that deleted the topic may have
                # died before it could write the marks, and with every replica down nobody else would
                self.tiered.rlm.start_marking_deleted(self._deleted_while_down)
        await self.group_coordinator.startup()  # loads __consumer_offsets in the background
        # cluster.restore.enable: the bucket's plan is read before this broker writes any manifest (issue 24)
        self.restore = await start_cluster_restore(
            self.config,
            self.tiered,
            self.store,
            self.topic_manager,
            self.replica_manager,
            self.group_coordinator,
            broker_id=self.broker_id,
            registry=self.metrics.registry,
        )
        if self.tiered is not None:  # the bucket's topic, cluster and group offsets manifests (issue 24)
            self.tiered.start_manifests(
                self.store,
                self.replica_manager,
                self.group_coordinator,
                self.config["remote.cluster.manifest.interval.ms"],
            )
        await self.txn_coordinator.startup()  # loads __transaction_state in the background
        self.metrics.register_txn_coordinator(self.txn_coordinator)
        self.metrics.register_group_coordinator(self.group_coordinator)
        self.metrics.register_log_collector(self.replica_manager.all_logs)
        self.metrics.register_open_file_cache(OPEN_FILES)
        # one broker alone (local metadata) is its own controller and leads every partition
        self.metrics.register_controller(self._is_controller if self.cluster_mode else lambda: True, self._offline)
        self.gc_pauses.install(self.metrics.registry)
        await self.socket_server.start()  # bound at the beginning: now accepting
        if self.iceberg is not None:
            self.iceberg.start()
        if self.peer_watch is not None:  # (cluster mode)
            self.peer_watch.start()
        if self.log_cleaner is not None:  # compaction; its swaps run on this loop
            self.metrics.register_log_cleaner(self.log_cleaner)
            await self.log_cleaner.start()
        self._tasks.append(
            asyncio.create_task(self._periodic(self.config["log.retention.check.interval.ms"], self._retention))
        )
        self._tasks.append(asyncio.create_task(self._periodic(1000, self._time_based_flush)))
        self._tasks.append(
            asyncio.create_task(
                self._periodic(self.config["log.flush.offset.checkpoint.interval.ms"], self._checkpoint)
            )
        )
        self._tasks.append(
            asyncio.create_task(
                self._periodic(self.config["producer.id.expiration.check.interval.ms"], self._expire_producer_ids)
            )
        )
        self._tasks.append(
            asyncio.create_task(
                self._periodic(  # Kafka's isr-expiration task
                    self.config["replica.lag.time.max.ms"] // 2, self._isr_expiration
                )
            )
        )
        freeze_new_objects()  # what start-up built since (the logs, partitions and tasks) leaves the collector's view
        log.info(
            "started",
            broker_id=self.broker_id,
            cluster_id=self.store.cluster_id,
            topics=len(self.store.topics()),
            partitions=len(self.replica_manager.partitions),
            metrics=f"http://{self.metrics_address[0]}:{self.metrics_address[1]}/metrics"
            if self.metrics_address
            else None,
            startup_ms=round((time.monotonic() - start) * 1000),
        )

    async def _periodic(self, interval_ms: int, fn) -> None:
        interval = max(interval_ms, 10) / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("background task failed", task=fn.__name__)

    async def _retention(self) -> None:
        deleted = self.log_manager.run_retention()
        if deleted:
            self.log_manager.checkpoint_log_start_offsets()
            log.info("retention deleted segments", segments=deleted)

    async def _time_based_flush(self) -> None:
        for ulog, up_to in self.log_manager.roll_flushes():  # Kafka's flush of the segments before a roll
            await self.replica_manager.flush_log(ulog, up_to)
        for ulog in self.log_manager.flush_dirty_logs():
            await self.replica_manager.flush_log(ulog)

    async def _expire_producer_ids(self) -> None:
        """producer.id.expiration.ms: drop the dedupe state of producers idle that long, on every partition."""
        now, expiration = int(time.time() * 1000), self.config["producer.id.expiration.ms"]
        for ulog in self.log_manager.all_logs():
            ulog.remove_expired_producers(now, expiration)

    async def _checkpoint(self) -> None:
        lm = self.log_manager

        def checkpoint() -> None:
            lm.checkpoint_recovery_points()
            lm.checkpoint_log_start_offsets()
            lm.checkpoint_high_watermarks()

        await asyncio.get_running_loop().run_in_executor(None, checkpoint)

    def _delete_stray_logs(self, store: EtcdMetadataStore) -> None:
        """Cluster startup: delete local logs the metadata says this broker no longer hosts -- the topic was re-created
        (another topic id) or the replica was moved away while the broker was down. Logs of topics absent from the
        metadata are kept (and not served): an emptied etcd must not wipe the brokers' data."""
        for ulog in list(self.log_manager.all_logs()):
            info = store.topic(ulog.topic)
            if info is None:
                if store.deleted_topic_id(ulog.topic) == ulog.topic_id:
                    log.info(
                        "deleting the log of a topic deleted while this broker was down",
                        topic=ulog.topic,
                        partition=ulog.partition,
                    )
                    if store.deleted_topic_was_tiered(ulog.topic):
                        from strata.remote.rlm import topic_id_partition

                        self._deleted_while_down.append(topic_id_partition(ulog))
                    self.log_manager.delete_log(ulog.topic, ulog.partition)
                else:
                    log.warning(
                        "log of a topic unknown to the cluster metadata; kept, not served",
                        topic=ulog.topic,
                        partition=ulog.partition,
                    )
                continue
            state = store.partition_state(ulog.topic, ulog.partition)
            stale_id = ulog.topic_id.int != 0 and ulog.topic_id != info.topic_id
            moved = ulog.partition >= info.partitions or (
                state is not None and self.broker_id not in state.replicas and self.broker_id not in state.adding
            )
            if stale_id or moved:
                log.info(
                    "deleting stray log",
                    topic=ulog.topic,
                    partition=ulog.partition,
                    reason="topic re-created" if stale_id else "not a replica",
                )
                self.log_manager.delete_log(ulog.topic, ulog.partition)

    def on_metadata_change(self, kind: str, key: Any) -> None:  # key: (topic, partition), topic or broker id
        """The metadata image changed (MetadataStore listener): partition states go to the replica manager."""
        rm = self.replica_manager
        if kind == "partition":
            topic, partition = key
            if self.cluster_mode:  # new replicas made in bulk, off the loop (cluster/new_replicas.py)
                self.new_replicas.on_partition(topic, partition)
            else:
                rm.apply_partition_state(topic, partition, self.store.partition_state(topic, partition))
        elif kind == "topic":
            info = self.store.topic(key)
            if info is None:
                old = getattr(self.store, "deleted_topic", lambda name: None)(key)
                if old is not None and any(k[0] == key for k in rm.partitions):
                    rm.remove_topic(old)
                    log.info("deleted topic", topic=key, topic_id=kafka_uuid_str(old.topic_id))
            else:
                rm.on_topic_change(info)  # config changes made through another broker
        elif kind == "broker":
            rm.fetcher_manager.on_broker_change(key)  # a leader re-registered: reconnect
            rm.on_brokers_changed()

    def _on_leadership_change(self, partition: Partition, leader: bool) -> None:
        """The group coordinator follows the leadership of the __consumer_offsets partitions; the remote partition
        remover looks at a __remote_log_metadata partition as soon as it leads it."""
        if (
            partition.topic.name == REMOTE_LOG_METADATA_TOPIC
            and leader
            and self.tiered is not None
            and self.tiered.started
        ):
            self.tiered.partition_remover.wake()  # what the previous leader of this metadata partition left
        if partition.topic.name == OFFSETS_TOPIC:
            if leader:
                self.group_coordinator.on_become_leader(partition.index)
            else:
                self.group_coordinator.on_resign(partition.index)
        elif partition.topic.name == TRANSACTION_STATE_TOPIC:
            if leader:
                self.txn_coordinator.on_become_leader(partition.index)
            else:
                self.txn_coordinator.on_resign(partition.index)

    def _build_txn_coordinator(self, producer_ids: ProducerIdManager) -> TransactionCoordinator:
        """The transaction coordinator; markers go to this broker's partitions in-process and to other leaders
        over the inter-broker listener (`TxnChannel`), which also asks other coordinators to verify produces."""
        rm = self.replica_manager
        gc = self.group_coordinator

        def leader_epoch(index: int) -> int:
            p = rm.get_partition(TRANSACTION_STATE_TOPIC, index)
            return max(p.leader_epoch, 0) if p is not None else 0

        async def local_markers(
            marker: TxnMarker, partitions: list[tuple[str, int]]
        ) -> dict[tuple[str, int], ErrorCode]:
            return await append_markers(rm, gc, marker, partitions)

        self.txn_channel = TxnChannel(self.config, self.broker_id, self.store, self.endpoints, local_markers)
        return TransactionCoordinator(
            TxnConfig.from_broker_config(self.config),
            rm,
            self.store,
            new_producer_id=producer_ids.generate,
            write_markers=self.txn_channel.write_markers,
            leader_epoch=leader_epoch,
            channel=self.txn_channel,
            metrics=self.metrics.txn,
        )

    async def _isr_expiration(self) -> None:
        self.replica_manager.maybe_shrink_isr()

    async def _controlled_shutdown(self) -> None:
        """Kafka's controlled shutdown: ask the controller to move this broker's leaderships away (bounded:
        controlled.shutdown.max.retries attempts of broker.session.timeout.ms each), then stop."""
        cfg = self.config
        attempts = max(1, cfg["controlled.shutdown.max.retries"])
        for attempt in range(attempts):
            started = time.monotonic()
            try:
                if await self.store.controlled_shutdown(cfg["broker.session.timeout.ms"] / 1000.0):
                    log.info("controlled shutdown complete", ms=round((time.monotonic() - started) * 1000))
                    return
            except Exception as e:  # noqa: BLE001 - any failure: retried, then the broker stops anyway
                log.warning("controlled shutdown attempt failed", attempt=attempt + 1, error=repr(e))
            if attempt + 1 < attempts:
                await asyncio.sleep(cfg["controlled.shutdown.retry.backoff.ms"] / 1000.0)
        log.warning("controlled shutdown did not complete; shutting down anyway", attempts=attempts)

    async def stop(self) -> None:
        """Clean shutdown: stop serving, then flush logs, write checkpoints and the clean-shutdown marker."""
        log.info("shutting down")
        if self.cluster_mode and self.config["controlled.shutdown.enable"]:
            await self._controlled_shutdown()
        if self.peer_watch is not None:
            await self.peer_watch.stop()
        if self._etcd_store is not None:  # (cluster mode)
            self._etcd_store.stopping()  # peers may now revoke our lease (listener closed): do not renew it
        if self.controller is not None:
            await self.controller.stop()
        for t in self._tasks:
            t.cancel()
        if self.restore is not None:
            await self.restore.close()
        await self.txn_coordinator.shutdown()  # lets queued transaction-state writes land
        await self.txn_channel.close()
        await self.group_coordinator.shutdown()  # answers parked joins, lets queued offset writes land
        await self.socket_server.stop()
        if self.controller_channel is not None:
            await self.controller_channel.close()
        await self.new_replicas.stop()
        if self.replica_manager.epoch_flusher is not None:
            await self.replica_manager.epoch_flusher.stop()
        await self.replica_manager.shutdown()  # replica fetchers stop before the logs close
        if self.iceberg is not None:
            await self.iceberg.close()  # translators stop (a commit in flight finishes in its thread)
        if self.tiered is not None:
            await self.tiered.close()  # the partition remover, the RLM, the RLMM and its connections
        await self.dynamic_config.close()  # a cleaner restart in flight
        if self.log_cleaner is not None:
            await self.log_cleaner.shutdown()  # aborts a cleaning in progress before the logs close
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.shutdown)
        await self.store.close()  # cluster: revokes the lease (deregisters now, not after the session)
        self.metrics.stop_http()
        self.gc_pauses.uninstall()
        log.info("shut down cleanly")


def run(config: BrokerConfig) -> int:
    """Serve until SIGTERM/SIGINT; returns the process exit code."""
    configure_logging(config["log.format"], config["log.level"])
    warn_unknown_configs(config)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # uvloop is a declared dependency; this only keeps odd platforms usable
        log.warning("uvloop not available, using the default asyncio loop")

    async def main() -> int:
        try:
            check_log_dirs(config)
            check_remote_storage(config)
            server = KafkaServer(config)
        except (StartupError, ConfigError) as e:
            print(f"strata: {e}", file=sys.stderr)
            return 2
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        diagnostics.install(loop, server.metrics.registry)
        try:
            await server.start()
        except StartupError as e:
            print(f"strata: {e}", file=sys.stderr)
            return 2
        except OSError as e:
            log.error("cannot start", error=str(e))
            await asyncio.get_running_loop().run_in_executor(None, server.log_manager.shutdown)
            return 1
        await stop.wait()
        await server.stop()
        return 0

    return asyncio.run(main())


__all__ = ["KafkaServer", "StartupError", "configure_logging", "run"]
