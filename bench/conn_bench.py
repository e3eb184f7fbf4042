"""Idle connections (issue 22): the broker's RSS with 10,000 idle client connections (aim: < 500 MiB).

One Strata broker of its own (tests/support/broker_proc.py, default settings). Its RSS is read once it has answered a
Metadata request, then `--connections` TCP connections are opened, each completing one ApiVersions round trip (as a
client does on connect) and then sending nothing; the RSS is read again once the broker counts them all
(`strata_network_connections`). Reported: both RSS values, the growth per connection and the time taken to open
them. The benchmark process holds the client sockets, so it needs that many file descriptors (and so does the
broker).

Standalone: ``python -m bench.conn_bench [--connections N]``; ``make bench`` runs it as the "connections" group, and
`measure()` is what another group (the scale group) calls for its row.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

AIM_MIB = 500.0


def _rss_mib(pid: int) -> float:
    m = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.MULTILINE)
    return int(m.group(1)) / 1024 if m else float("nan")


def _connections(metrics_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    m = re.search(r"^strata_network_connections ([0-9.e+-]+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def _raise_fd_limit(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, n + 256))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def measure(connections: int = 10_000) -> dict[str, Any]:
    """Start a broker, open `connections` idle connections, report its RSS before and after."""
    from tests.support.broker_proc import StrataBroker
    from tests.support.idle_conns import close_all, open_idle
    from tests.support.kafka_wire import WireClient
    from tests.support.waiting import wait_until

    _raise_fd_limit(connections)
    with tempfile.TemporaryDirectory(prefix="conn-bench-") as tmp:
        b = StrataBroker(Path(tmp), name="conn-bench").start()
        try:
            assert b.pid is not None
            with WireClient.connect(b.bootstrap) as w:
                w.metadata(None)
            base = _rss_mib(b.pid)
            t0 = time.monotonic()
            socks = open_idle(b.host, b.port, connections)
            try:
                opened_s = time.monotonic() - t0
                wait_until(lambda: _connections(b.metrics_port) >= connections, timeout=120)
                rss = _rss_mib(b.pid)
            finally:
                close_all(socks)
        finally:
            b.stop()
    return {
        "connections": connections,
        "rss_before_mib": round(base, 1),
        "rss_mib": round(rss, 1),
        "per_connection_kib": round((rss - base) * 1024 / connections, 2),
        "open_s": round(opened_s, 1),
        "aim_mib": AIM_MIB,
        "within_aim": rss < AIM_MIB,
    }


def table(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            "| idle connections | broker RSS before | with them | per connection | time to open | aim |",
            "|---|---|---|---|---|---|",
            f"| {r['connections']:,} | {r['rss_before_mib']} MiB | {r['rss_mib']} MiB | {r['per_connection_kib']} KiB "
            f"| {r['open_s']} s | < {r['aim_mib']:.0f} MiB: {'yes' if r['within_aim'] else 'NO'} |",
        ]
    )


def run(results: dict, connections: int | None = None) -> None:
    """`make bench` group: 10,000 connections (2,000 in quick mode)."""
    quick = bool(results.get("bench", {}).get("quick"))
    r = measure(connections or (2_000 if quick else 10_000))
    results["connections"] = r
    results["sections"].append(
        {
            "name": "connections",
            "title": "Idle connections: broker RSS (bench/conn_bench.py)",
            "markdown": table(r),
            "raw": r,
        }
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=10_000, help="idle connections to open (default 10,000)")
    r = measure(ap.parse_args(argv).connections)
    print(table(r))
    print(json.dumps(r))
    return 0 if r["within_aim"] else 1


if __name__ == "__main__":
    sys.exit(main())
