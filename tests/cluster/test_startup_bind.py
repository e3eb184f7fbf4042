"""Startup after a failed listen: a broker binds its Kafka listeners and its metrics listener before it registers
with etcd or leads anything. Found in `make cluster`: a broker registered and took leaderships, then failed to bind
its metrics port. Now such a broker ends with one line naming the setting and the address, exit code 2, and etcd
never hears of it."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tests.support.broker_proc import REPO_ROOT, free_port
from tests.support.cluster_proc import StrataCluster


def _etcd(url: str, path: str, body: dict[str, object]) -> dict:
    req = urllib.request.Request(f"{url}{path}", data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:  # etcd's v3 JSON gateway
        return json.loads(r.read())


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def _broker_keys(etcd_url: str) -> set[str]:
    res = _etcd(etcd_url, "/v3/kv/range", {"key": _b64("/strata/"), "range_end": _b64("/strata0"), "keys_only": True})
    return {k for kv in res.get("kvs", []) if "/brokers/" in (k := base64.b64decode(kv["key"]).decode())}


def _leases(etcd_url: str) -> int:
    return len(_etcd(etcd_url, "/v3/lease/leases", {}).get("leases", []))


def _serve_second_broker(
    c: StrataCluster, tmp: Path, props: Callable[[int], dict[str, object]]
) -> tuple[subprocess.CompletedProcess[str], int]:
    """`strata serve` of broker 2 into the cluster of broker 1 while a port is taken; `props(port)` gives its
    listener settings. Returns the finished process and the taken port."""
    assert c.etcd is not None
    data = tmp / "broker2"
    data.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = {"broker.id": 2, "metadata.store.connect": c.etcd.connect, "log.dirs": data / "logs", **props(port)}
        path = data / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return _run([sys.executable, "-m", "strata", "serve", str(path)]), port


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_broker_whose_metrics_port_is_taken_exits_2_and_never_registers(cluster_factory, tmp_path) -> None:
    c: StrataCluster = cluster_factory(1)
    assert c.etcd is not None
    registered = _broker_keys(c.etcd.url)
    assert len(registered) == 1 and _leases(c.etcd.url) == 1
    r, port = _serve_second_broker(
        c,
        tmp_path,
        lambda port: {
            "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
            "metrics.listener": f"http://127.0.0.1:{port}/metrics",
            "broker.session.timeout.ms": 3000,
        },
    )
    assert r.returncode == 2, r.stderr[-3000:]
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines == [f"strata: metrics.listener: cannot bind http://127.0.0.1:{port}/metrics: address already in use"]
    assert "Traceback" not in r.stdout + r.stderr
    # never registered: no key and no lease of its own (a registered broker's lease outlives its process by
    # broker.session.timeout.ms, so one that registered and then died would still show here)
    assert _broker_keys(c.etcd.url) == registered
    assert _leases(c.etcd.url) == 1
    assert c.registered(via=1) == {1}


def test_broker_whose_kafka_port_is_taken_names_the_listener_and_never_registers(cluster_factory, tmp_path) -> None:
    c: StrataCluster = cluster_factory(1)
    assert c.etcd is not None
    registered = _broker_keys(c.etcd.url)
    r, port = _serve_second_broker(
        c,
        tmp_path,
        lambda port: {
            "listeners": f"INTERNAL://127.0.0.1:{free_port()},EXTERNAL://127.0.0.1:{port}",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "metrics.listener": f"http://127.0.0.1:{free_port()}/metrics",
        },
    )
    assert r.returncode == 2, r.stderr[-3000:]
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines == [f"strata: listeners: cannot bind EXTERNAL 127.0.0.1:{port}: address already in use"]
    assert _broker_keys(c.etcd.url) == registered
    assert _leases(c.etcd.url) == 1
