"""New replicas from the metadata watch, made in bulk off the event loop.

A CreateTopics of thousands of partitions reaches every replica as thousands of partition keys on the watch. Made
one by one on the event loop (a dir, an fsynced partition.metadata, an fsynced epoch checkpoint each) they held the
loop for seconds: requests, replica fetches and the controller's passes waited. Here a partition state that needs a
replica this broker does not host yet is queued; a task makes the queued logs per topic in a worker thread
(LogManager.make_logs, the single broker's CreateTopics path: files fsynced together, the leader's epoch written
with them), adopts them and then applies the partitions' current states in slices with a yield between. A few
new replicas arriving together (at most ON_LOOP_MAX) are made on the loop as before, one loop turn after the image
showed them. Every other state change (a hosted partition's leader, ISR or epoch) is applied at once, as before.
While a large batch is being made, this broker's Metadata already names the new partitions, and a request for one
of them is answered NOT_LEADER_OR_FOLLOWER (retriable) until it is hosted; Kafka's broker, which publishes its
metadata image before applying the replica changes, has the same window.

The states applied are the image's at that time, not the queued events: as Kafka's metadata publisher applies an
image delta, intermediate states of one partition are skipped.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog

from ..gc_pauses import freeze_new_objects

if TYPE_CHECKING:
    from ..replica_manager import ReplicaManager

log = structlog.get_logger("strata.replica_manager")

Key = tuple[str, int]
APPLY_SLICE = 256  # partition states applied between two yields to the loop
ON_LOOP_MAX = 32  # new replicas made on the loop when no more arrive together (each a few fsynced files)
FREEZE_AFTER = 1000  # a creation this large moves its objects out of the collector's reach (as on one broker)


class NewReplicaMaker:
    def __init__(self, rm: ReplicaManager) -> None:
        self.rm = rm
        self._pending: dict[Key, None] = {}  # ordered set
        self._task: asyncio.Task | None = None
        self.made = 0  # logs made in worker threads so far

    def on_partition(self, topic: str, index: int) -> None:
        """A partition key changed in the image: applied now, or queued if it needs a new local log."""
        key = (topic, index)
        rm = self.rm
        if key in self._pending:
            return  # the drain applies the state current then
        if key in rm.partitions or not self._needs_log(topic, index):
            rm.apply_partition_state(topic, index, rm.store.partition_state(topic, index))
            return
        self._pending[key] = None
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain(), name="new-replicas")

    def _needs_log(self, topic: str, index: int) -> bool:
        rm = self.rm
        state = rm.store.partition_state(topic, index)
        if state is None or rm.store.topic(topic) is None:
            return False
        hosted = rm.broker_id in state.replicas or rm.broker_id in state.adding
        return hosted and rm.log_manager.get_log(topic, index) is None

    async def _drain(self) -> None:
        while self._pending:
            batch, self._pending = list(self._pending), {}
            if len(batch) <= ON_LOOP_MAX:
                # a few: made on the loop at once (apply_partition_state), so a client that sees the new
                # partition in this broker's Metadata finds it hosted here, as before
                await self._apply(batch)
                continue
            try:
                await self._make(batch)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("making new replicas failed; applied one by one", partitions=len(batch))
            await self._apply(batch)

    async def _make(self, keys: list[Key]) -> None:
        rm, lm, store = self.rm, self.rm.log_manager, self.rm.store
        by_topic: dict[str, list[int]] = {}
        for t, i in keys:
            if self._needs_log(t, i):
                by_topic.setdefault(t, []).append(i)
        made_total = 0
        for topic, todo in by_topic.items():
            info = store.topic(topic)
            if info is None:
                continue
            cfg = rm.config.log_config(info.configs)
            epochs = {
                i: st.leader_epoch
                for i in todo
                if (st := store.partition_state(topic, i)) is not None and st.leader == rm.broker_id
            }
            made = await asyncio.to_thread(lm.make_logs, topic, todo, info.topic_id, cfg, epochs)
            current = store.topic(topic)
            if current is None or current.topic_id != info.topic_id:  # deleted (or re-created) meanwhile
                await asyncio.to_thread(lm.discard_logs, made)
                continue
            lm.adopt_logs(made)
            made_total += len(made)
        self.made += made_total
        if made_total >= FREEZE_AFTER:
            freeze_new_objects()

    async def _apply(self, keys: list[Key]) -> None:
        rm = self.rm
        for n, (t, i) in enumerate(keys):
            if (t, i) in self._pending:
                continue  # queued again meanwhile: the next round applies it
            rm.apply_partition_state(t, i, rm.store.partition_state(t, i))
            if n % APPLY_SLICE == APPLY_SLICE - 1:
                await asyncio.sleep(0)

    async def stop(self) -> None:
        t, self._task = self._task, None
        if t is not None:
            t.cancel()
            await asyncio.gather(t, return_exceptions=True)
