"""KIP-405's headline on this machine: how long a wiped follower takes to rejoin the ISR, tiered vs untiered.

Two 2-broker clusters (etcd + Strata processes on loopback, tests/support/cluster_proc.py), one after the other, each
with a one-partition RF=2 topic of `--mib` MiB (1 KiB records, acks=all, 8 MiB segments). In the tiered run the
topic has remote storage on (LocalTieredStorage shared by both brokers) and `local.retention.bytes` = 5% of its size
less one segment, so that the tail the leader keeps locally -- the closed segments retention leaves plus the active
one -- is about 5% of the topic. Then the follower is stopped, its partition directory deleted and the
broker started again; the time measured runs from launching the broker process (about a second of it is start-up,
the same in both runs) to its id showing in the partition's ISR.
Untiered, the follower copies the whole log from the leader; tiered, it gets OFFSET_MOVED_TO_TIERED_STORAGE, rebuilds
its leader-epoch cache and producer state from the remote segment covering the leader's local start, and fetches
only the local tail. The ratio untiered/tiered is from the same run.

Standalone: ``python -m bench.rejoin_bench [--mib N] [--out DIR]``; ``make bench`` runs it as the "rejoin" group.
"""

from __future__ import annotations

import argparse
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

TOPIC = "rejoin"
RECORD = 1024
SEGMENT_BYTES = 8 << 20
LOCAL_SHARE = 0.05
SETTINGS: dict[str, object] = {
    "remote.log.storage.system.enable": True,
    "remote.log.storage.manager.class.name": "local",
    "remote.log.manager.task.interval.ms": 200,
    "remote.log.metadata.topic.num.partitions": 3,
    "remote.log.metadata.topic.replication.factor": 2,
    "log.retention.check.interval.ms": 200,
    "log.segment.delete.delay.ms": 0,
    "offsets.topic.replication.factor": 2,
    "replica.fetch.backoff.ms": 100,
    "replica.fetch.max.bytes": 4 << 20,
}


def _produce(bootstrap: str, mib: int) -> int:
    from confluent_kafka import Producer

    n = mib * (1 << 20) // RECORD
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 256 << 10,
            "log_level": 3,
        }
    )
    value = b"v" * RECORD
    errors: list[Any] = []
    for i in range(n):
        while True:
            try:
                p.produce(
                    TOPIC, value=value, partition=0, on_delivery=lambda err, _m: errors.append(err) if err else None
                )
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    if p.flush(120) != 0 or errors:
        raise RuntimeError(f"produce failed: {errors[:3]}")
    return n


def _local_bytes(c: Any, i: int) -> int:
    return sum(f.stat().st_size for f in c.partition_dir(i, TOPIC, 0).glob("*.log"))


def _wait(cond: Any, timeout: float, what: str) -> None:
    from tests.support.waiting import wait_until

    wait_until(cond, timeout=timeout, interval=0.1, message=what)


def run_mode(tiered: bool, mib: int, work: Path) -> dict[str, Any]:
    from tests.support.cluster_proc import StrataCluster

    c = StrataCluster(
        work / ("tiered" if tiered else "untiered"),
        size=2,
        overrides={**SETTINGS, "rsm.config.dir": str(work / "rsm")},
        start_timeout=90,
    )
    c.start()
    try:
        total = mib << 20
        config: dict[str, object] = {"segment.bytes": SEGMENT_BYTES, "min.insync.replicas": 1}
        if tiered:
            # retention keeps closed segments up to one segment past the limit, and the active segment comes on top
            config.update(
                {"remote.storage.enable": True, "local.retention.bytes": int(total * LOCAL_SHARE) - SEGMENT_BYTES}
            )
        c.create_topic(TOPIC, replica_assignment=[[1, 2]], config=config)
        t0 = time.monotonic()
        records = _produce(c.bootstrap, mib)
        produce_s = time.monotonic() - t0
        c.wait_isr(TOPIC, 0, {1, 2}, timeout=120)
        if tiered:  # the leader keeps only the tail: everything older is in remote storage
            _wait(
                lambda: _local_bytes(c, 1) <= total * LOCAL_SHARE + 2 * SEGMENT_BYTES,
                300,
                "the leader's local log shrank to its local retention",
            )
        leader_local = _local_bytes(c, 1)
        c.stop(2)
        shutil.rmtree(c.partition_dir(2, TOPIC, 0))
        t1 = time.monotonic()  # from the broker's launch: it fetches as soon as it is up
        c.start(2)
        startup_s = time.monotonic() - t1  # launched -> serving and registered (it may be fetching already)
        c.wait_isr(TOPIC, 0, {1, 2}, timeout=600)
        rejoin_s = time.monotonic() - t1
        return {
            "tiered": tiered,
            "mib": mib,
            "records": records,
            "produce_s": produce_s,
            "rejoin_s": rejoin_s,
            "startup_s": startup_s,
            "leader_local_mib": leader_local / (1 << 20),
            "follower_local_mib": _local_bytes(c, 2) / (1 << 20),
        }
    finally:
        c.close()


