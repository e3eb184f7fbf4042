"""Spark batch read of a tiered topic: ``read.mode=direct`` vs ``read.mode=broker`` vs one confluent-kafka consumer.

    python -m bench.spark_bench [--mib 512] [--partitions 2] [--reps 3] [--storage seaweedfs|s3|local|both] [--json F]

or from the harness: ``from bench import spark_bench; spark_bench.run(results)`` (adds ``results["spark_read"]``).

Set-up (not timed): an S3 server (SeaweedFS's ``weed mini``, a real object store; ``--storage s3`` uses moto's
server, whose Python request handling is the bottleneck on this machine), one Strata broker tiering to it
(``remote.log.storage.manager.class.name=s3``), a topic with ``segment.bytes`` 8 MiB and
``local.retention.bytes=1`` (the broker's chunk cache is cut to 16 MiB so the topic is much larger than it, as a
months-long history is), filled with 1 KiB incompressible values by an idempotent confluent-kafka producer, then a
wait until local retention removed everything but the active segment, so almost the whole topic lives only in
remote storage. One local SparkSession (``local[*]``) is started and warmed up
with a small read in each mode.

Measured, on the same data in the same run: the wall time to read every record from earliest to the high watermark
(a) with one confluent-kafka consumer (assign, no group), (b) with ``spark.read.format("strata")`` in broker mode
and (c) in direct mode, each Spark read forced through all value bytes with ``sum(length(value))``. MB/s counts
key + value bytes. The broker process's CPU seconds during each read are reported too: in direct mode the broker
only serves the local tail and Metadata/ListOffsets/``__remote_log_metadata`` to the driver. The best of ``--reps``
repetitions is kept for each reader. ``--storage local`` runs the same with LocalTieredStorage (a directory), which
takes the object-store server's CPU out of the comparison on a small machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
VALUE_BYTES = 1024
TOPIC = "spark-bench"
CHUNK_CACHE_BYTES = 16 << 20
STORAGE_NAMES = {"seaweedfs": "S3 (SeaweedFS)", "s3": "S3 (moto)", "local": "LocalTieredStorage"}


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _fill(bootstrap: str, partitions: int, mib: int, topic: str = TOPIC) -> tuple[int, int]:
    """``mib`` of 1 KiB incompressible values, keys 0..n-1, round-robin over the partitions (idempotent, acks=all);
    returns (records, bytes) once all are acknowledged."""
    from confluent_kafka import Producer

    n = mib * 1024 * 1024 // VALUE_BYTES
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "compression.type": "none",
            "log_level": 3,
        }
    )
    payload = os.urandom(VALUE_BYTES * 64)
    failed: list[Any] = []
    for i in range(n):
        off = (i * 37) % (len(payload) - VALUE_BYTES)
        while True:
            try:
                p.produce(
                    topic,
                    payload[off : off + VALUE_BYTES],
                    key=b"%08d" % i,
                    partition=i % partitions,
                    on_delivery=lambda err, _m: failed.append(err) if err else None,
                )
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(300) or failed:
        raise RuntimeError(f"bench fill failed: {failed[:3]}")
    return n, n * (VALUE_BYTES + 8)


def _wait_offloaded(
    bootstrap: str, partitions: int, timeout: float = 300, topic: str = TOPIC
) -> dict[int, tuple[int, int]]:
    """Wait until every partition's local log holds only its last (active) segment; returns {p: (local start,
    end)}."""
    from strata.cli.admin_client import AdminClient

    deadline = time.monotonic() + timeout
    while True:
        with AdminClient(bootstrap) as a:
            local = a.list_offsets(topic, range(partitions), -4)
            end = a.list_offsets(topic, range(partitions), -1)
        state = {p: (local[p], end[p]) for p in range(partitions)}
        if all(end[p] - local[p] <= 9 * 1024 for p in state):  # at most ~one 8 MiB segment left locally
            return state
        if time.monotonic() > deadline:
            raise RuntimeError(f"tiering did not catch up within {timeout}s: {state}")
        time.sleep(0.5)  # polling interval of a bounded condition wait


def _consumer_read(bootstrap: str, partitions: int, expected: int) -> tuple[float, int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
            "queued.max.messages.kbytes": 128 << 10,
            "log_level": 3,
        }
    )
    try:
        t0 = time.monotonic()
        c.assign([TopicPartition(TOPIC, p, -2) for p in range(partitions)])
        seen = nbytes = 0
        while seen < expected:
            for m in c.consume(10_000, timeout=1.0):
                if m.error():
                    continue
                seen += 1
                nbytes += len(m.value() or b"") + len(m.key() or b"")
            if time.monotonic() - t0 > 600:
                raise RuntimeError(f"consumer saw {seen}/{expected} records in 600s")
        return time.monotonic() - t0, seen, nbytes
    finally:
        c.close()


def _spark_read(spark: Any, options: dict[str, str]) -> tuple[float, int, int]:
    t0 = time.monotonic()
    row = (
        spark.read.format("strata")
        .options(**options)
        .load()
        .selectExpr("count(*) AS n", "sum(length(value)) + sum(length(key)) AS b")
        .collect()[0]
    )
    return time.monotonic() - t0, int(row["n"]), int(row["b"] or 0)


def measure(mib: int = 512, partitions: int = 2, reps: int = 3, storage: str = "seaweedfs") -> dict[str, Any]:
    from strata.pipeline.session import get_spark
    from tests.support.broker_proc import StrataBroker
    from tests.support.s3_servers import MotoServer, SeaweedServer

    work = Path(tempfile.mkdtemp(prefix="strata-spark-bench-"))
    s3 = None
    if storage in ("s3", "seaweedfs"):
        s3 = (SeaweedServer if storage == "seaweedfs" else MotoServer)(work / storage)
        s3.start()
        rsm = s3.rsm_config(**{"key.prefix": f"bench-{uuid.uuid4().hex[:8]}/"})
    else:  # LocalTieredStorage: no object-store server competing for the CPU
        rsm = {"dir": str(work / "tiered")}
    rsm_class = "local" if storage == "local" else "s3"
    overrides: dict[str, object] = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": rsm_class,
        "remote.log.manager.task.interval.ms": 300,
        "remote.log.metadata.topic.num.partitions": 5,
        "log.retention.check.interval.ms": 300,
        "log.segment.delete.delay.ms": 0,
        **{f"rsm.config.{k}": v for k, v in rsm.items()},
        # history much larger than the broker's chunk cache, as in production: repeated reads are not served
        # from the broker's memory
        "rsm.config.fetch.chunk.cache.size": CHUNK_CACHE_BYTES,
    }
    broker = StrataBroker(work / "broker", overrides, name="strata-spark-bench")
    spark = None
    try:
        broker.start()
        from strata.cli.admin_client import AdminClient

        with AdminClient(broker.bootstrap) as a:
            a.create_topic(
                TOPIC,
                partitions,
                1,
                {
                    "remote.storage.enable": "true",
                    "segment.bytes": str(8 << 20),
                    "local.retention.bytes": "1",
                    "retention.ms": "-1",
                },
            )
        records, _ = _fill(broker.bootstrap, partitions, mib)
        state = _wait_offloaded(broker.bootstrap, partitions)
        remote_records = sum(local for local, _end in state.values())

        spark = get_spark("strata-spark-bench")
        base = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": TOPIC}
        direct = {
            **base,
            "read.mode": "direct",
            "rsm.class.name": rsm_class,
            **{f"rsm.config.{k}": str(v) for k, v in rsm.items()},
        }
        warm = {"endingOffsets": json.dumps({TOPIC: {str(p): 2000 for p in range(partitions)}})}
        _spark_read(spark, {**base, **warm})
        _spark_read(spark, {**direct, **warm})
        # Spark's cost per query (planning in its Python workers, scheduling, task start), the same in both
        # modes: the best of a few reads of 2000 records per partition
        overhead = {
            mode: min(_spark_read(spark, {**o, **warm})[0] for _ in range(3))
            for mode, o in (("broker", base), ("direct", direct))
        }

        def timed(name: str, fn: Any) -> dict[str, Any]:
            best: dict[str, Any] | None = None
            for _ in range(reps):
                pid = broker.pid
                assert pid is not None, "the broker is running"
                cpu0 = _cpu_seconds(pid)
                seconds, n, nbytes = fn()
                cpu = _cpu_seconds(pid) - cpu0
                if n != records:
                    raise RuntimeError(f"{name}: read {n} records, expected {records}")
                run = {
                    "seconds": round(seconds, 3),
                    "records": n,
                    "bytes": nbytes,
                    "mb_per_s": round(nbytes / seconds / 1e6, 1),
                    "broker_cpu_s": round(cpu, 2),
                    "broker_cpu_share": round(cpu / seconds, 2),
                }
                if best is None or run["seconds"] < best["seconds"]:
                    best = run
            assert best is not None
            return best

        out: dict[str, Any] = {
            "storage": STORAGE_NAMES[storage],
            "topic_mib": mib,
            "partitions": partitions,
            "records": records,
            "remote_fraction": round(remote_records / records, 3),
            "query_overhead_s": {k: round(v, 3) for k, v in overhead.items()},
            "consumer": timed("consumer", lambda: _consumer_read(broker.bootstrap, partitions, records)),
            "spark_broker": timed("spark broker", lambda: _spark_read(spark, base)),
            "spark_direct": timed("spark direct", lambda: _spark_read(spark, direct)),
        }
        out["direct_vs_broker"] = round(out["spark_direct"]["mb_per_s"] / out["spark_broker"]["mb_per_s"], 2)
        out["direct_vs_consumer"] = round(out["spark_direct"]["mb_per_s"] / out["consumer"]["mb_per_s"], 2)
        return out
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        if s3 is not None:
            s3.stop()


def table(r: dict[str, Any]) -> str:
    lines = [
        (
            f"Spark batch read of a tiered topic ({r['topic_mib']} MiB, {r['partitions']} partitions, "
            f"{r['remote_fraction']:.0%} only in {r['storage']})"
        ),
        "",
        "| reader | MB/s | seconds | broker CPU s | broker CPU share |",
        "|---|---:|---:|---:|---:|",
    ]
    for key, label in (
        ("consumer", "one confluent-kafka consumer"),
        ("spark_broker", "Spark read.mode=broker"),
        ("spark_direct", "Spark read.mode=direct"),
    ):
        m = r[key]
        lines.append(f"| {label} | {m['mb_per_s']} | {m['seconds']} | {m['broker_cpu_s']} | {m['broker_cpu_share']} |")
    lines += ["", f"direct / broker: {r['direct_vs_broker']}x; direct / consumer: {r['direct_vs_consumer']}x"]
    if "query_overhead_s" in r:
        o = r["query_overhead_s"]
        lines += [
            "",
            (
                f"Spark's cost per query, in both modes (a read of 2000 records per partition): "
                f"{o['broker']} s broker, {o['direct']} s direct"
            ),
        ]
    return "\n".join(lines)


# (storage, MiB): a history of 512 MiB, where Spark's fixed cost per query (0.2-0.3 s here) is a small part of the
# read, on both storages; and 128 MiB on S3, where it is not
RUNS: tuple[tuple[str, int], ...] = (("seaweedfs", 512), ("local", 512), ("seaweedfs", 128))


def run(
    results: dict, *, partitions: int = 2, reps: int = 3, runs: tuple[tuple[str, int], ...] = RUNS
) -> dict[str, Any]:
    """Hook for bench.run: measures each (storage, size) and stores the numbers under ``results["spark_read"]``
    (the first) and ``results["spark_read_<storage>_<MiB>"]`` (the others); returns the first."""
    first: dict[str, Any] = {}
    for i, (storage, mib) in enumerate(runs):
        r = measure(mib=mib, partitions=partitions, reps=reps, storage=storage)
        results["spark_read" if i == 0 else f"spark_read_{storage}_{mib}"] = r
        first = first or r
    return first


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.spark_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=512, help="topic size in MiB (default 512)")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--storage",
        choices=("seaweedfs", "s3", "local", "both"),
        default="both",
        help="remote storage: S3 on SeaweedFS, S3 on a moto server, LocalTieredStorage, or both "
        "SeaweedFS and LocalTieredStorage (default, as `make bench`)",
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO_ROOT))
    results: dict[str, Any] = {}
    for storage in ("seaweedfs", "local") if args.storage == "both" else (args.storage,):
        r = measure(mib=args.mib, partitions=args.partitions, reps=args.reps, storage=storage)
        results[f"spark_read_{storage}"] = r
        print(table(r) + "\n")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
