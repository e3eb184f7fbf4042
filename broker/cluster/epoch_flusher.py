"""Leader-epoch checkpoints of many new leaders made durable together, in a worker thread.

Becoming leader assigns the new epoch at the LEO and rewrites the partition's leader-epoch-checkpoint (Kafka's
makeLeader). When a broker dies, each survivor becomes leader of hundreds or thousands of partitions in one burst of
watch events; an fsync of the file and of its directory per partition, on the event loop, held the loop for seconds
(py-spy: 40 % of a survivor's time during a 1,000-partition fail-over) while produce and fetch waited. In a cluster
the checkpoint is written at once without fsync (the rename keeps it whole) and its path is queued here; a task
fsyncs every queued file and directory in a worker thread, many at a time. A crash before that leaves the previous
checkpoint or the new one: either way the epochs of records past the recovery point are read back from their
batches at recovery, as for any unflushed append.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import structlog

from strata.storage.checkpoints import fsync_path

log = structlog.get_logger("strata.replica_manager")


class EpochCheckpointFlusher:
    def __init__(self) -> None:
        self._pending: set[Path] = set()
        self._task: asyncio.Task | None = None
        self.flushed = 0

    def written(self, path: Path | None) -> None:
        """`path` was rewritten without fsync: make it durable soon."""
        if path is None:
            return
        self._pending.add(path)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="epoch-checkpoint-fsync")

    async def _run(self) -> None:
        while self._pending:
            paths, self._pending = self._pending, set()
            try:
                await asyncio.to_thread(_fsync_all, paths)
                self.flushed += len(paths)
            except Exception as e:  # noqa: BLE001 - a disk error: Kafka's log dir failure is not modelled here
                log.warning("could not fsync leader epoch checkpoints", files=len(paths), error=repr(e))

    async def stop(self) -> None:
        """Flush what is queued (clean shutdown), bounded."""
        t = self._task
        if t is not None:
            await asyncio.wait([t], timeout=10.0)


def _fsync_all(paths: set[Path]) -> None:
    """Each file, then each directory once (its rename durable); a file gone meanwhile (partition deleted) is
    skipped."""
    for group in (paths, {p.parent for p in paths}):
        for p in group:
            try:
                fsync_path(p)
            except FileNotFoundError:
                continue
