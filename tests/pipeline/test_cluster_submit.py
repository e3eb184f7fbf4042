"""docs/spark.md's "Running on a cluster", run as written: a Spark standalone master and worker (the JVM classes
that ship in the pyspark wheel), the export job submitted with ``spark-submit --master spark://...``, executors on
the worker importing the strata package and reading the tiered topic in direct mode from S3."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pipeline.support import consume_all, create_topic, df_records, produce, wait_offloaded
from tests.support.s3_servers import free_ports

START_TIMEOUT_S = 90
SUBMIT_TIMEOUT_S = 240


def _spark_bin(name: str) -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / name)


class StandaloneCluster:
    """One master and one worker (1 core, 1 GiB), each its own process group, stopped by PID."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.port, self.ui_port, self.worker_ui_port = free_ports(3)
        self.procs: list[subprocess.Popen] = []
        self.env = {
            **os.environ,
            "SPARK_LOG_DIR": str(work / "logs"),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
        }
        self.env.pop("PYSPARK_GATEWAY_PORT", None)

    @property
    def master(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, *args: str) -> None:
        log = open(self.work / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        self.procs.append(
            subprocess.Popen(
                [_spark_bin("spark-class"), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        )

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                state = json.load(r)
        except (OSError, ValueError):  # not up yet; a master still starting may answer its HTML page
            return 0
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def start(self) -> StandaloneCluster:
        (self.work / "worker").mkdir(parents=True, exist_ok=True)
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        self._spawn(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            self.master,
            "--host",
            "127.0.0.1",
            "--cores",
            "1",
            "--memory",
            "1g",
            "--webui-port",
            str(self.worker_ui_port),
            "--work-dir",
            str(self.work / "worker"),
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.alive_workers() < 1:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"spark-class exited with {p.returncode}: see {self.work}/*.log")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no Spark worker registered within {START_TIMEOUT_S}s: see {self.work}/*.log")
            time.sleep(0.2)  # polling interval of a bounded condition wait
        return self

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    c = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"))
    try:
        yield c.start()
    finally:
        c.stop()


def test_export_submitted_to_a_standalone_cluster(spark, tiered, cluster, tmp_path):
    bs = tiered.bootstrap
    create_topic(
        bs, "submitted", 2, remote_storage_enable="true", segment_bytes=4096, local_retention_bytes=1, retention_ms=-1
    )
    produce(
        bs,
        "submitted",
        [
            {"key": b"k%d" % i, "value": b"s" * 60 + b"%d" % i, "headers": [("i", b"%d" % i)], "partition": i % 2}
            for i in range(600)
        ],
        batch_size=1024,
    )
    for p in (0, 1):
        wait_offloaded(bs, "submitted", p, at_least=100)
    out = tmp_path / "submitted.parquet"
    import strata.pipeline.jobs.export as job

    rsm = [f"--rsm-config={k}={v}" for k, v in tiered.moto.rsm_config(**{"key.prefix": tiered.prefix}).items()]
    env = {**cluster.env, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    r = subprocess.run(
        [
            _spark_bin("spark-submit"),
            "--master",
            cluster.master,
            "--conf",
            f"spark.executorEnv.PYSPARK_PYTHON={sys.executable}",
            "--conf",
            "spark.driver.host=127.0.0.1",
            "--conf",
            "spark.ui.enabled=false",
            job.__file__,
            "--bootstrap-server",
            bs,
            "--topic",
            "submitted",
            "--to",
            str(out),
            "--read-mode",
            "direct",
            *rsm,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=SUBMIT_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "exported 600 records" in r.stdout
    assert df_records(spark.read.parquet(str(out))) == consume_all(bs, "submitted")
    # the tasks ran in an executor of the standalone worker (not in a local-mode driver): the application's
    # executor log in the worker's work directory reports them finished
    logs = list((cluster.work / "worker").glob("app-*/*/stderr"))
    assert len(logs) == 1, "no executor ran on the standalone worker"
    assert sum(p.read_text(errors="replace").count("Finished task") for p in logs) >= 2  # read, then count

    # the same job from strata's own command line, --master pointing at the cluster (no spark-submit)
    again = tmp_path / "again.parquet"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "strata.pipeline.jobs.export",
            "--master",
            cluster.master,
            "--conf",
            "spark.ui.enabled=false",
            "--bootstrap-server",
            bs,
            "--topic",
            "submitted",
            "--to",
            str(again),
            "--read-mode",
            "direct",
            *rsm,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=SUBMIT_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert df_records(spark.read.parquet(str(again))) == consume_all(bs, "submitted")
    assert len(list((cluster.work / "worker").glob("app-*/*/stderr"))) == 2  # a second application ran there
