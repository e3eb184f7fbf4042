"""KafkaApis: decode a request frame, route it to its handler, encode the response.

Every advertised (api_key, version) in strata.protocol.registry.SUPPORTED_VERSIONS must have a handler here; anything
else is a protocol error that closes the connection (ApiVersions excepted: it answers error 35 in a v0 body).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from strata.protocol.acl import CLUSTER_NAME, AclError, AclOperation, ResourceType, parse_principal
from strata.protocol.fetch_response import encode_fetch_response
from strata.protocol.produce_records import use_request_buffer
from strata.protocol.records import BufferChain
from strata.protocol.registry import (
    SUPPORTED_VERSIONS,
    ApiKey,
    api_name,
    decode_request,
    encode_response,
    invalid_request_response,
    is_supported,
    peek_header,
    unsupported_api_versions_response,
)
from strata.protocol.request_nulls import NullFieldError
from strata.storage.file_region import FileRegion

from .authorization import authorize
from .cluster.forwarding import forwarded_identity, reframe
from .network import CloseConnection, Connection
from .quotas import ClientQuotas, LoopTimed, client_throttles, hold_response
from .request_context import Authorizer, KafkaPrincipal, RequestContext
from .services import BrokerServices

log = structlog.get_logger("strata.apis")

# Requests that must not take long beyond what they ask to wait (a Fetch's max_wait_ms): answered later than that by
# SLOW_REQUEST_S, they are logged, since a client's next requests on the connection wait behind them.
SLOW_REQUEST_S = 2.0
_BOUNDED_APIS = frozenset(
    {
        ApiKey.FETCH,
        ApiKey.HEARTBEAT,
        ApiKey.OFFSET_COMMIT,
        ApiKey.OFFSET_FETCH,
        ApiKey.METADATA,
        ApiKey.LIST_OFFSETS,
        ApiKey.FIND_COORDINATOR,
    }
)


# Requests larger than this are decoded in a worker thread (a thread hop costs ~60 us; decoding a 1 MiB request of
# small structs costs tens of milliseconds).
DECODE_OFF_LOOP_BYTES = 1 << 20
# Responses with more entries than this (topics, partitions, groups, configs, ... at any depth) are encoded in a
# worker thread: the codec takes ~20-40 us per entry, so 100,000 partitions held the loop 4 s.
ENCODE_OFF_LOOP_ITEMS = 1024
ENCODE_OFF_LOOP_PRODUCE_PARTITIONS = 65536  # the Produce codec's answer: ~25 ms of encoding

# Requests whose body carries a secret (AlterUserScramCredentials: a SaltedPassword, which authenticates as its user;
# SaslAuthenticate (36): the client's token): an undecodable one is logged without its first bytes.
_SECRET_BEARING_APIS = frozenset({ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 36})

HandlerFn = Callable[[BrokerServices, RequestContext, Any], Awaitable[Any]]

# Requests that wait for *other* requests to make progress: a Fetch long poll (replication rides on Fetch too), the
# JoinGroup and SyncGroup barriers, an acks=-1 Produce waiting for followers' fetches. Kafka takes them out of its
# request queue while they wait in a purgatory; Strata cannot tell when a handler parks, so they take no
# queued.max.requests slot (holding one while parked could starve the very requests they wait for).
_WAITING_APIS = frozenset({ApiKey.FETCH, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP})


def takes_request_slot(api_key: int, req: Any) -> bool:
    """Whether this request counts against `queued.max.requests` while its handler runs."""
    if api_key in _WAITING_APIS:
        return False
    return not (api_key == ApiKey.PRODUCE and req.acks == -1)


def build_handlers() -> dict[int, HandlerFn]:
    from .handlers import (
        acls,
        admin,
        api_versions,
        client_quotas,
        cluster_admin,
        configs,
        consumer_groups,
        fetch,
        groups,
        list_offsets,
        log_dirs,
        metadata,
        offset_for_leader_epoch,
        produce,
        producer,
        sasl,
        scram_admin,
        txn,
    )

    return {
        ApiKey.API_VERSIONS: api_versions.handle,
        ApiKey.METADATA: metadata.handle,
        ApiKey.PRODUCE: produce.handle,
        ApiKey.FETCH: fetch.handle,
        ApiKey.LIST_OFFSETS: list_offsets.handle,
        ApiKey.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch.handle,
        ApiKey.CREATE_TOPICS: admin.create_topics,
        ApiKey.DELETE_TOPICS: admin.delete_topics,
        ApiKey.CREATE_PARTITIONS: admin.create_partitions,
        ApiKey.DELETE_RECORDS: admin.delete_records,
        ApiKey.DESCRIBE_CONFIGS: configs.describe_configs,
        ApiKey.INCREMENTAL_ALTER_CONFIGS: configs.incremental_alter_configs,
        ApiKey.ALTER_CONFIGS: configs.alter_configs,
        ApiKey.DESCRIBE_CLUSTER: admin.describe_cluster,
        ApiKey.DESCRIBE_LOG_DIRS: log_dirs.describe_log_dirs,
        ApiKey.ELECT_LEADERS: cluster_admin.elect_leaders,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: cluster_admin.alter_partition_reassignments,
        ApiKey.LIST_PARTITION_REASSIGNMENTS: cluster_admin.list_partition_reassignments,
        ApiKey.INIT_PRODUCER_ID: producer.init_producer_id,
        ApiKey.FIND_COORDINATOR: groups.find_coordinator,
        ApiKey.JOIN_GROUP: groups.join_group,
        ApiKey.SYNC_GROUP: groups.sync_group,
        ApiKey.HEARTBEAT: groups.heartbeat,
        ApiKey.LEAVE_GROUP: groups.leave_group,
        ApiKey.OFFSET_COMMIT: groups.offset_commit,
        ApiKey.OFFSET_FETCH: groups.offset_fetch,
        ApiKey.OFFSET_DELETE: groups.offset_delete,
        ApiKey.LIST_GROUPS: groups.list_groups,
        ApiKey.DESCRIBE_GROUPS: groups.describe_groups,
        ApiKey.DELETE_GROUPS: groups.delete_groups,
        ApiKey.CONSUMER_GROUP_HEARTBEAT: consumer_groups.consumer_group_heartbeat,
        ApiKey.CONSUMER_GROUP_DESCRIBE: consumer_groups.consumer_group_describe,
        ApiKey.SASL_HANDSHAKE: sasl.sasl_handshake,
        ApiKey.SASL_AUTHENTICATE: sasl.sasl_authenticate,
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: scram_admin.describe_user_scram_credentials,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: scram_admin.alter_user_scram_credentials,
        ApiKey.DESCRIBE_CLIENT_QUOTAS: client_quotas.describe_client_quotas,
        ApiKey.ALTER_CLIENT_QUOTAS: client_quotas.alter_client_quotas,
        ApiKey.DESCRIBE_ACLS: acls.describe_acls,
        ApiKey.CREATE_ACLS: acls.create_acls,
        ApiKey.DELETE_ACLS: acls.delete_acls,
        ApiKey.ADD_PARTITIONS_TO_TXN: txn.add_partitions_to_txn,
        ApiKey.ADD_OFFSETS_TO_TXN: txn.add_offsets_to_txn,
        ApiKey.END_TXN: txn.end_txn,
        ApiKey.WRITE_TXN_MARKERS: txn.write_txn_markers,
        ApiKey.TXN_OFFSET_COMMIT: txn.txn_offset_commit,
        ApiKey.DESCRIBE_PRODUCERS: txn.describe_producers,
        ApiKey.DESCRIBE_TRANSACTIONS: txn.describe_transactions,
        ApiKey.LIST_TRANSACTIONS: txn.list_transactions,
    }


class KafkaApis:
    def __init__(self, services: BrokerServices, authorizer: Authorizer | None = None) -> None:
        self.services = services
        self.metrics = services.metrics
        self.authorizer = authorizer
        self.handlers = build_handlers()
        self.quotas = ClientQuotas(services.config, services.store, services.metrics)
        # queued.max.requests: requests in progress at once across all connections. A request waiting here has been
        # read, and its connection reads nothing more until it is answered: backpressure, as Kafka's full request
        # queue stops its processors from reading.
        self.request_slots = asyncio.Semaphore(services.config["queued.max.requests"])
        self.zero_copy = bool(services.config["fetch.zero.copy.enable"])  # sendfile on plaintext listeners
        missing = set(SUPPORTED_VERSIONS) - set(self.handlers)
        if missing:
            raise RuntimeError(f"advertised APIs without a handler: {sorted(missing)}")

    def _completed(self, name: str, received: float, req: Any = None) -> float:
        """Count an answered request and its latency (a Fetch also as FetchConsumer/FetchFollower); the latency."""
        elapsed = time.perf_counter() - received
        self.metrics.request_completed(name, elapsed, req)
        return elapsed

    async def handle(self, conn: Connection, payload: bytes | bytearray) -> bytes | list | None:
        received = time.perf_counter()
        try:
            hdr = peek_header(payload)
        except ValueError as e:
            log.warning("closing connection: malformed request header", conn=conn.id, peer=conn.peer, error=str(e))
            raise CloseConnection from None
        if not is_supported(hdr.api_key, hdr.api_version):
            if hdr.api_key == ApiKey.API_VERSIONS:
                self.metrics.request_errors.labels("ApiVersions").inc()
                return unsupported_api_versions_response(hdr.correlation_id)
            log.warning(
                "closing connection: unsupported api or version",
                conn=conn.id,
                peer=conn.peer,
                api_key=hdr.api_key,
                api=api_name(hdr.api_key),
                version=hdr.api_version,
            )
            self.metrics.request_errors.labels(api_name(hdr.api_key)).inc()
            raise CloseConnection
        name = api_name(hdr.api_key)
        try:
            if len(payload) > DECODE_OFF_LOOP_BYTES:
                # pure-Python decoding of a big request takes seconds (100,000 structs: ~2.6 s): a worker thread
                # keeps the loop serving the other connections meanwhile (it gets the GIL every switch interval)
                decoded = await asyncio.to_thread(decode_request, payload, hdr.api_key, hdr.api_version)
            else:
                decoded = decode_request(payload, hdr.api_key, hdr.api_version)
        except NullFieldError as e:
            # Kafka's parser refuses it (InvalidRequestException); answer INVALID_REQUEST where the response can
            # say so, else close. One line, no traceback: the client is at fault, not the broker.
            answer = invalid_request_response(hdr.api_key, hdr.api_version, hdr.correlation_id)
            log.warning(
                "invalid request: null in a non-nullable field",
                conn=conn.id,
                peer=conn.peer,
                api=name,
                version=hdr.api_version,
                client_id=e.client_id,
                field=e.field,
                answer="INVALID_REQUEST" if answer is not None else "close",
            )
            self.metrics.request_errors.labels(name).inc()
            if answer is None:
                raise CloseConnection from None
            return answer
        except Exception as e:  # noqa: BLE001 - whatever the codec raises on a bad body: close this connection only
            log.warning(
                "closing connection: undecodable request",
                conn=conn.id,
                peer=conn.peer,
                api=name,
                version=hdr.api_version,
                error=repr(e),
                head=bytes(payload[:48]).hex() if hdr.api_key not in _SECRET_BEARING_APIS else None,
            )
            self.metrics.request_errors.labels(name).inc()
            raise CloseConnection from None
        req = decoded.body
        if hdr.api_key == ApiKey.PRODUCE and isinstance(payload, bytearray):
            use_request_buffer(req, payload, hdr.api_version)  # the append stamps the batch headers in place
        ctx = RequestContext(
            hdr.api_key,
            hdr.api_version,
            hdr.correlation_id,
            decoded.client_id,
            received,
            conn.listener,
            conn.peer,
            conn.principal,
            self.authorizer,
            conn.sasl,
            self.metrics,
            zero_copy=self.zero_copy and conn.plaintext,
        )
        act_for_forwarded_client(ctx)
        fwd = self.services.controller_channel
        if fwd is not None and fwd.should_forward(hdr.api_key, ctx.client_id, req):
            forwarded = await fwd.forward(
                payload, hdr.api_key, hdr.api_version, ctx.client_id, req, str(ctx.principal), ctx.client_address
            )
            if forwarded is not None:
                self._completed(name, received, req)
                return reframe(forwarded, hdr.correlation_id)
        elif fwd is not None and fwd.forwarded_too_early(hdr.api_key, ctx.client_id):
            await fwd.settle_forwarded()
        slot = self.request_slots if takes_request_slot(hdr.api_key, req) else None
        if slot is not None:
            await slot.acquire()
        else:  # it may wait for other requests (a purgatory): its bytes must not hold back reading theirs
            conn.release_request_bytes()
        quotas = self.quotas if self.quotas.enabled else None
        timed: LoopTimed | None = None
        try:
            call = self.handlers[hdr.api_key](self.services, ctx, req)
            if quotas is not None:
                quotas.before(hdr.api_key, ctx, req)
                if quotas.times_requests(hdr.api_key, ctx, req):
                    call = timed = LoopTimed(call)
            resp = await call
        except CloseConnection:
            self.metrics.request_errors.labels(name).inc()
            raise
        except Exception:
            log.exception("request failed", api=name, version=hdr.api_version, client_id=ctx.client_id)
            self.metrics.request_errors.labels(name).inc()
            raise CloseConnection from None
        finally:
            if slot is not None:
                slot.release()
        if quotas is not None:
            throttle_ms = quotas.after(hdr.api_key, ctx, req, resp, len(payload), timed.ns if timed else 0)
            if throttle_ms > 0:
                if client_throttles(hdr.api_key, hdr.api_version):
                    conn.mute(throttle_ms)  # answered now; the connection reads nothing more until the mute ends
                else:
                    await hold_response(throttle_ms)
        elapsed = self._completed(name, received, req)
        if hdr.api_key in _BOUNDED_APIS and elapsed > getattr(req, "max_wait_ms", 0) / 1000 + SLOW_REQUEST_S:
            # A client waits for this answer before anything else it sent on the connection (heartbeats included).
            log.warning(
                "slow request",
                api=name,
                version=hdr.api_version,
                client_id=ctx.client_id,
                conn=conn.id,
                correlation_id=hdr.correlation_id,
                elapsed_s=round(elapsed, 3),
            )
        if resp is None:
            return None
        if hdr.api_key == ApiKey.PRODUCE:  # protocol/produce_codec.py: packed by hand, ~0.4 us a partition
            if resp.partition_count() > ENCODE_OFF_LOOP_PRODUCE_PARTITIONS:
                return await asyncio.to_thread(resp.encode, hdr.correlation_id)
            return resp.encode(hdr.correlation_id)
        if hdr.api_key == ApiKey.FETCH:
            # Records go out as the log returned them (a list of buffers for writelines), not copied twice.
            parts = encode_fetch_response(resp, hdr.api_version, hdr.correlation_id)
            if parts is not None:
                return parts
            join_record_chains(resp)  # the codec takes one buffer per partition
        if (
            len(payload) > DECODE_OFF_LOOP_BYTES
            or response_entries(resp, ENCODE_OFF_LOOP_ITEMS) > ENCODE_OFF_LOOP_ITEMS
        ):
            # the handler is done with `resp`: nothing else reads or changes it while the worker encodes it
            return await asyncio.to_thread(encode_response, resp, hdr.correlation_id)
        return encode_response(resp, hdr.correlation_id)


def act_for_forwarded_client(ctx: RequestContext) -> None:
    """A request another broker forwarded (Kafka's Envelope) is authorized as the client that sent it there: its
    principal and address replace the connection's, if the connection's principal may act for others (CLUSTER_ACTION
    on the cluster: a broker). From anyone else the claim is ignored and the connection's principal decides."""
    claimed = forwarded_identity(ctx.client_id)
    if claimed is None or ctx.authorizer is None:
        return
    principal, address = claimed
    try:
        kind, who = parse_principal(principal)
    except AclError:
        log.warning("ignoring a malformed principal in a forwarded request", peer=ctx.client_address)
        return
    if not authorize(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        log.warning(
            "ignoring the client a forwarded request names: the sender may not act for others",
            sender=str(ctx.principal),
            peer=ctx.client_address,
            claimed=principal,
        )
        return
    ctx.principal, ctx.client_address = KafkaPrincipal(kind, who), address


_ARRAY_FIELDS: dict[type, tuple[str, ...]] = {}


def response_entries(resp: Any, limit: int) -> int:
    """Entries of the struct arrays in a response at any depth, counted until `limit` is passed (so the count
    costs at most ~`limit` steps, whatever the response's size)."""
    n = 0
    todo = [resp]
    while todo:
        obj = todo.pop()
        names = _ARRAY_FIELDS.get(type(obj))
        if names is None:
            fields = obj._struct.fields.values()
            names = _ARRAY_FIELDS[type(obj)] = tuple(f.name for f in fields if f.is_struct_array())
        for name in names:
            items = getattr(obj, name)
            if items:
                n += len(items)
                if n > limit:
                    return n
                todo.extend(items)
    return n


def join_record_chains(resp: Any) -> None:
    """BufferChain records (remote reads) and FileRegions (zero-copy reads) as one buffer each, for
    kafka-python's encoder."""
    for t in resp.responses:
        for p in t.partitions:
            if isinstance(p.records, BufferChain | FileRegion):
                p.records = bytes(p.records)
