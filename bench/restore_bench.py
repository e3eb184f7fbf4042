"""Issue 24's bench: the bucket as the system of record, measured on this machine.

(a) Restore vs re-replication. A 3-broker origin cluster (etcd + Strata processes on loopback,
tests/support/cluster_proc.py) holds a tiered topic of `--gib` GiB (3 partitions, RF=2, broker 3 a replica of every
partition, 1 KiB records, acks=all, 8 MiB segments) in LocalTieredStorage (the "bucket", a directory shared by the
brokers) with every byte also kept locally. Re-replication: broker 3 is stopped, its partition directories deleted
and the broker launched again; the time runs from the launch to broker 3 in the ISR of every partition (it copies
every record from the leaders). Restore: after the origin is killed (-9), a fresh 3-broker cluster (new etcd, empty
disks) starts with `cluster.restore.enable=true` on the same bucket; the time runs from launching its brokers to every
partition serving its last restored offset (a consumer fetch of that record answers it). The local tail that never
tiered (each partition's active segment) is the documented loss and is not restored.

(b) Read-replica reads vs the origin's remote reads. The origin's local copies are dropped (`local.retention.bytes=1`)
so it serves the whole restored range from the bucket; one consumer (confluent-kafka, assign from offset 0, the same
settings) reads every partition up to its restored end from the origin, then from a 2-broker read-replica cluster
(own etcd, own RSM directory) whose topic has `remote.readreplica=<bucket dir>`. Same data, same consumer, one run.

Standalone: ``python -m bench.restore_bench [--gib G] [--quick] [--out DIR]``; ``make bench`` runs it as the
"restore" group.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.rejoin_bench import SETTINGS as REJOIN_SETTINGS  # noqa: E402 - after the path set-up

TOPIC = "restore"
PARTITIONS = 3
ASSIGNMENT = [[1, 3], [2, 3], [1, 3]]  # broker 3 holds every partition: wiping it re-replicates the whole topic
RECORD = 1024
SEGMENT_BYTES = 8 << 20
QUICK_MIB = 24
SETTINGS: dict[str, object] = {  # the rejoin bench's cluster (LocalTieredStorage, fast RLM tasks), manifests often
    **REJOIN_SETTINGS,
    "remote.manifest.upload.interval.ms": 500,
    "remote.cluster.manifest.interval.ms": 500,
}
CONSUMER: dict[str, object] = {
    "enable.auto.commit": False,
    "fetch.max.bytes": 16 << 20,
    "max.partition.fetch.bytes": 8 << 20,
    "queued.max.messages.kbytes": 256 << 10,
    "log_level": 3,
}


def _produce(bootstrap: str, mib: int) -> int:
    from tests.support.ck import produce_all
    from tests.support.records import Rec

    n = mib * (1 << 20) // RECORD
    value = b"v" * RECORD
    conf: dict[str, Any] = {
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 1 << 20,
        "queue.buffering.max.kbytes": 256 << 10,
    }
    produce_all(bootstrap, TOPIC, [Rec(i % PARTITIONS, None, value) for i in range(n)], timeout=600, **conf)
    return n


def _wait(cond: Any, timeout: float, what: str) -> Any:
    from tests.support.waiting import wait_until

    return wait_until(cond, timeout=timeout, interval=0.2, message=what)


def _bucket_ends(bucket: Path) -> dict[int, int]:
    """Per partition, one past the last offset the bucket's newest manifest lists (what a restore recovers)."""
    from strata.remote.bucket_manifest_reader import BucketManifestReader
    from strata.remote.bucket_store import LocalManifestStore
    from strata.remote.local_tiered import ROOT_STORAGE_DIR_NAME

    async def read() -> dict[int, int]:
        plan = await BucketManifestReader(LocalManifestStore(bucket / ROOT_STORAGE_DIR_NAME, fsync=False)).restore_plan(
            {TOPIC}
        )
        t = plan.topics.get(TOPIC)
        return {} if t is None else {p: pp.next_offset for p, pp in t.partitions.items()}

    return asyncio.run(read())


def _list_offsets(bootstrap: str, spec: int) -> dict[int, int]:
    from strata.cli.admin_client import AdminClient

    with AdminClient(bootstrap, timeout=10) as admin:
        return admin.list_offsets(TOPIC, range(PARTITIONS), spec)


def _serves(bootstrap: str, ends: dict[int, int]) -> bool:
    """A consumer fetch of each partition's last restored record returns it."""
    from confluent_kafka import Consumer, TopicPartition

    # no offset reset: a partition not serving yet must fail this probe (and the caller retry), not move the
    # consumer to the log end where the awaited record never comes
    conf = {"bootstrap.servers": bootstrap, "group.id": "restore-bench-probe", "auto.offset.reset": "error"}
    c = Consumer({**conf, **CONSUMER})
    c.assign([TopicPartition(TOPIC, p, end - 1) for p, end in ends.items()])
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 5
        while len(seen) < len(ends) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error() is not None:
                return False
            p, off = m.partition(), m.offset()
            if p is not None and off == ends[p] - 1:
                seen.add(p)
    finally:
        c.close()
    return len(seen) == len(ends)


