"""`make cluster` as a newcomer runs it: scripts/cluster.py from a checkout without tests/ (it must not import the
test package), three brokers, etcd and SeaweedFS up, S3 credentials on no command line (`ps -ef`) and in no file
but 0600 ones, tiering to S3 working with the credentials it was given, its data dir ignored by git, and the Make
target installing neither the test, Spark nor bench extras."""

from __future__ import annotations

import re
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path

import yaml
from confluent_kafka import Producer

from tests.support.broker_proc import REPO_ROOT
from tests.support.cluster_script import ClusterScript
from tests.support.waiting import wait_until

SECRET = "strata-secret"  # scripts/cluster.py's S3 secret (docker-compose.yml's MinIO password)


def _metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def test_make_cluster_keeps_credentials_off_command_lines_and_tiers_to_s3(tmp_path: Path) -> None:
    cluster = ClusterScript(tmp_path)
    repo, data, out = cluster.repo, cluster.data, cluster.out
    try:
        text = cluster.start()
        bootstrap = re.search(r"bootstrap servers: (\S+)", text)
        assert bootstrap is not None
        # broker i on port+i-1 and metrics on metrics-port+i-1, unless another process holds one of them
        assert len(bootstrap.group(1).split(",")) == 3
        urls = re.findall(r"metrics (http://127\.0\.0\.1:\d+/metrics)", text)
        assert len(urls) == 3

        # -ww: whole command lines (cut at the terminal width, a secret could hide past the cut)
        ps = subprocess.run(["ps", "-efww"], capture_output=True, text=True, check=True).stdout
        assert SECRET not in ps
        # the setting names only in the cluster's own processes: another program on the machine may mention them
        ours = "\n".join(cluster_command_lines(cluster.pid))
        assert "aws.secret" not in ours and "AWS_SECRET" not in ours
        serving = [line for line in ps.splitlines() if "strata serve" in line and str(data) in line]
        assert len(serving) == 3, serving
        for i in (1, 2, 3):
            props = data / f"broker{i}" / "server.properties"
            assert stat.S_IMODE(props.stat().st_mode) == 0o600
            assert SECRET not in props.read_text()

        # the brokers reach S3 with the credentials of their environment: segments of a tiered topic get copied
        subprocess.run(
            [sys.executable, "-m", "strata", "topics", "--bootstrap-server", bootstrap.group(1), "create"]
            + ["--topic", "demo", "--partitions", "1", "--replication-factor", "3"]
            + ["--config", "remote.storage.enable=true", "--config", "segment.bytes=65536"],
            cwd=repo,
            check=True,
            timeout=60,
        )
        p = Producer({"bootstrap.servers": bootstrap.group(1), "batch.size": 16384, "linger.ms": 1})
        for _ in range(400):
            p.produce("demo", b"x" * 1000)
            p.poll(0)
        assert p.flush(60) == 0
        wait_until(lambda: sum(_metric(u, "strata_remote_copy_requests_total") for u in urls) > 0, timeout=90)
        assert sum(_metric(u, "strata_rsm_s3_errors_total") for u in urls) == 0
    finally:
        code = cluster.stop()
    assert code == 0, out.read_text()[-3000:]
    assert out.read_text().rstrip().endswith("stopped")


def test_make_cluster_installs_no_test_spark_or_bench_extra_and_its_data_is_ignored() -> None:
    plan = subprocess.run(
        ["make", "-n", "-B", "cluster"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout
    installs = [line for line in plan.splitlines() if "pip install" in line]
    assert any("'.[client,cluster,iceberg]'" in line for line in installs), installs
    assert not any(extra in line for line in installs for extra in ("test", "spark", "bench", "dev")), installs
    assert "openjdk" not in plan and "kcat" not in plan
    ignored = subprocess.run(["git", "check-ignore", "-q", "strata-cluster/broker1/x.log"], cwd=REPO_ROOT, check=False)
    assert ignored.returncode == 0


def test_compose_services_keep_the_s3_secret_off_their_command_lines() -> None:
    """docker-compose.yml, the same topology in containers: the secret only in environments, where `ps` does not
    show it (minio-init used to pass it to `mc alias set`)."""
    services = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())["services"]
    secret = services["minio"]["environment"]["MINIO_ROOT_PASSWORD"]
    for name, svc in services.items():
        for key in ("command", "entrypoint"):
            value = svc.get(key) or []
            assert secret not in (value if isinstance(value, str) else " ".join(map(str, value))), (name, key)
        assert secret not in " ".join(map(str, (svc.get("healthcheck") or {}).get("test", []))), name


def cluster_command_lines(root: int) -> list[str]:
    """Command lines of `root` and every process below it (etcd, SeaweedFS, the brokers)."""
    out = subprocess.run(["ps", "-eww", "-o", "pid=,ppid=,args="], capture_output=True, text=True, check=True).stdout
    rows = [line.split(None, 2) for line in out.splitlines() if line.strip()]
    children: dict[int, list[tuple[int, str]]] = {}
    for row in rows:
        pid, ppid, args = int(row[0]), int(row[1]), row[2] if len(row) > 2 else ""
        children.setdefault(ppid, []).append((pid, args))
    args_of = {int(r[0]): (r[2] if len(r) > 2 else "") for r in rows}
    lines, todo = [args_of.get(root, "")], [root]
    while todo:
        for pid, args in children.get(todo.pop(), []):
            lines.append(args)
            todo.append(pid)
    assert len(lines) > 3, lines  # the script, etcd, SeaweedFS and the brokers at least
    return lines
