"""Delayed operations: requests parked until the log they watch changes or their deadline passes.

Kafka keys its purgatories by TopicPartition and checks `tryComplete` on every watched-key event; here each parked
request awaits one future that any append to a watched partition resolves, then re-checks its own condition.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable


class Purgatory:
    def __init__(self, name: str, on_size: Callable[[str, int], None] | None = None) -> None:
        self.name = name
        self._watchers: dict[Hashable, set[asyncio.Future]] = defaultdict(set)
        self._parked = 0
        self._on_size = on_size

    @property
    def size(self) -> int:
        return self._parked

    def _report(self) -> None:
        if self._on_size is not None:
            self._on_size(self.name, self._parked)

    def check_and_complete(self, key: Hashable) -> None:
        """An event on `key` (an append, an HW move): wake everything watching it."""
        waiters = self._watchers.pop(key, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(key)

    async def wait(self, keys: Iterable[Hashable], timeout_s: float) -> bool:
        """Park until an event on one of `keys` (True) or the timeout (False)."""
        keys = list(keys)
        if timeout_s <= 0 or not keys:
            return False
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        for k in keys:
            self._watchers[k].add(fut)
        self._parked += 1
        self._report()
        try:
            await asyncio.wait_for(fut, timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            self._parked -= 1
            self._report()
            for k in keys:
                s = self._watchers.get(k)
                if s is not None:
                    s.discard(fut)
                    if not s:
                        del self._watchers[k]
