"""A declarative scenario harness for tiered storage, in the spirit of Kafka's TieredStorageTestHarness /
TieredStorageTestBuilder: a `Scenario` is a list of actions run in order against a real broker process.

    (Scenario("offload and consume")
        .create_topic("t", partitions=1, batches_per_segment=2, configs={"local.retention.bytes": "1"})
        .produce("t", 0, 50)
        .wait_for_offload("t", 0, up_to_offset=39)
        .expect_earliest_local_offset("t", 0, 40)
        .consume("t", 0, from_offset=0, expect_records=50)
        .expect_fetch_from_remote("t", at_least=1)
        .run(harness))

Records have a fixed shape per topic (`records_per_batch` records of a fixed-width key and `value_size` random
bytes; timestamps within a batch differ by less than 64 ms), so every batch of a topic has the same size and the
harness sets `segment.bytes` to exactly `batches_per_segment` batches: segment j holds offsets
[j*B, (j+1)*B) with B = batches_per_segment * records_per_batch. The harness remembers every produced record, so
consume actions compare byte for byte, and check batch boundaries (a fetch answers whole batches: the first batch
returned is the one holding the fetch offset).

Observation goes through the broker's public surfaces only: Kafka requests (ListOffsets -2/-4/-5, Fetch, ...),
the `__remote_log_metadata` topic decoded by `strata remote-log-metadata`'s reader, the Prometheus endpoint
(`strata_remote_*`), and the remote storage itself (the LocalTieredStorage directory or the S3 bucket). Every
wait is bounded and, when it times out, says what it last saw. A failing action is reported with its index and
description and the actions that ran before it.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from strata.cli.admin_client import RESOURCE_TOPIC, AdminClient, AdminError
from strata.cli.remote_log_metadata import RemoteLogState, RemoteSegment, remote_log_state
from strata.protocol.records import build_batch, iter_batches, iter_records
from strata.protocol.uuids import kafka_uuid_str
from tests.support.broker_proc import StrataBroker
from tests.support.kafka_wire import WireClient

# Kafka error codes used here
NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNSUPPORTED_VERSION = 35
INVALID_CONFIG = 40
OFFSET_MOVED_TO_TIERED_STORAGE = 109

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5, -6

DEFAULT_WAIT_S = 30.0
SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".snapshot", ".leader_epoch_checkpoint")
_OBJECT = re.compile(r"^(\d{20})-([A-Za-z0-9_-]{22})(\.[a-z_.-]+)$")

# Broker settings every scenario uses: fast RLM tasks and retention checks, a small metadata topic.
BASE_OVERRIDES: dict[str, object] = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": 200,
    "remote.log.metadata.topic.num.partitions": 5,
    "log.retention.check.interval.ms": 200,
    "log.segment.delete.delay.ms": 0,
}


class ScenarioError(AssertionError):
    pass


# ---------------------------------------------------------------------------------------------------------------------
# remote storage backends
# ---------------------------------------------------------------------------------------------------------------------
class RemoteBackend:
    """Where the RSM keeps its objects, and how to list them (relative names under `<topic>-<p>-<topicId>/`)."""

    name = "?"

    def broker_overrides(self, broker_dir: Path) -> dict[str, object]:
        raise NotImplementedError

    def bind(self, broker: StrataBroker) -> None:
        """Called once the broker object exists (its data dir is known)."""

    def list_partition(self, partition_dir: str) -> list[str]:
        raise NotImplementedError

    def list_all(self) -> list[str]:
        """Every object, as `<partition_dir>/<name>`."""
        raise NotImplementedError

    def describe(self) -> str:
        return self.name


class LocalBackend(RemoteBackend):
    """LocalTieredStorage at its default place, `<log.dir>/kafka-tiered-storage` (no rsm.config.dir)."""

    name = "local"

    def __init__(self) -> None:
        self.root: Path | None = None

    def broker_overrides(self, broker_dir: Path) -> dict[str, object]:
        return {"remote.log.storage.manager.class.name": "local"}

    def bind(self, broker: StrataBroker) -> None:
        self.root = broker.log_dir / "kafka-tiered-storage"

    def list_partition(self, partition_dir: str) -> list[str]:
        assert self.root is not None
        d = self.root / partition_dir
        return sorted(p.name for p in d.iterdir() if p.is_file()) if d.is_dir() else []

    def list_all(self) -> list[str]:
        assert self.root is not None
        if not self.root.is_dir():
            return []
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file())

    def describe(self) -> str:
        return f"LocalTieredStorage at {self.root}"


class S3Backend(RemoteBackend):
    """S3RemoteStorageManager on an S3 server (moto), under a key prefix of its own."""

    name = "s3"

    def __init__(self, server: Any, prefix: str, endpoint: str | None = None) -> None:
        self.server = server
        self.prefix = prefix
        self.endpoint = endpoint or server.endpoint  # a proxy in front of the server, for fault scenarios

    def broker_overrides(self, broker_dir: Path) -> dict[str, object]:
        cfg = self.server.rsm_config(
            **{"key.prefix": self.prefix, "s3.endpoint.url": self.endpoint, "s3.retry.backoff.ms": 50}
        )
        out: dict[str, object] = {"remote.log.storage.manager.class.name": "s3"}
        out.update({f"rsm.config.{k}": v for k, v in cfg.items()})
        return out

    def list_partition(self, partition_dir: str) -> list[str]:
        pfx = f"{self.prefix}{partition_dir}/"
        return sorted(k[len(pfx) :] for k in self.server.keys(pfx))

    def list_all(self) -> list[str]:
        return sorted(k[len(self.prefix) :] for k in self.server.keys(self.prefix))

    def describe(self) -> str:
        return f"S3 bucket {self.server.bucket} at {self.endpoint}, prefix {self.prefix!r}"


def segment_objects(names: Sequence[str]) -> dict[tuple[int, str], set[str]]:
    """(base offset, segment id) -> suffixes, from object names `<20-digit offset>-<id22><suffix>`."""
    out: dict[tuple[int, str], set[str]] = {}
    for n in names:
        m = _OBJECT.match(n)
        if m is None:
            out.setdefault((-1, n), set()).add("?")  # anything else is reported as a stray object
            continue
        out.setdefault((int(m.group(1)), m.group(2)), set()).add(m.group(3))
    return out


# ---------------------------------------------------------------------------------------------------------------------
# produced records
# ---------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Produced:
    offset: int
    key: bytes
    value: bytes
    timestamp: int
    batch_base: int


@dataclass
class TopicShape:
    records_per_batch: int
    value_size: int
    batches_per_segment: int
    batch_bytes: int

    @property
    def records_per_segment(self) -> int:
        return self.records_per_batch * self.batches_per_segment


def _key(offset: int) -> bytes:
    return b"key-%010d" % offset


def _value(topic: str, partition: int, offset: int, size: int, generation: int) -> bytes:
    seed = f"{topic}/{partition}/{offset}/{generation}".encode()
    out = bytearray()
    block = 0
    while len(out) < size:
        out += hashlib.blake2b(seed + b"#%d" % block, digest_size=64).digest()
        block += 1
    return bytes(out[:size])


def _batch(records: Sequence[Produced]) -> bytes:
    return build_batch([(r.key, r.value, None, r.timestamp) for r in records], timestamp=records[0].timestamp)


def shape_for(records_per_batch: int, value_size: int, batches_per_segment: int) -> TopicShape:
    now = int(time.time() * 1000)
    sample = [Produced(i, _key(i), b"x" * value_size, now + i, 0) for i in range(records_per_batch)]
    return TopicShape(records_per_batch, value_size, batches_per_segment, len(_batch(sample)))


# ---------------------------------------------------------------------------------------------------------------------
# the context actions run in
# ---------------------------------------------------------------------------------------------------------------------
@dataclass
class TopicState:
    name: str
    partitions: int
    shape: TopicShape
    topic_id: str | None = None  # Kafka's base64 form, as in remote object names
    generation: int = 0
    produced: dict[int, list[Produced]] = field(default_factory=dict)

    def partition_dir(self, partition: int) -> str:
        return f"{self.name}-{partition}-{self.topic_id}"


class Harness:
    """One broker process with tiered storage on a backend; runs scenarios against it."""

    def __init__(
        self, tmp_dir: Path, backend: RemoteBackend, overrides: dict[str, object] | None = None, name: str = "tiered"
    ) -> None:
        self.tmp_dir = Path(tmp_dir)
        self.backend = backend
        ov = dict(BASE_OVERRIDES)
        ov.update(backend.broker_overrides(self.tmp_dir))
        ov.update(overrides or {})
        self.broker = StrataBroker(self.tmp_dir, ov, name=name)
        backend.bind(self.broker)
        self.topics: dict[str, TopicState] = {}
        self.deleted: list[TopicState] = []
        self.remote_fetch_baseline: dict[str, float] = {}
        self.log: list[str] = []

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def start(self) -> Self:
        self.broker.start()
        return self

    def stop(self) -> None:
        self.broker.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- clients ---------------------------------------------------------------------------------------------------
    def wire(self) -> WireClient:
        return WireClient.connect(self.broker.bootstrap, timeout=30.0)

    def admin(self) -> AdminClient:
        return AdminClient(self.broker.bootstrap, timeout=30.0)

    def topic(self, name: str) -> TopicState:
        if name not in self.topics:
            raise ScenarioError(f"topic {name!r} was not created by this scenario")
        return self.topics[name]

    # -- observations ----------------------------------------------------------------------------------------------
    def list_offset(self, topic: str, partition: int, spec: int, version: int = 9) -> tuple[int, int, int]:
        """(error, offset, timestamp) of one ListOffsets partition."""
        with self.wire() as c:
            p = c.list_offsets(topic, partition, spec, version=version).topics[0].partitions[0]
            return p.error_code, p.offset, p.timestamp

    def offset(self, topic: str, partition: int, spec: int) -> int:
        err, off, _ = self.list_offset(topic, partition, spec)
        if err:
            raise ScenarioError(f"ListOffsets({spec}) of {topic}-{partition}: error {err}")
        return off

    def offsets(self, topic: str, partition: int) -> dict[str, int]:
        names = {
            "earliest(-2)": EARLIEST,
            "earliest-local(-4)": EARLIEST_LOCAL,
            "latest-tiered(-5)": LATEST_TIERED,
            "latest(-1)": LATEST,
        }
        return {n: self.offset(topic, partition, s) for n, s in names.items()}

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        from prometheus_client.parser import text_string_to_metric_families

        url = f"http://127.0.0.1:{self.broker.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        out = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def metric(self, name: str, **labels: str) -> float:
        want = tuple(sorted(labels.items()))
        return self.metrics().get((name, want), 0.0)

    def remote_fetches(self, topic: str) -> float:
        return self.metric("strata_remote_fetch_requests_total", topic=topic)

    def rlmm(self) -> RemoteLogState:
        return remote_log_state(self.broker.bootstrap)

    def rlmm_segments(self, topic: str, partition: int, topic_id: str | None = None) -> list[RemoteSegment]:
        t = self.topics.get(topic)
        tid = topic_id or (t.topic_id if t else None)
        tid_uuid = _uuid_from_kafka(tid) if tid else None
        return self.rlmm().for_partition(topic, partition, tid_uuid)

    def remote_objects(self, topic: str, partition: int) -> list[str]:
        return self.backend.list_partition(self.topic(topic).partition_dir(partition))

    def local_segments(self, topic: str, partition: int) -> dict[int, int]:
        """base offset -> size of the partition's local `.log` files."""
        d = self.broker.partition_dir(topic, partition)
        out = {}
        for f in d.iterdir() if d.is_dir() else ():
            m = re.match(r"^(\d{20})\.log$", f.name)
            if m:
                out[int(m.group(1))] = f.stat().st_size
        return out

    # -- waiting ---------------------------------------------------------------------------------------------------
    def wait(
        self,
        what: str,
        probe: Callable[[], Any],
        ok: Callable[[Any], bool],
        timeout: float = DEFAULT_WAIT_S,
        interval: float = 0.1,
    ) -> Any:
        """Poll `probe()` until `ok(value)`; on timeout raise with the last value (or error) seen."""
        deadline = time.monotonic() + timeout
        last: Any = None
        last_exc: BaseException | None = None
        while True:
            try:
                last = probe()
                last_exc = None
                if ok(last):
                    return last
            except (OSError, AdminError, AssertionError) as e:
                last_exc = e
            if time.monotonic() >= deadline:
                seen = f"last error: {last_exc!r}" if last_exc is not None else f"last seen: {last!r}"
                raise ScenarioError(f"timed out after {timeout:.0f}s waiting for {what}; {seen}") from last_exc
            time.sleep(interval)


