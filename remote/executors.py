"""The RemoteLogManager's thread pools, kept apart as Kafka keeps them: copier
(`remote.log.manager.copier.thread.pool.size`), expiration (`remote.log.manager.expiration.thread.pool.size`) and
reader (`remote.log.reader.threads`). The event loop runs the tasks; these threads run their blocking file and CPU
work, so ten copies reading segment files cannot starve remote reads of threads (or the log flusher, which uses
the loop's default executor).

Which pool an RSM call uses follows the RLM task that made it: the copy, expiration and read paths set `POOL`
(a context variable, so tasks they spawn -- chunk loads, index loads -- inherit it) and an RSM's `_run` asks
`RemoteExecutors.current()`. Outside those paths (tools, tests) the loop's default executor is used.
"""

from __future__ import annotations

from concurrent.futures import Executor, ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass

COPY, EXPIRATION, READ = "copy", "expiration", "read"
POOL: ContextVar[str | None] = ContextVar("strata_remote_pool", default=None)


@dataclass
class RemoteExecutors:
    copy: Executor
    expiration: Executor
    read: Executor

    @classmethod
    def create(cls, copier_threads: int, expiration_threads: int, reader_threads: int) -> RemoteExecutors:
        return cls(
            ThreadPoolExecutor(max(1, copier_threads), thread_name_prefix="remote-log-copier"),
            ThreadPoolExecutor(max(1, expiration_threads), thread_name_prefix="remote-log-expiration"),
            ThreadPoolExecutor(max(1, reader_threads), thread_name_prefix="remote-log-reader"),
        )

    def current(self) -> Executor | None:
        """The pool of the RLM path running now; None (the loop's default executor) outside them."""
        pool = POOL.get()  # the names of the pools are the names of these fields
        return getattr(self, pool) if pool is not None else None

    def shutdown(self) -> None:
        for ex in (self.copy, self.expiration, self.read):
            ex.shutdown(wait=False, cancel_futures=True)


__all__ = ["COPY", "EXPIRATION", "POOL", "READ", "RemoteExecutors"]
