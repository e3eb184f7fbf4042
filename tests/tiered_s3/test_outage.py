"""Remote storage outage, end to end (issue 4, "Remote storage outage"): a real broker tiering to S3 (moto) through a
fault-injecting proxy (tests/tiered_s3/conftest.py).

`test_remote_storage_outage`: while a paced producer writes, a tail consumer reads the local log and a prober
fetches an offset that only remote storage holds, S3 becomes unreachable -- first a blackhole (requests accepted,
never answered: every S3 attempt ends in its timeout), then refused connections -- for `STRATA_OUTAGE_SECONDS`
(16 s by default; "minutes" in the issue, scaled down), then comes back. Checked:

(a) produce and local consume go on at the same pace with no error;
(b) every fetch of the remote offset returns within `remote.fetch.max.wait.ms` + a margin, answered
    KAFKA_STORAGE_ERROR (56) or empty (DelayedRemoteFetch expiry) -- never a hang, never wrong data; librdkafka,
    consuming from offset 0 through the outage, treats it as retriable and finishes after it; a ListOffsets by
    timestamp into remote data answers REQUEST_TIMED_OUT after `remote.list.offsets.request.timeout.ms` (KIP-1075);
(c) the copy lag grows in the metrics (`strata_remote_copy_lag_segments` / `_bytes`), as do copy errors and the
    S3 client's timeouts/errors (`strata_rsm_s3_*`);
(d) nothing local is deleted before it is remote: with `local.retention.bytes=1`, the local log start offset
    (ListOffsets -4) never passes the latest tiered offset (-5) + 1, sampled all along; the local log keeps every
    segment not yet copied;
(e) when S3 is back everything catches up by itself: copy lag 0, the remote chain gapless from 0, the failed
    attempts' COPY_SEGMENT_STARTED orphans deleted, the bucket holding exactly the RLMM's finished segments, the
    local log trimmed again, and every byte from offset 0 equal to what was produced.

`test_flaky_s3`: the proxy answers random 500/503s, drops connections and adds latency during a normal produce /
offload / consume run (plus a burst that exhausts the S3 client's retries once, so the RLM has to retry a copy):
the data read back from offset 0 is identical, the retries show in `strata_rsm_s3_retries_total` and in the broker
log ("remote copy failed ... retry_in_s"), and none of the failures sticks.

A longer soak is run by hand through the environment (durations in seconds or ms, as named), e.g.

    STRATA_OUTAGE_SECONDS=600 STRATA_OUTAGE_BACKOFF_MAX_MS=30000 STRATA_OUTAGE_API_TIMEOUT_MS=120000 \\
    STRATA_OUTAGE_RETRY_ATTEMPTS=5 STRATA_OUTAGE_LIST_OFFSETS_TIMEOUT_MS=30000 \\
    STRATA_OUTAGE_ATTEMPT_TIMEOUT_MS=30000 .venv/bin/python -m pytest tests/tiered_s3/test_outage.py -k outage

(`STRATA_OUTAGE_*`: SECONDS, RATE (batches/s), TASK_INTERVAL_MS, BACKOFF_MS, BACKOFF_MAX_MS, FETCH_WAIT_MS,
ATTEMPT_TIMEOUT_MS, API_TIMEOUT_MS, RETRY_ATTEMPTS, LIST_OFFSETS_TIMEOUT_MS, FETCH_MARGIN_S, CLIENT_BOUND_S, and
OVERRIDES="key=value;key=value" for any other broker property.) The pytest timeout grows with the outage.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from strata.protocol.records import iter_batches, iter_records
from tests.support import ck
from tests.support.kafka_wire import WireClient
from tests.support.s3_servers import Fault, MotoServer
from tests.tiered.harness import (
    EARLIEST_LOCAL,
    LATEST,
    LATEST_TIERED,
    Consume,
    CreateTopic,
    DeleteRecords,
    DeleteTopic,
    ExpectEmptyRemoteStorage,
    ExpectRemoteSegments,
    Harness,
    Produce,
    Produced,
    S3Backend,
    ScenarioError,
    TopicState,
    _batch,
    _key,
    _value,
    check_remote_chain,
    segment_objects,
)
from tests.tiered_s3.s3_faults import ProxyThread, key_prefix

KAFKA_STORAGE_ERROR = 56
REQUEST_TIMED_OUT = 7
NONE = 0


def _env(name: str, default: float) -> float:
    raw = os.environ.get(f"STRATA_OUTAGE_{name}")
    return float(raw) if raw else default


@dataclass(frozen=True)
class OutageSettings:
    outage_s: float = 16.0  # blackhole for the first half, refused connections for the second
    rate: float = 20.0  # produced batches per second (5 records of 1000 bytes each)
    task_interval_ms: int = 200  # remote.log.manager.task.interval.ms
    backoff_ms: int = 100  # remote.log.manager.task.retry.backoff.ms
    backoff_max_ms: int = 2000  # remote.log.manager.task.retry.backoff.max.ms
    fetch_wait_ms: int = 500  # remote.fetch.max.wait.ms
    attempt_timeout_ms: int = 1000  # rsm.config.s3.api.call.attempt.timeout.ms
    api_timeout_ms: int = 3000  # rsm.config.s3.api.call.timeout.ms (all attempts of one S3 call)
    retry_attempts: int = 3  # rsm.config.s3.retry.max.attempts
    list_offsets_timeout_ms: int = 1500  # remote.list.offsets.request.timeout.ms (KIP-1075; Kafka's default 30000)
    fetch_margin_s: float = 2.5  # allowed on top of remote.fetch.max.wait.ms for one remote Fetch
    client_bound_s: float = 3.0  # slowest produce / local fetch allowed (a hang lasts the S3 timeouts or more)
    # (the bounds absorb the pauses of a loaded 2-core box: broker GC pauses of ~0.5 s, CPU starvation)
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls) -> OutageSettings:
        d = cls()
        extra = {}
        for item in os.environ.get("STRATA_OUTAGE_OVERRIDES", "").split(";"):
            if "=" in item:
                k, v = item.split("=", 1)
                extra[k.strip()] = v.strip()
        return cls(
            outage_s=_env("SECONDS", d.outage_s),
            rate=_env("RATE", d.rate),
            task_interval_ms=int(_env("TASK_INTERVAL_MS", d.task_interval_ms)),
            backoff_ms=int(_env("BACKOFF_MS", d.backoff_ms)),
            backoff_max_ms=int(_env("BACKOFF_MAX_MS", d.backoff_max_ms)),
            fetch_wait_ms=int(_env("FETCH_WAIT_MS", d.fetch_wait_ms)),
            attempt_timeout_ms=int(_env("ATTEMPT_TIMEOUT_MS", d.attempt_timeout_ms)),
            api_timeout_ms=int(_env("API_TIMEOUT_MS", d.api_timeout_ms)),
            retry_attempts=int(_env("RETRY_ATTEMPTS", d.retry_attempts)),
            list_offsets_timeout_ms=int(_env("LIST_OFFSETS_TIMEOUT_MS", d.list_offsets_timeout_ms)),
            fetch_margin_s=_env("FETCH_MARGIN_S", d.fetch_margin_s),
            client_bound_s=_env("CLIENT_BOUND_S", d.client_bound_s),
            extra=extra,
        )

    @property
    def recovery_s(self) -> float:
        """Bound for each catch-up wait after the outage: a backoff, a last S3 call, then the backlog."""
        return 60 + (self.backoff_max_ms + self.api_timeout_ms) / 1000 + self.outage_s

    def broker_overrides(self) -> dict[str, object]:
        ov: dict[str, object] = {
            "remote.log.manager.task.interval.ms": self.task_interval_ms,
            "remote.log.manager.task.retry.backoff.ms": self.backoff_ms,
            "remote.log.manager.task.retry.backoff.max.ms": self.backoff_max_ms,
            "remote.fetch.max.wait.ms": self.fetch_wait_ms,
            "remote.list.offsets.request.timeout.ms": self.list_offsets_timeout_ms,
            "rsm.config.s3.api.call.attempt.timeout.ms": self.attempt_timeout_ms,
            "rsm.config.s3.api.call.timeout.ms": self.api_timeout_ms,
            "rsm.config.s3.retry.max.attempts": self.retry_attempts,
            "rsm.config.s3.retry.backoff.max.ms": 500,
        }
        ov.update(self.extra)
        return ov


SETTINGS = OutageSettings.from_env()
pytestmark = [pytest.mark.integration]

RECORDS_PER_BATCH, VALUE_SIZE, BATCHES_PER_SEGMENT = 5, 1000, 20
SEG = RECORDS_PER_BATCH * BATCHES_PER_SEGMENT  # records per segment: segment j = [j*SEG, (j+1)*SEG)


# ---------------------------------------------------------------------------------------------------------------------
# background actors (each with its own connection; failures are recorded, the test asserts on them)
# ---------------------------------------------------------------------------------------------------------------------
class Actor(threading.Thread):
    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.halt = threading.Event()
        self.crash: BaseException | None = None

    def run(self) -> None:
        try:
            self.body()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.crash = e

    def body(self) -> None:
        raise NotImplementedError

    def stop(self, timeout: float = 30.0) -> None:
        self.halt.set()
        self.join(timeout)
        assert not self.is_alive(), f"{self.name} did not stop within {timeout}s"

    def check(self) -> None:
        if self.crash is not None:
            raise AssertionError(f"{self.name} failed: {self.crash!r}") from self.crash


class PacedProducer(Actor):
    """One batch of RECORDS_PER_BATCH records every 1/rate s (acks=all), recorded in the harness's TopicState so
    consume actions can compare. Samples: (start time, latency, error code)."""

    def __init__(self, h: Harness, topic: str, rate: float) -> None:
        super().__init__("paced-producer")
        self.h, self.t, self.rate = h, h.topic(topic), rate
        self.samples: list[tuple[float, float, int]] = []

    def body(self) -> None:
        t, log = self.t, self.t.produced[0]
        with self.h.wire() as c:
            v = c.pick_version(0, 9)
            due = time.monotonic()
            while not self.halt.is_set():
                now = time.monotonic()
                if now < due:
                    self.halt.wait(due - now)  # pacing, not synchronisation
                    continue
                due = max(due + 1 / self.rate, now - 1.0)
                base = len(log)
                ts = int(time.time() * 1000)
                recs = [
                    Produced(
                        base + i, _key(base + i), _value(t.name, 0, base + i, VALUE_SIZE, t.generation), ts + i, base
                    )
                    for i in range(RECORDS_PER_BATCH)
                ]
                started = time.monotonic()
                resp = c.produce(t.name, 0, _batch(recs), version=v, acks=-1, timeout_ms=30000)
                pr = resp.responses[0].partition_responses[0]
                self.samples.append((started, time.monotonic() - started, pr.error_code))
                if pr.error_code != NONE:
                    continue
                if pr.base_offset != base:
                    raise AssertionError(f"produce: base offset {pr.base_offset}, expected {base}")
                log.extend(recs)

    def between(self, t0: float, t1: float) -> list[tuple[float, float, int]]:
        return [s for s in list(self.samples) if t0 <= s[0] < t1]


class TailConsumer(Actor):
    """Follows the end of the log (always local: it starts at the HW and keeps up). Records (offset, key, value,
    timestamp) read, fetch errors and latencies."""

    def __init__(self, h: Harness, topic: str, start: int) -> None:
        super().__init__("tail-consumer")
        self.h, self.topic, self.offset = h, topic, start
        self.start_offset = start
        self.records: list[tuple[int, bytes | None, bytes | None, int]] = []
        self.errors: list[tuple[int, int]] = []
        self.samples: list[tuple[float, float]] = []

    def body(self) -> None:
        with self.h.wire() as c:
            while not self.halt.is_set():
                started = time.monotonic()
                p = (
                    c.fetch(self.topic, 0, self.offset, version=12, max_wait_ms=200, max_bytes=1 << 20)
                    .responses[0]
                    .partitions[0]
                )
                self.samples.append((started, time.monotonic() - started))
                if p.error_code != NONE:
                    self.errors.append((self.offset, p.error_code))
                    self.halt.wait(0.1)  # a client's retry backoff
                    continue
                data = bytes(p.records or b"")
                for pos, hdr in iter_batches(data):
                    for r in iter_records(data, pos):
                        if r.offset >= self.offset:
                            self.records.append((r.offset, r.key, r.value, r.timestamp))
                    self.offset = max(self.offset, hdr.next_offset)


@dataclass
class Probe:
    started: float
    duration: float
    error: int
    nbytes: int
    mode: str  # proxy mode when the fetch was sent


class RemoteProber(Actor):
    """Fetches one remote-only offset over and over (a consumer stuck on remote data), at most every 0.1 s."""

    def __init__(self, h: Harness, topic: str, offset: int, proxy: ProxyThread, max_wait_ms: int) -> None:
        super().__init__("remote-prober")
        self.h, self.topic, self.offset, self.proxy, self.max_wait_ms = h, topic, offset, proxy, max_wait_ms
        self.probes: list[Probe] = []
        self.data: bytes = b""
        self.got_data = threading.Event()

    def body(self) -> None:
        with self.h.wire() as c:
            while not self.halt.is_set():
                mode = self.proxy.mode
                started = time.monotonic()
                p = (
                    c.fetch(self.topic, 0, self.offset, version=12, max_wait_ms=self.max_wait_ms, max_bytes=64 * 1024)
                    .responses[0]
                    .partitions[0]
                )
                data = bytes(p.records or b"")
                self.probes.append(Probe(started, time.monotonic() - started, p.error_code, len(data), mode))
                if p.error_code == NONE and data:
                    self.data = data
                    self.got_data.set()
                self.halt.wait(max(0.0, started + 0.1 - time.monotonic()))


class LibrdkafkaReader(Actor):
    """confluent-kafka reading `count` records from offset 0 across the outage (assign, no group)."""

    def __init__(self, bootstrap: str, topic: str, count: int, timeout: float) -> None:
        super().__init__("librdkafka-reader")
        self.bootstrap, self.topic, self.count, self.timeout = bootstrap, topic, count, timeout
        self.records: list[tuple[int, bytes | None, bytes | None, int]] = []
        self.errors: list[tuple[str, bool]] = []  # (error, retriable)

    def body(self) -> None:
        c = ck.consumer(self.bootstrap, **{"fetch.error.backoff.ms": 200})
        try:
            c.assign([TopicPartition(self.topic, 0, 0)])
            deadline = time.monotonic() + self.timeout
            while len(self.records) < self.count and time.monotonic() < deadline and not self.halt.is_set():
                for m in c.consume(num_messages=500, timeout=0.5):
                    err = m.error()
                    if err is not None:
                        self.errors.append((str(err), err.retriable()))
                        continue
                    if len(self.records) < self.count:
                        offset = m.offset()
                        assert offset is not None  # set on every consumed message
                        self.records.append((offset, m.key(), m.value(), m.timestamp()[1]))
        finally:
            c.close()


class OffsetWatcher(Actor):
    """Invariant (d), sampled all along: latest tiered (-5) read before and after the local log start (-4);
    L <= R_after + 1 must hold (R only grows, so this never reports a false violation; while S3 is down R is
    frozen and the check is exact). Also samples the copy lag gauges."""

    def __init__(self, h: Harness, topic: str) -> None:
        super().__init__("offset-watcher")
        self.h, self.topic = h, topic
        self.samples: list[tuple[float, int, int]] = []  # (time, local start, latest tiered after)
        self.violations: list[tuple[float, int, int, int]] = []
        self.lag: list[tuple[float, float, float]] = []  # (time, lag segments, lag bytes)

    def body(self) -> None:
        with self.h.wire() as c:

            def lo(spec: int) -> int:
                p = c.list_offsets(self.topic, 0, spec, version=9).topics[0].partitions[0]
                if p.error_code:
                    raise AssertionError(f"ListOffsets({spec}): error {p.error_code}")
                return p.offset

            n = 0
            while not self.halt.is_set():
                r0 = lo(LATEST_TIERED)
                local = lo(EARLIEST_LOCAL)
                r1 = lo(LATEST_TIERED)
                now = time.monotonic()
                self.samples.append((now, local, r1))
                if local > r1 + 1:
                    self.violations.append((now, r0, local, r1))
                if n % 5 == 0:
                    m = self.h.metrics()
                    lbl = (("partition", "0"), ("topic", self.topic))
                    self.lag.append(
                        (
                            now,
                            m.get(("strata_remote_copy_lag_segments", lbl), 0.0),
                            m.get(("strata_remote_copy_lag_bytes", lbl), 0.0),
                        )
                    )
                n += 1
                self.halt.wait(0.1)


# ---------------------------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------------------------
def hold(seconds: float, actors: list[Actor]) -> None:
    """Let the controlled interval pass (the outage itself), failing early if a background actor died."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        for a in actors:
            a.check()
        threading.Event().wait(min(0.5, left))


