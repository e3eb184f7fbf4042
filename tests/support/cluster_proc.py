"""A Strata cluster as processes for tests: one etcd (``tests.support.etcd_proc``) and N brokers.

``StrataCluster(tmp_dir, size=3, overrides={...}).start()`` starts etcd, then brokers ``1..N`` (ids as in
docker-compose.yml) with distinct ``broker.id``, ``broker.rack`` (``rack-a``, ``rack-b``, ...), ports, data
directories and ``metadata.store.connect=etcd://...``, and returns once every broker is registered: each live
broker's Metadata lists exactly the live broker ids. Faults: ``kill9(i)`` (SIGKILL), ``stop(i)`` (SIGTERM, i.e.
controlled shutdown), ``start(i)``, ``restart(i)``, and ``power_loss(i, ...)`` (after ``kill9``: cut the logs back as a
machine crash that loses unflushed page-cache data would). ``close()`` stops everything by PID.

Partition state comes from Metadata, as clients see it: ``leader_of``, ``isr_of``, ``replicas_of``, ``epoch_of``,
``wait_leader``, ``wait_isr``. ``log_batches(i, topic, p)`` reads a replica's ``.log`` files (offsets, leader epochs,
CRCs), to compare replicas byte-for-byte-equivalently.

``netns=True`` runs each broker in its own Linux network namespace (veth pairs on one bridge; etcd listens on its own
address of the bridge, clients in the root namespace reach every broker), so a test can cut links with blackhole
routes: ``partition(a, b)``, ``isolate(i)``, ``heal()``. Needs root and ``ip`` (iproute2); everything is removed at
``close()`` (and at interpreter exit if teardown never ran).
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import subprocess
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

from strata.protocol.records import BatchHeader, iter_batches
from strata.storage.checkpoints import RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile

from . import client_security
from .broker_proc import START_TIMEOUT, StrataBroker, free_port
from .etcd_proc import EtcdProcess
from .kafka_wire import WireClient
from .waiting import WaitTimeout, wait_until

# Cluster-wide settings for fast failover in tests (a broker's lease ends 3 s after its death; a follower that has
# not caught up for 2 s leaves the ISR). Tests add or override keys.
FAST_FAILOVER: dict[str, object] = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "replica.lag.time.max.ms": 2000,
    "replica.fetch.wait.max.ms": 200,
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
    "auto.create.topics.enable": False,
    # no background fsync: only segment rolls and clean shutdowns flush (the KIP-101 tests rely on it)
    "log.flush.interval.messages": 2**63 - 1,
    "log.flush.scheduler.interval.ms": 2**63 - 1,
}

RACKS = "abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class PartitionMeta:
    topic: str
    partition: int
    error_code: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


@dataclass(frozen=True)
class Batch:
    """One batch of a replica's log, as stored: what must be identical across replicas."""

    base_offset: int
    last_offset: int
    leader_epoch: int
    crc: int
    producer_id: int
    base_sequence: int
    count: int


class ClusterBroker(StrataBroker):
    """A StrataBroker with a cluster identity; in a network namespace when ``netns`` is given."""

    def __init__(
        self,
        tmp_dir: Path,
        overrides: Mapping[str, object],
        name: str,
        host: str = "127.0.0.1",
        netns: str | None = None,
        split_listeners: bool = False,
        security: client_security.ClientSecurity | None = None,
    ):
        super().__init__(tmp_dir, overrides, name=name)
        self.security = security  # clients' credentials on `port` (the overrides secure the listeners)
        self._host = host
        self.netns = netns
        if netns is not None:  # its own address: the usual ports, nothing else listens there
            self.port, self.metrics_port = 9092, 9464
        # docker-compose.yml's layout: clients on EXTERNAL (`port`), brokers among themselves on INTERNAL
        self.internal_port: int | None = (19092 if netns else free_port()) if split_listeners else None

    @property
    def host(self) -> str:
        return self._host

    @property
    def bootstrap(self) -> str:
        return f"{self._host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self._host}:{self.metrics_port}/metrics"

    def command(self) -> list[str]:
        cmd = super().command()
        # `ip netns exec` execs the command after setns(): the PID stays that of the broker
        return ["ip", "netns", "exec", self.netns, *cmd] if self.netns else cmd

    def _start_once(self, timeout: float) -> StrataBroker:
        # (re)derive the addresses: StrataBroker.start() may have picked fresh ports after EADDRINUSE
        if self.internal_port is None:
            self.base_props["listeners"] = f"PLAINTEXT://{self._host}:{self.port}"
        else:
            self.base_props.update(
                {
                    "listeners": f"INTERNAL://{self._host}:{self.internal_port},EXTERNAL://{self._host}:{self.port}",
                    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
                    "inter.broker.listener.name": "INTERNAL",
                }
            )
        self.base_props["metrics.listener"] = self.metrics_url
        if self.security is not None:
            client_security.register(self.bootstrap, self.security)
        return super()._start_once(timeout)