def _consume(bootstrap: str, ends: dict[int, int]) -> dict[str, float]:
    """Read every partition from offset 0 up to `ends` with one consumer: seconds, MiB, MiB/s."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"restore-bench-{time.monotonic_ns()}", **CONSUMER})
    left = {p: end for p, end in ends.items() if end > 0}
    c.assign([TopicPartition(TOPIC, p, 0) for p in left])
    nbytes = 0
    t0 = time.monotonic()
    try:
        while left:
            if time.monotonic() - t0 > 900:
                raise RuntimeError(f"consume stalled: {left} left")
            for m in c.consume(1000, 1.0):
                p, off = m.partition(), m.offset()
                if m.error() is not None or p is None or off is None or p not in left:
                    continue
                nbytes += len(m.value() or b"")
                if off >= left[p] - 1:
                    del left[p]
                    c.pause([TopicPartition(TOPIC, p)])
        secs = time.monotonic() - t0
    finally:
        c.close()
    mib = nbytes / (1 << 20)
    return {"s": secs, "mib": mib, "mib_s": mib / max(secs, 1e-6)}


def segment_bytes(mib: int) -> int:
    """8 MiB segments, smaller for a small topic so that each partition still rolls (and tiers) several."""
    return max(1 << 20, min(SEGMENT_BYTES, (mib << 20) // PARTITIONS // 8))


def measure(mib: int) -> dict[str, Any]:
    from tests.support.cluster_proc import StrataCluster

    seg = segment_bytes(mib)
    per_segment = seg // (RECORD + 70)  # records a segment holds, about (batch and record overhead)

    with tempfile.TemporaryDirectory(prefix="strata-restore-bench-") as tmp:
        work = Path(tmp)
        bucket = work / "bucket"
        # the restore's yardstick: the same fresh cluster launched on an empty bucket, no restore
        empty = StrataCluster(
            work / "empty", size=3, overrides={**SETTINGS, "rsm.config.dir": str(work / "empty-rsm")}, start_timeout=300
        )
        t = time.monotonic()
        empty.start()
        empty_startup_s = time.monotonic() - t
        empty.close()
        origin = StrataCluster(
            work / "origin", size=3, overrides={**SETTINGS, "rsm.config.dir": str(bucket)}, start_timeout=90
        )
        origin.start()
        try:
            origin.create_topic(
                TOPIC,
                replica_assignment=ASSIGNMENT,
                config={"segment.bytes": seg, "remote.storage.enable": True, "min.insync.replicas": 1},
            )
            t0 = time.monotonic()
            records = _produce(origin.bootstrap, mib)
            produce_s = time.monotonic() - t0
            for p in range(PARTITIONS):
                origin.wait_isr(TOPIC, p, set(ASSIGNMENT[p]), timeout=300)
            # the closed segments tiered and listed by the manifests (the active segments are the local tail)
            produced = _list_offsets(origin.bootstrap, -1)
            t1 = time.monotonic()
            _wait(
                lambda: (
                    (t := _list_offsets(origin.bootstrap, -5))
                    and all(t[p] + 1 >= produced[p] - 2 * per_segment for p in range(PARTITIONS))
                    and (e := _bucket_ends(bucket))
                    and all(e.get(p, 0) == t[p] + 1 for p in range(PARTITIONS))
                ),
                900,
                "the closed segments tiered and in the manifests",
            )
            tier_s = time.monotonic() - t1

            # (a) re-replication: broker 3 loses its disk and copies every partition back from the leaders
            origin.stop(3)
            for p in range(PARTITIONS):
                shutil.rmtree(origin.partition_dir(3, TOPIC, p))
            t2 = time.monotonic()
            origin.start(3)
            for p in range(PARTITIONS):
                origin.wait_isr(TOPIC, p, set(ASSIGNMENT[p]), timeout=1800)
            rereplicate_s = time.monotonic() - t2

            # (b) the origin's remote reads: its local copies dropped down to the active segment, everything below
            # it tiered and in the manifests: that is what a restore recovers and what the consumers read
            from strata.cli.admin_client import RESOURCE_TOPIC, AdminClient

            with AdminClient(origin.bootstrap, timeout=10) as admin:
                admin.alter_configs(RESOURCE_TOPIC, TOPIC, set={"local.retention.bytes": "1"})

            def settled() -> dict[int, int] | None:
                local, tiered = _list_offsets(origin.bootstrap, -4), _list_offsets(origin.bootstrap, -5)
                if not all(local[p] == tiered[p] + 1 >= produced[p] - 2 * per_segment for p in range(PARTITIONS)):
                    return None
                e = _bucket_ends(bucket)
                return e if all(e.get(p) == local[p] for p in range(PARTITIONS)) else None

            ends: dict[int, int] = _wait(settled, 600, "the origin's local log down to its tiered active segment")
            origin_read = _consume(origin.bootstrap, ends)

            rr = StrataCluster(
                work / "replica",
                size=2,
                overrides={**SETTINGS, "rsm.config.dir": str(work / "replica-rsm")},
                start_timeout=90,
            )
            rr.start()
            try:
                rr.create_topic(
                    TOPIC, PARTITIONS, replication_factor=1, config={"remote.readreplica": str(bucket)}, timeout=60
                )
                _wait(lambda: _list_offsets(rr.bootstrap, -1) == ends, 120, "the read replica at the origin's end")
                replica_read = _consume(rr.bootstrap, ends)
            finally:
                rr.close()
        finally:
            origin.close()

        # (a) restore: every broker and etcd gone; a fresh cluster on the same bucket
        restored = StrataCluster(
            work / "restored",
            size=3,
            overrides={**SETTINGS, "rsm.config.dir": str(bucket), "cluster.restore.enable": True},
            start_timeout=300,
        )
        t3 = time.monotonic()
        restored.start()
        try:
            startup_s = time.monotonic() - t3
            _wait(lambda: _list_offsets(restored.bootstrap, -1) == ends, 1800, "every partition restored")
            listed_s = time.monotonic() - t3
            _wait(lambda: _serves(restored.bootstrap, ends), 600, "every partition serves its last restored offset")
            restore_s = time.monotonic() - t3
        finally:
            restored.close()
    restored_mib = sum(ends.values()) * RECORD / (1 << 20)
    return {
        "mib": mib,
        "records": records,
        "segment_bytes": seg,
        "produced": produced,
        "restored_ends": ends,
        "restored_mib": restored_mib,
        "produce_s": produce_s,
        "tier_wait_s": tier_s,
        "rereplicate_s": rereplicate_s,
        "restore_s": restore_s,
        "restore_startup_s": startup_s,
        "empty_startup_s": empty_startup_s,
        "restore_listed_s": listed_s,
        "ratio": rereplicate_s / max(restore_s, 1e-6),
        "origin_remote_read": origin_read,
        "replica_read": replica_read,
        "read_ratio": replica_read["mib_s"] / max(origin_read["mib_s"], 1e-6),
    }


def table(r: dict[str, Any]) -> str:
    o, rr = r["origin_remote_read"], r["replica_read"]
    intro = (
        f"Topic of {r['mib']} MiB ({r['records']:,} records of {RECORD} B), 3 partitions, RF=2, 3 brokers, "
        f"{r['segment_bytes'] >> 20} MiB segments, LocalTieredStorage; {r['restored_mib']:.0f} MiB tiered "
        "(the active segments are the local tail). "
        f"Re-replication / restore: **{r['ratio']:.1f}x**; read replica / origin remote reads: "
        f"**{r['read_ratio']:.2f}x**."
    )
    rows = [
        ("wiped broker launched -> in the ISR of every partition (s)", f"{r['rereplicate_s']:.1f}"),
        (
            "fresh cluster with cluster.restore.enable launched -> every partition serves its end (s)",
            f"{r['restore_s']:.1f}",
        ),
        ("of which the 3 brokers' start-up, restore included (s)", f"{r['restore_startup_s']:.1f}"),
        ("launched -> ListOffsets answers every restored end (s)", f"{r['restore_listed_s']:.1f}"),
        ("the same cluster's start-up on an empty bucket, no restore (s)", f"{r['empty_startup_s']:.1f}"),
        ("origin remote reads, one consumer (MiB/s)", f"{o['mib_s']:.1f} ({o['mib']:.0f} MiB in {o['s']:.1f} s)"),
        ("read-replica cluster, same consumer (MiB/s)", f"{rr['mib_s']:.1f} ({rr['mib']:.0f} MiB in {rr['s']:.1f} s)"),
        ("produce, acks=all (s)", f"{r['produce_s']:.1f}"),
    ]
    lines = [intro, "", "| | |", "|---|---:|"] + [f"| {a} | {b} |" for a, b in rows]
    return "\n".join(lines)


def run(results: dict, gib: float | None = None) -> None:
    """`make bench` group: appends the section (1 GiB; 24 MiB in quick mode)."""
    quick = bool(results.get("bench", {}).get("quick"))
    mib = int(gib * 1024) if gib else (QUICK_MIB if quick else 1024)
    r = measure(mib)
    results["restore"] = r
    results["sections"].append(
        {
            "name": "restore",
            "title": "Cluster restore from the bucket vs re-replication; read-replica reads (bench/restore_bench.py)",
            "markdown": table(r),
            "raw": r,
            "plot": {
                "title": "restore vs re-replication (s)",
                "bars": [("re-replicate", r["rereplicate_s"]), ("restore", r["restore_s"])],
            },
        }
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=1.0, help="topic size in GiB (default 1)")
    ap.add_argument("--quick", action="store_true", help=f"a {QUICK_MIB} MiB smoke run")
    ap.add_argument("--out", type=Path, help="also write restore.json and restore.md there")
    args = ap.parse_args(argv)
    r = measure(QUICK_MIB if args.quick else int(args.gib * 1024))
    print(table(r))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "restore.json").write_text(json.dumps(r, indent=2))
        (args.out / "restore.md").write_text(table(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