def metric(m: dict, name: str, **labels: str) -> float:
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


def slow_requests(m: dict, api: str, le: str) -> float:
    """Requests of `api` slower than `le` seconds (strata_network_request_total_time_seconds histogram)."""
    return metric(m, "strata_network_request_total_time_seconds_count", api=api) - metric(
        m, "strata_network_request_total_time_seconds_bucket", api=api, le=le
    )


def expected(t: TopicState, start: int, count: int) -> list[tuple[int, bytes, bytes, int]]:
    return [(r.offset, r.key, r.value, r.timestamp) for r in t.produced[0][start : start + count]]


def first_difference(want: list, got: list) -> str:
    if len(want) != len(got):
        return f"{len(got)} records, expected {len(want)}"
    for w, g in zip(want, got):
        if w != g:
            return f"record {w[0]} differs (got offset {g[0]})"
    return ""


def segment_bases(end_offset: int) -> list[int]:
    return list(range(0, end_offset + 1, SEG))


def last_closed_end(leo: int) -> int:
    """End offset of the last closed segment (segments hold exactly SEG records; the segment that fills up rolls
    only at the next append, so with LEO on a boundary the active segment is the full last one)."""
    active_base = (leo // SEG) * SEG if leo % SEG else leo - SEG
    return active_base - 1


def wait(
    h: Harness,
    what: str,
    probe: Callable[[], Any],
    ok: Callable[[Any], bool],
    timeout: float = 60.0,
    actors: tuple[Actor, ...] = (),
) -> Any:
    def checked() -> Any:
        for a in actors:
            a.check()
        return probe()

    return h.wait(what, checked, ok, timeout, interval=0.2)


# ---------------------------------------------------------------------------------------------------------------------
# the outage
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.timeout(180 + 3 * SETTINGS.outage_s + 2 * SETTINGS.recovery_s)
def test_remote_storage_outage(moto: MotoServer, s3_proxy: ProxyThread, tmp_path, request) -> None:
    cfg = SETTINGS
    h = Harness(
        tmp_path / "broker",
        S3Backend(moto, key_prefix(request), endpoint=s3_proxy.endpoint),
        cfg.broker_overrides(),
        name="outage",
    )
    request.node._strata_brokers = [h.broker]
    actors: list[Actor] = []
    h.start()
    try:
        _outage_scenario(h, s3_proxy, cfg, actors)
    finally:
        for a in actors:
            a.halt.set()
        for a in actors:
            a.join(30)
        h.stop()


def _outage_scenario(h: Harness, proxy: ProxyThread, cfg: OutageSettings, actors: list[Actor]) -> None:
    topic = "orders"
    create_tiered_topic(h, topic)
    t = h.topic(topic)
    phases = [("start", time.monotonic())]
    seg_bytes = t.shape.batch_bytes * BATCHES_PER_SEGMENT
    producer = PacedProducer(h, topic, cfg.rate)
    watcher = OffsetWatcher(h, topic)
    actors += [producer, watcher]
    producer.start()
    watcher.start()

    # -- before: tiering works (4 segments copied and trimmed locally; the first two read back from S3) ---------
    wait(
        h,
        "4 segments copied and deleted locally",
        lambda: h.offsets(topic, 0),
        lambda o: o["latest-tiered(-5)"] >= 4 * SEG - 1 and o["earliest-local(-4)"] >= 4 * SEG,
        actors=(producer, watcher),
    )
    Consume(topic, 0, 0, 2 * SEG).run(h)
    # a second tiered topic, for remote deletion during the outage
    audit = "audit"
    create_tiered_topic(h, audit)
    Produce(audit, 0, 3 * SEG + RECORDS_PER_BATCH).run(h)
    wait(
        h,
        f"{audit}: 3 segments copied",
        lambda: h.offsets(audit, 0),
        lambda o: o["latest-tiered(-5)"] == 3 * SEG - 1 and o["earliest-local(-4)"] == 3 * SEG,
        actors=(producer, watcher),
    )
    # inside segment 3: copied, deleted locally, never read, not cached (reading segment 1 read ahead segment 2)
    remote_offset = 3 * SEG + 7
    tail = TailConsumer(h, topic, h.offset(topic, 0, LATEST))
    actors.append(tail)
    tail.start()

    # -- the outage: blackhole, then refused connections ----------------------------------------------------------
    phases.append(("tiering works", time.monotonic()))
    m0 = h.metrics()
    r_out = h.offset(topic, 0, LATEST_TIERED)
    t_out = time.monotonic()
    proxy.set_mode("blackhole")
    prober = RemoteProber(h, topic, remote_offset, proxy, max_wait_ms=cfg.fetch_wait_ms)
    reader = LibrdkafkaReader(h.broker.bootstrap, topic, len(t.produced[0]), timeout=cfg.outage_s + 2 * cfg.recovery_s)
    actors += [prober, reader]
    prober.start()
    reader.start()
    # a consumer seeking by time into remote data (offsetsForTimes): the remote time index cannot be read
    ts_offset = 3 * SEG + 3  # segment 3: copied, deleted locally, its indexes never read
    ts_target = t.produced[0][ts_offset].timestamp
    started = time.monotonic()
    with WireClient.connect(h.broker.bootstrap, timeout=300.0) as c:
        ts_error = c.list_offsets(topic, 0, ts_target, version=7).topics[0].partitions[0].error_code
    ts_took = time.monotonic() - started
    # DeleteRecords works without S3; the remote segments below the new log start cannot be deleted yet
    DeleteRecords(audit, 0, 2 * SEG).run(h)
    hold(max(0.0, t_out + cfg.outage_s / 2 - time.monotonic()), actors)
    m_mid = h.metrics()
    proxy.set_mode("refuse")
    hold(cfg.outage_s / 2, actors)

    m_end = h.metrics()
    offs_end = h.offsets(topic, 0)
    local_end = sorted(h.local_segments(topic, 0))
    states = {s.start_offset: s.state for s in h.rlmm_segments(audit, 0)}
    stored = {b for b, _ in segment_objects(h.backend.list_partition(h.topic(audit).partition_dir(0)))}
    t_back = time.monotonic()
    proxy.set_mode("pass")
    s3_down = (t_out, t_back)

    # (a) produce and local consume unaffected
    during = producer.between(*s3_down)
    assert not [s for s in producer.samples if s[2] != NONE], "produce errors"
    achieved = len(during) / (t_back - t_out)
    assert achieved >= 0.8 * cfg.rate, f"produce rate during the outage {achieved:.1f}/s, target {cfg.rate}/s"
    worst = max(s[1] for s in during)
    assert worst < cfg.client_bound_s, f"slowest produce during the outage took {worst:.2f}s"
    slow_in_broker = slow_requests(m_end, "Produce", "1.0") - slow_requests(m0, "Produce", "1.0")
    assert slow_in_broker == 0, f"{slow_in_broker} produce requests took more than 1 s in the broker"
    assert not tail.errors, f"local consumer errors: {tail.errors[:5]}"
    tail_worst = max(d for s, d in tail.samples if t_out <= s < t_back)
    assert tail_worst < cfg.client_bound_s, f"slowest local fetch during the outage took {tail_worst:.2f}s"
    assert tail.offset >= offs_end["latest(-1)"] - 20 * RECORDS_PER_BATCH, (tail.offset, offs_end)

    # (b) remote reads: bounded, retriable, never data that is not there
    bound = cfg.fetch_wait_ms / 1000 + cfg.fetch_margin_s
    out_probes = [p for p in prober.probes if p.mode in ("blackhole", "refuse")]
    assert out_probes, "no remote fetch during the outage"
    slow = [p for p in prober.probes if p.duration > bound]
    assert not slow, f"{len(slow)} remote fetches took longer than {bound:.2f}s: {slow[:3]}"
    wrong = [p for p in out_probes if not (p.error == KAFKA_STORAGE_ERROR or (p.error == NONE and p.nbytes == 0))]
    assert not wrong, f"remote fetches during the outage answered other than 56/empty: {wrong[:3]}"
    by_mode = {m: sorted({(p.error, p.nbytes > 0) for p in out_probes if p.mode == m}) for m in ("blackhole", "refuse")}
    assert all(by_mode.values()), by_mode
    assert any(p.error == KAFKA_STORAGE_ERROR for p in out_probes), by_mode
    assert metric(m_mid, "strata_delayed_remote_fetch_expires_total", topic=topic) > metric(
        m0, "strata_delayed_remote_fetch_expires_total", topic=topic
    ), "no DelayedRemoteFetch expiry"
    assert metric(m_end, "strata_remote_fetch_errors_total", topic=topic) > metric(
        m0, "strata_remote_fetch_errors_total", topic=topic
    )

    # ListOffsets by timestamp needing a remote time index: a retriable error within remote.list.offsets.request.
    # timeout.ms (REQUEST_TIMED_OUT, KIP-1075) or the S3 deadline (KAFKA_STORAGE_ERROR), whichever comes first
    ts_bound = min(cfg.list_offsets_timeout_ms, 2 * cfg.api_timeout_ms) / 1000 + cfg.fetch_margin_s
    assert ts_error in (REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR), f"ListOffsets by timestamp: error {ts_error}"
    assert ts_took <= ts_bound, f"ListOffsets by timestamp took {ts_took:.2f}s (bound {ts_bound:.1f}s)"
    if cfg.list_offsets_timeout_ms < cfg.attempt_timeout_ms:  # no S3 attempt can end before the lookup timeout
        assert ts_error == REQUEST_TIMED_OUT, f"ListOffsets by timestamp: error {ts_error}, expected 7"

    # (c) copy lag grows, copies fail, the S3 client times out (blackhole) and gives up (both)
    lbl = {"topic": topic, "partition": "0"}
    lag_segs = metric(m_end, "strata_remote_copy_lag_segments", **lbl)
    lag_bytes = metric(m_end, "strata_remote_copy_lag_bytes", **lbl)
    uncopied = [b for b in local_end if b > offs_end["latest-tiered(-5)"]]
    closed_uncopied = len(uncopied) - 1
    assert closed_uncopied >= 0.5 * cfg.rate * cfg.outage_s / BATCHES_PER_SEGMENT, (local_end, offs_end)
    assert lag_segs >= max(
        3, closed_uncopied - 2 * cfg.rate * (cfg.backoff_max_ms + cfg.api_timeout_ms) / 1000 / BATCHES_PER_SEGMENT
    ), f"copy lag {lag_segs} segments, {closed_uncopied} waiting"
    assert lag_bytes == lag_segs * seg_bytes, (lag_bytes, lag_segs, seg_bytes)
    outage_lag = [s for ts, s, _ in watcher.lag if t_out <= ts <= t_back]
    assert outage_lag and outage_lag[-1] > outage_lag[0], f"copy lag did not grow: {outage_lag}"
    for name in ("strata_remote_copy_errors_total",):
        assert metric(m_end, name, topic=topic) > metric(m0, name, topic=topic), name
    assert metric(m_mid, "strata_rsm_s3_timeouts_total") > metric(m0, "strata_rsm_s3_timeouts_total")
    assert metric(m_end, "strata_rsm_s3_errors_total") > metric(m_mid, "strata_rsm_s3_errors_total")

    # remote deletion during the outage: attempted (DELETE_SEGMENT_STARTED), the objects still there
    assert states == {0: "DELETE_SEGMENT_STARTED", SEG: "DELETE_SEGMENT_STARTED", 2 * SEG: "COPY_SEGMENT_FINISHED"}, (
        states
    )
    assert stored == {0, SEG, 2 * SEG}, f"{audit}: segment objects in the bucket at {sorted(stored)}"

    # (d) nothing local deleted before it is remote
    assert not watcher.violations, f"local log start passed latest tiered + 1: {watcher.violations[:5]}"
    assert offs_end["earliest-local(-4)"] == offs_end["latest-tiered(-5)"] + 1, offs_end
    assert local_end[0] == offs_end["earliest-local(-4)"] and local_end == list(
        range(local_end[0], local_end[-1] + 1, SEG)
    ), f"local segments {local_end}, offsets {offs_end}"
    assert offs_end["latest-tiered(-5)"] <= r_out + SEG, (r_out, offs_end)  # at most a copy in flight finished

    phases.append(("outage over, checked", time.monotonic()))

    # (e) S3 is back: everything catches up by itself
    prober_ok = prober.got_data.wait(cfg.recovery_s)
    assert prober_ok, f"remote reads did not recover: last probes {prober.probes[-3:]}"
    want = t.produced[0]
    got = [
        (r.offset, r.key, r.value, r.timestamp)
        for pos, _ in iter_batches(prober.data)
        for r in iter_records(prober.data, pos)
    ]
    assert (
        got
        and got[0][0] <= remote_offset
        and all((o, k, v, ts) == (want[o].offset, want[o].key, want[o].value, want[o].timestamp) for o, k, v, ts in got)
    )
    wait(
        h,
        "copying resumed while producing",
        lambda: h.offset(topic, 0, LATEST_TIERED),
        lambda r: r >= offs_end["latest(-1)"] - SEG,
        cfg.recovery_s,
        actors=(producer, watcher, tail),
    )
    producer.stop()
    phases.append(("copying resumed", time.monotonic()))
    leo = len(t.produced[0])
    end = last_closed_end(leo)
    wait(
        h,
        f"caught up: latest tiered {end}, local log start {end + 1}, copy lag 0",
        lambda: (
            h.offsets(topic, 0),
            metric(h.metrics(), "strata_remote_copy_lag_segments", **lbl),
            metric(h.metrics(), "strata_remote_copy_lag_bytes", **lbl),
        ),
        lambda o: o[0]["latest-tiered(-5)"] == end and o[0]["earliest-local(-4)"] == end + 1 and o[1:] == (0, 0),
        cfg.recovery_s,
        actors=(watcher, tail),
    )
    wait(
        h,
        "the failed copy attempts' COPY_SEGMENT_STARTED orphans deleted",
        lambda: [
            (s.start_offset, s.state)
            for s in h.rlmm_segments(topic, 0)
            if s.state not in ("COPY_SEGMENT_FINISHED", "DELETE_SEGMENT_FINISHED")
        ],
        lambda left: not left,
        cfg.recovery_s,
    )
    phases.append(("caught up, orphans gone", time.monotonic()))
    segs = h.rlmm_segments(topic, 0)
    orphans = [s for s in segs if s.history[:2] == ["COPY_SEGMENT_STARTED", "DELETE_SEGMENT_STARTED"]]
    assert orphans, "no failed copy attempt recorded during the outage"
    check_remote_chain(segs, 0, end)
    ExpectRemoteSegments(topic, 0, segment_bases(end)).run(h)
    # the deletions that failed during the outage are retried: DELETE_SEGMENT_FINISHED, objects gone
    ExpectRemoteSegments(audit, 0, [2 * SEG], timeout=cfg.recovery_s).run(h)
    wait(
        h,
        f"{audit}: segments below the log start DELETE_SEGMENT_FINISHED",
        lambda: {s.start_offset: s.state for s in h.rlmm_segments(audit, 0)},
        lambda st: (
            st == {0: "DELETE_SEGMENT_FINISHED", SEG: "DELETE_SEGMENT_FINISHED", 2 * SEG: "COPY_SEGMENT_FINISHED"}
        ),
    )
    Consume(audit, 0, 2 * SEG, SEG + RECORDS_PER_BATCH).run(h)
    Consume(topic, 0, 0, leo).run(h)  # every byte from offset 0, byte for byte
    assert h.list_offset(topic, 0, ts_target, version=7)[:2] == (NONE, ts_offset), "ListOffsets by timestamp"
    phases.append(("consumed from 0", time.monotonic()))

    reader.join(cfg.outage_s + 2 * cfg.recovery_s)
    reader.check()
    bad = [e for e in reader.errors if not e[1]]
    assert not bad, f"librdkafka saw non-retriable errors: {bad[:3]}"
    diff = first_difference(expected(t, 0, reader.count), reader.records)
    assert not diff, f"librdkafka from offset 0 across the outage: {diff}"
    phases.append(("librdkafka done", time.monotonic()))
    tail.stop()
    diff = first_difference(expected(t, tail.start_offset, len(tail.records)), tail.records)
    assert not diff and len(tail.records) >= leo - tail.start_offset - 20 * RECORDS_PER_BATCH, diff
    prober.stop()
    watcher.stop()
    for a in actors:
        a.check()
    assert not watcher.violations, f"local log start passed latest tiered + 1: {watcher.violations[:5]}"
    out = h.broker.output()
    assert "remote copy failed" in out and "retry_in_s" in out
    assert "Traceback" not in out and "never retrieved" not in out, "unexpected exceptions in the broker log"
    print(
        f"\noutage {cfg.outage_s:.0f}s: produced {leo} records ({achieved:.1f} batches/s during the outage, "
        f"slowest {worst * 1000:.0f} ms); copy lag at the end {lag_segs:.0f} segments / {lag_bytes:.0f} bytes; "
        f"remote fetches during the outage: {len(out_probes)} "
        f"(56: {sum(p.error == KAFKA_STORAGE_ERROR for p in out_probes)}, "
        f"slowest {max(p.duration for p in out_probes) * 1000:.0f} ms); ListOffsets by time: error {ts_error} "
        f"after {ts_took:.1f}s; "
        f"failed copy attempts {len(orphans)}; "
        f"librdkafka retriable errors seen {len(reader.errors)}; phases: "
        + ", ".join(f"{a} +{t1 - t0:.1f}s" for (_, t0), (a, t1) in itertools.pairwise(phases))
    )


# ---------------------------------------------------------------------------------------------------------------------
# a flaky S3
# ---------------------------------------------------------------------------------------------------------------------
FLAKY_SEGMENTS = 8


def fault_harness(
    moto: MotoServer, proxy: ProxyThread, tmp_path, request, name: str, *, call_timeout_ms: int, max_attempts: int
) -> Harness:
    """A broker on moto behind the fault proxy, with short RLM backoffs and S3 deadlines so faults resolve fast."""
    overrides: dict[str, object] = {
        "remote.log.manager.task.retry.backoff.ms": 100,
        "remote.log.manager.task.retry.backoff.max.ms": 1000,
        "rsm.config.s3.api.call.attempt.timeout.ms": 2000,
        "rsm.config.s3.api.call.timeout.ms": call_timeout_ms,
        "rsm.config.s3.retry.max.attempts": max_attempts,
        "rsm.config.s3.retry.backoff.max.ms": 200,
    }
    h = Harness(
        tmp_path / "broker", S3Backend(moto, key_prefix(request), endpoint=proxy.endpoint), overrides, name=name
    )
    request.node._strata_brokers = [h.broker]
    return h


def create_tiered_topic(h: Harness, topic: str) -> None:
    """One partition of SEG-record segments, kept locally only until copied."""
    CreateTopic(
        topic,
        1,
        {"local.retention.bytes": "1"},
        batches_per_segment=BATCHES_PER_SEGMENT,
        records_per_batch=RECORDS_PER_BATCH,
        value_size=VALUE_SIZE,
    ).run(h)


@pytest.mark.timeout(240)
def test_flaky_s3(moto: MotoServer, s3_proxy: ProxyThread, tmp_path, request) -> None:
    h = fault_harness(moto, s3_proxy, tmp_path, request, "flaky", call_timeout_ms=8000, max_attempts=3)
    with h:
        topic = "events"
        create_tiered_topic(h, topic)
        s3_proxy.set_mode("flaky")
        # one copy fails for good at the S3 client (its 3 attempts at the first segment's .log are refused):
        # the RLM must retry the whole copy
        s3_proxy.add(*[Fault("status", 503, method="PUT", path_contains=".log") for _ in range(3)])
        n = FLAKY_SEGMENTS * SEG + 2 * RECORDS_PER_BATCH
        Produce(topic, 0, n).run(h)
        end = last_closed_end(n)
        wait(
            h,
            f"offloaded up to {end} through the flaky proxy",
            lambda: h.offsets(topic, 0),
            lambda o: o["latest-tiered(-5)"] == end and o["earliest-local(-4)"] == end + 1,
            timeout=120,
        )
        t = h.topic(topic)
        got, errors, empties = read_tolerant(h, topic, 0, n, timeout=120)
        diff = first_difference(expected(t, 0, n), got)
        assert not diff, f"consumed from 0 through the flaky proxy: {diff}"
        recs = ck.read_partition(h.broker.bootstrap, topic, 0, 0, n, timeout=120, **{"fetch.error.backoff.ms": 100})
        diff = first_difference(expected(t, 0, n), [(r.offset, r.key, r.value, r.timestamp) for r in recs])
        assert not diff, f"librdkafka from 0 through the flaky proxy: {diff}"
        # nothing sticks: lag 0, no orphan left in the RLMM or the bucket, a gapless chain
        lbl = {"topic": topic, "partition": "0"}
        wait(h, "copy lag 0", lambda: metric(h.metrics(), "strata_remote_copy_lag_segments", **lbl), lambda v: v == 0)
        wait(
            h,
            "failed attempts cleaned up",
            lambda: [
                (s.start_offset, s.state)
                for s in h.rlmm_segments(topic, 0)
                if s.state not in ("COPY_SEGMENT_FINISHED", "DELETE_SEGMENT_FINISHED")
            ],
            lambda left: not left,
            timeout=90,
        )
        check_remote_chain(h.rlmm_segments(topic, 0), 0, end)
        ExpectRemoteSegments(topic, 0, segment_bases(end), timeout=90).run(h)
        m = h.metrics()
        injected = dict(s3_proxy.proxy.faults_by_mode)
        s3_proxy.set_mode("pass")
    assert metric(m, "strata_rsm_s3_retries_total") > 0, "no S3 retry counted"
    assert metric(m, "strata_rsm_s3_requests_total") > metric(m, "strata_rsm_s3_retries_total")
    assert metric(m, "strata_remote_copy_errors_total", topic=topic) >= 1
    kinds = {k for (_, k) in injected}
    assert {"status 500", "status 503", "delay"} <= kinds and kinds & {"drop_request", "drop_response"}, injected
    out = h.broker.output()
    assert re.search(r"remote copy failed.*retry_in_s", out), "the RLM's copy retry is not in the broker log"
    copied = set(re.findall(r"copied segment to remote storage.*?base_offset=(\d+)", out))
    assert copied == {str(b) for b in segment_bases(end)}, sorted(copied, key=int)
    assert "Traceback" not in out and "never retrieved" not in out, "unexpected exceptions in the broker log"
    print(
        f"\nflaky S3: faults injected {injected}; S3 requests {metric(m, 'strata_rsm_s3_requests_total'):.0f}, "
        f"retries {metric(m, 'strata_rsm_s3_retries_total'):.0f}, "
        f"given up {metric(m, 'strata_rsm_s3_errors_total'):.0f}; "
        f"copy errors {metric(m, 'strata_remote_copy_errors_total', topic=topic):.0f}; consumer saw "
        f"{errors} storage errors and {empties} empty remote answers"
    )


@pytest.mark.timeout(240)
def test_topic_deleted_while_s3_refuses_is_emptied_once_it_returns(
    moto: MotoServer, s3_proxy: ProxyThread, tmp_path, request
) -> None:
    """Deleting a tiered topic while S3 refuses connections: the remote partition deletion starts, keeps its objects
    while S3 is away, and finishes by itself (objects gone, DELETE_PARTITION_FINISHED) once S3 is back."""
    h = fault_harness(moto, s3_proxy, tmp_path, request, "delete-topic", call_timeout_ms=4000, max_attempts=2)
    with h:
        topic = "gone"
        create_tiered_topic(h, topic)
        Produce(topic, 0, 3 * SEG + RECORDS_PER_BATCH).run(h)
        wait(
            h,
            "3 segments copied",
            lambda: h.offsets(topic, 0),
            lambda o: o["latest-tiered(-5)"] == 3 * SEG - 1 and o["earliest-local(-4)"] == 3 * SEG,
        )
        t = h.topic(topic)
        tid = h.rlmm_segments(topic, 0)[0].topic_id
        s3_proxy.set_mode("refuse")
        DeleteTopic(topic).run(h)
        wait(
            h,
            "remote partition deletion started",
            lambda: h.rlmm().partition_deletes.get((topic, 0, tid), []),
            lambda states: states and states[-1] == "DELETE_PARTITION_STARTED",
        )
        # the attempts fail while S3 is away: the objects stay and the deletion does not claim to be finished
        wait(
            h,
            "a failed remote deletion in the broker log",
            lambda: h.broker.output(),
            lambda out: "remote partition deletion failed" in out,
        )
        assert segment_objects(h.backend.list_partition(t.partition_dir(0))), "objects deleted while S3 refused"
        assert h.rlmm().partition_deletes[(topic, 0, tid)][-1] == "DELETE_PARTITION_STARTED"
        s3_proxy.set_mode("pass")
        ExpectEmptyRemoteStorage(topic, timeout=90).run(h)
        out = h.broker.output()
    assert "Traceback" not in out and "never retrieved" not in out, "unexpected exceptions in the broker log"


def read_tolerant(
    h: Harness, topic: str, start: int, count: int, timeout: float
) -> tuple[list[tuple[int, bytes | None, bytes | None, int]], int, int]:
    """Read `count` records from `start` like a client: KAFKA_STORAGE_ERROR and empty answers are retried."""
    got: list[tuple[int, bytes | None, bytes | None, int]] = []
    offset, errors, empties = start, 0, 0
    deadline = time.monotonic() + timeout
    with h.wire() as c:
        while len(got) < count:
            if time.monotonic() > deadline:
                raise ScenarioError(
                    f"read {len(got)} of {count} records from {start} within {timeout}s "
                    f"({errors} storage errors, {empties} empty answers)"
                )
            p = c.fetch(topic, 0, offset, version=12, max_wait_ms=500, max_bytes=64 * 1024).responses[0].partitions[0]
            if p.error_code == KAFKA_STORAGE_ERROR:
                errors += 1
                continue
            assert p.error_code == NONE, f"fetch at {offset}: error {p.error_code}"
            data = bytes(p.records or b"")
            if not data:
                empties += 1
            for pos, hdr in iter_batches(data):
                for r in iter_records(data, pos):
                    if r.offset >= offset and len(got) < count:
                        got.append((r.offset, r.key, r.value, r.timestamp))
                offset = max(offset, hdr.next_offset)
    return got, errors, empties