class _BridgeEtcd(EtcdProcess):
    """etcd listening on an address of the namespaces' bridge (reachable from every namespace)."""

    def __init__(self, tmp_dir: Path, host: str):
        self._bridge_host = host
        super().__init__(tmp_dir)

    @property
    def host(self) -> str:
        return self._bridge_host


class NetnsNetwork:
    """Broker namespaces on one bridge. Root namespace: ``.1`` (clients), ``.2`` (etcd); broker i: ``.(10+i)``.

    Cuts are blackhole routes inside the namespaces: packets to a blackholed address are dropped (established TCP
    connections stall, new connects fail), exactly one direction per route, so a partition adds one on each side.
    """

    live: ClassVar[set[NetnsNetwork]] = set()
    _seq = 0

    def __init__(self, ids: Iterable[int]):
        NetnsNetwork._seq += 1
        self.tag = f"st{os.getpid() % 10000}{NetnsNetwork._seq}"
        self.ids = list(ids)
        self.bridge = f"{self.tag}br"
        self.subnet = _free_subnet()
        hosts = list(self.subnet.hosts())
        self.root_ip = str(hosts[0])
        self.etcd_ip = str(hosts[1])
        self.ips = {i: str(hosts[9 + i]) for i in self.ids}
        self.blocked: set[tuple[int, str]] = set()  # (namespace of broker, blackholed address)
        self._up = False

    def ns(self, i: int) -> str:
        return f"{self.tag}n{i}"

    def setup(self) -> NetnsNetwork:
        NetnsNetwork.live.add(self)
        self._up = True
        plen = self.subnet.prefixlen
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.root_ip}/{plen}", "dev", self.bridge)
        _ip("addr", "add", f"{self.etcd_ip}/{plen}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i in self.ids:
            ns, veth = self.ns(i), f"{self.tag}h{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", self.bridge)
            _ip("link", "set", veth, "up")
            _ip("-n", ns, "addr", "add", f"{self.ips[i]}/{plen}", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        return self

    def block(self, i: int, address: str) -> None:
        """Broker i can no longer send to `address`."""
        if (i, address) not in self.blocked:
            _ip("-n", self.ns(i), "route", "add", "blackhole", f"{address}/32")
            self.blocked.add((i, address))

    def partition(self, a: int, b: int) -> None:
        """Cut the link between brokers a and b (both directions)."""
        self.block(a, self.ips[b])
        self.block(b, self.ips[a])

    def isolate(self, i: int, from_etcd: bool = True) -> None:
        """Cut broker i from every other broker (and from etcd); clients still reach it."""
        for j in self.ids:
            if j != i:
                self.partition(i, j)
        if from_etcd:
            self.block(i, self.etcd_ip)

    def heal(self) -> None:
        for i, address in sorted(self.blocked):
            _ip("-n", self.ns(i), "route", "del", "blackhole", f"{address}/32")
        self.blocked.clear()

    def teardown(self) -> None:
        if not self._up:
            return
        self._up = False
        for i in self.ids:
            _ip("netns", "del", self.ns(i), check=False)  # removes its veth pair too
        _ip("link", "del", self.bridge, check=False)
        NetnsNetwork.live.discard(self)


def _ip(*args: str, check: bool = True) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=False)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.200.0.0/14 that no interface of this host uses."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
    used = {
        ipaddress.ip_interface(tok).network
        for line in out.splitlines()
        for k, tok in zip(line.split(), line.split()[1:])
        if k == "inet"
    }
    base = (os.getpid() * 7) % 1024
    for k in range(1024):
        net = ipaddress.IPv4Network(f"10.{200 + (base + k) // 256 % 4}.{(base + k) % 256}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free 10.200.0.0/14 subnet for the test network")


