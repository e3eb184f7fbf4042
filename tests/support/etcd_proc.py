"""Run a real etcd (Debian's `etcd-server` package, binary `etcd`) as a subprocess for tests.

``EtcdProcess(tmp_dir).start()`` picks free client and peer ports on 127.0.0.1, keeps its data directory and log
under ``tmp_dir``, and waits (bounded) until ``/health`` answers ``"health":"true"``. It stops by PID: ``stop()``
(SIGTERM, bounded wait, SIGKILL as last resort), ``kill()`` (SIGKILL at once), ``pause()``/``resume()``
(SIGSTOP/SIGCONT, to freeze the quorum in fault tests). ``restart()`` keeps ports and data.

``connect`` is the value for a broker's ``metadata.store.connect``; ``endpoint`` is ``(host, port)``.

The pytest fixture ``etcd_fixture`` (function scope, a fresh etcd per test) is meant to be bound to a name in a test
module or conftest: ``etcd = etcd_fixture`` (then tests take an ``etcd`` argument).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, ClassVar

import pytest

from .waiting import WaitTimeout, wait_until

START_TIMEOUT = float(os.environ.get("STRATA_IT_ETCD_START_TIMEOUT", "30"))
STOP_TIMEOUT = 10.0


def etcd_binary() -> str | None:
    return shutil.which("etcd") or ("/usr/bin/etcd" if os.path.exists("/usr/bin/etcd") else None)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EtcdStartError(AssertionError):
    pass


class EtcdProcess:
    """One single-member etcd cluster on loopback."""

    live: ClassVar[set[EtcdProcess]] = set()

    def __init__(self, tmp_dir: Path | str, name: str = "etcd") -> None:
        self.tmp_dir = Path(tmp_dir)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.client_port = _free_port()
        self.peer_port = _free_port()
        self.data_dir = self.tmp_dir / f"{name}.data"
        self.output_path = self.tmp_dir / f"{name}.out"
        self.proc: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def endpoint(self) -> tuple[str, int]:
        return (self.host, self.client_port)

    @property
    def connect(self) -> str:
        return f"etcd://{self.host}:{self.client_port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.client_port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self) -> list[str]:
        binary = etcd_binary()
        if binary is None:
            raise EtcdStartError("etcd is not installed (Debian package etcd-server; `make system-deps`)")
        peer = f"http://{self.host}:{self.peer_port}"
        return [
            binary,
            "--name",
            self.name,
            "--data-dir",
            str(self.data_dir),
            "--listen-client-urls",
            self.url,
            "--advertise-client-urls",
            self.url,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"{self.name}={peer}",
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            f"strata-test-{self.client_port}",
            # Small, fast test quorum: short heartbeats, no auto compaction surprises.
            "--heartbeat-interval",
            "50",
            "--election-timeout",
            "500",
            "--logger",
            "zap",
            "--log-outputs",
            "stderr",
        ]

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=1) as r:
                return json.loads(r.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    def start(self, timeout: float = START_TIMEOUT) -> EtcdProcess:
        for attempt in range(3):
            try:
                return self._start_once(timeout)
            except EtcdStartError as exc:
                if attempt == 2 or self._started_before or "address already in use" not in str(exc).lower():
                    raise
                self.client_port, self.peer_port = _free_port(), _free_port()
        raise AssertionError("unreachable")

    _started_before = False

    def _start_once(self, timeout: float) -> EtcdProcess:
        assert not self.is_running(), "already running"
        self._out = open(self.output_path, "ab")  # noqa: SIM115 - lives as long as the process
        proc = self.proc = subprocess.Popen(
            self.command(), stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        EtcdProcess.live.add(self)
        try:
            wait_until(
                lambda: self.healthy() or (proc.poll() is not None and "exited"),
                timeout,
                interval=0.05,
                message=f"etcd {self.name} on {self.url} healthy",
            )
        except WaitTimeout:
            self.kill()
            raise EtcdStartError(f"etcd did not become healthy in {timeout}s:\n{self.tail()}") from None
        if self.proc.poll() is not None:
            self._close_out()
            EtcdProcess.live.discard(self)
            raise EtcdStartError(f"etcd exited with {self.proc.returncode}:\n{self.tail()}")
        self._started_before = True
        return self

    def restart(self, timeout: float = START_TIMEOUT) -> EtcdProcess:
        if self.is_running():
            self.stop()
        return self._start_once(timeout)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
                os.kill(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT)
        self._close_out()
        EtcdProcess.live.discard(self)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT)
        self._close_out()
        EtcdProcess.live.discard(self)

    def pause(self) -> None:
        assert self.is_running()
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def _close_out(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.output_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _kill_leftovers() -> None:
    for e in list(EtcdProcess.live):
        e.kill()


atexit.register(_kill_leftovers)


def wait_healthy(e: EtcdProcess, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not e.healthy():
        if time.monotonic() > deadline:
            raise WaitTimeout(f"etcd {e.url} not healthy within {timeout}s")
        time.sleep(0.05)


@pytest.fixture
def etcd_fixture(tmp_path: Path) -> Iterator[EtcdProcess]:
    """A fresh single-member etcd for one test; skipped when etcd is not installed."""
    if etcd_binary() is None:
        pytest.skip("etcd not installed (apt-get install etcd-server)")
    e = EtcdProcess(tmp_path / "etcd").start()
    try:
        yield e
    finally:
        e.stop()
