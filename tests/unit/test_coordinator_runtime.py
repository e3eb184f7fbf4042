"""CoordinatorRuntime on its own, with a key-value state machine on an internal topic of its own: writes answered
after the append is committed and in FIFO order, a partition's state loaded from its log on leadership, unloaded on
resignation, and a load that ends after a resignation installing nothing. The group coordinator's use of it is
covered by test_group_coordinator.py and test_replication_coordinator.py."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from strata.broker.coordinator.runtime import CoordinatorRuntime, CoordinatorTopic, partition_for
from strata.protocol.errors import ErrorCode as E
from tests.unit.test_group_coordinator import make_server, run, until

TOPIC = CoordinatorTopic("__test_state", partitions=2, replication_factor=1, segment_bytes=1 << 20)


@dataclass
class KvLoad:
    partition: int
    state: dict[bytes, bytes] = field(default_factory=dict)


class KvShard:
    """The smallest state machine: the last value per key, a tombstone deletes."""

    def __init__(self) -> None:
        self.state: dict[int, dict[bytes, bytes]] = {}
        self.unloaded: list[int] = []

    def begin_load(self, partition: int) -> KvLoad:
        return KvLoad(partition)

    def replay(self, load: KvLoad, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        if value is None:
            load.state.pop(key, None)
        else:
            load.state[key] = value

    def complete_load(self, partition: int, load: KvLoad) -> None:
        self.state[partition] = load.state

    def unload(self, partition: int) -> None:
        self.state.pop(partition, None)
        self.unloaded.append(partition)


def key_in(partition: int) -> str:
    return next(k for k in (f"k{i}" for i in range(100)) if partition_for(k, TOPIC.partitions) == partition)


def test_writes_are_answered_once_committed_and_state_is_reloaded_from_the_log(tmp_path):
    async def main():
        server = make_server(tmp_path)
        rm = server.replica_manager
        shard = KvShard()
        rt = CoordinatorRuntime(TOPIC, shard, rm, server.store, clock=lambda: 1000)
        await rt.startup()
        assert rt.loaded.is_set() and not rt.topic_exists()
        assert rt.check("a") == E.COORDINATOR_NOT_AVAILABLE  # no topic yet
        assert await rt.ensure_topic() and rt.topic_exists() and rt.num_partitions == 2
        p = rt.partition_for("a")
        assert rt.check("a") == E.NOT_COORDINATOR  # not led here until told so
        rt.on_become_leader(p)
        assert rt.check("a") == E.NONE and p not in rt.loading  # an empty log: nothing to load
        # writes queued together land in order; each answers once the HW passed it
        futs = [rt.write(p, [(b"a", b"1")]), rt.write(p, [(b"a", b"2"), (b"b", b"x")]), rt.write(p, [(b"b", None)])]
        assert await asyncio.gather(*futs) == [E.NONE, E.NONE, E.NONE]
        log = rm.get_partition(TOPIC.name, p).log
        assert log.high_watermark == log.log_end_offset == 4
        await rt.shutdown()
        assert not rt.active and rt.check("a") == E.COORDINATOR_NOT_AVAILABLE
        # a new runtime on the same log: the partition led before startup is replayed (last value per key)
        shard2 = KvShard()
        rt2 = CoordinatorRuntime(TOPIC, shard2, rm, server.store, clock=lambda: 1000)
        rt2.on_become_leader(p)
        await rt2.startup()
        await asyncio.wait_for(rt2.loaded.wait(), 10)
        assert shard2.state == {p: {b"a": b"2"}} and rt2.check("a") == E.NONE
        # resigning unloads; winning the partition again loads it again
        rt2.on_resign(p)
        assert shard2.unloaded == [p] and p not in shard2.state and rt2.check("a") == E.NOT_COORDINATOR
        rt2.on_become_leader(p)
        assert rt2.check("a") == E.COORDINATOR_LOAD_IN_PROGRESS
        await until(lambda: rt2.check("a") == E.NONE)
        assert shard2.state == {p: {b"a": b"2"}}
        await rt2.shutdown()
        server.log_manager.shutdown()

    run(main())


def test_a_load_ended_after_a_resignation_installs_nothing(tmp_path):
    async def main():
        server = make_server(tmp_path)
        shard = KvShard()
        rt = CoordinatorRuntime(TOPIC, shard, server.replica_manager, server.store, clock=lambda: 1000)
        await rt.startup()
        assert await rt.ensure_topic()
        p = rt.partition_for(key_in(1))
        rt.on_become_leader(p)
        assert await rt.write(p, [(b"a", b"1")]) == E.NONE
        rt.on_resign(p)
        rt.on_become_leader(p)  # a load starts ...
        assert p in rt.loading
        rt.on_resign(p)  # ... and the partition is lost before it ends
        await until(lambda: not rt.background_tasks)
        assert p not in shard.state and p not in rt.loading and shard.unloaded == [p, p]
        await rt.shutdown()
        server.log_manager.shutdown()

    run(main())


class HeldAppends:
    """A replica manager whose appends wait until the test releases them (the ISR catching up)."""

    def __init__(self) -> None:
        self.appended: list[tuple[str, int, bytes | memoryview]] = []
        self.release = asyncio.Event()

    def get_partition(self, topic: str, partition: int) -> None:
        return None

    async def append_records(self, entries, internal: bool = False):
        assert internal
        self.appended += entries
        await self.release.wait()
        return [type("R", (), {"error": E.NONE})() for _ in entries]

    def ensure_partitions(self, info) -> None:
        pass


class OneTopicStore:
    clustered = False

    def topic(self, name: str):
        return type("T", (), {"partitions": 3})()

    def brokers(self):
        return {0: object()}

    async def create_topic(self, name, partitions, configs, internal=False, replication_factor=1):
        raise AssertionError("the topic exists")


def test_a_write_is_answered_only_when_its_append_is_committed():
    async def main():
        rm = HeldAppends()
        rt = CoordinatorRuntime(TOPIC, KvShard(), rm, OneTopicStore(), clock=lambda: 1000)
        assert rt.num_partitions == 3  # an existing topic keeps its own partition count
        await rt.startup()
        fut = rt.write(1, [(b"k", b"v")])
        await until(lambda: rm.appended)
        assert rm.appended[0][:2] == (TOPIC.name, 1) and not fut.done()
        rm.release.set()
        assert await asyncio.wait_for(fut, 5) == E.NONE
        await rt.shutdown()

    run(main())
