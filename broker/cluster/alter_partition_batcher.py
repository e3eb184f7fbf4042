"""AlterPartition (ISR changes) sent in batches, as Kafka's AlterPartitionManager does.

A leader of thousands of partitions shrinks or expands many ISRs at once (a follower that restarted, or fell behind
while it made its replicas); one compare-and-set transaction per partition is thousands of etcd round trips in
series with the leader's event loop. Here the changes asked for while a batch is in flight are queued and written
together, up to BATCH partitions per transaction. A transaction whose compare fails for one partition fails for all:
its partitions are then written one by one, so each gets its own answer (the new state, or StaleStateError).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from .model import PartitionState, StaleStateError

Update = tuple[str, int, PartitionState]
BATCH = 100  # etcd's default --max-txn-ops is 128


class AlterPartitionBatcher:
    def __init__(
        self, write: Callable[[list[Update]], Awaitable[int]], current: Callable[[str, int], PartitionState | None]
    ) -> None:
        self._write = write  # one transaction of compare-and-set partition writes (raises StaleStateError)
        self._current = current  # the image's state of a partition
        self._queue: list[tuple[Update, asyncio.Future[PartitionState]]] = []
        self._task: asyncio.Task | None = None
        self.transactions = 0  # tests: how many transactions the changes took

    async def submit(self, topic: str, partition: int, new: PartitionState) -> PartitionState:
        fut: asyncio.Future[PartitionState] = asyncio.get_running_loop().create_future()
        self._queue.append(((topic, partition, new), fut))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="alter-partition")
        return await fut

    async def _run(self) -> None:
        while self._queue:
            batch: list[tuple[Update, asyncio.Future[PartitionState]]] = []
            keys: set[tuple[str, int]] = set()
            rest = []
            for item in self._queue:
                (t, p, _), fut = item
                if fut.done():
                    continue  # the asker was cancelled
                if (t, p) in keys or len(batch) >= BATCH:
                    rest.append(item)  # one change per partition per transaction: the next one follows it
                else:
                    keys.add((t, p))
                    batch.append(item)
            self._queue = rest
            if batch:
                await self._write_batch(batch)

    async def _write_batch(self, batch: list[tuple[Update, asyncio.Future[PartitionState]]]) -> None:
        ready = []
        for (t, p, new), fut in batch:
            cur = self._current(t, p)
            if cur is None or new.partition_epoch != cur.partition_epoch + 1:
                _fail(fut, StaleStateError(f"{t}-{p}: the partition changed before its ISR change was written"))
            else:
                ready.append(((t, p, new), fut))
        if not ready:
            return
        try:
            self.transactions += 1
            await self._write([u for u, _ in ready])
        except StaleStateError:
            if len(ready) == 1:
                _fail(ready[0][1], StaleStateError(f"{ready[0][0][0]}-{ready[0][0][1]} changed concurrently"))
                return
            for item in ready:  # the image now has what failed the compare: each alone gets its own answer
                await self._write_batch([item])
            return
        except asyncio.CancelledError:
            for _, fut in ready:
                fut.cancel()
            raise
        except Exception as e:  # noqa: BLE001 - etcd unreachable, say: every asker gets the error
            for _, fut in ready:
                _fail(fut, e)
            return
        for (_, _, new), fut in ready:
            if not fut.done():
                fut.set_result(new)


def _fail(fut: asyncio.Future, e: BaseException) -> None:
    if not fut.done():
        fut.set_exception(e)
