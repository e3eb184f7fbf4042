"""Admin requests that change cluster metadata are carried out by the controller, as Kafka brokers forward them to
theirs (KIP-590): a broker that is not the controller sends the client's request on as it came and answers with the
controller's response.

The controller is the one broker that creates, deletes and grows topics, alters their configs, elects leaders on
request, starts reassignments and alters SCRAM credentials; every topic or partition change is still a
compare-and-set transaction in etcd, so a controller deposed mid-request cannot overwrite its successor's work. A
forwarded request is marked by its client id, so a broker that lost the controller role while the request
travelled answers NOT_CONTROLLER instead of forwarding it again (clients retry it). Before answering, the
forwarding broker reads the changed topics back from etcd, so the client's next request to it sees what the
controller did.

The controller authorizes the client, not the forwarding broker: as Kafka's Envelope (KIP-590) carries the client's
principal and address, the marker does too (`strata-forwarded-by-<broker id>/<principal>/<address>:<client id>`,
principal and address percent-encoded). The controller believes them only from a connection whose own principal
holds CLUSTER_ACTION on the cluster (a broker); from anyone else it authorizes the connection's principal
(broker/apis.py).
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import structlog

from strata.protocol.errors import ErrorCode, KafkaApiError
from strata.protocol.registry import REQUEST_CLASSES, ApiKey, api_name

from .broker_client import BrokerConnection, BrokerConnectionError, inter_broker_security

if TYPE_CHECKING:
    from ..endpoints import BrokerEndpoints
    from ..metadata_store import MetadataStore, TopicInfo
    from ..metrics import BrokerMetrics
    from .etcd_store import EtcdMetadataStore

log = structlog.get_logger("strata.forwarding")

# The requests a broker hands to the controller (Kafka's ForwardingManager set, as far as Strata implements it).
CONTROLLER_APIS = frozenset(
    {
        ApiKey.CREATE_TOPICS,
        ApiKey.DELETE_TOPICS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.ALTER_CONFIGS,
        ApiKey.ELECT_LEADERS,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        ApiKey.LIST_PARTITION_REASSIGNMENTS,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    }
)
FORWARDED_PREFIX = "strata-forwarded-by-"
BROKER_LOGGER_RESOURCE = 8  # ConfigResource.Type.BROKER_LOGGER
DEFAULT_TIMEOUT_S = 30.0
FORWARDED_SETTLE_S = 3.0  # a forwarded request waits this long for this broker to take up the controllership
AUTO_CREATE_VERSION = 7
_CORR = struct.Struct(">i")


def is_forwarded(client_id: str | None) -> bool:
    return client_id is not None and client_id.startswith(FORWARDED_PREFIX)


def forwarded_client_id(broker_id: int, client_id: str | None, principal: str, client_address: str) -> str:
    """The client id a forwarded request carries: who forwarded it, for whom (principal and address), and the
    client's own id."""
    who = quote(principal, safe="")
    where = quote(client_address, safe="")
    return f"{FORWARDED_PREFIX}{broker_id}/{who}/{where}:{client_id or ''}"


def _marker_fields(client_id: str | None) -> list[str] | None:
    if not is_forwarded(client_id):
        return None
    assert client_id is not None
    return client_id[len(FORWARDED_PREFIX) :].partition(":")[0].split("/")


def forwarding_broker_id(client_id: str | None) -> int | None:
    """The id of the broker that forwarded a request (None if it came from a client): a BROKER config resource
    names the broker the client sent it to."""
    fields = _marker_fields(client_id)
    if fields is None:
        return None
    return int(fields[0]) if fields[0].isdigit() else None


def forwarded_identity(client_id: str | None) -> tuple[str, str] | None:
    """The client's principal (`User:alice`) and address (`host:port`) a forwarded request names, if it does."""
    fields = _marker_fields(client_id)
    if fields is None or len(fields) != 3 or not fields[1]:
        return None
    return unquote(fields[1]), unquote(fields[2])