def measure(mib: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="strata-rejoin-bench-") as tmp:
        untiered = run_mode(False, mib, Path(tmp))
        tiered = run_mode(True, mib, Path(tmp))
    net = [m["rejoin_s"] - m["startup_s"] for m in (untiered, tiered)]
    return {
        "untiered": untiered,
        "tiered": tiered,
        "ratio": untiered["rejoin_s"] / max(tiered["rejoin_s"], 1e-6),
        "ratio_after_startup": net[0] / net[1] if min(net) > 0 else None,
    }


def table(r: dict[str, Any]) -> str:
    u, t = r["untiered"], r["tiered"]
    after = f"{r['ratio_after_startup']:.1f}x" if r.get("ratio_after_startup") else "n/a"
    rows = [
        ("wiped follower: broker launched -> in the ISR (s)", u["rejoin_s"], t["rejoin_s"]),
        ("of which broker start-up: launched -> registered (s)", u["startup_s"], t["startup_s"]),
        ("leader's local log (MiB)", u["leader_local_mib"], t["leader_local_mib"]),
        ("follower's local log after rejoining (MiB)", u["follower_local_mib"], t["follower_local_mib"]),
        ("local tail, % of the topic", 100 * u["leader_local_mib"] / u["mib"], 100 * t["leader_local_mib"] / t["mib"]),
        ("produce, acks=all (s)", u["produce_s"], t["produce_s"]),
    ]
    intro = (
        f"Topic of {u['mib']} MiB ({u['records']:,} records of {RECORD} B), 2 brokers, RF=2; tiered keeps "
        f"about {LOCAL_SHARE:.0%} locally. Rejoin ratio untiered/tiered: **{r['ratio']:.1f}x** "
        f"({after} after the broker's start-up)."
    )
    lines = [intro, "", "| | untiered | tiered |", "|---|---:|---:|"]
    lines += [f"| {name} | {a:.2f} | {b:.2f} |" for name, a, b in rows]
    return "\n".join(lines)


def run(results: dict, mib: int | None = None) -> None:
    """`make bench` group: appends the section (1 GiB topic, 256 MiB in quick mode)."""
    quick = bool(results.get("bench", {}).get("quick"))
    r = measure(mib or (256 if quick else 1024))
    results["rejoin"] = r
    results["sections"].append(
        {
            "name": "rejoin",
            "title": "Wiped follower rejoining the ISR, tiered vs untiered (bench/rejoin_bench.py)",
            "markdown": table(r),
            "raw": r,
            "plot": {
                "title": "wiped follower rejoin (s)",
                "bars": [("untiered", r["untiered"]["rejoin_s"]), ("tiered", r["tiered"]["rejoin_s"])],
            },
        }
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=1024, help="topic size in MiB (default 1024)")
    ap.add_argument("--out", type=Path, help="also write rejoin.json and rejoin.md there")
    args = ap.parse_args(argv)
    r = measure(args.mib)
    print(table(r))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "rejoin.json").write_text(json.dumps(r, indent=2))
        (args.out / "rejoin.md").write_text(table(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
