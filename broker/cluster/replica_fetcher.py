"""Followers: one ReplicaFetcher task per source broker, copying every partition this broker follows from it
(Kafka's ReplicaFetcherManager / AbstractFetcherThread / ReplicaFetcherThread).

Per partition the state machine is Kafka's:

* **Truncating** -- after becoming follower (or a new leader epoch): OffsetForLeaderEpoch to the leader for the
  follower's latest epoch, truncate to min(the leader's end offset of that epoch, our end of it, our LEO), walking
  back one epoch at a time while the leader answers an epoch we do not have (KIP-101/KIP-279). Never by HW.
* **Fetching** -- Fetch with `replica_state` (v15+) from the LEO with `last_fetched_epoch`, in a KIP-227 fetch
  session with the leader (fetch_session_handler.py: only changed partitions are sent and answered); append with
  `append_as_follower`; follower HW = min(leader HW, LEO); log start follows the leader's. A `diverging_epoch` in the
  response (KIP-320) truncates the same way. OFFSET_OUT_OF_RANGE resets against the leader's log start/end;
  OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405) goes through `build_remote_log_aux_state`.

A partition whose state changed while a request was in flight (removed, re-added with a new epoch, made leader) has
a new PartitionFetchState object; answers for the old one are dropped.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from strata.protocol.errors import ErrorCode
from strata.protocol.registry import REQUEST_CLASSES, ApiKey
from strata.storage.errors import StorageError

from .broker_client import BrokerConnection, BrokerConnectionError, inter_broker_security
from .fetch_session_handler import SESSION_ERRORS, FetchSessionHandler, PartitionData

if TYPE_CHECKING:
    from ..partition import Partition
    from ..replica_manager import ReplicaManager

log = structlog.get_logger("strata.replica_fetcher")

TRUNCATING = "Truncating"
FETCHING = "Fetching"

FETCH_VERSION = 17  # replica_state (v15+), topic ids (v13+), diverging_epoch (v12+), error 109 (v14+)
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
LIST_OFFSETS_VERSION = 9  # -4 EARLIEST_LOCAL needs v8+
EPOCH_RACE_RETRY_S = 0.05  # the leader has not applied the new epoch yet: retry soon

Key = tuple[str, int]


def truncation_offset(
    log_end_offset: int,
    end_offset_for_epoch: Callable[[int], tuple[int, int]],
    leader_epoch: int,
    leader_end_offset: int,
) -> tuple[int, bool]:
    """Where a follower truncates given the leader's answer (epoch, end offset) to an OffsetForLeaderEpoch for the
    follower's latest epoch (or a Fetch's diverging_epoch): (offset, truncation completed). Kafka's
    AbstractFetcherThread.getOffsetTruncationState.

    `end_offset_for_epoch(e)` is the follower's own (greatest epoch <= e, its end offset), (-1, -1) if unknown."""
    if leader_end_offset < 0:
        # The leader knows nothing of our epoch: keep the log; an out-of-range fetch settles it.
        return log_end_offset, True
    if leader_epoch < 0:
        return min(leader_end_offset, log_end_offset), True
    follower_epoch, follower_end = end_offset_for_epoch(leader_epoch)
    if follower_end < 0:
        # We have no epoch <= the leader's: what we have past its end offset is not the leader's.
        return min(leader_end_offset, log_end_offset), True
    if follower_epoch != leader_epoch:
        # We lack the epoch the leader answered: cut to the end of our epoch below it and ask again.
        return min(follower_end, log_end_offset), False
    return min(follower_end, leader_end_offset, log_end_offset), True


@dataclass(eq=False)
class PartitionFetchState:
    topic: str
    partition: int
    topic_id: uuid.UUID
    leader_epoch: int
    state: str = TRUNCATING
    delayed_until: float = 0.0  # monotonic seconds
    lag: int = 0  # leader HW - our LEO, as of the last fetch (Kafka's FetcherLagMetrics)

    @property
    def key(self) -> Key:
        return (self.topic, self.partition)


