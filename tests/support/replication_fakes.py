"""In-process replication fixtures: several ReplicaManagers over one fake cluster metadata store, with the replica
fetchers' requests carried through kafka-python's codec to the leader's real handlers (Fetch, OffsetForLeaderEpoch,
ListOffsets) instead of TCP, and a fake monotonic clock for lag arithmetic.

The store plays etcd + controller: `set_state` is what an election writes, `alter_partition` is the leaders'
compare-and-set (StaleStateError when the partition epoch does not follow). Every change is applied to every node
synchronously, as a metadata watch would.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from strata.broker.cluster import replica_fetcher
from strata.broker.cluster.broker_client import BrokerConnectionError
from strata.broker.cluster.model import BrokerInfo, PartitionState, StaleStateError
from strata.broker.fetch_session import FetchSessionCache
from strata.broker.handlers import fetch as fetch_handler
from strata.broker.handlers import list_offsets as list_offsets_handler
from strata.broker.handlers import offset_for_leader_epoch as ofle_handler
from strata.broker.metadata_store import MetadataStore, TopicInfo
from strata.broker.metrics import BrokerMetrics
from strata.broker.replica_manager import ReplicaManager
from strata.broker.request_context import RequestContext
from strata.config import BrokerConfig, LogConfig
from strata.protocol.registry import REQUEST_CLASSES, RESPONSE_CLASSES, ApiKey, decode_request, encode_response
from strata.storage.log_manager import LogManager

HANDLERS = {
    ApiKey.FETCH: fetch_handler.handle,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: ofle_handler.handle,
    ApiKey.LIST_OFFSETS: list_offsets_handler.handle,
}


class FakeClock:
    def __init__(self, start_ms: float = 1_000_000.0) -> None:
        self.ms = start_ms

    def __call__(self) -> float:
        return self.ms

    def advance(self, ms: float) -> None:
        self.ms += ms


class FakeClusterStore(MetadataStore):
    clustered = True

    def __init__(self, broker_ids: list[int]) -> None:
        self._listeners = []
        self.cluster_id = "fake-cluster"
        self._topics: dict[str, TopicInfo] = {}
        self._brokers = {b: BrokerInfo(b, {"PLAINTEXT": ("127.0.0.1", 19000 + b)}) for b in broker_ids}
        self._states: dict[tuple[str, int], PartitionState] = {}
        self.alters: list[tuple[str, int, PartitionState]] = []  # committed ISR changes
        self.conflict_next_alter = False  # the next alter loses its CAS
        self.alter_gate: asyncio.Event | None = None  # alters wait for it when set

    def topics(self) -> dict[str, TopicInfo]:
        return self._topics

    def brokers(self) -> dict[int, BrokerInfo]:
        return self._brokers

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        return self._states.get((topic, partition))

    @property
    def controller_id(self) -> int:
        return min(self._brokers)

    async def create_topic(self, name, partitions, configs, internal=False, replication_factor=1, assignments=None):
        assignments = assignments or [sorted(self._brokers)[:replication_factor] for _ in range(partitions)]
        info = TopicInfo(name, uuid.uuid4(), partitions, dict(configs), internal)
        self._topics[name] = info
        self._notify("topic", name)
        for i, a in enumerate(assignments):
            self.set_state(name, i, PartitionState(a[0], 0, tuple(a), tuple(a), 0))
        return info

    async def delete_topic(self, name):
        info = self._topics.pop(name)
        for k in [k for k in self._states if k[0] == name]:
            del self._states[k]
        self._notify("topic", name)
        return info

    async def set_partition_count(self, name, partitions, assignments=None):
        raise NotImplementedError

    async def set_topic_configs(self, name, configs):
        self._topics[name].configs = dict(configs)
        self._notify("topic", name)
        return self._topics[name]

    def set_state(self, topic: str, partition: int, state: PartitionState) -> None:
        """What the controller writes (elections, ISR removal of a dead broker)."""
        self._states[(topic, partition)] = state
        self._notify("partition", (topic, partition))

    def elect(self, topic: str, partition: int, leader: int, isr: tuple[int, ...] | None = None) -> PartitionState:
        cur = self._states[(topic, partition)]
        new = cur.with_changes(leader=leader, isr=tuple(isr) if isr is not None else cur.isr)
        self.set_state(topic, partition, new)
        return new

    async def alter_partition(self, topic: str, partition: int, new: PartitionState) -> PartitionState:
        if self.alter_gate is not None:
            await self.alter_gate.wait()
        cur = self._states.get((topic, partition))
        if self.conflict_next_alter:
            self.conflict_next_alter = False
            assert cur is not None, f"{topic}-{partition}: no state to conflict with"
            # the controller got there first: the partition epoch moved
            self.set_state(topic, partition, cur.with_changes())
            raise StaleStateError("conflict (injected)")
        if cur is None or new.partition_epoch != cur.partition_epoch + 1 or new.leader_epoch != cur.leader_epoch:
            raise StaleStateError(f"{topic}-{partition}: {new} does not follow {cur}")
        self.alters.append((topic, partition, new))
        self.set_state(topic, partition, new)
        return new


class Node:
    """One broker: a LogManager on its own dir and a ReplicaManager on the shared store."""

    def __init__(self, cluster: FakeCluster, broker_id: int, data: Path, overrides: dict[str, Any]) -> None:
        props = {
            "broker.id": broker_id,
            "log.dirs": str(data),
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "metrics.listener": "",
            "replica.fetch.wait.max.ms": 50,
            "replica.fetch.backoff.ms": 20,
            "replica.lag.time.max.ms": 10_000,
        }
        props.update(overrides)
        self.cluster = cluster
        self.broker_id = broker_id
        self.config = BrokerConfig.from_dict(props)

        def log_config(topic: str) -> LogConfig:
            info = cluster.store.topic(topic)
            return self.config.log_config(info.configs if info else None)

        self.log_manager = LogManager([data], log_config)
        self.log_manager.startup()
        self.metrics = BrokerMetrics()
        self.rm = ReplicaManager(self.config, self.log_manager, cluster.store, self.metrics)
        self.down = False  # requests to it fail (connection refused)
        # stands in for BrokerServices: only what the Fetch, ListOffsets and OffsetForLeaderEpoch handlers read
        self.shim: Any = SimpleNamespace(
            replica_manager=self.rm,
            store=cluster.store,
            config=self.config,
            broker_id=broker_id,
            advertised_endpoint=lambda listener: ("127.0.0.1", 19000 + broker_id),
            fetch_sessions=FetchSessionCache(1000, 120_000),  # the followers' KIP-227 sessions with this leader
        )
        self.stopped = False

    def on_change(self, kind: str, key: object) -> None:
        if self.stopped:
            return
        if kind == "partition":
            assert isinstance(key, tuple), key  # (topic, partition)
            topic, p = key
            self.rm.apply_partition_state(topic, p, self.cluster.store.partition_state(topic, p))
        elif kind == "topic":
            assert isinstance(key, str), key  # the topic name
            info = self.cluster.store.topic(key)
            if info is not None:
                self.rm.on_topic_change(info)

    def log(self, topic: str, partition: int = 0):
        return self.rm.partitions[(topic, partition)].log

    def partition(self, topic: str, partition: int = 0):
        return self.rm.partitions[(topic, partition)]


class FakeCluster:
    def __init__(self, tmp: Path, ids: list[int], overrides: dict[str, Any] | None = None) -> None:
        self.store = FakeClusterStore(ids)
        self.nodes = {i: Node(self, i, tmp / f"b{i}", dict(overrides or {})) for i in ids}
        for n in self.nodes.values():
            self.store.add_listener(n.on_change)

    def start(self) -> FakeCluster:
        for n in self.nodes.values():
            n.rm.start()
        return self

    async def close(self) -> None:
        for n in self.nodes.values():
            n.stopped = True
            await n.rm.shutdown()
            n.log_manager.shutdown()

    def __getitem__(self, i: int) -> Node:
        return self.nodes[i]


async def _dispatch(node: Node, api_key: int, version: int, fields: dict[str, Any]) -> Any:
    """Through the codec both ways, to the real handler: what the leader would have answered on the wire."""
    req = REQUEST_CLASSES[api_key][version](**fields)
    req.with_header(correlation_id=7, client_id="test-fetcher")
    frame = bytes(req.encode(header=True, framed=True))[4:]
    body = decode_request(frame, api_key, version).body
    ctx = RequestContext(api_key, version, 7, "test-fetcher", time.perf_counter(), "PLAINTEXT", "127.0.0.1:0")
    resp = await HANDLERS[api_key](node.shim, ctx, body)
    return RESPONSE_CLASSES[api_key].decode(encode_response(resp, 7)[4:], version=version, header=True)


def install_transport(monkeypatch, cluster: FakeCluster, clock: FakeClock | None = None) -> list[tuple[int, int, int]]:
    """Route every fetcher request in-process; returns the log of (source broker, api key, version) sent."""
    sent: list[tuple[int, int, int]] = []

    async def request(self, api_key: int, version: int, timeout_s: float | None = None, **fields: Any) -> Any:
        node = cluster.nodes.get(self.source_id)
        await asyncio.sleep(0)
        if node is None or node.down or node.stopped:
            raise BrokerConnectionError(f"broker {self.source_id} is down")
        sent.append((self.source_id, api_key, version))
        return await _dispatch(node, api_key, version, fields)

    monkeypatch.setattr(replica_fetcher.ReplicaFetcher, "request", request)
    if clock is not None:
        import strata.broker.partition
        import strata.broker.replica_manager

        monkeypatch.setattr(strata.broker.partition, "now_ms", clock)
        monkeypatch.setattr(strata.broker.replica_manager, "now_ms", clock)
    return sent