class StrataCluster:
    """etcd + brokers 1..size. Every method that waits does so on a condition, bounded."""

    def __init__(
        self,
        tmp_dir: Path | str,
        size: int = 3,
        overrides: Mapping[str, object] | None = None,
        broker_overrides: Mapping[int, Mapping[str, object]] | None = None,
        netns: bool = False,
        racks: bool = True,
        start_timeout: float = START_TIMEOUT,
        defaults: Mapping[str, object] = FAST_FAILOVER,
        ports: Mapping[int, tuple[int, int]] | None = None,
        split_listeners: bool = False,
        security: client_security.ClientSecurity | None = None,
        topic_config: Mapping[str, object] | None = None,
    ):
        """`defaults` (FAST_FAILOVER unless given) + `overrides` go to every broker, then `broker_overrides[i]`.
        `ports` fixes broker i's (Kafka port, metrics port) on loopback; otherwise free ports are picked.
        `split_listeners`: listeners INTERNAL (between brokers) and EXTERNAL (clients: `bootstrap`), as in
        docker-compose.yml, instead of one PLAINTEXT listener. `security`: the client listener is secured (by
        `overrides`) and the test's clients (WireClient, confluent-kafka from `bootstrap`) use these credentials.
        `topic_config`: added to every `create_topic`'s config (a profile's tiering, say)."""
        self.tmp_dir = Path(tmp_dir)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        self.ids = list(range(1, size + 1))
        self.start_timeout = start_timeout
        self.net = NetnsNetwork(self.ids) if netns else None
        self.etcd: EtcdProcess | None = None
        self.brokers: dict[int, ClusterBroker] = {}
        self._overrides = {**defaults, **(overrides or {})}
        self._ports = dict(ports or {})
        self._split = split_listeners
        self.security = security
        self._topic_config = dict(topic_config or {})
        self._broker_overrides = {i: dict(v) for i, v in (broker_overrides or {}).items()}
        self._racks = racks
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def start(self, i: int | None = None, timeout: float | None = None) -> Self:
        """Without `i`: start etcd and every broker, wait until all are registered. With `i`: start broker i (its
        ports, data and properties kept) and wait until every live broker sees it registered."""
        timeout = timeout or self.start_timeout
        if i is not None:
            self.brokers[i].start(timeout)
            self.wait_registered(timeout=timeout)
            return self
        try:
            self._start_all(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _start_all(self, timeout: float) -> None:
        if self.net is not None:
            self.net.setup()
            self.etcd = _BridgeEtcd(self.tmp_dir / "etcd", self.net.etcd_ip)
        else:
            self.etcd = EtcdProcess(self.tmp_dir / "etcd")
        self.etcd.start()
        for i in self.ids:
            props: dict[str, object] = {"broker.id": i, "metadata.store.connect": self.etcd.connect, **self._overrides}
            if self._racks:
                props["broker.rack"] = f"rack-{RACKS[(i - 1) % len(RACKS)]}"
            props.update(self._broker_overrides.get(i, {}))
            host, ns = (self.net.ips[i], self.net.ns(i)) if self.net is not None else ("127.0.0.1", None)
            b = ClusterBroker(
                self.tmp_dir / f"broker{i}",
                props,
                name=f"broker{i}",
                host=host,
                netns=ns,
                split_listeners=self._split,
                security=self.security,
            )
            if i in self._ports:
                b.port, b.metrics_port = self._ports[i]
            self.brokers[i] = b
        _in_parallel([lambda b=b: b.start(timeout) for b in self.brokers.values()])
        self.wait_registered(timeout=timeout)

    def kill9(self, i: int) -> None:
        self.brokers[i].kill9()

    def stop(self, i: int, timeout: float = 30.0) -> int | None:
        """SIGTERM (controlled shutdown); returns the exit code, None when it had to be SIGKILLed after `timeout`."""
        return self.brokers[i].stop(timeout)

    def restart(self, i: int, kill: bool = False, timeout: float | None = None) -> None:
        if kill:
            self.kill9(i)
        else:
            self.stop(i)
        self.start(i, timeout)

    def live_ids(self) -> list[int]:
        return [i for i, b in self.brokers.items() if b.is_running()]

    def close(self, graceful: bool = False) -> None:
        """Stop every broker, then etcd and the network. Tests throw the data away, so brokers get SIGKILL;
        `graceful` stops them one after the other with SIGTERM (controlled shutdown; SIGKILL after 30 s)."""
        if self._closed:
            return
        self._closed = True
        for b in self.brokers.values():
            if b.is_running() and graceful:
                b.stop(timeout=30.0)
            elif b.is_running():
                b.kill9()
        if self.etcd is not None:
            self.etcd.stop()
        client_security.unregister(b.bootstrap for b in self.brokers.values())
        if self.net is not None:
            self.net.teardown()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- addresses -------------------------------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        """Every broker's address (clients skip the dead ones)."""
        return ",".join(b.bootstrap for b in self.brokers.values())

    def broker(self, i: int) -> ClusterBroker:
        return self.brokers[i]

    # -- metadata (as clients see it) --------------------------------------------------------------------------------
    def metadata(self, topics: list[str] | None, via: int | None = None, timeout: float = 5.0, version: int = 8) -> Any:
        """A Metadata response (v8 unless asked: v10+ carry topic ids) from broker `via`, or from the first live
        broker that answers."""
        order = [via] if via is not None else self.live_ids()
        last: Exception | None = None
        for i in order:
            b = self.brokers[i]
            try:
                with WireClient(b.host, b.port, timeout=timeout) as c:
                    return c.metadata(topics, version=version)
            except OSError as e:
                last = e
        raise ConnectionError(f"no broker answered Metadata (tried {order}): {last!r}")

    def registered(self, via: int) -> set[int]:
        return {b.node_id for b in self.metadata([], via=via).brokers}

    def wait_registered(self, ids: Iterable[int] | None = None, timeout: float = 30.0) -> None:
        """Until every live broker's Metadata lists exactly `ids` (default: the live brokers)."""

        def ok() -> bool:
            want = set(ids) if ids is not None else set(self.live_ids())
            return all(self.registered(i) == want for i in self.live_ids())

        wait_until(
            ok,
            timeout,
            interval=0.1,
            message=lambda: (
                "brokers registered: "
                + ", ".join(f"{i} sees {self._safe(lambda i=i: sorted(self.registered(i)))}" for i in self.live_ids())
            ),
        )

    def partition_meta(self, topic: str, partition: int, via: int | None = None) -> PartitionMeta:
        md = self.metadata([topic], via=via)
        for t in md.topics:
            if t.name != topic:
                continue
            if t.error_code:
                raise LookupError(f"Metadata for {topic}: error {t.error_code}")
            for p in t.partitions:
                if p.partition_index == partition:
                    return PartitionMeta(
                        topic,
                        partition,
                        p.error_code,
                        p.leader_id,
                        p.leader_epoch,
                        tuple(p.replica_nodes),
                        tuple(p.isr_nodes),
                        tuple(p.offline_replicas),
                    )
        raise LookupError(f"{topic}-{partition} not in Metadata")

    def leader_of(self, topic: str, partition: int, via: int | None = None) -> int:
        return self.partition_meta(topic, partition, via).leader

    def isr_of(self, topic: str, partition: int, via: int | None = None) -> set[int]:
        return set(self.partition_meta(topic, partition, via).isr)

    def replicas_of(self, topic: str, partition: int, via: int | None = None) -> list[int]:
        return list(self.partition_meta(topic, partition, via).replicas)

    def epoch_of(self, topic: str, partition: int, via: int | None = None) -> int:
        return self.partition_meta(topic, partition, via).leader_epoch

    def wait_leader(
        self,
        topic: str,
        partition: int,
        *,
        not_in: Iterable[int] = (),
        among: Iterable[int] | None = None,
        via: int | None = None,
        timeout: float = 30.0,
    ) -> int:
        """Until a live broker (`via`, default every live broker) reports a live leader outside `not_in` (and in
        `among`); returns it. Every live broker must agree, so clients anywhere are redirected."""
        excluded = set(not_in)
        allowed = set(among) if among is not None else None

        def ok() -> int | None:
            live = set(self.live_ids())
            views = [self.leader_of(topic, partition, via=i) for i in ([via] if via else sorted(live))]
            ld = views[0]
            if len(set(views)) != 1 or ld not in live or ld in excluded or (allowed and ld not in allowed):
                return None
            return ld

        leader = wait_until(
            ok,
            timeout,
            interval=0.05,
            message=lambda: (
                f"leader of {topic}-{partition} (not in {sorted(excluded)}): {self._describe(topic, partition)}"
            ),
        )
        assert leader is not None  # wait_until returns only a truthy value
        return leader

    def wait_isr(
        self,
        topic: str,
        partition: int,
        isr: Iterable[int] | None = None,
        timeout: float = 30.0,
        via: int | None = None,
    ) -> set[int]:
        """Until the ISR equals `isr` (default: all replicas) in every live broker's Metadata."""

        def ok() -> set[int] | None:
            views = [self.partition_meta(topic, partition, via=i) for i in ([via] if via else self.live_ids())]
            want = set(isr) if isr is not None else set(views[0].replicas)
            return want if all(set(v.isr) == want for v in views) else None

        got = wait_until(
            ok,
            timeout,
            interval=0.05,
            message=lambda: (
                f"ISR of {topic}-{partition} == "
                f"{sorted(isr) if isr is not None else 'replicas'}: {self._describe(topic, partition)}"
            ),
        )
        assert got is not None  # wait_until returns only a truthy value
        return got

    def wait_full_isr(self, topic: str, partitions: int, timeout: float = 30.0) -> None:
        for p in range(partitions):
            self.wait_isr(topic, p, timeout=timeout)

    def _describe(self, topic: str, partition: int) -> str:
        return "; ".join(
            f"broker {i}: {self._safe(lambda i=i: self.partition_meta(topic, partition, via=i))}"
            for i in self.live_ids()
        )

    @staticmethod
    def _safe(fn: Any) -> Any:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - diagnostics only
            return f"<{e!r}>"

    # -- topics ----------------------------------------------------------------------------------------------------
    def create_topic(
        self,
        topic: str,
        partitions: int = 1,
        replication_factor: int = 3,
        config: Mapping[str, object] | None = None,
        replica_assignment: list[list[int]] | None = None,
        timeout: float = 30.0,
    ) -> None:
        """CreateTopics with confluent-kafka's AdminClient, then wait until every partition has a leader and a full
        ISR in every live broker's Metadata."""
        from confluent_kafka.admin import AdminClient, NewTopic

        a = AdminClient(
            {"bootstrap.servers": self.bootstrap, "log_level": 3, **client_security.librdkafka(self.bootstrap)}
        )
        cfg = {k: _prop(v) for k, v in {**self._topic_config, **(config or {})}.items()}
        if replica_assignment is not None:
            partitions = len(replica_assignment)
            nt = NewTopic(topic, num_partitions=partitions, replica_assignment=replica_assignment, config=cfg)
        else:
            nt = NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor, config=cfg)
        a.create_topics([nt], operation_timeout=timeout, request_timeout=timeout)[topic].result(timeout=timeout)
        del a
        for p in range(partitions):
            self.wait_leader(topic, p, timeout=timeout)
        self.wait_full_isr(topic, partitions, timeout=timeout)

    # -- replica files ---------------------------------------------------------------------------------------------
    def partition_dir(self, i: int, topic: str, partition: int) -> Path:
        return self.brokers[i].partition_dir(topic, partition)

    def log_batches(self, i: int, topic: str, partition: int) -> list[Batch]:
        """Every batch of broker i's replica, in offset order, read from its `.log` segment files. On a running
        broker, retention can delete a listed segment before it is read: the log then starts at the next one."""
        out: list[Batch] = []
        for seg in sorted(self.partition_dir(i, topic, partition).glob("*.log")):
            try:
                data = seg.read_bytes()
            except FileNotFoundError:
                continue
            for _pos, h in iter_batches(data):
                out.append(_batch(h))
        return out

    def recovery_point(self, i: int, topic: str, partition: int) -> int:
        """The flushed offset recorded in broker i's `recovery-point-offset-checkpoint` (0 when absent)."""
        path = self.brokers[i].log_dir / RECOVERY_POINT_CHECKPOINT
        if not path.exists():
            return 0
        return OffsetCheckpointFile(path).read().get((topic, partition), 0)

    def power_loss(self, i: int, keep: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Simulate a machine crash of the (already SIGKILLed) broker i that loses unflushed data.

        `kill -9` loses nothing: the page cache survives the process. A power loss keeps what was fsynced -- at least
        everything below the offset in `recovery-point-offset-checkpoint` -- and may lose any suffix after it. For
        each (topic, partition) in `keep`, the replica's log is cut back to the batch boundary at or below the given
        offset (later segments removed); the offset must not be below the recovery point, or the crash would be
        losing flushed data. Indexes, checkpoints and the leader-epoch file are left as they are: they are written
        atomically with fsync, and recovery of a log without the clean-shutdown marker reconciles them. Returns the
        resulting log end offset of each partition.
        """
        b = self.brokers[i]
        assert not b.is_running(), "power_loss needs a stopped (killed) broker"
        assert not (b.log_dir / ".kafka_cleanshutdown").exists(), "a killed broker has no clean-shutdown marker"
        ends: dict[tuple[str, int], int] = {}
        for (topic, partition), offset in keep.items():
            rp = self.recovery_point(i, topic, partition)
            assert offset >= rp, (
                f"broker {i} {topic}-{partition}: cannot lose offsets from {offset}: "
                f"flushed up to {rp} (recovery point)"
            )
            end = 0
            for seg in sorted(self.partition_dir(i, topic, partition).glob("*.log")):
                base = int(seg.name.split(".")[0])
                if base >= offset and base > 0:
                    seg.unlink()
                    continue
                data = seg.read_bytes()
                cut = 0
                for pos, h in iter_batches(data):
                    if h.last_offset >= offset:
                        break
                    cut = pos + h.size
                    end = h.last_offset + 1
                if cut < len(data):
                    with open(seg, "r+b") as f:
                        f.truncate(cut)
                end = max(end, base)
            ends[(topic, partition)] = end
        return ends

    def __repr__(self) -> str:
        return f"<StrataCluster {self.bootstrap} live={self.live_ids()}>"


def _batch(h: BatchHeader) -> Batch:
    return Batch(
        h.base_offset, h.last_offset, h.partition_leader_epoch, h.crc, h.producer_id, h.base_sequence, h.records_count
    )


def _prop(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _in_parallel(fns: list[Any]) -> None:
    """Run the callables in threads; re-raise the first failure after all have finished."""
    errors: list[BaseException] = []

    def run(fn: Any) -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(fn,), daemon=True) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


@atexit.register
def _remove_leftover_networks() -> None:
    for net in list(NetnsNetwork.live):
        net.teardown()


__all__ = [
    "FAST_FAILOVER",
    "Batch",
    "ClusterBroker",
    "NetnsNetwork",
    "PartitionMeta",
    "StrataCluster",
    "WaitTimeout",
    "wait_until",
]
