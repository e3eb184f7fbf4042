"""An in-memory `MetadataTopicIO` for the RLMM tests, and tests of the fake itself.

It behaves like a replicated log seen through its high watermark: `append` validates the magic-v2 batch, assigns
offsets from the log end (rewriting the base offset as a leader does), and returns the base offset once the high
watermark covers the batch. `hold_hw(p)` stops the high watermark of a partition (appends then wait, like acks=all
with a lagging follower) until `release_hw(p)`. `read` returns whole batches from the one holding the requested
offset, only below the high watermark; `block_reads(p)` makes reads of a partition return nothing (a slow disk)
until `unblock_reads(p)`. Everything is event driven: no timers.
"""

from __future__ import annotations

import asyncio

import pytest

from strata.protocol.records import build_batch, iter_batches, iter_records, set_base_offset, validate_batch


class InMemoryMetadataTopicIO:
    def __init__(self, num_partitions: int | None = None) -> None:
        self.num_partitions = num_partitions
        self.created: list[tuple[int, int, int]] = []
        self.logs: dict[int, list[bytes]] = {}
        self.leo: dict[int, int] = {}
        self.hw: dict[int, int] = {}
        self.held: set[int] = set()
        self.blocked: set[int] = set()
        self.appends = 0
        self.reads = 0
        self.read_offsets: list[tuple[int, int]] = []
        self._changed: dict[int, asyncio.Event] = {}

    # -- MetadataTopicIO ----------------------------------------------------------------------------------------------
    async def ensure_topic(self, num_partitions: int, replication_factor: int, retention_ms: int) -> None:
        if self.num_partitions is not None and self.num_partitions != num_partitions:
            raise RuntimeError(
                f"__remote_log_metadata exists with {self.num_partitions} partitions, not {num_partitions}"
            )
        self.num_partitions = num_partitions
        self.created.append((num_partitions, replication_factor, retention_ms))

    async def append(self, partition: int, records: bytes) -> int:
        self._check(partition)
        buf = bytearray(records)
        header = validate_batch(buf)
        assert header.size == len(buf), "exactly one batch per append"
        base = self.leo.get(partition, 0)
        set_base_offset(buf, 0, base)
        self.logs.setdefault(partition, []).append(bytes(buf))
        self.leo[partition] = base + header.last_offset_delta + 1
        self.appends += 1
        if partition not in self.held:
            self._advance_hw(partition)
        while self.hw.get(partition, 0) <= base:
            await self._event(partition).wait()
        return base

    def read(self, partition: int, offset: int, max_bytes: int) -> bytes:
        self._check(partition)
        self.reads += 1
        self.read_offsets.append((partition, offset))
        if partition in self.blocked:
            return b""
        hw = self.hw.get(partition, 0)
        out = bytearray()
        for batch in self.logs.get(partition, []):
            ((_, h),) = iter_batches(batch)
            if h.next_offset <= offset:
                continue
            if h.next_offset > hw:
                break
            if out and len(out) + len(batch) > max_bytes:
                break
            out += batch
        return bytes(out)

    def replicated_end_offset(self, partition: int) -> int:
        """The log end (every reader's replica holds all records appended, committed or not)."""
        return self.leo.get(partition, 0)

    def end_offset(self, partition: int) -> int:
        self._check(partition)
        return self.hw.get(partition, 0)

    async def wait_for_data(self, partition: int, offset: int, timeout_s: float) -> None:
        self._check(partition)
        if self.hw.get(partition, 0) > offset and partition not in self.blocked:
            return
        try:
            await asyncio.wait_for(self._event(partition).wait(), timeout_s)
        except TimeoutError:
            pass

    # -- test controls -------------------------------------------------------------------------------------------------
    def hold_hw(self, partition: int) -> None:
        self.held.add(partition)

    def release_hw(self, partition: int) -> None:
        self.held.discard(partition)
        self._advance_hw(partition)

    def block_reads(self, partition: int) -> None:
        self.blocked.add(partition)

    def unblock_reads(self, partition: int) -> None:
        self.blocked.discard(partition)
        self._notify(partition)

    def records(self, partition: int) -> list[tuple[int, bytes | None]]:
        """(offset, value) of every record in the log of `partition` (committed or not)."""
        out: list[tuple[int, bytes | None]] = []
        for batch in self.logs.get(partition, []):
            out.extend((r.offset, r.value) for r in iter_records(batch))
        return out

    def append_nowait(self, partition: int, value: bytes | None, key: bytes | None = None) -> int:
        """Append one record as another broker would, without waiting (the high watermark moves unless held)."""
        self._check(partition)
        batch = bytearray(build_batch([(key, value)], timestamp=1))
        base = self.leo.get(partition, 0)
        set_base_offset(batch, 0, base)
        self.logs.setdefault(partition, []).append(bytes(batch))
        self.leo[partition] = base + 1
        if partition not in self.held:
            self._advance_hw(partition)
        return base

    # -- internals ----------------------------------------------------------------------------------------------------
    def _check(self, partition: int) -> None:
        if self.num_partitions is None or not 0 <= partition < self.num_partitions:
            raise ValueError(f"no partition {partition} in __remote_log_metadata ({self.num_partitions})")

    def _event(self, partition: int) -> asyncio.Event:
        ev = self._changed.get(partition)
        if ev is None:
            ev = self._changed[partition] = asyncio.Event()
        return ev

    def _advance_hw(self, partition: int) -> None:
        self.hw[partition] = self.leo.get(partition, 0)
        self._notify(partition)

    def _notify(self, partition: int) -> None:
        ev = self._event(partition)
        ev.set()
        self._changed[partition] = asyncio.Event()


