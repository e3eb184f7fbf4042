"""~200 MB through tiered storage, read back from offset 0 by four client libraries (issue 4 "Tests").

One broker (LocalTieredStorage), one topic of 4 partitions with 1 MiB segments and `local.retention.bytes` of
2 MiB. confluent-kafka produces ~200 MB of ~1 KiB keyed records; the test keeps, per partition, a digest over
(offset, sha256(key, value)) of every acknowledged record (from the delivery reports, so memory stays small).
Once every closed segment is remote and local retention has run, the local log holds only the tail (the
partition's `.log` files total at most local.retention.bytes + one segment), and confluent-kafka, kafka-python,
aiokafka (assign, no group) and kafkajs (a consumer group: kafkajs consumes only through groups) read everything
from offset 0 at the same time; each must return the same per-partition digests, record counts and byte counts.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.broker_proc import REPO_ROOT
from tests.tiered.clients_consume import record_digest
from tests.tiered.harness import EARLIEST, EARLIEST_LOCAL, LATEST, LATEST_TIERED, Harness, LocalBackend

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MB = 1 << 20
TOTAL_BYTES = 200 * MB
PARTITIONS = 4
VALUE_SIZE = 1010
SEGMENT_BYTES = MB
LOCAL_RETENTION = 2 * MB
TOPIC = "big"
CLIENTS = ["confluent", "kafka-python", "aiokafka", "kafkajs"]
JS_DIR = REPO_ROOT / "tests" / "js"


def produce(bootstrap: str) -> dict[int, list]:
    """Produce ~TOTAL_BYTES; return {partition: [count, bytes, digest]} of what the broker acknowledged."""
    from confluent_kafka import Producer

    acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    sizes = {p: 0 for p in range(PARTITIONS)}
    errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
            return
        acked[msg.partition()].append((msg.offset(), record_digest(msg.key(), msg.value())))
        sizes[msg.partition()] += len(msg.key()) + len(msg.value())

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1000000,
            "queue.buffering.max.kbytes": 256 * 1024,
            "log_level": 3,
            "enable.idempotence": False,
            "max.in.flight.requests.per.connection": 1,
        }
    )
    rnd = random.Random(405)
    n = TOTAL_BYTES // (VALUE_SIZE + 14)
    for i in range(n):
        key = b"key-%010d" % i
        value = rnd.randbytes(VALUE_SIZE)
        while True:
            try:
                p.produce(TOPIC, value=value, key=key, partition=i % PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(120) == 0, "records not delivered within 120s"
    assert not errors, errors[:5]
    out = {}
    for part, recs in acked.items():
        recs.sort()
        h = hashlib.sha256()
        for i, (off, dig) in enumerate(recs):
            assert off == i, f"partition {part}: acknowledged offsets have a gap or duplicate at {off} (#{i})"
            h.update(struct.pack(">q", off) + dig)
        out[part] = [len(recs), sizes[part], h.hexdigest()]
    return out


def local_log_bytes(h: Harness, partition: int) -> int:
    return sum(h.local_segments(TOPIC, partition).values())


def test_200mb_read_back_from_remote_by_four_clients(tmp_path: Path) -> None:
    assert (JS_DIR / "node_modules" / "kafkajs").is_dir(), "run `make node-deps` (npm install in tests/js)"
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    with Harness(tmp_path / "broker", LocalBackend()) as h:
        with h.admin() as a:
            a.create_topic(
                TOPIC,
                PARTITIONS,
                1,
                {
                    "remote.storage.enable": "true",
                    "segment.bytes": str(SEGMENT_BYTES),
                    "local.retention.bytes": str(LOCAL_RETENTION),
                },
            )
        expected = produce(h.broker.bootstrap)
        timings["produce"] = time.monotonic() - t0
        ends = {p: expected[p][0] for p in range(PARTITIONS)}
        total = sum(v[1] for v in expected.values())
        assert total >= 190 * MB, f"only {total} bytes produced"
        for p in range(PARTITIONS):
            assert h.offset(TOPIC, p, LATEST) == ends[p]

        # offloaded: every closed segment is remote (-5 is just below the active segment) and local retention
        # has cut the local log down to its tail
        def settled(p: int) -> dict[str, int]:
            local = h.local_segments(TOPIC, p)
            return {
                "latest_tiered": h.offset(TOPIC, p, LATEST_TIERED),
                "active_base": max(local),
                "local_bytes": sum(local.values()),
                "local_segments": len(local),
            }

        for p in range(PARTITIONS):
            h.wait(
                f"{TOPIC}-{p} fully offloaded with only its tail local",
                functools.partial(settled, p),
                lambda s: (
                    s["latest_tiered"] + 1 == s["active_base"] and s["local_bytes"] <= LOCAL_RETENTION + SEGMENT_BYTES
                ),
                timeout=120,
            )
        timings["offload"] = time.monotonic() - t0 - timings["produce"]
        for p in range(PARTITIONS):
            local, start = h.offset(TOPIC, p, EARLIEST_LOCAL), h.offset(TOPIC, p, EARLIEST)
            assert start == 0 and local > ends[p] // 2, (p, start, local, ends[p])
            assert min(h.local_segments(TOPIC, p)) == local
            assert local_log_bytes(h, p) <= LOCAL_RETENTION + SEGMENT_BYTES

        remote_before = h.remote_fetches(TOPIC)
        ends_json = json.dumps({str(p): e for p, e in ends.items()})
        procs = {}
        t1 = time.monotonic()
        for c in CLIENTS:
            if c == "kafkajs":
                cmd = [
                    "node",
                    str(JS_DIR / "tiered_consume.js"),
                    h.broker.bootstrap,
                    TOPIC,
                    "tiered-200mb-js",
                    ends_json,
                ]
            else:
                cmd = [sys.executable, "-m", "tests.tiered.clients_consume", c, h.broker.bootstrap, TOPIC, ends_json]
            procs[c] = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        results = {}
        for c, proc in procs.items():
            try:
                out, err = proc.communicate(timeout=200)
            except subprocess.TimeoutExpired:
                for other in procs.values():
                    other.kill()
                raise
            assert proc.returncode == 0, f"{c} reader failed ({proc.returncode}):\n{err[-3000:]}"
            results[c] = json.loads(out.strip().splitlines()[-1])
        timings["consume (4 clients at once)"] = time.monotonic() - t1
        remote_fetches = h.remote_fetches(TOPIC) - remote_before

    want = {str(p): v for p, v in expected.items()}
    for c, got in results.items():
        secs = got.pop("seconds")
        timings[c] = secs
        assert got == want, f"{c} read back something else than was produced:\n got  {got}\n want {want}"
    # ~150 MB of it sat only in remote storage: the readers must have gone there
    assert remote_fetches >= 4 * PARTITIONS, remote_fetches
    print(
        f"\n200 MB tiered: {json.dumps({k: round(v, 1) for k, v in timings.items()})}, "
        f"{remote_fetches:.0f} remote fetches"
    )