def _local_only(api_key: int, req: Any) -> bool:
    """BROKER_LOGGER changes are made by the broker the client sent them to, so a request holding one is answered
    here (Kafka's broker applies them and forwards the rest; dynamic BROKER configs in the same request are
    written to etcd from here, by the same compare-and-set as the controller's)."""
    return (
        api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS
        and req is not None
        and any(r.resource_type == BROKER_LOGGER_RESOURCE for r in req.resources or ())
    )


def topics_named(api_key: int, version: int, req: Any, store: MetadataStore) -> list[str]:
    """The topics a controller request changes (read back from etcd after it)."""
    if api_key == ApiKey.CREATE_TOPICS or api_key == ApiKey.CREATE_PARTITIONS:
        return [t.name for t in req.topics]
    if api_key == ApiKey.DELETE_TOPICS:
        if version < 6:
            return list(req.topic_names)
        names = []
        for t in req.topics:
            info = store.topic_by_id(t.topic_id) if t.name is None and t.topic_id is not None else None
            names.append(info.name if info is not None else t.name)
        return [n for n in names if n]
    if api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS or api_key == ApiKey.ALTER_CONFIGS:
        return [r.resource_name for r in req.resources if r.resource_type == 2]
    if api_key == ApiKey.ELECT_LEADERS:
        return [t.topic for t in req.topic_partitions or []]
    if api_key == ApiKey.ALTER_PARTITION_REASSIGNMENTS:
        return [t.name for t in req.topics]
    return []


