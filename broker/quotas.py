"""Client quota enforcement (Kafka's QuotaManagers: produce, fetch, request), wired around every request.

`KafkaApis` asks this module before a handler runs (a consumer's Fetch is capped to what its quota window allows,
as Kafka caps `fetchMaxBytes`) and after (record the usage, compute the throttle time, put it in the response).
As Kafka does, the answer leaves at once with `throttle_time_ms` set and the connection is then muted for that
time (KIP-219): the next request is not read before. Responses of versions older than the client-side throttling of
KIP-219 (Produce < v6, Fetch < v8, ...) are held back for the throttle time instead. A consumer Fetch of a client
that was over its quota before it (it did not wait out its throttle: another connection, an old client) or is over
its request quota answers no records, and its bytes are not counted (Kafka's "unrecord"); one that this fetch takes
over the quota gets its records and the throttle time (Kafka empties that one too, but with fetches capped to one
window's worth a first batch larger than that would then never be delivered).

What counts: Produce records the request's size against `producer_byte_rate`, a consumer Fetch its records' size
against `consumer_byte_rate`, and every request (but an acks=0 Produce) the time its handler ran on the event loop,
as a percentage of one core, against `request_percentage` (Kafka: time on its request handler threads). Follower
fetches and a broker's own requests (forwarded admin requests, the RLMM producer) are never throttled.
The configured values come from the metadata store (AlterClientQuotas) and apply on every broker through its watch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Generator
from typing import Any

from prometheus_client import Histogram

from strata.config import BrokerConfig
from strata.protocol.registry import ApiKey

from .cluster.forwarding import is_forwarded
from .metadata_store import MetadataStore
from .metrics import BrokerMetrics, fetch_request_name
from .request_context import RequestContext
from .security.client_quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotaManager,
)
from .tiered import RLMM_PRODUCER_CLIENT_ID

NANOS_TO_PERCENT_SECONDS = 100.0 / 1e9  # Kafka's NanosToPercentagePerSecond

# The first version of each API whose clients throttle themselves on throttle_time_ms (each response's
# shouldClientThrottle in Kafka); older versions get their response after the throttle time instead. An API not
# listed never throttles on the client side (DescribeClientQuotas, OffsetForLeaderEpoch, SASL, ...).
CLIENT_THROTTLES_FROM: dict[int, int] = {
    ApiKey.PRODUCE: 6,
    ApiKey.FETCH: 8,
    ApiKey.LIST_OFFSETS: 3,
    ApiKey.METADATA: 6,
    ApiKey.OFFSET_COMMIT: 4,
    ApiKey.OFFSET_FETCH: 4,
    ApiKey.FIND_COORDINATOR: 2,
    ApiKey.JOIN_GROUP: 3,
    ApiKey.HEARTBEAT: 2,
    ApiKey.LEAVE_GROUP: 2,
    ApiKey.SYNC_GROUP: 2,
    ApiKey.DESCRIBE_GROUPS: 2,
    ApiKey.LIST_GROUPS: 2,
    ApiKey.API_VERSIONS: 2,
    ApiKey.CREATE_TOPICS: 3,
    ApiKey.DELETE_TOPICS: 2,
    ApiKey.DELETE_RECORDS: 1,
    ApiKey.INIT_PRODUCER_ID: 1,
    ApiKey.DESCRIBE_CONFIGS: 2,
    ApiKey.ALTER_CONFIGS: 1,
    ApiKey.DESCRIBE_LOG_DIRS: 1,
    ApiKey.CREATE_PARTITIONS: 1,
    ApiKey.DELETE_GROUPS: 1,
    ApiKey.ELECT_LEADERS: 0,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 0,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: 0,
    ApiKey.OFFSET_DELETE: 0,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0,
}


def client_throttles(api_key: int, version: int) -> bool:
    """Whether a client of this response version waits out throttle_time_ms itself (KIP-219)."""
    first = CLIENT_THROTTLES_FROM.get(api_key)
    return first is not None and version >= first


def _is_follower_fetch(api_key: int, req: Any) -> bool:
    return api_key == ApiKey.FETCH and fetch_request_name(req) == "FetchFollower"


def _exempt(api_key: int, ctx: RequestContext, req: Any) -> bool:
    """Requests of brokers: replication, forwarding, the RLMM's producer (Kafka exempts cluster actions)."""
    cid = ctx.client_id or ""
    return _is_follower_fetch(api_key, req) or is_forwarded(cid) or cid.startswith(RLMM_PRODUCER_CLIENT_ID)


def fetch_response_bytes(resp: Any) -> int:
    """The records a Fetch response carries (what the consumer byte rate measures)."""
    n = 0
    for t in resp.responses or ():
        for p in t.partitions or ():
            if p.records is not None:
                n += len(p.records)
    return n


class LoopTimed:
    """Awaits a coroutine and adds up the time its steps ran on the event loop, leaving out the time it waited
    (a long poll, a purgatory, a worker thread): the request-time a request quota measures."""

    __slots__ = ("coro", "ns")

    def __init__(self, coro: Awaitable[Any]) -> None:
        self.coro: Any = coro  # a handler's coroutine, stepped by hand
        self.ns = 0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self.coro
        value: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter_ns()
            try:
                step = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as done:
                self.ns += time.perf_counter_ns() - started
                return done.value
            finally:
                value = error = None
            self.ns += time.perf_counter_ns() - started
            try:
                value = yield step
            except BaseException as e:  # noqa: BLE001 - cancellation and the like go to the coroutine, as await would
                error = e


