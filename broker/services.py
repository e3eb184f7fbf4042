"""BrokerServices: what the request handlers are given, built once by the server after every subsystem exists.

One typed, immutable object rather than the server: handlers see the broker's services, not its lifecycle
(tasks, sockets, start/stop), and nothing can be attached to it later. One object rather than dependencies per
handler module: the handler modules share most of their needs (the store, the config, the replica manager, the
endpoints), and the dispatcher calls every handler the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from strata.config import BrokerConfig
from strata.storage.log_manager import LogManager

from .endpoints import BrokerEndpoints
from .fetch_session import FetchSessionCache
from .metadata_store import MetadataStore
from .metrics import BrokerMetrics
from .producer_ids import ProducerIdManager
from .replica_manager import ReplicaManager
from .topic_manager import TopicManager

if TYPE_CHECKING:
    from strata.remote.rlm import RemoteLogManager

    from .cluster.forwarding import ControllerChannel
    from .group import GroupCoordinator
    from .txn import TransactionCoordinator


@dataclass(frozen=True, slots=True)
class BrokerServices:
    config: BrokerConfig
    broker_id: int
    store: MetadataStore
    endpoints: BrokerEndpoints
    metrics: BrokerMetrics
    log_manager: LogManager
    replica_manager: ReplicaManager
    topic_manager: TopicManager
    group_coordinator: GroupCoordinator
    txn_coordinator: TransactionCoordinator
    producer_ids: ProducerIdManager
    remote_log_manager: RemoteLogManager | None  # tiered storage (remote.log.storage.system.enable)
    controller_channel: ControllerChannel | None  # a cluster: admin requests go to the controller
    fetch_sessions: FetchSessionCache  # KIP-227 incremental fetch sessions


__all__ = ["BrokerServices"]
