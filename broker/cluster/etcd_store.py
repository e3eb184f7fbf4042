"""EtcdMetadataStore: the cluster's MetadataStore on etcd v3 (aetcd), key layout of docs/cluster.md.

* Reads come from a MetadataImage kept current by one watch on `<prefix>/<cluster.id>/`; after a watch error the
  whole prefix is re-read at one revision (a single Range is revision-consistent) and the watch resumes after it;
  the listeners get the difference.
* The broker is registered under `brokers/<id>` on a lease of `broker.session.timeout.ms`, kept alive every
  `broker.heartbeat.interval.ms`; a lost lease (etcd unreachable longer than the session, or expired) is replaced
  and the broker registers again.
* Every write is a transaction: topic keys compare their mod_revision (or absence), partition states compare
  their mod_revision and carry partition_epoch + 1; controller writes also compare `controller_epoch`, so a deposed
  controller cannot write. A failed compare raises StaleStateError (partition state) after refreshing the image
  from the keys it compared.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import aetcd
import structlog
from aetcd import rpc
from aetcd.exceptions import ClientError
from aetcd.exceptions import _handle_exception as _map_grpc_error

from strata.config import parse_bool
from strata.protocol.acl import AclBinding, AclBindingFilter
from strata.protocol.errors import ErrorCode, KafkaApiError

from ..metadata_store import (
    MetadataStore,
    ScramKey,
    TopicInfo,
    _new_cluster_id,
    acl_id,
    first_leader_epoch,
    match_acls,
)
from ..security.client_quotas import QuotaChanges, QuotaEntity, altered
from ..security.scram import ScramCredential, ScramMechanism
from .alter_partition_batcher import AlterPartitionBatcher
from .image import MetadataImage, acl_rel, quota_rel, scram_rel, topic_to_json
from .lease_keeper import LeaseKeeper
from .model import BrokerInfo, PartitionState, StaleStateError
from .placement import assign_replicas

log = structlog.get_logger("strata.etcd")

MAX_TXN_OPS = 100  # etcd's default --max-txn-ops is 128
PRODUCER_ID_KEY = "producer_ids/next"


def parse_connect(spec: str) -> list[tuple[str, int]]:
    """`etcd://host:port[,host:port...]` -> endpoints (port defaults to 2379)."""
    if not spec.startswith("etcd://"):
        raise ValueError(f"metadata.store.connect {spec!r} must start with etcd://")
    out = []
    for part in spec[len("etcd://") :].split(","):
        part = part.strip().rstrip("/")
        if not part:
            continue
        host, sep, port = part.rpartition(":")
        if not sep:
            host, port = part, "2379"
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError(f"metadata.store.connect {spec!r} names no etcd endpoint")
    return out


# ---- transaction building blocks ------------------------------------------------------------------------------
def _cmp(key: bytes, target: str, op: str, value) -> rpc.Compare:
    c = rpc.Compare(key=key)
    c.result = {"==": rpc.Compare.EQUAL, "!=": rpc.Compare.NOT_EQUAL, "<": rpc.Compare.LESS, ">": rpc.Compare.GREATER}[
        op
    ]
    if target == "mod":
        c.target, c.mod_revision = rpc.Compare.MOD, int(value)
    elif target == "create":
        c.target, c.create_revision = rpc.Compare.CREATE, int(value)
    elif target == "value":
        c.target, c.value = rpc.Compare.VALUE, value
    elif target == "version":
        c.target, c.version = rpc.Compare.VERSION, int(value)
    else:
        raise ValueError(target)
    return c


def _put(key: bytes, value: bytes, lease: int = 0) -> rpc.RequestOp:
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value, lease=lease))


def _get(key: bytes) -> rpc.RequestOp:
    return rpc.RequestOp(request_range=rpc.RangeRequest(key=key))


def _delete(key: bytes, prefix: bool = False) -> rpc.RequestOp:
    req = rpc.DeleteRangeRequest(key=key)
    if prefix:
        req.range_end = aetcd.utils.prefix_range_end(key)
    return rpc.RequestOp(request_delete_range=req)


def _j(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


class IneligibleReplicaError(StaleStateError):
    """An ISR expansion to a broker that is not live or is shutting down (Kafka's INELIGIBLE_REPLICA)."""


@dataclass
class TxnResult:
    succeeded: bool
    revision: int
    ranges: list[list]  # kvs of each range op of the branch taken


class EtcdMetadataStore(MetadataStore):
    clustered = True

    def __init__(
        self,
        endpoints: list[tuple[str, int]],
        *,
        broker_id: int,
        prefix: str = "/strata",
        cluster_id: str | None = None,
        session_timeout_ms: int = 9000,
        heartbeat_interval_ms: int = 2000,
        request_timeout_s: float = 5.0,
    ) -> None:
        self._listeners = []
        self.endpoints = endpoints
        self.broker_id = broker_id
        self.prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
        self.configured_cluster_id = cluster_id or None
        self.cluster_id = cluster_id or ""
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.request_timeout_s = request_timeout_s
        self.image = MetadataImage()
        self._endpoint_index = 0
        self._client: aetcd.Client | None = None
        self._root = b""
        self._me: BrokerInfo | None = None
        self.lease_id = 0
        self._lease_lost = asyncio.Event()
        self._stopping = False
        self._tasks: list[asyncio.Task] = []
        self._closed = False
        self.registrations = 0  # times this process (re-)registered (tests, logs)
        self._image_changed = asyncio.Event()  # set on every image change; waiters clear it themselves
        self.lease_keeper: LeaseKeeper | None = None
        self.alter_batcher = AlterPartitionBatcher(
            self.write_partitions, lambda t, p: self.image.partitions.get((t, p))
        )

    @classmethod
    def from_config(cls, config, cluster_id: str | None = None) -> EtcdMetadataStore:
        return cls(
            parse_connect(config["metadata.store.connect"]),
            broker_id=config.broker_id,
            prefix=config["metadata.store.prefix"],
            cluster_id=cluster_id or config["cluster.id"] or None,
            session_timeout_ms=config["broker.session.timeout.ms"],
            heartbeat_interval_ms=config["broker.heartbeat.interval.ms"],
        )

    # ---- connection ---------------------------------------------------------------------------------------------
    def _new_client(self) -> aetcd.Client:
        host, port = self.endpoints[self._endpoint_index % len(self.endpoints)]
        return aetcd.Client(host=host, port=port, timeout=self.request_timeout_s)

    @property
    def client(self) -> aetcd.Client:
        if self._client is None:
            self._client = self._new_client()
        return self._client

    async def _rotate(self) -> None:
        """Switch to the next endpoint after a connection failure (the watch restarts on its own)."""
        if len(self.endpoints) < 2:
            return
        old, self._client = self._client, None
        self._endpoint_index += 1
        if old is not None:
            try:
                await asyncio.wait_for(old.close(), 2.0)
            except Exception:  # noqa: BLE001, S110 - a failed endpoint's client: closing it is best effort
                pass

    async def _rpc(self, fn):
        """Run `fn(client)`, trying each endpoint once on connection failures."""
        last: Exception | None = None
        for _ in range(len(self.endpoints)):
            try:
                return await fn(self.client)
            except (aetcd.exceptions.ConnectionFailedError, aetcd.exceptions.ConnectionTimeoutError) as e:
                last = e
                await self._rotate()
        assert last is not None
        raise last

    def key(self, rel: str) -> bytes:
        return self._root + rel.encode()

    async def txn(
        self, compare: list[rpc.Compare], success: list[rpc.RequestOp], failure: Iterable[rpc.RequestOp] = ()
    ) -> TxnResult:
        req = rpc.TxnRequest(compare=compare, success=success, failure=list(failure))

        async def call(c: aetcd.Client):
            await c.connect()
            try:
                return await c.kvstub.Txn(req, timeout=self.request_timeout_s, metadata=c.metadata)
            except rpc.AioRpcError as e:
                _map_grpc_error(e)

        resp = await self._rpc(call)
        ranges = [list(r.response_range.kvs) for r in resp.responses if r.WhichOneof("response") == "response_range"]
        return TxnResult(resp.succeeded, resp.header.revision, ranges)

    def _rel(self, key: bytes) -> str:
        return key[len(self._root) :].decode()

    # ---- lifecycle ----------------------------------------------------------------------------------------------
    async def start(self) -> None:
        await self._resolve_cluster_id()
        self._root = f"{self.prefix}/{self.cluster_id}/".encode()
        await self._reload()
        self._tasks.append(asyncio.create_task(self._watch_loop(), name="etcd-watch"))
        log.info(
            "metadata store connected",
            endpoints=[f"{h}:{p}" for h, p in self.endpoints],
            cluster_id=self.cluster_id,
            revision=self.image.revision,
            brokers=sorted(self.image.brokers),
            topics=len(self.image.topics),
        )

    async def _resolve_cluster_id(self) -> None:
        """`<prefix>/cluster_id` names the cluster a broker without `cluster.id` joins; the first broker creates it
        (create-if-absent). A configured id marks its own `<prefix>/<id>/cluster_id` the same way."""
        pointer = f"{self.prefix}/cluster_id".encode()
        cid = self.configured_cluster_id or _new_cluster_id()
        own = f"{self.prefix}/{cid}/cluster_id".encode()
        res = await self.txn(
            [_cmp(pointer, "create", "==", 0)], [_put(pointer, _j(cid)), _put(own, _j(cid))], [_get(pointer)]
        )
        if not res.succeeded and not self.configured_cluster_id:
            cid = json.loads(res.ranges[0][0].value)  # adopt the stored cluster
            own = f"{self.prefix}/{cid}/cluster_id".encode()
        await self.txn([_cmp(own, "create", "==", 0)], [_put(own, _j(cid))])
        self.cluster_id = cid

    async def _reload(self) -> None:
        """Re-read the whole prefix at one revision; notify the differences to the previous image."""
        root = self._root
        r = await self._rpc(lambda c: c.get_prefix(root))
        kvs = [(self._rel(kv.key), kv.value, kv.mod_revision) for kv in r.kvs]
        new = MetadataImage.from_kvs(kvs, r.header.revision)
        old, self.image = self.image, new
        changes = new.diff(old) if old.revision else []
        for kind, key in changes:
            self._notify(kind, key)
        self._image_changed.set()

    async def _watch_loop(self) -> None:
        backoff = 0.1
        while not self._closed:
            watch = None
            try:
                start = self.image.revision + 1
                watch = await self._rpc(lambda c, s=start: c.watch_prefix(self._root, start_revision=s))
                backoff = 0.1
                async for ev in watch:
                    rel = self._rel(ev.kv.key)
                    value = ev.kv.value if ev.kind == "PUT" else None
                    self._apply(rel, value, ev.kv.mod_revision)
                raise ConnectionError("watch stream ended")
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the watch task must not die: re-read and watch again
                if self._closed:
                    return
                log.warning("metadata watch failed; re-reading", error=repr(e))
            finally:
                if watch is not None:  # bounded: aetcd's cancel blocks on a full request queue of a dead stream
                    try:
                        await asyncio.wait_for(watch.cancel(), 1.0)
                    except (Exception, asyncio.CancelledError):  # noqa: BLE001, S110 - a dead stream: best effort
                        pass
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)
            try:
                if backoff > 0.4:
                    await self._rotate()
                await self._reload()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - retried by the next round of the watch loop
                log.warning("metadata re-read failed", error=repr(e))

    def _apply(self, rel: str, value: bytes | None, revision: int) -> None:
        changes = self.image.apply(rel, value, revision)
        for kind, key in changes:
            try:
                self._notify(kind, key)
            except Exception:
                log.exception("metadata listener failed", kind=kind, key=key)
        self._image_changed.set()

    def _apply_kvs(self, kvs: Iterable) -> None:
        for kv in kvs:
            self._apply(self._rel(kv.key), kv.value, kv.mod_revision)

    async def wait_for(self, predicate, timeout: float) -> bool:
        """Wait (bounded) until `predicate()` holds on the image; True if it does."""
        deadline = time.monotonic() + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._image_changed.clear()
            if predicate():
                return True
            try:
                await asyncio.wait_for(self._image_changed.wait(), remaining)
            except TimeoutError:
                return bool(predicate())
        return True

    async def close(self) -> None:
        self._closed = True
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=2.0)
        self._tasks.clear()
        if self.lease_id:
            try:  # deregister at once (and drop controller / shutdown keys on this lease)
                await asyncio.wait_for(self.client.revoke_lease(self.lease_id), self.request_timeout_s)
            except Exception as e:  # noqa: BLE001 - the lease then runs out on its own
                log.warning("could not revoke the broker lease", error=repr(e))
            self.lease_id = 0
        if self._client is not None:
            try:
                await asyncio.wait_for(self._client.close(), 2.0)
            except Exception:  # noqa: BLE001, S110 - closing: best effort
                pass
            self._client = None

    # ---- registration and lease ---------------------------------------------------------------------------------
    @property
    def lease_ttl_s(self) -> int:
        return max(1, math.ceil(self.session_timeout_ms / 1000))

    async def register(self, broker: BrokerInfo) -> None:
        self._me = broker
        if not self.lease_id:
            await self._grant()
        await self._put_registration()
        if not any(t.get_name() == "etcd-keepalive" for t in self._tasks):
            self._tasks.append(asyncio.create_task(self._keepalive_loop(), name="etcd-keepalive"))

    async def _grant(self) -> None:
        lease = await self._rpc(lambda c: c.lease(self.lease_ttl_s))
        self.lease_id = lease.id
        self._lease_lost.clear()

    async def _put_registration(self) -> None:
        me = self._me
        assert me is not None
        key = self.key(f"brokers/{me.broker_id}")
        r = await self._rpc(lambda c: c.get(key))
        if r is not None:
            old = json.loads(r.value)
            if old.get("incarnation") != me.incarnation and r.lease and r.lease != self.lease_id:
                # A previous incarnation of this broker (killed, restarted before its lease ran out): revoke its
                # lease so its registration and any controller key it held go now, not after the session timeout.
                try:
                    await self._rpc(lambda c: c.revoke_lease(r.lease))
                except ClientError:
                    pass
        res = await self.txn([], [_put(key, _j({**me.to_json(), "lease": self.lease_id}), self.lease_id)])
        self.image.apply(f"brokers/{me.broker_id}", _j({**me.to_json(), "lease": self.lease_id}), res.revision)
        self._notify("broker", me.broker_id)
        self._image_changed.set()
        self.registrations += 1
        log.info("broker registered", broker_id=me.broker_id, lease=hex(self.lease_id), ttl_s=self.lease_ttl_s)

    async def revoke_broker_lease(self, broker_id: int, incarnation: str) -> bool:
        """Revoke the lease of broker `broker_id`'s registration if it is still `incarnation` (liveness.py: the
        process is gone); True if a lease was revoked."""
        key = self.key(f"brokers/{broker_id}")
        r = await self._rpc(lambda c: c.get(key))
        if r is None or not r.lease or json.loads(r.value).get("incarnation") != incarnation:
            return False
        try:
            await self._rpc(lambda c: c.revoke_lease(r.lease))
        except ClientError:  # expired or revoked meanwhile
            return False
        return True

    def stopping(self) -> None:
        """The broker is shutting down: a lease lost from now on (revoked by a peer that saw the listener close)
        is not renewed."""
        self._stopping = True

    async def _keepalive_loop(self) -> None:
        """Renewal runs in the LeaseKeeper's thread (a busy loop must not starve it); here the loop stamps that it
        runs and registers again once the keeper finds the lease ended."""
        interval = max(self.heartbeat_interval_ms, 50) / 1000.0
        keeper = self.lease_keeper = LeaseKeeper(
            self.endpoints, interval, self.session_timeout_ms / 1000.0, self.request_timeout_s
        )
        keeper.keep(self.lease_id)
        try:
            while not self._closed:
                await asyncio.sleep(interval)
                keeper.loop_alive()
                if not keeper.lost or keeper.lost != self.lease_id:
                    continue
                if self._stopping:
                    log.info("broker lease ended during shutdown", lease=hex(self.lease_id))
                    return
                log.warning("broker lease lost; registering again", lease=hex(self.lease_id))
                self._lease_lost.set()
                while not self._closed:
                    try:
                        await self._grant()
                        await self._put_registration()
                        keeper.keep(self.lease_id)
                        break
                    except asyncio.CancelledError:
                        raise
                    except Exception as e:  # noqa: BLE001 - the keep-alive task must not die: retried
                        log.warning("registering again failed", error=repr(e))
                        await asyncio.sleep(interval)
        finally:
            keeper.stop()

    # ---- reads ----------------------------------------------------------------------------------------------------
    def topics(self) -> dict[str, TopicInfo]:
        return self.image.topics

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self.image.by_id.get(topic_id)

    def brokers(self) -> dict[int, BrokerInfo]:
        return self.image.brokers

    def departed_brokers(self, within_s: float) -> dict[int, BrokerInfo]:
        now = time.monotonic()
        return {b: info for b, (info, at) in self.image.departed.items() if now - at < within_s}

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        return self.image.partitions.get((topic, partition))

    @property
    def controller_id(self) -> int:
        c = self.image.controller
        return c.broker_id if c is not None else -1

    def shutting_down(self) -> frozenset[int]:
        return frozenset(self.image.shutdown)

    def deleted_topic_id(self, name: str) -> uuid.UUID | None:
        """The topic id of the last deletion of `name` (the `deleting/<name>` tombstone), for brokers that were
        down when it happened."""
        d = self.image.deleting.get(name)
        try:
            return uuid.UUID(d["topic_id"]) if d else None
        except (KeyError, ValueError):
            return None

    def deleted_topic_was_tiered(self, name: str) -> bool:
        """Whether the last deletion of `name` was of a topic with remote.storage.enable: a replica that was down
        then marks its remote partitions deleted when it comes back (tombstones from before this field: no)."""
        d = self.image.deleting.get(name)
        return bool(d and d.get("remote_storage"))

    def deleted_topic(self, name: str) -> TopicInfo | None:
        """The TopicInfo of `name` as it was when it was last deleted (listeners of a 'topic' deletion)."""
        return self.image.deleted_topics.get(name)

    # ---- topic mutations (any broker) ----------------------------------------------------------------------------
    def _initial_state(self, replicas: list[int], leader_epoch: int = 0) -> PartitionState:
        live = [b for b in replicas if b in self.image.brokers]
        return PartitionState(live[0] if live else -1, leader_epoch, tuple(live or replicas), tuple(replicas), 0)

    def compute_assignments(
        self, partitions: int, replication_factor: int, *, start_partition: int = 0, start_index: int = -1
    ) -> list[list[int]]:
        live = {b: info.rack for b, info in self.image.brokers.items() if b not in self.image.shutdown}
        if not live:
            live = {b: info.rack for b, info in self.image.brokers.items()}
        return assign_replicas(
            live, partitions, replication_factor, start_index=start_index, start_partition=start_partition
        )

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        internal: bool = False,
        replication_factor: int = 1,
        assignments: list[list[int]] | None = None,
        topic_id: uuid.UUID | None = None,
        recovery: dict[str, Any] | None = None,
    ) -> TopicInfo:
        if assignments is None:
            assignments = self.compute_assignments(partitions, replication_factor)
        info = TopicInfo(
            name,
            topic_id or uuid.uuid4(),
            len(assignments),
            dict(configs),
            internal,
            [list(a) for a in assignments],
            recovery,
        )
        tkey = self.key(f"topics/{name}")
        parts = [
            (f"partitions/{name}/{p}", self._initial_state(a, first_leader_epoch(info, p)))
            for p, a in enumerate(assignments)
        ]
        first, rest = parts[: MAX_TXN_OPS - 1], parts[MAX_TXN_OPS - 1 :]
        res = await self.txn(
            [_cmp(tkey, "create", "==", 0)],
            [_put(tkey, _j(topic_to_json(info)))] + [_put(self.key(k), _j(s.to_json())) for k, s in first],
            [_get(tkey)],
        )
        if not res.succeeded:
            self._apply_kvs(res.ranges[0])
            raise KafkaApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        created = res.revision
        self._apply(f"topics/{name}", _j(topic_to_json(info)), res.revision)
        for k, s in first:
            self._apply(k, _j(s.to_json()), res.revision)
        await self._put_more_partitions(tkey, created, rest)
        return self.image.topics.get(name, info)

    async def _put_more_partitions(self, tkey: bytes, create_rev: int, parts: list[tuple[str, PartitionState]]) -> None:
        """Partition keys beyond one transaction's op limit, each batch guarded by the topic's create revision (so
        a topic deleted and re-created meanwhile is not touched)."""
        for i in range(0, len(parts), MAX_TXN_OPS):
            batch = parts[i : i + MAX_TXN_OPS]
            res = await self.txn(
                [_cmp(tkey, "create", "==", create_rev)] + [_cmp(self.key(k), "create", "==", 0) for k, _ in batch],
                [_put(self.key(k), _j(s.to_json())) for k, s in batch],
            )
            if not res.succeeded:
                raise KafkaApiError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "the topic changed while its partitions were being created"
                )
            for k, s in batch:
                self._apply(k, _j(s.to_json()), res.revision)

    async def delete_topic(self, name: str) -> TopicInfo:
        for _ in range(10):
            info = self.image.topics.get(name)
            if info is None:
                raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
            tkey = self.key(f"topics/{name}")
            res = await self.txn(
                [_cmp(tkey, "mod", "==", self.image.mod_revision(f"topics/{name}"))],
                [
                    _delete(tkey),
                    _delete(self.key(f"partitions/{name}/"), prefix=True),
                    _put(
                        self.key(f"deleting/{name}"),
                        _j(
                            {
                                "topic_id": str(info.topic_id),
                                "partitions": info.partitions,
                                "remote_storage": parse_bool(info.configs.get("remote.storage.enable", False)),
                            }
                        ),
                    ),
                ],
                [_get(tkey)],
            )
            if res.succeeded:
                for p in range(info.partitions):
                    self._apply(f"partitions/{name}/{p}", None, res.revision)
                self._apply(f"topics/{name}", None, res.revision)
                return info
            await self._refresh_key(f"topics/{name}", res.ranges[0], res.revision)
        raise KafkaApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Topic '{name}' kept changing during deletion.")

    async def refresh_topics(self, names: Iterable[str]) -> None:
        """Read these topics' keys (and their partitions') at one revision and apply them now, instead of when the
        watch brings them: a broker that had the controller change a topic answers its client only once its own
        image shows the change (read-your-writes for the client's next request to it)."""
        names = sorted(set(names))
        if not names:
            return
        ops = []
        for name in names:
            ops.append(_get(self.key(f"topics/{name}")))
            part = rpc.RangeRequest(key=self.key(f"partitions/{name}/"))
            part.range_end = aetcd.utils.prefix_range_end(part.key)
            ops.append(rpc.RequestOp(request_range=part))
        res = await self.txn([], ops)
        for i, name in enumerate(names):
            await self._refresh_key(f"topics/{name}", res.ranges[2 * i], res.revision)
            seen = {self._rel(kv.key) for kv in res.ranges[2 * i + 1]}
            self._apply_kvs(res.ranges[2 * i + 1])
            for rel in [k for k in self.image.revs if k.startswith(f"partitions/{name}/") and k not in seen]:
                if self.image.mod_revision(rel):  # present in the image, absent in etcd
                    self._apply(rel, None, res.revision)

    async def _refresh_key(self, rel: str, kvs: list, revision: int) -> None:
        """Bring one key of the image up to `revision` from a failed transaction's read of it."""
        if kvs:
            self._apply_kvs(kvs)
        else:
            self._apply(rel, None, revision)

    async def set_partition_count(
        self, name: str, partitions: int, assignments: list[list[int]] | None = None
    ) -> TopicInfo:
        for _ in range(10):
            info = self.image.topics.get(name)
            if info is None:
                raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
            current = info.partitions
            if partitions <= current:
                raise KafkaApiError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"Topic currently has {current} partitions, which is higher than or equal to "
                    f"the requested {partitions}.",
                )
            rf = max(1, len(info.replicas(0)))
            brokers = sorted(self.image.brokers)
            first = info.replicas(0)[0] if info.replicas(0) else -1
            start_index = brokers.index(first) if first in brokers else -1
            added = (
                [list(a) for a in assignments]
                if assignments
                else self.compute_assignments(
                    partitions - current, rf, start_partition=current, start_index=start_index
                )
            )
            new_info = TopicInfo(
                name,
                info.topic_id,
                partitions,
                dict(info.configs),
                info.internal,
                [list(a) for a in info.assignments] + added,
            )
            parts = [(f"partitions/{name}/{current + i}", self._initial_state(a)) for i, a in enumerate(added)]
            tkey = self.key(f"topics/{name}")
            first_batch, rest = parts[: MAX_TXN_OPS - 1], parts[MAX_TXN_OPS - 1 :]
            res = await self.txn(
                [_cmp(tkey, "mod", "==", self.image.mod_revision(f"topics/{name}"))],
                [_put(tkey, _j(topic_to_json(new_info)))]
                + [_put(self.key(k), _j(s.to_json())) for k, s in first_batch],
                [_get(tkey)],
            )
            if not res.succeeded:
                await self._refresh_key(f"topics/{name}", res.ranges[0], res.revision)
                continue
            # the topic first, as in create_topic: a listener told of a new partition looks up its assignment in
            # the topic (the watch brings the same revision later and is ignored, so an early partition would be
            # missed until its state changes again)
            self._apply(f"topics/{name}", _j(topic_to_json(new_info)), res.revision)
            for k, s in first_batch:
                self._apply(k, _j(s.to_json()), res.revision)
            r = await self._rpc(lambda c, k=tkey: c.get(k))
            await self._put_more_partitions(tkey, r.create_revision if r else -1, rest)
            return self.image.topics.get(name, new_info)
        raise KafkaApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Topic '{name}' kept changing.")

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        return await self.update_topic(
            name,
            lambda info: TopicInfo(
                name, info.topic_id, info.partitions, dict(configs), info.internal, info.assignments
            ),
        )

    async def update_topic(self, name: str, change) -> TopicInfo:
        """CAS loop on `topics/<name>`: `change(info) -> TopicInfo`."""
        for _ in range(10):
            info = self.image.topics.get(name)
            if info is None:
                raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
            new_info = change(info)
            tkey = self.key(f"topics/{name}")
            res = await self.txn(
                [_cmp(tkey, "mod", "==", self.image.mod_revision(f"topics/{name}"))],
                [_put(tkey, _j(topic_to_json(new_info)))],
                [_get(tkey)],
            )
            if res.succeeded:
                self._apply(f"topics/{name}", _j(topic_to_json(new_info)), res.revision)
                return self.image.topics.get(name, new_info)
            await self._refresh_key(f"topics/{name}", res.ranges[0], res.revision)
        raise KafkaApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Topic '{name}' kept changing.")

    def config_overrides(self, resource_type: int, name: str) -> dict[str, str]:
        return dict(self.image.configs.get((resource_type, name), {}))

    async def update_config_overrides(
        self, resource_type: int, name: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]:
        """CAS loop on `configs/<type>/<name>` (deleted when the set becomes empty)."""
        rel = f"configs/{resource_type}/{name}"
        key = self.key(rel)
        for _ in range(10):
            new = dict(change(self.config_overrides(resource_type, name)))
            op = _put(key, _j(new)) if new else _delete(key)
            res = await self.txn([_cmp(key, "mod", "==", self.image.mod_revision(rel))], [op], [_get(key)])
            if res.succeeded:
                self._apply(rel, _j(new) if new else None, res.revision)
                return new
            await self._refresh_key(rel, res.ranges[0], res.revision)
        raise KafkaApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Configs of {name!r} kept changing.")

    def scram_credentials(self) -> dict[ScramKey, ScramCredential]:
        return dict(self.image.scram)

    def scram_credential(self, mechanism: ScramMechanism, user: str) -> ScramCredential | None:
        return self.image.scram.get((user, mechanism))

    async def alter_scram_credentials(
        self, upserts: list[tuple[str, ScramCredential]], deletions: list[ScramKey]
    ) -> None:
        """One transaction (the controller's; each user at most once, so no key twice); every broker's watch brings
        it into its image."""
        ops: list[tuple[str, bytes | None]] = [(scram_rel(u, m), None) for u, m in deletions]
        ops += [(scram_rel(u, c.mechanism), _j(c.to_json())) for u, c in upserts]
        await self._write_batches(ops)  # beyond etcd's limit in batches, as create_topic's partitions

    async def refresh_scram(self) -> None:
        """Read every credential at one revision and apply it now (read-your-writes after a forwarded alter)."""
        await self._refresh_prefix("scram/")

    async def _refresh_prefix(self, prefix: str) -> None:
        """Bring every key under `prefix` in the image up to one revision read now."""
        r = rpc.RangeRequest(key=self.key(prefix))
        r.range_end = aetcd.utils.prefix_range_end(r.key)
        res = await self.txn([], [rpc.RequestOp(request_range=r)])
        seen = {self._rel(kv.key) for kv in res.ranges[0]}
        self._apply_kvs(res.ranges[0])
        for rel in [k for k in self.image.revs if k.startswith(prefix) and k not in seen]:
            if self.image.mod_revision(rel):  # present in the image, absent in etcd
                self._apply(rel, None, res.revision)

    # ---- ACLs: one key per binding, named by its digest (acl_id) -------------------------------------------------
    # Any broker writes them, without the controller and without compare-and-set: a key is its binding's content,
    # so writing one twice, or deleting one already gone, changes nothing; and a binding created while another
    # broker deletes with a matching filter either is in that broker's fresh read (deleted) or comes after it.
    def acls(self) -> list[AclBinding]:
        return list(self.image.acls.values())

    async def create_acls(self, bindings: list[AclBinding]) -> None:
        # written even when the image has them: it may not show yet that another broker deleted one
        ops: dict[str, bytes | None] = {acl_rel(acl_id(b)): _j(b.to_json()) for b in bindings}
        await self._write_batches(list(ops.items()))

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        await self._refresh_prefix("acls/")  # judged on etcd's set now, not on a watch that may lag
        matched = await match_acls(list(self.image.acls.values()), filters)
        gone = {acl_rel(acl_id(b)) for found in matched for b in found}
        await self._write_batches([(rel, None) for rel in sorted(gone)])
        return matched

    async def _write_batches(self, ops: list[tuple[str, bytes | None]]) -> None:
        """Puts (value) and deletes (None) in transactions of at most MAX_TXN_OPS, applied to the image at once."""
        for i in range(0, len(ops), MAX_TXN_OPS):
            batch = ops[i : i + MAX_TXN_OPS]
            res = await self.txn(
                [], [_delete(self.key(rel)) if v is None else _put(self.key(rel), v) for rel, v in batch]
            )
            for rel, v in batch:
                self._apply(rel, v, res.revision)

    # ---- client quotas ----------------------------------------------------------------------------------------
    def client_quotas(self) -> dict[QuotaEntity, dict[str, float]]:
        return {e: dict(v) for e, v in self.image.quotas.items()}

    async def alter_client_quotas(self, changes: QuotaChanges) -> None:
        """One transaction (per MAX_TXN_OPS entities, beyond etcd's limit) that compares each entity's mod
        revision: any broker writes it, as quotas touch no partition state and need no controller to order them;
        re-read and retried on a concurrent change."""
        entities = list(changes)
        for i in range(0, len(entities), MAX_TXN_OPS):
            await self._alter_quota_batch({e: changes[e] for e in entities[i : i + MAX_TXN_OPS]})

    async def _alter_quota_batch(self, changes: QuotaChanges) -> None:
        rels = [quota_rel(e) for e in changes]
        keys = [self.key(rel) for rel in rels]
        for _ in range(10):
            values = [altered(self.image.quotas.get(e, {}), ops) for e, ops in changes.items()]
            puts: list[bytes | None] = [_j(v) if v else None for v in values]
            res = await self.txn(
                [_cmp(k, "mod", "==", self.image.mod_revision(rel)) for k, rel in zip(keys, rels, strict=True)],
                [_delete(k) if v is None else _put(k, v) for k, v in zip(keys, puts, strict=True)],
                [_get(k) for k in keys],
            )
            if res.succeeded:
                for rel, v in zip(rels, puts, strict=True):
                    self._apply(rel, v, res.revision)
                return
            for rel, kvs in zip(rels, res.ranges, strict=True):
                await self._refresh_key(rel, kvs, res.revision)
        raise KafkaApiError(ErrorCode.UNKNOWN_SERVER_ERROR, "Client quotas kept changing.")

    # ---- partition state --------------------------------------------------------------------------------------
    async def alter_partition(self, topic: str, partition: int, new: PartitionState) -> PartitionState:
        """Compare-and-set by a leader (ISR changes): the stored state must still be the one `new` succeeds.
        A broker that is not live or is in controlled shutdown cannot join the ISR (Kafka's INELIGIBLE_REPLICA):
        IneligibleReplicaError, before any etcd round trip."""
        cur = self.image.partitions.get((topic, partition))
        if cur is not None:
            bad = [b for b in new.isr if b not in cur.isr and (b not in self.image.brokers or b in self.image.shutdown)]
            if bad:
                raise IneligibleReplicaError(
                    f"{topic}-{partition}: broker(s) {bad} cannot join the ISR "
                    "(not registered, or in controlled shutdown)"
                )
        return await self.alter_batcher.submit(topic, partition, new)  # with others asked meanwhile: one txn

    async def write_partitions(
        self,
        updates: list[tuple[str, int, PartitionState]],
        topics: Iterable[TopicInfo] = (),
        *,
        controller_epoch: int | None = None,
    ) -> int:
        """One transaction: every partition key must be unchanged since the image read it and get
        partition_epoch + 1; `topics` are rewritten under the same compare; with `controller_epoch` the write
        only happens while that controller is current. StaleStateError (image refreshed) otherwise."""
        compare: list[rpc.Compare] = []
        success: list[rpc.RequestOp] = []
        failure: list[rpc.RequestOp] = []
        rels: list[str] = []
        for topic, p, new in updates:
            rel = f"partitions/{topic}/{p}"
            cur = self.image.partitions.get((topic, p))
            if cur is None:
                raise StaleStateError(f"{topic}-{p} does not exist")
            if new.partition_epoch != cur.partition_epoch + 1:
                raise StaleStateError(
                    f"{topic}-{p}: partition epoch {new.partition_epoch} does not follow {cur.partition_epoch}"
                )
            k = self.key(rel)
            compare.append(_cmp(k, "mod", "==", self.image.mod_revision(rel)))
            success.append(_put(k, _j(new.to_json())))
            failure.append(_get(k))
            rels.append(rel)
        for info in topics:
            rel = f"topics/{info.name}"
            k = self.key(rel)
            compare.append(_cmp(k, "mod", "==", self.image.mod_revision(rel)))
            success.append(_put(k, _j(topic_to_json(info))))
            failure.append(_get(k))
            rels.append(rel)
        if controller_epoch is not None:
            k = self.key("controller_epoch")
            compare.append(_cmp(k, "value", "==", _j(controller_epoch)))
            failure.append(_get(k))
        res = await self.txn(compare, success, failure)
        if not res.succeeded:
            for rel, kvs in zip(rels + ["controller_epoch"], res.ranges):
                await self._refresh_key(rel, kvs, res.revision)
            raise StaleStateError(f"partition state changed concurrently ({', '.join(rels)})")
        for topic, p, new in updates:
            self._apply(f"partitions/{topic}/{p}", _j(new.to_json()), res.revision)
        for info in topics:
            self._apply(f"topics/{info.name}", _j(topic_to_json(info)), res.revision)
        return res.revision

    # ---- controller election -------------------------------------------------------------------------------------
    async def try_become_controller(self) -> int | None:
        """Create `controller` on this broker's lease if absent, bumping `controller_epoch`; the new epoch, or
        None if another broker is controller (or the epoch moved under us)."""
        if not self.lease_id:
            return None
        ekey, ckey = self.key("controller_epoch"), self.key("controller")
        r = await self._rpc(lambda c: c.get(ekey))
        epoch = int(json.loads(r.value)) + 1 if r is not None else 1
        res = await self.txn(
            [_cmp(ckey, "create", "==", 0), _cmp(ekey, "mod", "==", r.mod_revision if r is not None else 0)],
            [_put(ckey, _j({"broker_id": self.broker_id, "epoch": epoch}), self.lease_id), _put(ekey, _j(epoch))],
            [_get(ckey)],
        )
        if not res.succeeded:
            self._apply_kvs(res.ranges[0] if res.ranges else [])
            return None
        self._apply("controller_epoch", _j(epoch), res.revision)
        self._apply("controller", _j({"broker_id": self.broker_id, "epoch": epoch}), res.revision)
        return epoch

    async def resign_controller(self, epoch: int) -> None:
        ckey = self.key("controller")
        await self.txn([_cmp(self.key("controller_epoch"), "value", "==", _j(epoch))], [_delete(ckey)])

    # ---- controlled shutdown ----------------------------------------------------------------------------------
    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Write `shutdown/<id>` (on this broker's lease) and wait until the controller marks it done."""
        if not self.lease_id:
            return True
        rel = f"shutdown/{self.broker_id}"
        if self.broker_id not in self.image.shutdown:
            res = await self.txn(
                [_cmp(self.key(rel), "create", "==", 0)], [_put(self.key(rel), _j({"done": False}), self.lease_id)]
            )
            if res.succeeded:
                self._apply(rel, _j({"done": False}), res.revision)
        return await self.wait_for(lambda: bool(self.image.shutdown.get(self.broker_id, {}).get("done")), timeout_s)

    async def mark_shutdown_done(self, broker_id: int, epoch: int) -> None:
        rel = f"shutdown/{broker_id}"
        r = await self._rpc(lambda c: c.get(self.key(rel)))
        if r is None:
            return
        res = await self.txn(
            [
                _cmp(self.key(rel), "mod", "==", r.mod_revision),
                _cmp(self.key("controller_epoch"), "value", "==", _j(epoch)),
            ],
            [_put(self.key(rel), _j({"done": True}), r.lease)],
        )
        if res.succeeded:
            self._apply(rel, _j({"done": True}), res.revision)

    async def delete_keys(self, rels: list[str], epoch: int) -> None:
        if not rels:
            return
        res = await self.txn(
            [_cmp(self.key("controller_epoch"), "value", "==", _j(epoch))], [_delete(self.key(r)) for r in rels]
        )
        if res.succeeded:
            for r in rels:
                self._apply(r, None, res.revision)

    # ---- producer ids -------------------------------------------------------------------------------------------
    async def allocate_producer_id_block(self, size: int) -> int:
        if size <= 0:
            raise ValueError(f"producer id block size must be positive, not {size}")
        k = self.key(PRODUCER_ID_KEY)
        for _ in range(100):
            r = await self._rpc(lambda c: c.get(k))
            start = int(json.loads(r.value)) if r is not None else 0
            if start > 2**63 - 1 - size:
                raise KafkaApiError(ErrorCode.UNKNOWN_SERVER_ERROR, "all producer ids are exhausted")
            res = await self.txn(
                [_cmp(k, "mod", "==", r.mod_revision if r is not None else 0)], [_put(k, _j(start + size))]
            )
            if res.succeeded:
                return start
        raise KafkaApiError(ErrorCode.UNKNOWN_SERVER_ERROR, "could not allocate a producer id block")
