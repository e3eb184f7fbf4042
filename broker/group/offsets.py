"""Committed offsets of the classic groups on `__consumer_offsets`: storage (OffsetCommit, OffsetFetch,
OffsetDelete) and expiration (`offsets.retention.minutes`), as Kafka's OffsetMetadataManager. The group coordinator
validates requests against the group protocol (member, generation) first; the records go through its runtime and the
groups' offsets change only once they are committed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from strata.protocol.errors import ErrorCode

from ..coordinator.runtime import CoordinatorRuntime
from ..replica_manager import pace
from .consumer.group import ConsumerGroup
from .consumer.records import group_tombstones
from .group import ClassicGroup, GroupState
from .records import (
    OffsetAndMetadata,
    encode_group_metadata_key,
    encode_offset_commit_key,
    encode_offset_commit_value,
)

log = structlog.get_logger("strata.group")

S = GroupState
E = ErrorCode
AnyGroup = ClassicGroup | ConsumerGroup


def map_append_error(err: ErrorCode, for_offsets: bool) -> ErrorCode:
    """Kafka's mapping of a failed __consumer_offsets append to what the client is told."""
    if err in (
        E.UNKNOWN_TOPIC_OR_PARTITION,
        E.NOT_ENOUGH_REPLICAS,
        E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        E.REQUEST_TIMED_OUT,
    ):
        return E.COORDINATOR_NOT_AVAILABLE
    if err in (E.NOT_LEADER_OR_FOLLOWER, E.KAFKA_STORAGE_ERROR):
        return E.NOT_COORDINATOR
    if err in (E.MESSAGE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE, E.INVALID_FETCH_SIZE):
        return E.INVALID_COMMIT_OFFSET_SIZE if for_offsets else E.UNKNOWN_SERVER_ERROR
    return err


