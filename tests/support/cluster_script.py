"""`make cluster` / `make cluster-secure` as a newcomer runs them: scripts/cluster.py from a copy of the checkout
without tests/ (it must not import the test package), on free ports, stopped by its supervisor's PID."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.broker_proc import free_port
from tests.support.checkout import copy_checkout
from tests.support.waiting import wait_until


class ClusterScript:
    def __init__(self, tmp_path: Path, *extra: str) -> None:
        self.repo = copy_checkout(tmp_path / "repo", exclude=("tests",))
        self.data, self.out = tmp_path / "data", tmp_path / "cluster.out"
        self.cmd = [sys.executable, str(self.repo / "scripts/cluster.py"), *extra, "--data-dir", str(self.data)]
        self.cmd += ["--port", str(free_port()), "--metrics-port", str(free_port())]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        """Start and wait for the banner; returns the output so far."""
        with open(self.out, "wb") as f:
            self.proc = subprocess.Popen(
                self.cmd, cwd=self.repo, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        proc = self.proc
        wait_until(
            lambda: "Strata cluster is up." in self.out.read_text() or proc.poll() is not None,
            timeout=240,
            message=lambda: self.out.read_text()[-3000:],
        )
        text = self.out.read_text()
        assert proc.poll() is None, text[-3000:]
        assert "Traceback" not in text
        return text

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def bootstrap(self) -> str:
        found = re.search(r"bootstrap servers: (\S+)", self.out.read_text())
        assert found is not None
        return found.group(1)

    def stop(self) -> int:
        """SIGTERM to the supervisor (brokers, then etcd and SeaweedFS); its exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout=180)


__all__ = ["ClusterScript"]
