"""KIP-227 incremental fetch sessions, the broker side (Kafka's FetchSession.scala: FetchSessionCache, FetchManager and
the fetch contexts).

A full fetch (session epoch 0) may create a session: the broker keeps each partition's request fields (fetch offset,
max bytes, leader epochs, the fetcher's log start) and what it last answered about it (HW, LSO, log start offset).
An incremental fetch (epoch n > 0) names only the partitions added or altered since and those to forget; the others
come from the session. Its response carries only the partitions with something new: records, a changed HW, LSO or
log start offset, an error or a diverging epoch (Kafka's CachedPartition.maybeUpdateResponseData, plus the LSO, which
READ_COMMITTED consumers show as lag). Epoch -1 is a sessionless full fetch; a full fetch naming a session closes it.

The cache holds `max.incremental.fetch.session.cache.slots` sessions. When it is full a new session may evict one
(Kafka's tryEvict): the least recently used if it has been idle for `min.incremental.fetch.session.eviction.ms`
(Kafka's fixed 120 s), else the least valuable one older than that, where a follower's session (privileged) beats a
consumer's and more partitions beat fewer; a consumer's session is always evictable by a follower's. Otherwise the
full fetch is answered without a session (session id 0). Kafka splits its cache into 8 shards of slots/8 each (a
lock per shard); the event loop needs no locks, so this is one cache of all the slots.

Sessions live in memory only: after a restart every incremental fetch gets FETCH_SESSION_ID_NOT_FOUND and its client
starts over with a full fetch.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Gauge

from strata.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from .metrics import BrokerMetrics
    from .replica_manager import FetchResult

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0  # a full fetch that creates a session
FINAL_EPOCH = -1  # a full fetch without a session (and the close of the one named)
_MAX_EPOCH = 2**31 - 1

TopicKey = str | uuid.UUID  # a topic's name (Fetch < v13) or id (v13+)
PartitionKey = tuple[TopicKey, int]


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: FINAL stays FINAL, the largest int32 wraps to 1 (0 is never reused)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """One partition of a fetch: the fetcher's request fields (kept between the requests of a session) and what the
    broker last answered about it (-1: nothing yet, or an error to be followed by a full answer)."""

    topic: TopicKey
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    fetcher_log_start_offset: int = -1  # a follower's own log start (Fetch v5+)
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    @property
    def key(self) -> PartitionKey:
        return (self.topic, self.partition)

    def update_request(self, new: CachedPartition) -> None:
        self.fetch_offset = new.fetch_offset
        self.max_bytes = new.max_bytes
        self.current_leader_epoch = new.current_leader_epoch
        self.last_fetched_epoch = new.last_fetched_epoch
        self.fetcher_log_start_offset = new.fetcher_log_start_offset

    def must_respond(self, r: FetchResult) -> bool:
        """Whether an incremental response carries this partition; records what it tells the fetcher."""
        respond = len(r.records) > 0 or r.diverging_epoch is not None
        if self.high_watermark != r.high_watermark:
            self.high_watermark = r.high_watermark
            respond = True
        if self.last_stable_offset != r.last_stable_offset:
            self.last_stable_offset = r.last_stable_offset
            respond = True
        if self.log_start_offset != r.log_start_offset:
            self.log_start_offset = r.log_start_offset
            respond = True
        if r.error:
            self.high_watermark = -1  # answered again in full once the error is gone
            respond = True
        return respond


@dataclass(eq=False, slots=True)
class FetchSession:
    id: int
    privileged: bool  # a follower's
    uses_topic_ids: bool  # created by Fetch v13+: only v13+ may continue it
    created: float  # time.monotonic()
    last_used: float
    epoch: int  # the epoch the next incremental fetch must carry
    partitions: dict[PartitionKey, CachedPartition]  # in the order fetches read them
    cached: bool = True  # False once removed from the cache (a parked fetch may still answer for it)


@dataclass(eq=False, slots=True)
class FetchContext:
    """What one Fetch reads and how its response is cut: sessionless, full (may create a session), incremental (a
    session's partitions, answered only where changed), or a session error answered with no partitions."""

    cache: FetchSessionCache
    partitions: list[CachedPartition] = field(default_factory=list)  # in response order
    error: ErrorCode = ErrorCode.NONE
    creates_session: bool = False
    privileged: bool = False
    uses_topic_ids: bool = False
    session: FetchSession | None = None  # the incremental fetch's, or the one a full fetch created
    request_epoch: int = FINAL_EPOCH
    _answered: list[CachedPartition] | None = None

    @property
    def incremental(self) -> bool:
        return self.session is not None and not self.creates_session

    def respond(self, results: list[FetchResult]) -> tuple[int, ErrorCode, list[int] | None]:
        """(session id, error, the indexes of the partitions to answer; None: all) once the partitions are read."""
        if self.creates_session:
            for cp, r in zip(self.partitions, results):
                cp.must_respond(r)
            self.session = self.cache.maybe_create(self.privileged, self.uses_topic_ids, self.partitions)
            return (self.session.id if self.session else INVALID_SESSION_ID), ErrorCode.NONE, None
        session = self.session
        if session is None:
            return INVALID_SESSION_ID, ErrorCode.NONE, None
        if session.epoch != next_epoch(self.request_epoch):
            # Another request of this session came in while this one was parked: the client is out of step.
            return session.id, ErrorCode.INVALID_FETCH_SESSION_EPOCH, []
        selected: list[int] = []
        answered: list[CachedPartition] = []
        order = session.partitions
        for i, (cp, r) in enumerate(zip(self.partitions, results)):
            if cp.must_respond(r):
                selected.append(i)
                answered.append(cp)
                if len(r.records) and order.pop(cp.key, None) is cp:
                    order[cp.key] = cp  # Kafka's fairness: a partition that got data goes to the end
        self._answered = answered
        return session.id, ErrorCode.NONE, selected

    def throttled(self) -> int:
        """The quota emptied the response (Kafka's getThrottledResponse): a full fetch creates no session, an
        incremental one has told the fetcher nothing, so what it answered is sent again. The session id to answer."""
        if self.creates_session:
            if self.session is not None:
                self.cache.remove(self.session)
                self.session = None
            return INVALID_SESSION_ID
        for cp in self._answered or ():
            cp.high_watermark = -1
        return self.session.id if self.session is not None else INVALID_SESSION_ID


class FetchSessionCache:
    """The broker's fetch sessions (Kafka's FetchSessionCache and FetchManager)."""

    def __init__(self, max_entries: int, eviction_ms: int, metrics: BrokerMetrics | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_s = eviction_ms / 1000.0
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self.num_partitions = 0
        self._evictions: Any = None
        if metrics is not None:
            r = metrics.registry
            # kafka.server:type=FetchSessionCache,name=NumIncrementalFetchSessions / ...PartitionsCached / Evictions
            Gauge(
                "strata_fetch_session_cache_num_incremental_fetch_sessions",
                "Incremental fetch sessions in the cache",
                registry=r,
            ).set_function(lambda: len(self.sessions))
            Gauge(
                "strata_fetch_session_cache_num_incremental_fetch_partitions_cached",
                "Partitions in the cached incremental fetch sessions",
                registry=r,
            ).set_function(lambda: self.num_partitions)
            self._evictions = Counter(
                "strata_fetch_session_cache_incremental_fetch_session_evictions",
                "Fetch sessions evicted to make room for another",
                registry=r,
            )

    # ---- contexts (Kafka's FetchManager.newContext) ---------------------------------------------------------------
    def new_context(
        self,
        version: int,
        session_id: int,
        epoch: int,
        is_follower: bool,
        wanted: dict[PartitionKey, CachedPartition],
        forgotten: list[PartitionKey],
    ) -> FetchContext:
        if version < 7:  # no sessions before Fetch v7
            return FetchContext(self, list(wanted.values()))
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                s = self.sessions.get(session_id)
                if s is not None:  # a full fetch closes the session it names
                    self.remove(s)
            return FetchContext(
                self,
                list(wanted.values()),
                creates_session=epoch == INITIAL_EPOCH,
                privileged=is_follower,
                uses_topic_ids=version >= 13,
            )
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext(self, error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext(self, error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != (version >= 13):
            return FetchContext(self, error=ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        parts = session.partitions
        before = len(parts)
        for key, cp in wanted.items():
            old = parts.get(key)
            if old is None:
                parts[key] = cp
            else:
                old.update_request(cp)
        for key in forgotten:
            parts.pop(key, None)
        self.num_partitions += len(parts) - before
        if not parts:
            self.remove(session)  # nothing left to fetch: the session ends, the answer is sessionless
            return FetchContext(self, list(wanted.values()))
        self._touch(session)
        session.epoch = next_epoch(session.epoch)
        return FetchContext(self, list(parts.values()), session=session, request_epoch=epoch)

    # ---- the cache ---------------------------------------------------------------------------------------------
    def maybe_create(
        self, privileged: bool, uses_topic_ids: bool, partitions: list[CachedPartition]
    ) -> FetchSession | None:
        """A new session of `partitions`, if there is room or a session can be evicted for it."""
        now = time.monotonic()
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, len(partitions), now):
            return None
        sid = random.randint(1, _MAX_EPOCH)  # an identifier, not a secret
        while sid in self.sessions:
            sid = random.randint(1, _MAX_EPOCH)
        s = FetchSession(sid, privileged, uses_topic_ids, now, now, next_epoch(INITIAL_EPOCH), {})
        for cp in partitions:
            s.partitions[cp.key] = cp
        self.sessions[sid] = s
        self.num_partitions += len(s.partitions)
        return s

    def _try_evict(self, privileged: bool, size: int, now: float) -> bool:
        """Kafka's tryEvict: a stale session first, else the least valuable evictable one if it is worth less than
        the newcomer, by (privileged, partitions, id); the newcomer's id counts as 0, so a tie keeps the old one."""
        if not self.sessions:
            return False
        lru = next(iter(self.sessions.values()))
        if now - lru.last_used > self.eviction_s:
            self._evict(lru)
            return True
        victim: FetchSession | None = None
        for s in self.sessions.values():
            old = now - s.created > self.eviction_s
            if not (old or (privileged and not s.privileged)):
                continue
            if victim is None or (s.privileged, len(s.partitions), s.id) < (
                victim.privileged,
                len(victim.partitions),
                victim.id,
            ):
                victim = s
        if victim is None or (privileged, size, 0) < (victim.privileged, len(victim.partitions), victim.id):
            return False
        self._evict(victim)
        return True

    def _evict(self, s: FetchSession) -> None:
        self.remove(s)
        if self._evictions is not None:
            self._evictions.inc()

    def remove(self, s: FetchSession) -> None:
        if self.sessions.pop(s.id, None) is s:
            self.num_partitions -= len(s.partitions)
            s.cached = False

    def _touch(self, s: FetchSession) -> None:
        s.last_used = time.monotonic()
        self.sessions.move_to_end(s.id)


__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "FetchContext",
    "FetchSession",
    "FetchSessionCache",
    "next_epoch",
]