class ClientQuotas:
    """The three client quota managers of one broker, kept in step with the metadata store."""

    def __init__(self, config: BrokerConfig, store: MetadataStore, metrics: BrokerMetrics) -> None:
        num = config["quota.window.num"]
        size = float(config["quota.window.size.seconds"])
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, num, size)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, num, size)
        # Kafka bounds a request-quota throttle to one window
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, num, size, max_throttle_ms=int(size * 1000))
        self.store = store
        self._load_pending = False
        # kafka.server:type={Produce,Fetch,Request},user=*,client-id=* throttle-time, by quota type only: user names
        # and client ids are unbounded label values
        self.throttle_time = Histogram(
            "strata_client_quota_throttle_time_seconds",
            "Throttle time given to clients over a quota (Kafka's throttle-time), by quota type",
            ["quota_type"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
            registry=metrics.registry,
        )
        self.load()
        store.add_listener(self._on_change)

    def _on_change(self, kind: str, key: object) -> None:
        """A change of many entities notifies once per entity: reload once, after the change (at the loop's next
        turn), not once per entity."""
        if kind != "quota" or self._load_pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a store used outside the broker): at once
            self.load()
            return
        self._load_pending = True
        loop.call_soon(self.load)

    def load(self) -> None:
        """Take every entity's values from the store (again once an etcd store has read its first image, which
        notifies no listener)."""
        self._load_pending = False
        configs = self.store.client_quotas()
        for manager in (self.produce, self.fetch, self.request):
            manager.update_configs(configs)

    @property
    def enabled(self) -> bool:
        return self.produce.enabled or self.fetch.enabled or self.request.enabled

    def times_requests(self, api_key: int, ctx: RequestContext, req: Any) -> bool:
        """Whether this request's loop time must be measured (a request quota is configured and applies)."""
        return self.request.enabled and not _exempt(api_key, ctx, req)

    def before(self, api_key: int, ctx: RequestContext, req: Any) -> None:
        """A consumer's Fetch asks at most what an idle client may fetch unthrottled (Kafka's cap on
        fetchMaxBytes); the first batch of a partition still comes whole (KIP-74)."""
        if api_key != ApiKey.FETCH or not self.fetch.enabled or _is_follower_fetch(api_key, req):
            return
        cap = self.fetch.max_value_in_window(ctx.principal.name, ctx.client_id or "")
        if cap is not None and ctx.api_version >= 3 and req.max_bytes > cap:
            req.max_bytes = max(int(cap), 1)

    def after(self, api_key: int, ctx: RequestContext, req: Any, resp: Any, request_bytes: int, loop_ns: int) -> int:
        """Record the request's usage; the throttle time in ms (0: none), already set in the response. A consumer
        Fetch of a client already over quota loses its records (it fetches them again after the throttle)."""
        if _exempt(api_key, ctx, req):
            return 0
        user, client_id = ctx.principal.name, ctx.client_id or ""
        now = time.monotonic()
        request_ms = 0
        if loop_ns and not (api_key == ApiKey.PRODUCE and req.acks == 0):  # Kafka: acks=0 is request-quota exempt
            request_ms = self.request.record_and_throttle_ms(user, client_id, loop_ns * NANOS_TO_PERCENT_SECONDS, now)
        bytes_ms, kind = 0, "request"
        if api_key == ApiKey.PRODUCE and self.produce.enabled:
            bytes_ms, kind = self.produce.record_and_throttle_ms(user, client_id, request_bytes, now), "produce"
        elif api_key == ApiKey.FETCH and self.fetch.enabled and resp is not None:
            size = fetch_response_bytes(resp)
            over_before = self.fetch.throttle_ms(user, client_id, now) > 0
            bytes_ms, kind = self.fetch.record_and_throttle_ms(user, client_id, size, now), "fetch"
            if request_ms > 0 or (bytes_ms > 0 and over_before):
                self.fetch.unrecord(user, client_id, size, now)
                resp.responses = []  # Kafka's throttled fetch response: no partitions
                if hasattr(resp, "node_endpoints"):
                    resp.node_endpoints = []
                if ctx.on_fetch_throttled is not None:
                    ctx.on_fetch_throttled()  # a fetch session: nothing of this answer reaches the client
        throttle_ms = max(bytes_ms, request_ms)
        if throttle_ms <= 0:
            return 0
        self.throttle_time.labels(kind if bytes_ms > request_ms else "request").observe(throttle_ms / 1000)
        if resp is not None and hasattr(resp, "throttle_time_ms"):
            resp.throttle_time_ms = throttle_ms
        return throttle_ms


async def hold_response(throttle_ms: int) -> None:
    """A client that does not throttle itself (an old version) gets its answer after the throttle time: Kafka mutes
    the channel first and sends the response when the throttle ends. This is the throttle, not synchronisation."""
    await asyncio.sleep(throttle_ms / 1000)


__all__ = ["CLIENT_THROTTLES_FROM", "ClientQuotas", "LoopTimed", "client_throttles", "hold_response"]