# -- tests of the fake: it must behave like a log, or the RLMM tests prove nothing -------------------------------------


def test_append_assigns_offsets_and_read_returns_whole_batches_from_the_holding_one() -> None:
    async def main() -> None:
        io = InMemoryMetadataTopicIO()
        await io.ensure_topic(3, 1, -1)
        assert await io.append(1, build_batch([b"a", b"b"], timestamp=5)) == 0
        assert await io.append(1, build_batch([b"c"], timestamp=5)) == 2
        assert io.end_offset(1) == 3 and io.end_offset(0) == 0
        data = io.read(1, 1, 1 << 20)
        batches = [h for _, h in iter_batches(data)]
        assert [h.base_offset for h in batches] == [0, 2]  # the batch holding offset 1 comes whole
        assert [r.value for _, h in iter_batches(data) for r in iter_records(data, _)] == [b"a", b"b", b"c"]
        assert io.read(1, 3, 1 << 20) == b""
        one = io.read(1, 0, 1)  # at least one whole batch
        assert [h.base_offset for _, h in iter_batches(one)] == [0]
        with pytest.raises(ValueError):
            io.read(3, 0, 10)

    asyncio.run(main())


def test_held_high_watermark_hides_data_and_delays_append() -> None:
    async def main() -> None:
        io = InMemoryMetadataTopicIO(2)
        io.hold_hw(0)
        task = asyncio.ensure_future(io.append(0, build_batch([b"x"], timestamp=1)))
        await asyncio.sleep(0)
        assert not task.done()
        assert io.read(0, 0, 1 << 20) == b"" and io.end_offset(0) == 0
        waiter = asyncio.ensure_future(io.wait_for_data(0, 0, 3600))
        await asyncio.sleep(0)
        assert not waiter.done()
        io.release_hw(0)
        assert await task == 0
        await waiter
        assert io.end_offset(0) == 1 and io.read(0, 0, 1 << 20) != b""

    asyncio.run(main())


def test_ensure_topic_rejects_a_different_partition_count() -> None:
    async def main() -> None:
        io = InMemoryMetadataTopicIO(5)
        with pytest.raises(RuntimeError):
            await io.ensure_topic(50, 3, -1)
        await io.ensure_topic(5, 3, -1)
        assert io.created == [(5, 3, -1)]

    asyncio.run(main())