def _uuid_from_kafka(s: str) -> uuid.UUID:
    import base64

    return uuid.UUID(bytes=base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))


class MetadataTail:
    """Follows `__remote_log_metadata` in the broker's data directory (the partition `.log` files, read as they grow),
    for reactions within a millisecond or two of an RLMM event -- e.g. a kill -9 between COPY_SEGMENT_STARTED and
    COPY_SEGMENT_FINISHED. States per segment id, in order."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = Path(log_dir)
        self._pos: dict[Path, int] = {}
        self.history: dict[uuid.UUID, list[str]] = {}
        self.meta: dict[uuid.UUID, Any] = {}

    def poll(self) -> None:
        from strata.remote.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate
        from strata.remote.rlmm_serde import deserialize

        for f in sorted(self.log_dir.glob("__remote_log_metadata-*/*.log")):
            pos = self._pos.get(f, 0)
            try:
                with open(f, "rb") as fh:
                    fh.seek(pos)
                    data = fh.read()
            except FileNotFoundError:
                continue
            for bpos, hdr in iter_batches(data):
                for r in iter_records(data, bpos):
                    assert r.value is not None  # every metadata record has a value
                    m = deserialize(r.value)
                    if isinstance(m, RemoteLogSegmentMetadata):
                        self.meta[m.segment_id] = m
                        self.history.setdefault(m.segment_id, []).append(m.state.name)
                    elif isinstance(m, RemoteLogSegmentMetadataUpdate):
                        self.history.setdefault(m.remote_log_segment_id.id, []).append(m.state.name)
                pos += hdr.size
            self._pos[f] = pos

    def segments_of(self, topic: str) -> dict[uuid.UUID, list[str]]:
        return {
            sid: h
            for sid, h in self.history.items()
            if sid in self.meta and self.meta[sid].topic_id_partition.topic == topic
        }


# ---------------------------------------------------------------------------------------------------------------------
# actions
# ---------------------------------------------------------------------------------------------------------------------
class Action:
    def describe(self) -> str:
        raise NotImplementedError

    def run(self, h: Harness) -> None:
        raise NotImplementedError


@dataclass
class CreateTopic(Action):
    name: str
    partitions: int = 1
    configs: dict[str, str] = field(default_factory=dict)
    batches_per_segment: int = 2
    records_per_batch: int = 5
    value_size: int = 100
    tiered: bool = True
    expect_error: str | None = None  # substring of the CreateTopics error (the action then expects a failure)

    def describe(self) -> str:
        return (
            f"create_topic({self.name!r}, partitions={self.partitions}, batches_per_segment="
            f"{self.batches_per_segment}, configs={self.configs})"
        )

    def run(self, h: Harness) -> None:
        shape = shape_for(self.records_per_batch, self.value_size, self.batches_per_segment)
        cfg = {"segment.bytes": str(shape.batch_bytes * self.batches_per_segment)}
        if self.tiered:
            cfg["remote.storage.enable"] = "true"
        cfg.update(self.configs)
        with h.admin() as a:
            try:
                a.create_topic(self.name, self.partitions, 1, cfg)
            except AdminError as e:
                if self.expect_error is not None and self.expect_error in str(e):
                    return
                raise
            if self.expect_error is not None:
                raise ScenarioError(
                    f"creating {self.name} with {cfg} succeeded; expected an error containing {self.expect_error!r}"
                )
            [desc] = a.describe_topics([self.name])
        prev = h.topics.get(self.name)
        h.topics[self.name] = TopicState(
            self.name,
            self.partitions,
            shape,
            desc.topic_id,
            generation=(prev.generation + 1) if prev else 0,
            produced={p: [] for p in range(self.partitions)},
        )


@dataclass
class Produce(Action):
    topic: str
    partition: int
    count: int
    timestamp_base: int | None = None  # first record's timestamp (default: now); then +1 ms per record

    def describe(self) -> str:
        ts = "" if self.timestamp_base is None else f", timestamp_base={self.timestamp_base}"
        return f"produce({self.topic!r}, {self.partition}, {self.count} records{ts})"

    def run(self, h: Harness) -> None:
        t = h.topic(self.topic)
        n = t.shape.records_per_batch
        if self.count % n:
            raise ScenarioError(f"produce a multiple of {n} records (whole batches keep segment sizes exact)")
        log = t.produced[self.partition]
        first = len(log)
        ts0 = int(time.time() * 1000) if self.timestamp_base is None else self.timestamp_base
        batches = []
        for b in range(self.count // n):
            base = first + b * n
            recs = [
                Produced(
                    base + i,
                    _key(base + i),
                    _value(t.name, self.partition, base + i, t.shape.value_size, t.generation),
                    ts0 + (base - first) + i,
                    base,
                )
                for i in range(n)
            ]
            batch = _batch(recs)
            if len(batch) != t.shape.batch_bytes:
                raise ScenarioError(f"batch of {len(batch)} bytes, the topic's shape says {t.shape.batch_bytes}")
            batches.append((recs, batch))
        with h.wire() as c:
            v = c.pick_version(0, 9)
            # pipelined: every batch is its own request (one batch per append keeps the segment roll exact)
            from kafka.protocol.producer import ProduceRequest, ProduceResponse

            P = ProduceRequest.TopicProduceData
            pending = []
            for recs, batch in batches:
                req = ProduceRequest[v](
                    transactional_id=None,
                    acks=-1,
                    timeout_ms=30000,
                    topic_data=[
                        P(name=t.name, partition_data=[P.PartitionProduceData(index=self.partition, records=batch)])
                    ],
                )
                pending.append((recs, c.send(req)))
            for recs, corr in pending:
                resp = c.recv(ProduceResponse, v, corr)
                pr = resp.responses[0].partition_responses[0]
                if pr.error_code != NONE:
                    raise ScenarioError(f"produce to {t.name}-{self.partition}: error {pr.error_code}")
                if pr.base_offset != recs[0].offset:
                    raise ScenarioError(
                        f"produce to {t.name}-{self.partition}: base offset {pr.base_offset}, "
                        f"the harness expected {recs[0].offset} (someone else wrote?)"
                    )
                log.extend(recs)


@dataclass
class WaitForOffload(Action):
    """LATEST_TIERED (-5) reaches `up_to_offset`: every segment up to it is COPY_SEGMENT_FINISHED."""

    topic: str
    partition: int
    up_to_offset: int
    timeout: float = DEFAULT_WAIT_S

    def describe(self) -> str:
        return f"wait_for_offload({self.topic!r}, {self.partition}, up_to_offset={self.up_to_offset})"

    def run(self, h: Harness) -> None:
        h.wait(
            f"{self.topic}-{self.partition} offloaded up to offset {self.up_to_offset} (ListOffsets -5)",
            lambda: h.offsets(self.topic, self.partition),
            lambda o: o["latest-tiered(-5)"] >= self.up_to_offset,
            self.timeout,
        )


@dataclass
class ExpectListOffset(Action):
    """ListOffsets `spec` answers `offset` (waiting, bounded, for background tasks to get there)."""

    topic: str
    partition: int
    spec: int
    offset: int
    timestamp: int | None = None
    timeout: float = DEFAULT_WAIT_S
    label: str = "list_offsets"

    def describe(self) -> str:
        return f"{self.label}({self.topic!r}, {self.partition}, spec={self.spec}) == {self.offset}"

    def run(self, h: Harness) -> None:
        def ok(r: tuple[int, int, int]) -> bool:
            return r[0] == NONE and r[1] == self.offset and (self.timestamp is None or r[2] == self.timestamp)

        h.wait(
            f"ListOffsets({self.spec}) of {self.topic}-{self.partition} == offset {self.offset}"
            + ("" if self.timestamp is None else f", timestamp {self.timestamp}")
            + " (error, offset, timestamp)",
            lambda: h.list_offset(self.topic, self.partition, self.spec),
            ok,
            self.timeout,
        )


@dataclass
class ExpectRemoteSegments(Action):
    """The remote storage holds exactly the segments starting at `base_offsets`, each with its whole file set, and
    they are the COPY_SEGMENT_FINISHED segments of the RLMM (same ids): nothing missing, nothing extra."""

    topic: str
    partition: int
    base_offsets: list[int]
    timeout: float = DEFAULT_WAIT_S

    def describe(self) -> str:
        return f"expect_remote_segments({self.topic!r}, {self.partition}, {self.base_offsets})"

    def run(self, h: Harness) -> None:
        extra = {".rsm-manifest"} if h.backend.name == "s3" else set()
        want_files = set(SEGMENT_SUFFIXES) | extra

        def probe() -> dict[str, Any]:
            objs = segment_objects(h.remote_objects(self.topic, self.partition))
            finished = {
                kafka_uuid_str(s.segment_id): s.start_offset
                for s in h.rlmm_segments(self.topic, self.partition)
                if s.state == "COPY_SEGMENT_FINISHED"
            }
            return {"stored": {k: sorted(v) for k, v in sorted(objs.items())}, "rlmm_finished": finished}

        def ok(o: dict[str, Any]) -> bool:
            stored = o["stored"]
            bases = sorted(b for b, _ in stored)
            complete = all(set(v) - {".txnindex"} == want_files for v in stored.values())
            ids = {sid: b for b, sid in stored}
            return bases == sorted(self.base_offsets) and complete and ids == o["rlmm_finished"]

        h.wait(
            f"remote segments of {self.topic}-{self.partition} at {self.base_offsets} with files "
            f"{sorted(want_files)}, matching the RLMM's COPY_SEGMENT_FINISHED ids ({h.backend.describe()})",
            probe,
            ok,
            self.timeout,
        )


@dataclass
class Consume(Action):
    """Fetch from `from_offset` until `expect_records` records at or above it are read; compare them byte for byte
    with what was produced, and check batch boundaries (whole batches; the first is the one holding the offset)."""

    topic: str
    partition: int
    from_offset: int
    expect_records: int
    client: str = "wire"  # "wire" (raw Fetch, checks batches) or "confluent" (librdkafka, assign)
    fetch_version: int = 12
    max_bytes: int = 64 * 1024
    timeout: float = DEFAULT_WAIT_S

    def describe(self) -> str:
        return (
            f"consume({self.topic!r}, {self.partition}, from_offset={self.from_offset}, "
            f"expect_records={self.expect_records}, client={self.client})"
        )

    def run(self, h: Harness) -> None:
        t = h.topic(self.topic)
        h.remote_fetch_baseline[self.topic] = h.remote_fetches(self.topic)
        expected = t.produced[self.partition][self.from_offset : self.from_offset + self.expect_records]
        if len(expected) != self.expect_records:
            raise ScenarioError(f"only {len(expected)} records were produced from offset {self.from_offset}")
        if self.client == "confluent":
            self._confluent(h, expected)
        else:
            self._wire(h, t, expected)

    def _wire(self, h: Harness, t: TopicState, expected: list[Produced]) -> None:
        got: list[tuple[int, bytes | None, bytes | None, int]] = []
        offset = self.from_offset
        first_batch_checked = False
        deadline = time.monotonic() + self.timeout
        last = "nothing yet"
        with h.wire() as c:
            while len(got) < self.expect_records:
                if time.monotonic() > deadline:
                    raise ScenarioError(
                        f"{self.describe()}: read {len(got)} of {self.expect_records} records "
                        f"within {self.timeout}s; last fetch: {last}"
                    )
                resp = c.fetch(
                    t.name,
                    self.partition,
                    offset,
                    version=self.fetch_version,
                    max_wait_ms=500,
                    max_bytes=self.max_bytes,
                )
                p = resp.responses[0].partitions[0]
                data = bytes(p.records or b"")
                last = (
                    f"offset {offset}: error {p.error_code}, hw {p.high_watermark}, log start "
                    f"{p.log_start_offset}, {len(data)} bytes"
                )
                if p.error_code != NONE:
                    raise ScenarioError(f"{self.describe()}: {last}")
                for pos, hdr in iter_batches(data):
                    if not first_batch_checked:
                        want = t.produced[self.partition][offset].batch_base
                        if hdr.base_offset != want:
                            raise ScenarioError(
                                f"{self.describe()}: the first batch fetched at {offset} starts at "
                                f"{hdr.base_offset}; the batch holding {offset} starts at {want}"
                            )
                        first_batch_checked = True
                    if hdr.last_offset < offset:
                        raise ScenarioError(
                            f"{self.describe()}: fetch at {offset} returned batch "
                            f"[{hdr.base_offset}, {hdr.last_offset}] wholly below it"
                        )
                    if hdr.base_offset != t.produced[self.partition][hdr.base_offset].batch_base:
                        raise ScenarioError(
                            f"{self.describe()}: batch at {hdr.base_offset} does not start where "
                            "a produced batch started (batches split or merged)"
                        )
                    for r in iter_records(data, pos):
                        if r.offset >= offset and len(got) < self.expect_records:
                            got.append((r.offset, r.key, r.value, r.timestamp))
                    offset = max(offset, hdr.next_offset)
        _compare(self.describe(), expected, got)

    def _confluent(self, h: Harness, expected: list[Produced]) -> None:
        from tests.support import ck

        recs = ck.read_partition(
            h.broker.bootstrap, self.topic, self.partition, self.from_offset, self.expect_records, timeout=self.timeout
        )
        _compare(self.describe(), expected, [(r.offset, r.key, r.value, r.timestamp) for r in recs])


def _compare(
    what: str, expected: list[Produced], got: Sequence[tuple[int, bytes | None, bytes | None, int | None]]
) -> None:
    if len(got) != len(expected):
        raise ScenarioError(f"{what}: read {len(got)} records, expected {len(expected)}")
    for e, (off, key, value, ts) in zip(expected, got):
        if off != e.offset:
            raise ScenarioError(f"{what}: got offset {off} where {e.offset} was expected (gap or duplicate)")
        if key != e.key or value != e.value:
            raise ScenarioError(f"{what}: record {off} differs from what was produced (key {key!r:.40})")
        if ts != e.timestamp:
            raise ScenarioError(f"{what}: record {off} has timestamp {ts}, produced with {e.timestamp}")


@dataclass
class ExpectFetchError(Action):
    """A consumer Fetch at `offset` answers `error` for the partition."""

    topic: str
    partition: int
    offset: int
    error: int
    fetch_version: int = 12

    def describe(self) -> str:
        return f"expect_fetch_error({self.topic!r}, {self.partition}, offset={self.offset}, error={self.error})"

    def run(self, h: Harness) -> None:
        with h.wire() as c:
            p = (
                c.fetch(self.topic, self.partition, self.offset, version=self.fetch_version, max_wait_ms=100)
                .responses[0]
                .partitions[0]
            )
        if p.error_code != self.error:
            raise ScenarioError(
                f"{self.describe()}: error {p.error_code}, log start {p.log_start_offset}, "
                f"{len(p.records or b'')} bytes"
            )


@dataclass
class ExpectFetchFromRemote(Action):
    """Since the last consume of `topic` started, the broker served `at_least` (or `exactly`) remote fetches
    (`strata_remote_fetch_requests_total{topic}`, Kafka's RemoteFetchRequestsPerSec)."""

    topic: str
    at_least: int | None = None
    exactly: int | None = None

    def describe(self) -> str:
        cond = f"exactly={self.exactly}" if self.exactly is not None else f"at_least={self.at_least}"
        return f"expect_fetch_from_remote({self.topic!r}, {cond})"

    def run(self, h: Harness) -> None:
        if self.topic not in h.remote_fetch_baseline:
            raise ScenarioError("expect_fetch_from_remote needs a consume of the topic before it")
        n = h.remote_fetches(self.topic) - h.remote_fetch_baseline[self.topic]
        if self.exactly is not None and n != self.exactly:
            raise ScenarioError(f"{self.describe()}: {n:.0f} remote fetches")
        if self.at_least is not None and n < self.at_least:
            raise ScenarioError(f"{self.describe()}: {n:.0f} remote fetches")


@dataclass
class DeleteRecords(Action):
    topic: str
    partition: int
    before_offset: int

    def describe(self) -> str:
        return f"delete_records({self.topic!r}, {self.partition}, before_offset={self.before_offset})"

    def run(self, h: Harness) -> None:
        with h.admin() as a:
            low = a.delete_records(self.topic, {self.partition: self.before_offset})
        if low != {self.partition: self.before_offset}:
            raise ScenarioError(f"{self.describe()}: low watermark {low}")


@dataclass
class DeleteTopic(Action):
    topic: str

    def describe(self) -> str:
        return f"delete_topic({self.topic!r})"

    def run(self, h: Harness) -> None:
        with h.admin() as a:
            a.delete_topic(self.topic)
        h.deleted.append(h.topics.pop(self.topic))


@dataclass
class UpdateTopicConfig(Action):
    topic: str
    set: dict[str, str] = field(default_factory=dict)
    delete: list[str] = field(default_factory=list)
    expect_error: str | None = None

    def describe(self) -> str:
        return f"update_topic_config({self.topic!r}, set={self.set}, delete={self.delete})"

    def run(self, h: Harness) -> None:
        with h.admin() as a:
            try:
                a.alter_configs(RESOURCE_TOPIC, self.topic, set=self.set, delete=self.delete)
            except AdminError as e:
                if self.expect_error is not None and self.expect_error in str(e):
                    return
                raise ScenarioError(f"{self.describe()}: {e}") from None
            if self.expect_error is not None:
                raise ScenarioError(f"{self.describe()} succeeded; expected an error containing {self.expect_error!r}")
            got = {c.name: c.value for c in a.describe_configs(RESOURCE_TOPIC, self.topic)}
        for k, v in self.set.items():
            if got.get(k) != v:
                raise ScenarioError(f"{self.describe()}: DescribeConfigs shows {k}={got.get(k)!r} afterwards")


@dataclass
class RestartBroker(Action):
    kill: bool = False

    def describe(self) -> str:
        return "kill_broker() + start" if self.kill else "restart_broker()"

    def run(self, h: Harness) -> None:
        h.broker.restart(kill=self.kill)


@dataclass
class ExpectEmptyRemoteStorage(Action):
    """Nothing of `topic` (any partition, the topic id it had) is left in remote storage, and the RLMM marked
    every partition DELETE_PARTITION_FINISHED."""

    topic: str
    timeout: float = DEFAULT_WAIT_S

    def describe(self) -> str:
        return f"expect_empty_remote_storage({self.topic!r})"

    def run(self, h: Harness) -> None:
        t = h.topics.get(self.topic) or next((d for d in reversed(h.deleted) if d.name == self.topic), None)
        if t is None:
            raise ScenarioError(f"unknown topic {self.topic!r}")
        dirs = [t.partition_dir(p) for p in range(t.partitions)]

        def probe() -> dict[str, Any]:
            left = [o for o in h.backend.list_all() if o.split("/", 1)[0] in dirs]
            st = h.rlmm()
            assert t.topic_id is not None
            tid = _uuid_from_kafka(t.topic_id)
            marks = {p: st.partition_deletes.get((t.name, p, tid), []) for p in range(t.partitions)}
            return {"objects_left": left, "partition_delete_states": marks}

        h.wait(
            f"empty remote storage for {self.topic} ({h.backend.describe()}) and DELETE_PARTITION_FINISHED",
            probe,
            lambda o: (
                not o["objects_left"]
                and all(m and m[-1] == "DELETE_PARTITION_FINISHED" for m in o["partition_delete_states"].values())
            ),
            self.timeout,
        )


@dataclass
class WaitForRetentionPass(Action):
    """Synchronise on the broker's log-retention task (log.retention.check.interval.ms): a plain sentinel topic
    with retention.bytes=1 gets its oldest segment deleted, twice in a row, so at least one whole retention pass
    started after this action began (and visited every log)."""

    SENTINEL = "harness-retention-sentinel"

    def describe(self) -> str:
        return "wait_for_retention_pass()"

    def run(self, h: Harness) -> None:
        if self.SENTINEL not in h.topics:
            CreateTopic(
                self.SENTINEL,
                1,
                {"retention.bytes": "1"},
                batches_per_segment=1,
                records_per_batch=5,
                value_size=10,
                tiered=False,
            ).run(h)
        t = h.topics[self.SENTINEL]
        for _ in range(2):
            Produce(self.SENTINEL, 0, 10).run(h)
            want = len(t.produced[0]) - 5  # everything but the active segment (the last batch) goes

            def reached(o: int, want: int = want) -> bool:
                return o == want

            h.wait(
                f"a retention pass deletes {self.SENTINEL}'s old segments (earliest offset {want})",
                lambda: h.offset(self.SENTINEL, 0, EARLIEST),
                reached,
            )


@dataclass
class Step(Action):
    """A custom step: `fn(harness)`."""

    name: str
    fn: Callable[[Harness], None]

    def describe(self) -> str:
        return self.name

    def run(self, h: Harness) -> None:
        self.fn(h)


# ---------------------------------------------------------------------------------------------------------------------
# the builder
# ---------------------------------------------------------------------------------------------------------------------
class Scenario:
    def __init__(self, name: str) -> None:
        self.name = name
        self.actions: list[Action] = []

    def _add(self, a: Action) -> Scenario:
        self.actions.append(a)
        return self

    def create_topic(
        self, name: str, partitions: int = 1, configs: dict[str, str] | None = None, **kw: Any
    ) -> Scenario:
        return self._add(CreateTopic(name, partitions, dict(configs or {}), **kw))

    def produce(self, topic: str, partition: int, count: int, timestamp_base: int | None = None) -> Scenario:
        return self._add(Produce(topic, partition, count, timestamp_base))

    def wait_for_offload(self, topic: str, partition: int, up_to_offset: int, **kw: Any) -> Scenario:
        return self._add(WaitForOffload(topic, partition, up_to_offset, **kw))

    def expect_earliest_local_offset(self, topic: str, partition: int, offset: int, **kw: Any) -> Scenario:
        return self._add(
            ExpectListOffset(topic, partition, EARLIEST_LOCAL, offset, label="expect_earliest_local_offset", **kw)
        )

    def expect_earliest_offset(self, topic: str, partition: int, offset: int, **kw: Any) -> Scenario:
        return self._add(ExpectListOffset(topic, partition, EARLIEST, offset, label="expect_earliest_offset", **kw))

    def expect_latest_tiered_offset(self, topic: str, partition: int, offset: int, **kw: Any) -> Scenario:
        return self._add(
            ExpectListOffset(topic, partition, LATEST_TIERED, offset, label="expect_latest_tiered_offset", **kw)
        )

    def expect_list_offsets(self, topic: str, partition: int, spec: int, offset: int, **kw: Any) -> Scenario:
        return self._add(ExpectListOffset(topic, partition, spec, offset, **kw))

    def expect_remote_segments(self, topic: str, partition: int, base_offsets: list[int], **kw: Any) -> Scenario:
        return self._add(ExpectRemoteSegments(topic, partition, list(base_offsets), **kw))

    def consume(self, topic: str, partition: int, from_offset: int, expect_records: int, **kw: Any) -> Scenario:
        return self._add(Consume(topic, partition, from_offset, expect_records, **kw))

    def expect_fetch_error(self, topic: str, partition: int, offset: int, error: int) -> Scenario:
        return self._add(ExpectFetchError(topic, partition, offset, error))

    def expect_fetch_from_remote(self, topic: str, at_least: int | None = None, exactly: int | None = None) -> Scenario:
        if at_least is None and exactly is None:
            at_least = 1
        return self._add(ExpectFetchFromRemote(topic, at_least, exactly))

    def delete_records(self, topic: str, partition: int, before_offset: int) -> Scenario:
        return self._add(DeleteRecords(topic, partition, before_offset))

    def delete_topic(self, topic: str) -> Scenario:
        return self._add(DeleteTopic(topic))

    def update_topic_config(
        self,
        topic: str,
        set: dict[str, str] | None = None,
        delete: list[str] | None = None,
        expect_error: str | None = None,
    ) -> Scenario:
        return self._add(UpdateTopicConfig(topic, dict(set or {}), list(delete or []), expect_error))

    def restart_broker(self) -> Scenario:
        return self._add(RestartBroker(kill=False))

    def kill_broker(self) -> Scenario:
        """kill -9, then start again on the same data."""
        return self._add(RestartBroker(kill=True))

    def expect_empty_remote_storage(self, topic: str, **kw: Any) -> Scenario:
        return self._add(ExpectEmptyRemoteStorage(topic, **kw))

    def wait_for_retention_pass(self) -> Scenario:
        return self._add(WaitForRetentionPass())

    def step(self, name: str, fn: Callable[[Harness], None]) -> Scenario:
        return self._add(Step(name, fn))

    def run(self, h: Harness) -> None:
        for i, a in enumerate(self.actions):
            started = time.monotonic()
            try:
                a.run(h)
            except Exception as e:
                done = "\n".join(f"  {j}. {x}" for j, x in enumerate(h.log)) or "  (none)"
                raise ScenarioError(
                    f"scenario {self.name!r} [{h.backend.name}] failed at action {i}: "
                    f"{a.describe()}\n{type(e).__name__}: {e}\nactions before it:\n{done}"
                ) from e
            h.log.append(f"{a.describe()} ({time.monotonic() - started:.2f}s)")


def check_remote_chain(segments: Sequence[RemoteSegment], start: int, end: int) -> None:
    """The COPY_SEGMENT_FINISHED segments (what readers use) cover [start, end] exactly once: sorted by start
    offset each begins right after the previous one ends (no gap, no overlap, no duplicate)."""
    finished = sorted((s for s in segments if s.state == "COPY_SEGMENT_FINISHED"), key=lambda s: s.start_offset)
    chain = [(s.start_offset, s.end_offset) for s in finished]
    if not finished:
        raise ScenarioError(f"no COPY_SEGMENT_FINISHED segment; expected a chain over [{start}, {end}]")
    if finished[0].start_offset != start or finished[-1].end_offset != end:
        raise ScenarioError(f"remote chain {chain} does not span [{start}, {end}]")
    for a, b in itertools.pairwise(finished):
        if b.start_offset != a.end_offset + 1:
            kind = "overlap/duplicate" if b.start_offset <= a.end_offset else "gap"
            raise ScenarioError(
                f"remote chain has a {kind} between [{a.start_offset}, {a.end_offset}] and "
                f"[{b.start_offset}, {b.end_offset}]: {chain}"
            )


__all__ = [
    "BASE_OVERRIDES",
    "EARLIEST",
    "EARLIEST_LOCAL",
    "EARLIEST_PENDING_UPLOAD",
    "LATEST",
    "LATEST_TIERED",
    "MAX_TIMESTAMP",
    "OFFSET_MOVED_TO_TIERED_STORAGE",
    "OFFSET_OUT_OF_RANGE",
    "UNSUPPORTED_VERSION",
    "Harness",
    "LocalBackend",
    "MetadataTail",
    "RemoteBackend",
    "S3Backend",
    "Scenario",
    "ScenarioError",
    "check_remote_chain",
    "segment_objects",
    "shape_for",
]