@dataclass(eq=False)
class ReplicaFetcher:
    """Fetches everything this broker follows from one source broker."""

    manager: ReplicaFetcherManager
    source_id: int
    partitions: dict[Key, PartitionFetchState] = field(default_factory=dict)
    task: asyncio.Task | None = None
    conn: BrokerConnection | None = None
    _wake: asyncio.Event | None = None
    _rotation: int = 0
    _stopping: bool = False
    _fetch_in_flight: bool = False
    _interrupted: bool = False
    _closing: asyncio.Task | None = None
    session: FetchSessionHandler = field(default_factory=FetchSessionHandler)  # KIP-227, with this leader

    # ---- membership --------------------------------------------------------------------------------------------
    def add(self, st: PartitionFetchState) -> None:
        self.partitions[st.key] = st
        self.wake()
        self._interrupt_fetch()

    def _interrupt_fetch(self) -> None:
        """A partition joined while a fetch is in flight: that fetch may sit in the leader's purgatory for
        replica.fetch.wait.max.ms, and everything else on the connection (the newcomer's OffsetForLeaderEpoch, its
        first fetch) queues behind it, so acks=-1 produce to a new topic or a new leader would wait up to that long.
        Drop the connection (the leader forgets the parked fetch; its answer, not yet applied, is lost and fetched
        again) and go round at once on a fresh one."""
        if self._fetch_in_flight and not self._interrupted and self.conn is not None:
            self._interrupted = True
            conn, self.conn = self.conn, None
            self._closing = asyncio.get_running_loop().create_task(conn.close())

    def remove(self, key: Key) -> PartitionFetchState | None:
        return self.partitions.pop(key, None)

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def start(self) -> None:
        if self.task is None:
            self._stopping = False
            self._wake = asyncio.Event()
            self.task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.source_id}")

    async def stop(self) -> None:
        self._stopping = True
        t, self.task = self.task, None
        if t is not None:
            t.cancel()
            await asyncio.gather(t, return_exceptions=True)
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

    # ---- plumbing --------------------------------------------------------------------------------------------
    @property
    def rm(self) -> ReplicaManager:
        return self.manager.rm

    def current_partition(self, st: PartitionFetchState) -> Partition | None:
        """The partition if `st` is still how we follow it (same object, still a follower in that epoch)."""
        if self.partitions.get(st.key) is not st:
            return None
        p = self.rm.partitions.get(st.key)
        if p is None or p.is_leader or p.leader_id != self.source_id or p.leader_epoch != st.leader_epoch:
            return None
        return p

    def delay(self, st: PartitionFetchState, seconds: float) -> None:
        """Fetch `st` again only `seconds` from now (backoff)."""
        st.delayed_until = time.monotonic() + seconds

    async def _connection(self) -> BrokerConnection:
        for _ in range(3):
            if self.conn is not None and self.conn.connected:
                return self.conn
            b = self.rm.store.brokers().get(self.source_id)
            if b is None:
                raise BrokerConnectionError(f"broker {self.source_id} is not registered")
            ep = b.endpoint(self.manager.listener_name)
            if ep is None:
                raise BrokerConnectionError(f"broker {self.source_id} has no endpoint")
            cfg = self.rm.config
            conn = self.conn = BrokerConnection(
                ep[0],
                ep[1],
                f"broker-{self.rm.broker_id}-fetcher-{self.source_id}",
                cfg["replica.socket.timeout.ms"] / 1000.0,
                inter_broker_security(cfg),
            )
            try:
                await conn.connect()
            except BrokerConnectionError:
                if self.conn is conn:
                    raise
                continue  # closed while connecting (the broker re-registered): connect to what it is now
            if self.conn is conn:
                return conn
            await conn.close()  # reset while connecting: connect to what it is now
        raise BrokerConnectionError(f"connection to broker {self.source_id} keeps being reset")

    async def request(self, api_key: int, version: int, timeout_s: float | None = None, **fields: Any) -> Any:
        """One request to the leader on this fetcher's connection (made on demand)."""
        conn = await self._connection()
        return await conn.request(api_key, version, timeout_s, **fields)

    # ---- main loop -------------------------------------------------------------------------------------------
    async def _run(self) -> None:
        backoff = self.rm.config["replica.fetch.backoff.ms"] / 1000.0
        assert self._wake is not None
        while not self._stopping:
            try:
                now = time.monotonic()
                ready = [st for st in self.partitions.values() if st.delayed_until <= now]
                for st in ready:
                    if self.current_partition(st) is None and self.partitions.get(st.key) is st:
                        del self.partitions[st.key]  # stale: the partition moved on (cannot happen, but
                        #                                  a state that never sends a request must not spin)
                truncating = [st for st in ready if st.state == TRUNCATING and self.partitions.get(st.key) is st]
                sent = False
                if truncating:
                    sent = await self._truncate(truncating)
                fetching = [st for st in ready if st.state == FETCHING and self.partitions.get(st.key) is st]
                if fetching:
                    sent = await self._fetch(fetching) or sent
                if not sent:
                    delays = [st.delayed_until - now for st in self.partitions.values()]
                    self._wake.clear()
                    timeout = max(min(delays), 0.001) if delays else None
                    # asyncio.wait, not wait_for: 3.11's wait_for can swallow a cancellation that arrives as the
                    # event is set, and the fetcher would never stop
                    waiter = asyncio.ensure_future(self._wake.wait())
                    try:
                        await asyncio.wait({waiter}, timeout=timeout)
                    finally:
                        waiter.cancel()
            except asyncio.CancelledError:
                raise
            except BrokerConnectionError as e:
                log.info("fetch from leader failed", leader=self.source_id, error=str(e))
                for st in self.partitions.values():
                    self.delay(st, backoff)
            except Exception:
                log.exception("replica fetcher round failed", leader=self.source_id)
                for st in self.partitions.values():
                    self.delay(st, backoff)

    # ---- truncation (OffsetForLeaderEpoch) ---------------------------------------------------------------------
    async def _truncate(self, states: list[PartitionFetchState]) -> bool:
        asks: dict[Key, tuple[PartitionFetchState, int]] = {}
        for st in states:
            p = self.current_partition(st)
            if p is None:
                continue
            latest = p.log.latest_epoch
            if latest is None:
                # No epochs: an empty (or pre-epoch) log. Kafka truncates such a log to its HW.
                self.manager.truncate(p, p.log.high_watermark)
                st.state = FETCHING
                continue
            asks[st.key] = (st, latest)
        if not asks:
            return False
        Req = _request_class(ApiKey.OFFSET_FOR_LEADER_EPOCH)
        T = Req.OffsetForLeaderTopic
        by_topic: dict[str, list] = {}
        for (topic, idx), (st, latest) in asks.items():
            by_topic.setdefault(topic, []).append(
                T.OffsetForLeaderPartition(partition=idx, current_leader_epoch=st.leader_epoch, leader_epoch=latest)
            )
        resp = await self.request(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            OFFSET_FOR_LEADER_EPOCH_VERSION,
            replica_id=self.rm.broker_id,
            topics=[T(topic=t, partitions=ps) for t, ps in by_topic.items()],
        )
        backoff = self.rm.config["replica.fetch.backoff.ms"] / 1000.0
        for tr in resp.topics:
            for pr in tr.partitions:
                entry = asks.get((tr.topic, pr.partition))
                if entry is None:
                    continue
                st, asked = entry
                p = self.current_partition(st)
                if p is None:
                    continue
                err = pr.error_code
                if err != ErrorCode.NONE:
                    log.info(
                        "OffsetForLeaderEpoch failed",
                        topic=st.topic,
                        partition=st.partition,
                        leader=self.source_id,
                        error=_name(err),
                    )
                    self.delay(st, EPOCH_RACE_RETRY_S if _is_epoch_race(err) else backoff)
                    continue
                offset, done = truncation_offset(
                    p.log.log_end_offset, p.log.end_offset_for_epoch, pr.leader_epoch, pr.end_offset
                )
                log.info(
                    "truncating follower by leader epoch",
                    topic=st.topic,
                    partition=st.partition,
                    asked_epoch=asked,
                    leader_epoch=pr.leader_epoch,
                    leader_end_offset=pr.end_offset,
                    leo=p.log.log_end_offset,
                    truncate_to=offset,
                    completed=done,
                )
                self.manager.truncate(p, offset)
                if done:
                    st.state = FETCHING
        return True

    # ---- fetching ----------------------------------------------------------------------------------------------
    async def _fetch(self, states: list[PartitionFetchState]) -> bool:
        cfg = self.rm.config
        Req = _request_class(ApiKey.FETCH)
        T = Req.FetchTopic
        # Rotate the partition order so a partition behind a busy one is not starved of the response's bytes.
        self._rotation = (self._rotation + 1) % len(states)
        states = states[self._rotation :] + states[: self._rotation]
        sent: dict[tuple[uuid.UUID, int], tuple[PartitionFetchState, int]] = {}
        wanted: dict[tuple[uuid.UUID, int], PartitionData] = {}
        max_bytes = cfg["replica.fetch.max.bytes"]
        for st in states:
            p = self.current_partition(st)
            if p is None:
                continue
            ulog = p.log
            leo = ulog.log_end_offset
            latest = ulog.latest_epoch
            key = (st.topic_id, st.partition)
            sent[key] = (st, leo)
            wanted[key] = (leo, ulog.log_start_offset, max_bytes, st.leader_epoch, -1 if latest is None else latest)
        if not sent:
            return False
        # KIP-227: after the first (full) fetch, only partitions whose fetch changed are sent
        data = self.session.build(wanted)
        by_topic: dict[uuid.UUID, list] = {}
        for (tid, index), (offset, log_start, part_max, epoch, last_epoch) in data.to_send.items():
            by_topic.setdefault(tid, []).append(
                T.FetchPartition(
                    partition=index,
                    current_leader_epoch=epoch,
                    fetch_offset=offset,
                    last_fetched_epoch=last_epoch,
                    log_start_offset=log_start,
                    partition_max_bytes=part_max,
                )
            )
        forgotten: dict[uuid.UUID, list[int]] = {}
        for tid, index in data.to_forget:
            forgotten.setdefault(tid, []).append(index)
        wait_ms = cfg["replica.fetch.wait.max.ms"]
        fields: dict[str, Any] = {
            "max_wait_ms": wait_ms,
            "min_bytes": cfg["replica.fetch.min.bytes"],
            "max_bytes": cfg["replica.fetch.response.max.bytes"],
            "isolation_level": 0,
            "session_id": data.session_id,
            "session_epoch": data.epoch,
            "topics": [T(topic_id=tid, partitions=ps) for tid, ps in by_topic.items()],
            "forgotten_topics_data": [Req.ForgottenTopic(topic_id=tid, partitions=ps) for tid, ps in forgotten.items()],
            "rack_id": cfg["broker.rack"] or "",
        }
        if FETCH_VERSION >= 15:
            fields["replica_state"] = Req.ReplicaState(replica_id=self.rm.broker_id, replica_epoch=-1)
        else:
            fields["replica_id"] = self.rm.broker_id
        timeout = cfg["replica.socket.timeout.ms"] / 1000.0 + wait_ms / 1000.0
        self._fetch_in_flight, self._interrupted = True, False
        try:
            resp = await self.request(ApiKey.FETCH, FETCH_VERSION, timeout, **fields)
        except BrokerConnectionError:
            self.session.handle_error()
            if self._interrupted:
                return True  # _interrupt_fetch: go round at once with the new partitions
            raise
        finally:
            self._fetch_in_flight = False
        self.session.handle_response(resp.error_code, resp.session_id)
        if resp.error_code in SESSION_ERRORS:
            # the leader lost or left our session (e.g. it restarted): a full fetch at once, as Kafka's fetcher
            log.info("fetch session reset", leader=self.source_id, error=_name(resp.error_code))
            return True
        backoff = cfg["replica.fetch.backoff.ms"] / 1000.0
        if resp.error_code:
            log.info("fetch refused", leader=self.source_id, error=_name(resp.error_code))
            for st, _ in sent.values():
                self.delay(st, backoff)
            return True
        for tr in resp.responses:
            for pd in tr.partitions:
                entry = sent.get((tr.topic_id, pd.partition_index))
                if entry is None:
                    continue
                st, leo_at_request = entry
                p = self.current_partition(st)
                if p is None or p.log.log_end_offset != leo_at_request or st.state != FETCHING:
                    continue
                try:
                    await self._process_partition(p, st, pd, backoff)
                except StorageError as e:
                    log.warning("follower append failed", topic=st.topic, partition=st.partition, error=str(e))
                    self.delay(st, backoff)
        return True

    async def _process_partition(self, p: Partition, st: PartitionFetchState, pd: Any, backoff: float) -> None:
        err = pd.error_code
        ulog = p.log
        if err == ErrorCode.NONE:
            div = pd.diverging_epoch
            if div is not None and div.end_offset >= 0:
                offset, done = truncation_offset(
                    ulog.log_end_offset, ulog.end_offset_for_epoch, div.epoch, div.end_offset
                )
                log.info(
                    "truncating follower on a diverging epoch",
                    topic=st.topic,
                    partition=st.partition,
                    leader_epoch=div.epoch,
                    leader_end_offset=div.end_offset,
                    leo=ulog.log_end_offset,
                    truncate_to=offset,
                    completed=done,
                )
                self.manager.truncate(p, offset)
                return
            records = pd.records
            if records:
                flusher = self.rm.epoch_flusher
                epoch = ulog.latest_epoch
                ulog.append_as_follower(records, epoch_sync=flusher is None)
                if flusher is not None and ulog.latest_epoch != epoch:
                    flusher.written(ulog.leader_epoch_cache.path)  # fsynced with others', off the loop
            leo = ulog.log_end_offset
            ulog.update_high_watermark(min(pd.high_watermark, leo))
            if pd.log_start_offset > ulog.log_start_offset:
                ulog.advance_log_start_offset(pd.log_start_offset)
            st.lag = max(0, pd.high_watermark - leo)
            self.rm.on_follower_progress(p)
            return
        if err == ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._handle_out_of_range(p, st)
            return
        if err == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE:
            await self.build_remote_log_aux_state(p, st)
            return
        log.info(
            "follower fetch error", topic=st.topic, partition=st.partition, leader=self.source_id, error=_name(err)
        )
        self.delay(st, EPOCH_RACE_RETRY_S if _is_epoch_race(err) else backoff)

    async def list_offset(self, st: PartitionFetchState, timestamp: int) -> tuple[int, int]:
        """(offset, leader epoch) the leader answers to a ListOffsets of `timestamp` (a sentinel: -1 latest, -2
        earliest, -4 earliest local) for `st`; LeaderError when it answers an error."""
        Req = _request_class(ApiKey.LIST_OFFSETS)
        T = Req.ListOffsetsTopic
        resp = await self.request(
            ApiKey.LIST_OFFSETS,
            LIST_OFFSETS_VERSION,
            replica_id=self.rm.broker_id,
            isolation_level=0,
            topics=[
                T(
                    name=st.topic,
                    partitions=[
                        T.ListOffsetsPartition(
                            partition_index=st.partition, current_leader_epoch=st.leader_epoch, timestamp=timestamp
                        )
                    ],
                )
            ],
        )
        for t in resp.topics:
            for pr in t.partitions:
                if pr.partition_index == st.partition:
                    if pr.error_code:
                        raise LeaderError(pr.error_code)
                    return pr.offset, pr.leader_epoch
        raise LeaderError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    async def _handle_out_of_range(self, p: Partition, st: PartitionFetchState) -> None:
        """Kafka's fetchOffsetAndTruncate: behind the leader's log start -> start over there; ahead of its end
        (only after an unclean election) -> truncate to it."""
        try:
            leader_end = (await self.list_offset(st, -1))[0]
            if self.current_partition(st) is not p:
                return
            ulog = p.log
            if leader_end < ulog.log_end_offset:
                log.warning(
                    "follower ahead of the leader's log end: truncating",
                    topic=st.topic,
                    partition=st.partition,
                    leo=ulog.log_end_offset,
                    leader_end=leader_end,
                )
                self.manager.truncate(p, leader_end)
                return
            leader_start = (await self.list_offset(st, -2))[0]
            if self.current_partition(st) is not p:
                return
            if leader_start > ulog.log_end_offset:
                log.info(
                    "follower behind the leader's log start: starting over there",
                    topic=st.topic,
                    partition=st.partition,
                    leo=ulog.log_end_offset,
                    leader_start=leader_start,
                )
                self.manager.truncate_fully(p, leader_start)
            else:  # in range after all (the leader's log moved meanwhile): retry after a pause
                self.delay(st, self.rm.config["replica.fetch.backoff.ms"] / 1000.0)
        except LeaderError as e:
            self.delay(st, self.rm.config["replica.fetch.backoff.ms"] / 1000.0)
            log.info("out-of-range handling failed", topic=st.topic, partition=st.partition, error=_name(e.error_code))

    async def build_remote_log_aux_state(self, p: Partition, st: PartitionFetchState) -> None:
        """KIP-405 hook for a follower whose fetch offset is below the leader's local log start (error 109).

        With remote storage on here: the tier state machine (replica_fetcher_tier_state.py) rebuilds the epoch
        cache and producer state from the remote segment below the leader's earliest local offset and starts the log
        there (retrying with backoff; also while the broker is still starting it). Without it (remote storage off
        on this broker), the local log starts over at the leader's local log start (ListOffsets -4) with the log
        start offset at the leader's (-2)."""
        if (
            self.rm.rlm is not None or self.rm.config.get("remote.log.storage.system.enable")
        ) and p.log.remote_log_enabled:
            from .replica_fetcher_tier_state import build_remote_log_aux_state

            await build_remote_log_aux_state(self, p, st)
            return
        try:
            local_start = (await self.list_offset(st, -4))[0]
            leader_start = (await self.list_offset(st, -2))[0]
        except LeaderError as e:
            self.delay(st, self.rm.config["replica.fetch.backoff.ms"] / 1000.0)
            log.info(
                "ListOffsets for the tiered rebuild failed",
                topic=st.topic,
                partition=st.partition,
                error=_name(e.error_code),
            )
            return
        if self.current_partition(st) is not p:
            return
        log.info(
            "follower below the leader's local log start (tiered): starting over there",
            topic=st.topic,
            partition=st.partition,
            leo=p.log.log_end_offset,
            leader_local_start=local_start,
            leader_start=leader_start,
        )
        self.manager.truncate_fully(p, local_start, log_start_offset=min(leader_start, local_start))