class OffsetMetadataManager:
    """The offsets of `groups` (the coordinator's, shared); `has_timers(group_id)`: whether the group protocol
    still has a timer running for the group (such a group is not deleted by expiration)."""

    def __init__(
        self,
        groups: dict[str, ClassicGroup],
        runtime: CoordinatorRuntime[Any],
        *,
        metadata_max_bytes: int,
        retention_ms: int,
        has_timers: Callable[[str], bool],
        consumer_groups: dict[str, ConsumerGroup] | None = None,
    ) -> None:
        self.groups = groups
        self.consumer_groups: dict[str, ConsumerGroup] = consumer_groups if consumer_groups is not None else {}
        self.runtime = runtime
        self.metadata_max_bytes = metadata_max_bytes
        self.retention_ms = retention_ms
        self.has_timers = has_timers
        # producer id -> groups holding its pending transactional offsets, so a marker finds them without a scan
        self.txn_groups: dict[int, set[str]] = {}

    async def _records(
        self, group_id: str, offsets: dict[tuple[str, int], OffsetAndMetadata]
    ) -> tuple[dict[tuple[str, int], ErrorCode], list[tuple[bytes, bytes]], dict[tuple[str, int], OffsetAndMetadata]]:
        """A commit's offsets checked against `offset.metadata.max.bytes` (refused ones answered
        OFFSET_METADATA_TOO_LARGE) and encoded as offset commit records; (results so far, records, accepted)."""
        results: dict[tuple[str, int], ErrorCode] = {}
        kvs: list[tuple[bytes, bytes]] = []
        accepted: dict[tuple[str, int], OffsetAndMetadata] = {}
        for n, (tp, om) in enumerate(offsets.items()):
            await pace(n)  # a commit of 100,000 partitions: other connections get a turn
            if len(om.metadata.encode()) > self.metadata_max_bytes:
                results[tp] = E.OFFSET_METADATA_TOO_LARGE
                continue
            version = 1 if om.expire_timestamp >= 0 else 3  # Kafka's offsetCommitValueVersion()
            kvs.append((encode_offset_commit_key(group_id, tp[0], tp[1]), encode_offset_commit_value(om, version)))
            accepted[tp] = om
        return results, kvs, accepted

    def group(self, group_id: str) -> AnyGroup | None:
        """The classic or consumer group of that id (ids are unique across both)."""
        return self.groups.get(group_id) or self.consumer_groups.get(group_id)

    async def store(
        self, group: AnyGroup, offsets: dict[tuple[str, int], OffsetAndMetadata]
    ) -> dict[tuple[str, int], ErrorCode]:
        """Write a validated commit; the group's offsets change once the records are committed."""
        group_id = group.group_id
        results, kvs, accepted = await self._records(group_id, offsets)
        if kvs:
            werr = await self.runtime.write(self.runtime.partition_for(group_id), kvs)
            if werr:
                mapped = map_append_error(werr, True)
                for tp in accepted:
                    results[tp] = mapped
                return results
            if self.group(group_id) is group:
                group.offsets.update(accepted)
            for tp in accepted:
                results[tp] = E.NONE
        return results

    async def store_transactional(
        self, group: AnyGroup, producer: tuple[int, int], offsets: dict[tuple[str, int], OffsetAndMetadata]
    ) -> dict[tuple[str, int], ErrorCode]:
        """TxnOffsetCommit: the records go in the producer's transaction; the offsets stay pending in the group
        until the transaction's marker reaches this partition (`complete_transaction`)."""
        group_id = group.group_id
        results, kvs, accepted = await self._records(group_id, offsets)
        if kvs:
            # Pending before the append, as Kafka's prepareTxnOffsetCommit: a marker that lands after the record
            # (the coordinator aborting the transaction meanwhile) may complete before this write is answered.
            pid = producer[0]
            pending = group.pending_txn_offsets.setdefault(pid, {})
            before = {tp: pending[tp] for tp in accepted if tp in pending}
            pending.update(accepted)
            self.txn_groups.setdefault(pid, set()).add(group_id)
            werr = await self.runtime.write(self.runtime.partition_for(group_id), kvs, producer=producer)
            mapped = map_append_error(werr, True) if werr else E.NONE
            if werr and group.pending_txn_offsets.get(pid) is pending:  # not written: back to what was pending
                for tp in accepted:
                    if tp in before:
                        pending[tp] = before[tp]
                    else:
                        pending.pop(tp, None)
                if not pending:
                    del group.pending_txn_offsets[pid]
                    self._untrack(pid, group_id)
            for tp in accepted:
                results[tp] = mapped
        return results

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """A marker of `producer_id` reached `partition`: its pending offsets there are committed or dropped."""
        gids = self.txn_groups.get(producer_id)
        if gids is None:
            return
        for gid in [g for g in gids if self.runtime.partition_for(g) == partition]:
            gids.discard(gid)
            group = self.group(gid)
            pending = group.pending_txn_offsets.pop(producer_id, None) if group is not None else None
            if group is not None and pending is not None and commit:
                group.offsets.update(pending)
        if not gids:
            del self.txn_groups[producer_id]

    def track_pending(self, group: AnyGroup) -> None:
        """A loaded group's pending transactional offsets join the index."""
        for pid in group.pending_txn_offsets:
            self.txn_groups.setdefault(pid, set()).add(group.group_id)

    def untrack_pending(self, group: AnyGroup) -> None:
        """An unloaded group's pending transactional offsets leave the index."""
        for pid in group.pending_txn_offsets:
            self._untrack(pid, group.group_id)

    def _untrack(self, pid: int, group_id: str) -> None:
        gids = self.txn_groups.get(pid)
        if gids is not None:
            gids.discard(group_id)
            if not gids:
                del self.txn_groups[pid]

    def fetch(
        self, group_id: str, topics: list[tuple[str, list[int]]] | None
    ) -> list[tuple[str, list[tuple[int, OffsetAndMetadata | None]]]]:
        """Committed offsets of the requested partitions (topics=None: every committed partition)."""
        group = self.group(group_id)
        offsets = group.offsets if group is not None and not group.is_in(S.DEAD) else {}
        if topics is None:
            by_topic: dict[str, list[tuple[int, OffsetAndMetadata | None]]] = {}
            for (t, p), om in sorted(offsets.items()):
                by_topic.setdefault(t, []).append((p, om))
            return list(by_topic.items())
        return [(t, [(p, offsets.get((t, p))) for p in parts]) for t, parts in topics]

    async def delete(
        self, g: AnyGroup, partitions: list[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete of a group that may lose them: tombstones, then the offsets go once they are committed."""
        group_id = g.group_id
        results: dict[tuple[str, int], ErrorCode] = {}
        kvs = []
        gone = []
        for n, (t, p) in enumerate(partitions):
            await pace(n)
            if g.is_subscribed_to_topic(t):
                results[(t, p)] = E.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            results[(t, p)] = E.NONE
            if (t, p) in g.offsets:
                kvs.append((encode_offset_commit_key(group_id, t, p), None))
                gone.append((t, p))
        if kvs:
            werr = await self.runtime.write(self.runtime.partition_for(group_id), kvs)
            if werr:
                return map_append_error(werr, True), {}
            for tp in gone:
                g.offsets.pop(tp, None)
        return E.NONE, results

    async def expire(self, now: int) -> tuple[int, int]:
        """Expire offsets per Kafka's rules; delete Empty groups left without offsets. Returns (offsets, groups)."""
        writes: dict[int, list] = {}
        plans = []
        groups: list[tuple[str, AnyGroup]] = [*self.groups.items(), *self.consumer_groups.items()]
        for gid, g in groups:
            p = self.runtime.partition_for(gid)
            if p in self.runtime.loading or g.is_in(S.DEAD):
                continue
            base = self._expiration_base(g)
            expired = []
            if base is not None:
                for tp, om in g.offsets.items():
                    if g.is_subscribed_to_topic(tp[0]):
                        continue
                    if om.expire_timestamp >= 0:
                        if now >= om.expire_timestamp:
                            expired.append(tp)
                    elif now - base(om) >= self.retention_ms:
                        expired.append(tp)
            all_gone = len(expired) == len(g.offsets)
            delete_group = (
                all_gone
                and g.is_in(S.EMPTY)
                and not g.pending_members
                and not g.pending_txn_offsets
                and not self.has_timers(gid)
            )
            if not expired and not delete_group:
                continue
            kvs = writes.setdefault(p, [])
            kvs += [(encode_offset_commit_key(gid, t, i), None) for t, i in expired]
            if delete_group and isinstance(g, ConsumerGroup):
                kvs += group_tombstones(gid, [])
                g.dead = True
                del self.consumer_groups[gid]
            elif delete_group and isinstance(g, ClassicGroup):
                kvs.append((encode_group_metadata_key(gid), None))
                g.transition_to(S.DEAD, now)
                del self.groups[gid]
            plans.append((g, p, expired, delete_group))
        pending = {p: self.runtime.write(p, kvs) for p, kvs in writes.items()}
        errors = {p: await f for p, f in pending.items()}
        n_offsets = n_groups = 0
        for g, p, expired, delete_group in plans:
            if errors[p]:
                continue
            for tp in expired:
                g.offsets.pop(tp, None)
            n_offsets += len(expired)
            n_groups += int(delete_group)
        if n_offsets or n_groups:
            log.info("expired offsets", offsets=n_offsets, groups_deleted=n_groups)
        return n_offsets, n_groups

    def _expiration_base(self, g: AnyGroup) -> Callable[[OffsetAndMetadata], int] | None:
        if isinstance(g, ConsumerGroup):  # Kafka's consumer groups: from the commit (subscribed topics kept)
            return lambda om: om.commit_timestamp
        if g.protocol_type is not None:
            if g.is_in(S.EMPTY):
                ts = g.current_state_timestamp
                return (lambda om: ts) if ts is not None else (lambda om: om.commit_timestamp)
            if g.uses_consumer_protocol() and g.subscribed_topics is not None and g.is_in(S.STABLE):
                return lambda om: om.commit_timestamp
            return None
        return lambda om: om.commit_timestamp


__all__ = ["OffsetMetadataManager", "map_append_error"]
