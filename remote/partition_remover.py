"""RemotePartitionRemover (KIP-405 topic deletion): the remote data of deleted partitions is removed by the leader of
the `__remote_log_metadata` partition their records live in, not by the partitions' own leaders.

Deleting a tiered topic (or KIP-950's remote.log.delete.on.disable) only records DELETE_PARTITION_MARKED for each
partition -- the broker that handled the request does, as Kafka's controller would, and each partition's leader does
too (the first record wins, the second is a no-op transition). On every broker, this remover reads the metadata
partitions the broker leads from its own replicas, folding the latest partition-delete state per user partition, and
for each one MARKED or STARTED (a deleter that died mid-way) runs the deletion: follow the partition in the RLMM,
DELETE_PARTITION_STARTED, every segment DELETE_SEGMENT_STARTED -> RSM delete -> DELETE_SEGMENT_FINISHED, the RSM's
partition delete, DELETE_PARTITION_FINISHED (RemoteLogManager.delete_partition, which retries through remote storage
outages). So a deletion finishes even when the partition's leader was down when the topic was deleted, and whoever
leads the metadata partition next picks up what its predecessor left.

A pass runs when a led metadata partition gets records (a MARKED is noticed at once), when this broker becomes a
metadata partition's leader (`wake`), after a failed removal (backing off from 1 s), and at least every
`remote.partition.remover.task.interval.ms`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from strata.protocol.records import iter_batches, iter_records

from .metadata import RemotePartitionDeleteMetadata, RemotePartitionDeleteState, TopicIdPartition
from .rlmm_api import RemoteLogMetadataManager
from .rlmm_serde import deserialize
from .rlmm_types import MetadataDecodeError

log = structlog.get_logger("strata.remote")

READ_BYTES = 1 << 20
READY_TIMEOUT_S = 30.0
RETRY_BACKOFF_S = 1.0  # after a failed removal, doubling up to the task interval


class RemotePartitionRemover:
    def __init__(
        self,
        rlm: Any,
        rlmm: RemoteLogMetadataManager,
        io: Any,
        *,
        num_partitions: int,
        interval_ms: int,
        is_leader: Callable[[int], bool],
        wait_for_appends: Callable[[list[int], float], Awaitable[Any]],
    ) -> None:
        self.rlm = rlm
        self.rlmm = rlmm
        self.io = io
        self.num_partitions = num_partitions
        self.interval_s = max(interval_ms, 10) / 1000.0
        self.is_leader = is_leader
        self.wait_for_appends = wait_for_appends
        self._positions: dict[int, int] = {}
        self._pending: dict[int, dict[TopicIdPartition, RemotePartitionDeleteState]] = {}
        self._finished: dict[int, set[TopicIdPartition]] = {}  # deletions are final: a late MARKED is ignored
        self._removing: dict[TopicIdPartition, asyncio.Task] = {}
        self._failures: dict[TopicIdPartition, int] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closed = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="remote-partition-remover")

    def wake(self) -> None:
        self._wake.set()

    async def close(self) -> None:
        self._closed = True
        tasks = [t for t in (self._task, *self._removing.values()) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def pending(self) -> dict[TopicIdPartition, RemotePartitionDeleteState]:
        """Partitions of led metadata partitions whose deletion is not finished, with their latest state."""
        return {tip: st for states in self._pending.values() for tip, st in states.items()}

    async def _run(self) -> None:
        while not self._closed:
            led: list[int] = []
            try:
                led = self.run_once()
            except Exception as e:  # noqa: BLE001 - a metadata partition moving away mid-read: next pass
                log.warning("remote partition remover pass failed", error=str(e))
            self._wake.clear()
            waits = [asyncio.ensure_future(self._wake.wait())]
            if led:
                waits.append(asyncio.ensure_future(self.wait_for_appends(led, self.interval_s)))
            try:
                await asyncio.wait(waits, timeout=self.interval_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()

    def run_once(self) -> list[int]:
        """Fold what the led metadata partitions got since the last pass and start the deletions due; returns the
        metadata partitions this broker leads."""
        led = [p for p in range(self.num_partitions) if self.is_leader(p)]
        for p in list(self._positions):
            if p not in led:  # led elsewhere now: its new leader takes over
                del self._positions[p]
                self._pending.pop(p, None)
                self._finished.pop(p, None)
        for p in led:
            self._fold(p)
            for tip in self._pending.get(p, {}):
                if tip not in self._removing:
                    t = asyncio.create_task(self._remove(tip), name=f"remote-partition-remover-{tip}")
                    self._removing[tip] = t
        return led

    def _fold(self, p: int) -> None:
        pos = self._positions.get(p, 0)  # below the log start, a read starts at the log start
        end = self.io.end_offset(p) or 0
        states = self._pending.setdefault(p, {})
        finished = self._finished.setdefault(p, set())
        while pos < end:
            data = self.io.read(p, pos, READ_BYTES)
            last = pos - 1
            for bpos, h in iter_batches(data):
                if h.last_offset < pos:
                    continue
                for r in iter_records(data, bpos):
                    if r.offset < pos or r.value is None:
                        continue
                    try:
                        m = deserialize(r.value)
                    except MetadataDecodeError:
                        continue
                    if isinstance(m, RemotePartitionDeleteMetadata):
                        tip = m.topic_id_partition
                        if m.state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                            states.pop(tip, None)
                            finished.add(tip)
                        elif tip not in finished:  # a mark written late by a broker not following the partition
                            states[tip] = m.state
                last = h.last_offset
            if last < pos:
                break  # nothing readable (the read stopped at the HW): next pass
            pos = last + 1
        self._positions[p] = pos

    async def _remove(self, tip: TopicIdPartition) -> None:
        followed = tip in self.rlmm.followed_partitions()
        try:
            if not followed:
                self.rlmm.on_partition_leadership_changes([], [tip])
            await self.rlmm.wait_until_ready(tip, READY_TIMEOUT_S)
            log.info("removing remote partition", partition=str(tip))
            n = await self.rlm.delete_partition(tip)
            log.info("removed remote partition", partition=str(tip), segments=n)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - retried by a pass soon (backing off), not only at the interval
            failures = self._failures[tip] = self._failures.get(tip, 0) + 1
            delay = min(RETRY_BACKOFF_S * 2 ** (failures - 1), self.interval_s)
            log.warning("remote partition removal failed", partition=str(tip), error=str(e), retry_in_s=round(delay, 2))
            if not self._closed:
                asyncio.get_running_loop().call_later(delay, self.wake)
        else:
            self._failures.pop(tip, None)
        finally:
            self._removing.pop(tip, None)
            if not followed and not self._closed:
                try:
                    self.rlmm.on_stop_partitions([tip])
                except Exception as e:  # noqa: BLE001 - a closing RLMM
                    log.warning("RLMM stop failed", partition=str(tip), error=str(e))