class LeaderError(Exception):
    """The leader answered a request of the fetcher with an error (`error_code`)."""

    def __init__(self, code: int) -> None:
        super().__init__(_name(code))
        self.error_code = code


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _is_epoch_race(code: int) -> bool:
    return code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.FENCED_LEADER_EPOCH)


def _request_class(api_key: int) -> type[Any]:
    """type[Any]: kafka-python generates the nested field classes (FetchTopic ...) at import."""
    return REQUEST_CLASSES[api_key]


class ReplicaFetcherManager:
    """Assigns followed partitions to per-source-broker fetchers; started with the broker's event loop."""

    def __init__(self, rm: ReplicaManager) -> None:
        self.rm = rm
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._source_of: dict[Key, int] = {}
        self.started = False
        self.listener_name = rm.config.inter_broker_listener_name

    def add_partition(self, p: Partition) -> None:
        """(Re)start following `p` from its leader in its current epoch: Truncating first."""
        self.remove_partition(p.key)
        if p.leader_id < 0:
            return
        f = self.fetchers.get(p.leader_id)
        if f is None:
            f = self.fetchers[p.leader_id] = ReplicaFetcher(self, p.leader_id)
            if self.started:
                f.start()
        f.add(PartitionFetchState(p.topic.name, p.index, p.topic.topic_id, p.leader_epoch))
        self._source_of[p.key] = p.leader_id

    def remove_partition(self, key: Key) -> None:
        src = self._source_of.pop(key, None)
        if src is not None and (f := self.fetchers.get(src)) is not None:
            f.remove(key)

    def on_broker_change(self, broker_id: int) -> None:
        """A broker re-registered (new endpoint after a restart): reconnect on the next request."""
        f = self.fetchers.get(broker_id)
        if f is not None and f.conn is not None:
            conn, f.conn = f.conn, None
            asyncio.get_running_loop().create_task(conn.close())

    def start(self) -> None:
        self.started = True
        for f in self.fetchers.values():
            f.start()

    async def shutdown(self) -> None:
        self.started = False
        await asyncio.gather(*(f.stop() for f in self.fetchers.values()), return_exceptions=True)
        self.fetchers.clear()
        self._source_of.clear()

    # ---- log changes (shared by truncation paths) --------------------------------------------------------------
    def truncate(self, p: Partition, offset: int) -> None:
        """Truncate a follower log to `offset` and drop epoch entries starting at or after it (an epoch this broker
        led without writing starts at the LEO; it must not survive, or the next OffsetForLeaderEpoch asks for it
        again)."""
        ulog = p.log
        if offset < ulog.log_end_offset:
            ulog.truncate_to(offset)
            cleaner = getattr(self.rm, "log_cleaner", None)
            if cleaner is not None:
                cleaner.manager.maybe_truncate_checkpoint(ulog, offset)
        ulog.leader_epoch_cache.truncate_from_end(ulog.log_end_offset)
        self.rm.on_follower_progress(p)

    def truncate_fully(self, p: Partition, offset: int, log_start_offset: int | None = None) -> None:
        ulog = p.log
        ulog.truncate_fully_and_start_at(offset, log_start_offset)  # tiered: the data below lives in remote storage
        cleaner = getattr(self.rm, "log_cleaner", None)
        if cleaner is not None:
            cleaner.manager.maybe_truncate_checkpoint(ulog, offset)
        self.rm.on_follower_progress(p)

    @property
    def max_lag(self) -> int:
        return max((st.lag for f in list(self.fetchers.values()) for st in list(f.partitions.values())), default=0)


__all__ = [
    "FETCHING",
    "TRUNCATING",
    "PartitionFetchState",
    "ReplicaFetcher",
    "ReplicaFetcherManager",
    "truncation_offset",
]
