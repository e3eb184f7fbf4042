"""`make cluster`: the docker-compose.yml topology as local processes on loopback -- etcd, three Strata brokers
(ids 1-3, racks rack-a..rack-c) and SeaweedFS as the S3 server of tiered storage -- until Ctrl-C.

    python scripts/cluster.py [--data-dir ./strata-cluster] [--brokers 3] [--port 9092] [--fresh]

Brokers run config/cluster-node.properties (the compose node configuration: RF 3, min.insync.replicas 2, tiered
storage on S3) with the compose host names replaced by loopback addresses. As in the compose file, clients use the
EXTERNAL listener -- broker i on port+i-1 -- and brokers reach each other on INTERNAL (a free port); metrics are on
9464+i-1 (free ports are used when those are taken). Data, logs and etcd's state live under --data-dir and
survive a restart of the script (--fresh wipes them first). Ctrl-C (or SIGTERM) stops everything: the brokers
first (controlled shutdown), then etcd and SeaweedFS.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from strata.config.broker_config import parse_properties
from tests.support.cluster_proc import StrataCluster
from tests.support.s3_servers import SeaweedServer

# compose-network addresses and paths (loopback ones replace them)
_COMPOSE_ONLY = {"metadata.store.connect", "log.dirs", "metrics.listener", "rsm.config.s3.endpoint.url"}


def node_settings(seaweed: SeaweedServer) -> dict[str, object]:
    """config/cluster-node.properties for brokers on loopback next to `seaweed` (run with split listeners)."""
    props: dict[str, object] = {
        k: v
        for k, v in parse_properties((REPO / "config/cluster-node.properties").read_text()).items()
        if k not in _COMPOSE_ONLY
    }
    props.update({f"rsm.config.{k}": v for k, v in seaweed.rsm_config().items()})
    props.update({"group.initial.rebalance.delay.ms": 0, "remote.log.manager.task.interval.ms": 5000})
    return props


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="make cluster", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data-dir", type=Path, default=REPO / "strata-cluster")
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--port", type=int, default=9092, help="Kafka port of broker 1 (broker i: port+i-1)")
    ap.add_argument("--metrics-port", type=int, default=9464, help="metrics port of broker 1")
    ap.add_argument("--fresh", action="store_true", help="delete --data-dir first")
    args = ap.parse_args(argv)
    return supervise(lambda: run(args))


def supervise(fn: Callable[[], int]) -> int:
    """Run `fn` in a child process in its own session, so that etcd, SeaweedFS and the brokers it starts do not
    get the terminal's Ctrl-C (SIGINT goes to the whole foreground process group): this process turns Ctrl-C or
    SIGTERM into one SIGTERM to the child, which then stops the brokers first (controlled shutdown needs etcd),
    then etcd and SeaweedFS."""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        code = 1
        try:
            code = fn()
        except BaseException:  # noqa: BLE001 - reported, then the child exits with 1
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: os.kill(pid, signal.SIGTERM))
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def run(args: argparse.Namespace) -> int:
    if args.fresh and args.data_dir.exists():
        shutil.rmtree(args.data_dir)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    print("starting SeaweedFS (S3) ...", flush=True)
    seaweed = SeaweedServer(args.data_dir / "seaweedfs")
    seaweed.start()
    cluster: StrataCluster | None = None
    try:
        print("starting etcd and the brokers ...", flush=True)
        ports = {i: (args.port + i - 1, args.metrics_port + i - 1) for i in range(1, args.brokers + 1)}
        cluster = StrataCluster(
            args.data_dir,
            size=args.brokers,
            defaults=node_settings(seaweed),
            ports=ports,
            split_listeners=True,
            start_timeout=60,
        )
        cluster.start()
        print(banner(cluster, seaweed), flush=True)
        while not stop.wait(1.0):
            for i, b in cluster.brokers.items():
                if b.proc is not None and b.proc.poll() is not None and not getattr(b, "_reported", False):
                    b._reported = True  # type: ignore[attr-defined]
                    print(
                        f"broker {i} exited with code {b.proc.returncode}; last lines of {b.output_path}:\n"
                        f"{b.tail(20)}",
                        flush=True,
                    )
        print("\nstopping ...", flush=True)
    finally:
        if cluster is not None:
            cluster.close(graceful=True)
        seaweed.stop()
    print("stopped", flush=True)
    return 0


def banner(cluster: StrataCluster, seaweed: SeaweedServer) -> str:
    lines = ["", "Strata cluster is up.", f"  bootstrap servers: {cluster.bootstrap}", "  brokers:"]
    for i, b in cluster.brokers.items():
        rack = b.overrides.get("broker.rack", "")
        lines.append(
            f"    {i} ({rack}): {b.bootstrap} (inter-broker 127.0.0.1:{b.internal_port})  "
            f"metrics {b.metrics_url}  pid {b.pid}  log {b.output_path}"
        )
    assert cluster.etcd is not None
    lines += [
        f"  etcd: {cluster.etcd.url} (pid {cluster.etcd.pid})",
        f"  S3 (SeaweedFS): {seaweed.endpoint} bucket {seaweed.bucket} (pid {seaweed.pid})",
        "",
        "Try:",
        (
            f"  .venv/bin/strata topics --bootstrap-server {cluster.brokers[1].bootstrap} create --topic demo "
            "--partitions 3 --replication-factor 3 --config remote.storage.enable=true "
            "--config local.retention.ms=60000 --config segment.bytes=1048576"
        ),
        f"  .venv/bin/strata topics --bootstrap-server {cluster.brokers[1].bootstrap} describe --topic demo",
        "",
        "Ctrl-C stops everything.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