class ControllerChannel:
    """This broker's connection to the controller, used one request at a time (admin requests are rare)."""

    def __init__(
        self,
        store: EtcdMetadataStore,
        endpoints: BrokerEndpoints,
        metrics: BrokerMetrics,
        *,
        broker_id: int,
        socket_timeout_s: float,
        is_controller: Callable[[], bool],
    ) -> None:
        """`is_controller`: whether this broker is the active controller now (it then answers itself)."""
        self.store = store
        self.endpoints = endpoints
        self.metrics = metrics
        self.broker_id = broker_id
        self.socket_timeout_s = socket_timeout_s
        self._is_controller = is_controller
        self._conn: tuple[int, BrokerConnection] | None = None
        self._lock = asyncio.Lock()
        self._closing: set[asyncio.Task[None]] = set()  # connections to a former controller, closing

    def is_controller(self) -> bool:
        return self._is_controller()

    def should_forward(self, api_key: int, client_id: str | None, req: Any = None) -> bool:
        return (
            api_key in CONTROLLER_APIS
            and not is_forwarded(client_id)
            and not self.is_controller()
            and not _local_only(api_key, req)
        )

    def forwarded_too_early(self, api_key: int, client_id: str | None) -> bool:
        """A request forwarded here because the sender's image names this broker controller, before this broker has
        taken the office up (its election write returns after other brokers may have seen it): it should wait a
        moment for that (settle_forwarded) instead of answering NOT_CONTROLLER, which the forwarder would relay to
        the client. (Kafka's forwarding thread re-sends on NOT_CONTROLLER; here the receiver waits.)"""
        return api_key in CONTROLLER_APIS and is_forwarded(client_id) and not self.is_controller()

    async def settle_forwarded(self) -> None:
        deadline = time.monotonic() + FORWARDED_SETTLE_S
        while not self.is_controller() and (left := deadline - time.monotonic()) > 0:
            # polled too: taking office sets the controller's epoch, which is no image change
            await self.store.wait_for(self.is_controller, min(left, 0.05))

    async def forward(
        self,
        payload: bytes | bytearray | memoryview,
        api_key: int,
        version: int,
        client_id: str | None,
        req: Any,
        principal: str,
        client_address: str,
    ) -> bytes | None:
        """The controller's response to the client's request (payload, header included, under the controller's
        correlation id), or None if this broker should answer itself: it has become the controller, or no
        controller answered in time (then its own handler answers NOT_CONTROLLER). The controller authorizes
        `principal` connecting from `client_address`."""
        timeout_s = getattr(req, "timeout_ms", 0) / 1000 or DEFAULT_TIMEOUT_S
        fwd_id = forwarded_client_id(self.broker_id, client_id, principal, client_address)
        resp = await self._send(lambda conn, left: conn.forward(payload, fwd_id, left), timeout_s)
        if resp is None:
            return None
        self.metrics.forwarded_requests.labels(api_name(api_key)).inc()
        await self._read_back(topics_named(api_key, version, req, self.store))
        if api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
            await self._read_back_scram()
        return resp

    async def create_topic(self, name: str) -> TopicInfo | None:
        """Metadata's auto-creation, as Kafka's brokers do it: a CreateTopics with the controller's defaults."""
        R = REQUEST_CLASSES[ApiKey.CREATE_TOPICS][AUTO_CREATE_VERSION]
        topic = R.CreatableTopic(name=name, num_partitions=-1, replication_factor=-1, assignments=[], configs=[])
        timeout_ms = int(DEFAULT_TIMEOUT_S * 1000)
        resp = await self._send(
            lambda conn, left: conn.request(
                ApiKey.CREATE_TOPICS,
                AUTO_CREATE_VERSION,
                left,
                topics=[topic],
                timeout_ms=timeout_ms,
                validate_only=False,
            ),
            DEFAULT_TIMEOUT_S,
        )
        if resp is None:
            raise KafkaApiError(ErrorCode.LEADER_NOT_AVAILABLE, "no controller to create the topic")
        self.metrics.forwarded_requests.labels(api_name(ApiKey.CREATE_TOPICS)).inc()
        res = resp.topics[0]
        if res.error_code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
            raise KafkaApiError(ErrorCode(res.error_code), res.error_message)
        await self._read_back([name])
        return self.store.topic(name)

    async def _send(self, call: Callable[[BrokerConnection, float], Awaitable[Any]], timeout_s: float) -> Any:
        store = self.store
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            if self.is_controller():
                return None
            c = store.image.controller
            if c is None or c.broker_id == self.broker_id:  # none yet, or ours not yet taken up
                await store.wait_for(lambda c=c: store.image.controller != c or self.is_controller(), min(left, 1.0))
                continue
            try:
                async with self._lock:
                    return await call(self._connection(c.broker_id), left)
            except BrokerConnectionError as e:
                log.info(
                    "controller unreachable; waiting for it or its successor", controller=c.broker_id, error=str(e)
                )
                await store.wait_for(lambda c=c: store.image.controller != c, min(left, 0.5))
        return None

    def _connection(self, broker_id: int) -> BrokerConnection:
        ep = self.endpoints.inter_broker_endpoint(broker_id)
        if ep is None:
            raise BrokerConnectionError(f"controller {broker_id} has no endpoint")
        if self._conn is None or self._conn[0] != broker_id or (self._conn[1].host, self._conn[1].port) != tuple(ep):
            if self._conn is not None:
                t = asyncio.ensure_future(self._conn[1].close())
                self._closing.add(t)
                t.add_done_callback(self._closing.discard)
            self._conn = (
                broker_id,
                BrokerConnection(
                    ep[0],
                    ep[1],
                    f"broker-{self.broker_id}-forwarding",
                    self.socket_timeout_s,
                    inter_broker_security(self.endpoints.config),
                ),
            )
        return self._conn[1]

    async def _read_back(self, names: list[str]) -> None:
        if not names:
            return
        try:
            await self.store.refresh_topics(names)
        except Exception as e:  # noqa: BLE001 - the controller has answered; the watch brings the change anyway
            log.warning("could not read back forwarded changes", topics=names, error=repr(e))

    async def _read_back_scram(self) -> None:
        """The credentials as the controller left them, so the client's next Describe here shows its change."""
        try:
            await self.store.refresh_scram()
        except Exception as e:  # noqa: BLE001 - the controller has answered; the watch brings the change anyway
            log.warning("could not read back forwarded SCRAM changes", error=repr(e))

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn[1], None
            await conn.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


def reframe(response: bytes, correlation_id: int) -> bytes:
    """A forwarded response framed for the client: its correlation id instead of ours."""
    return _CORR.pack(len(response)) + _CORR.pack(correlation_id) + response[4:]
