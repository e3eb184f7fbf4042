"""A declarative scenario harness for KIP-405 on a cluster, the multi-broker sibling of tests/tiered/harness.py: a
`ClusterScenario` is a list of actions run in order against a real `StrataCluster` (etcd, broker processes, S3).

    (ClusterScenario("unclean election", topic="t")
        .create_topic(replicas=[1, 2], **{"remote.storage.enable": True, "segment.bytes": 4096})
        .produce("r1", 40, expect_start=0)
        .stop(2).expect_isr({1})
        .produce("r2", 120, expect_start=40)
        .wait_tiered_past(100, remember="old_tiered")
        .kill(1).start(2).expect_leader(2, remember="epoch")
        .produce("r3", 150, expect_start=40)
        .expect_read([("r1", 0, 40), ("r3", 0, 150)])
        .run(cluster))

Records are named batches (`tests/cluster/tiered_support.values`): `expect_read` lists which runs of which batches
the partition must hold from offset 0, in order. Arguments that depend on what an earlier action saw take a callable
of the scenario's memory (`lambda m: m["old_tiered"] + 40`). Observation goes through public surfaces only (Kafka
requests, the RLMM records, Prometheus, the replica files). A failing action is reported with its index and
description and the actions that ran before it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any, Self

from tests.cluster.tiered_support import (
    EARLIEST_LOCAL,
    list_offset,
    produce,
    remote_fetches,
    replicate_metadata_topic,
    set_topic_config,
    values,
    wait_tiered_past,
)
from tests.cluster.workload import read_all
from tests.support.cluster_proc import StrataCluster
from tests.support.waiting import wait_until

Memory = dict[str, Any]
Value = Any | Callable[[Memory], Any]


class ScenarioError(AssertionError):
    pass


def _v(x: Value, m: Memory) -> Any:
    return x(m) if callable(x) else x


class ClusterScenario:
    def __init__(self, name: str, topic: str) -> None:
        self.name = name
        self.topic = topic
        # an action's return value (if any) is ignored
        self.actions: list[tuple[str, Callable[[StrataCluster, Memory], object]]] = []

    def _add(self, description: str, fn: Callable[[StrataCluster, Memory], object]) -> Self:
        self.actions.append((description, fn))
        return self

    def run(self, c: StrataCluster) -> Memory:
        memory: Memory = {}
        for i, (description, fn) in enumerate(self.actions):
            try:
                fn(c, memory)
            except Exception as e:
                done = "\n".join(f"  {j}. {d}" for j, (d, _) in enumerate(self.actions[:i]))
                raise ScenarioError(
                    f"scenario {self.name!r}: action {i} ({description}) failed: {e}\n"
                    f"actions run before it:\n{done}\nmemory: {memory}"
                ) from e
        return memory

    # -- topology ----------------------------------------------------------------------------------------------------
    def replicate_metadata_topic(self) -> Self:
        return self._add("__remote_log_metadata on every broker", lambda c, m: replicate_metadata_topic(c))

    def create_topic(self, replicas: list[int], **config: object) -> Self:
        def fn(c: StrataCluster, m: Memory) -> None:
            c.create_topic(self.topic, replica_assignment=[replicas], config=config)

        return self._add(f"create {self.topic} on {replicas} with {config}", fn)

    def kill(self, i: int) -> Self:
        return self._add(f"kill -9 broker {i}", lambda c, m: c.kill9(i))

    def stop(self, i: int) -> Self:
        return self._add(f"stop broker {i}", lambda c, m: c.stop(i))

    def start(self, i: int, **overrides: object) -> Self:
        def fn(c: StrataCluster, m: Memory) -> None:
            c.brokers[i].overrides.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
            c.start(i)

        return self._add(f"start broker {i}" + (f" with {overrides}" if overrides else ""), fn)

    def power_loss(self, i: int, keep: int) -> Self:
        def fn(c: StrataCluster, m: Memory) -> None:
            got = c.power_loss(i, {(self.topic, 0): keep})
            assert got == {(self.topic, 0): keep}, got

        return self._add(f"power loss of broker {i}: its log keeps offsets below {keep}", fn)

    def wipe(self, i: int) -> Self:
        return self._add(
            f"broker {i} loses its disk (partition directory deleted)",
            lambda c, m: shutil.rmtree(c.partition_dir(i, self.topic, 0)),
        )

    def set_config(self, **configs: object) -> Self:
        conf = {k.replace("_", "."): v for k, v in configs.items()}
        return self._add(f"alter {self.topic}: {conf}", lambda c, m: set_topic_config(c, self.topic, conf))

    # -- data --------------------------------------------------------------------------------------------------------
    def produce(self, name: str, n: int, expect_start: Value = None) -> Self:
        def fn(c: StrataCluster, m: Memory) -> None:
            start = produce(c, self.topic, name, n)
            want = _v(expect_start, m)
            assert want is None or start == want, f"{name} written from offset {start}, expected {want}"
            m[name] = start

        return self._add(f"produce {n} records {name!r}", fn)

    def wait_tiered_past(self, offset: Value, remember: str | None = None) -> Self:
        def fn(c: StrataCluster, m: Memory) -> None:
            t = wait_tiered_past(c, self.topic, _v(offset, m))
            if remember:
                m[remember] = t

        return self._add(f"wait until the leader tiered past {offset}", fn)

    def drop_local_copies(self, past: Value) -> Self:
        """Local retention down to one segment: the earliest local offset moves past `past`, so reading below it
        goes to remote storage."""

        def fn(c: StrataCluster, m: Memory) -> None:
            set_topic_config(c, self.topic, {"local.retention.bytes": 1})
            limit = _v(past, m)
            wait_until(
                lambda: list_offset(c, self.topic, EARLIEST_LOCAL) > limit,
                timeout=60,
                message=lambda: f"earliest local offset {list_offset(c, self.topic, EARLIEST_LOCAL)}",
            )

        return self._add(f"local retention 1 byte: earliest local offset past {past}", fn)

    # -- expectations ------------------------------------------------------------------------------------------------
    def expect_leader(self, i: int, remember: str | None = None) -> Self:
        def fn(c: StrataCluster, m: Memory) -> None:
            assert c.wait_leader(self.topic, 0, among=[i], timeout=30) == i
            if remember:
                m[remember] = c.epoch_of(self.topic, 0)

        return self._add(f"broker {i} leads", fn)

    def expect_isr(self, isr: set[int], timeout: float = 60) -> Self:
        return self._add(f"ISR is {sorted(isr)}", lambda c, m: c.wait_isr(self.topic, 0, isr, timeout=timeout))

    def expect_read(self, runs: list[tuple[str, int, int]], remote_via: int | None = None) -> Self:
        """A consumer reading from offset 0 gets exactly these runs (batch name, from, to) in order; with
        `remote_via`, broker `remote_via` served some of it from remote storage."""

        def fn(c: StrataCluster, m: Memory) -> None:
            want = [v for name, lo, hi in runs for v in values(name, hi)[lo:hi]]
            before = remote_fetches(c, remote_via, self.topic) if remote_via else 0.0
            got = [r.value for r in sorted(read_all(c.bootstrap, self.topic, 1), key=lambda r: r.offset)]
            assert got == want, _first_difference(got, want)
            if remote_via:
                assert remote_fetches(c, remote_via, self.topic) > before, "nothing was read from remote storage"

        return self._add(f"read from offset 0: {runs}", fn)

    def do(self, description: str, action: Callable[[StrataCluster, Memory], Any]) -> Self:
        """Any other action (it may remember what it saw in the memory)."""
        return self._add(description, lambda c, m: action(c, m))

    def expect(self, description: str, check: Callable[[StrataCluster, Memory], Any]) -> Self:
        """Any other check; it fails by raising (an assert) or by returning False."""

        def fn(c: StrataCluster, m: Memory) -> None:
            assert check(c, m) is not False, description

        return self._add(description, fn)


def _first_difference(got: list[bytes | None], want: list[bytes]) -> str:
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return f"offset {i}: got {(a if a is None else a[:14])!r}, expected {b[:14]!r}"
    return f"got {len(got)} records, expected {len(want)}"
