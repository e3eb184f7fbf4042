"""The fuzz loop against one broker process, its checks, and the findings it records.

Each input goes over its own connection (so it replays alone), followed by an ApiVersions "ping" on the same
connection: the broker must answer the ping (after answering the input, or not answering an acks=0 Produce) or
close the connection within ``hang_s``; neither is a **hang**. After each input the broker's output is scanned
for tracebacks and "request failed"/"connection failed" lines (**traceback**), the process must be alive
(**crash**) and its RSS is sampled. A watchdog thread pings on a connection of its own every 0.2 s: an answer later
than ``stall_s`` is a **stall** of the event loop, charged to the inputs in flight.

After each batch (``batch_inputs`` inputs or ``batch_s`` seconds): a new connection gets ApiVersions and Metadata
answered within ``health_s`` (else **unresponsive**), RSS is below ``rss_limit_mib`` (else **rss**), and the
canary reads back byte for byte (else **canary**). At the end (and every ``restart_every_s``) the broker is
restarted, cleanly and after ``kill -9``, and the canary checked again. A broker that crashed or stopped answering
is killed and restarted so the run goes on.

Every distinct finding (kind, API, version, symptom, code location) is kept with its count and first input: seed,
index (``python -m tests.fuzz replay --seed S --index I`` regenerates it), hex, and a ``.bin`` file of the bytes.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kafka.protocol.admin import CreateTopicsRequest

from strata.protocol.registry import RESPONSE_CLASSES
from tests.support.broker_proc import REPO_ROOT, StrataBroker
from tests.support.kafka_wire import WireClient

from . import batches
from .canary import Canary
from .inputs import PING_CORRELATION_ID, FuzzInput, make_input, ping_frame
from .values import FRESH_GROUP_PREFIX, WAIT_FIELDS, FuzzContext

FUZZ_TOPICS = {"fz-plain": (3, {}), "fz-compact": (2, {"cleanup.policy": "compact"}), "fz-one": (1, {})}
LOG_MARKERS = (
    "Traceback (most recent call last)",
    "request failed",
    "connection failed",
    "Task exception was never retrieved",
    "Exception in callback",
)
_FRAME_LINE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_SIZE = struct.Struct(">i")


@dataclass
class FuzzConfig:
    seed: int = 1
    max_inputs: int = 0  # 0: no bound on the count
    max_seconds: float = 150.0
    batch_inputs: int = 400
    batch_s: float = 30.0
    hang_s: float = 15.0
    # A "huge" input (up to max_items entries, ~10 MB) is work in proportion: a Fetch of 100,000 unknown topics takes
    # ~7 s on an idle 2-core machine and over 15 s beside a test run. It must still be answered, within this bound,
    # while the event loop stays responsive to everyone else (stall_s).
    huge_hang_s: float = 60.0
    health_s: float = 15.0
    stall_s: float = 5.0
    rss_limit_mib: int = 1024
    bomb_bytes: int = 512 << 20
    max_items: int = 100_000
    max_request_bytes: int = 100 * 1024 * 1024
    restart_every_s: float = 0.0  # 0: restart (clean, then kill -9) only at the end
    out_dir: Path = Path("fuzz-out")
    log_hex_bytes: int = 4096  # hex of at most this many input bytes in the report (the .bin file has all)


@dataclass
class Finding:
    kind: str
    api: str
    version: int
    symptom: str
    where: str
    seed: int
    index: int
    input: str
    hex: str
    bin_path: str
    count: int = 1
    log_excerpt: str = ""

    def key(self) -> tuple[str, str, str, str]:
        return (self.kind, self.api, _normalise(self.symptom), self.where)

    def line(self) -> str:
        return (
            f"[{self.kind}] {self.api} v{self.version} x{self.count}: {self.symptom}"
            + (f" at {self.where}" if self.where else "")
            + f"\n    first input seed={self.seed} index={self.index}: {self.input}"
            + f"\n    replay: python -m tests.fuzz replay --seed {self.seed} --index {self.index}"
            + f"  (bytes: {self.bin_path})"
        )


def _normalise(symptom: str) -> str:
    """Numbers and quoted names out of a symptom, so one bug is one finding whatever the input's values."""
    s = re.sub(r"0x[0-9a-f]+|\d+", "N", symptom)
    return re.sub(r"'[^']*'", "'…'", s)[:160]


@dataclass
class Summary:
    seed: int
    inputs: int = 0
    seconds: float = 0.0
    per_api: collections.Counter[str] = field(default_factory=collections.Counter)
    per_strategy: collections.Counter[str] = field(default_factory=collections.Counter)
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    findings: list[Finding] = field(default_factory=list)
    max_rss_mib: float = 0.0
    restarts: list[str] = field(default_factory=list)
    canary_checks: int = 0
    canary_ok: bool = True
    long_waits: int = 0

    def count(self, kind: str) -> int:
        return sum(f.count for f in self.findings if f.kind == kind)

    def failed(self) -> bool:
        return bool(self.findings) or not self.canary_ok

    def text(self) -> str:
        lines = [
            f"fuzz seed={self.seed}: {self.inputs} inputs in {self.seconds:.0f}s",
            "per API: " + ", ".join(f"{k}={v}" for k, v in sorted(self.per_api.items())),
            "per strategy: " + ", ".join(f"{k}={v}" for k, v in sorted(self.per_strategy.items())),
            "outcomes: " + ", ".join(f"{k}={v}" for k, v in sorted(self.outcomes.items())),
            f"crashes={self.count('crash')} hangs={self.count('hang')} stalls={self.count('stall')} "
            f"tracebacks={self.count('traceback')} unresponsive={self.count('unresponsive')} "
            f"bad responses={self.count('bad-response')} accepted bad batches={self.count('accepted')} "
            f"rss={self.count('rss')}",
            f"max RSS {self.max_rss_mib:.0f} MiB; legitimate long waits {self.long_waits}; "
            f"restarts: {', '.join(self.restarts) or 'none'}",
            f"canary: {'intact' if self.canary_ok else 'BROKEN'} ({self.canary_checks} checks)",
        ]
        if self.findings:
            lines.append(f"{len(self.findings)} distinct findings:")
            lines += [f.line() for f in self.findings]
        return "\n".join(lines)


def rss_mib(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Watchdog(threading.Thread):
    """Pings the broker on a connection of its own; answers later than ``stall_s`` are event-loop stalls."""

    def __init__(self, broker: StrataBroker, stall_s: float):
        super().__init__(daemon=True, name="fuzz-watchdog")
        self.broker, self.stall_s = broker, stall_s
        self.current = -1  # index of the input in flight (set by the fuzz loop)
        self.stalls: list[tuple[int, int, float]] = []  # (first input index, last input index, seconds)
        self._halt = threading.Event()
        self.paused = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)

    def run(self) -> None:
        sock: socket.socket | None = None
        ping = ping_frame()
        while not self._halt.is_set():
            if self.paused.is_set():
                if sock is not None:
                    sock.close()
                    sock = None
                self._halt.wait(0.2)
                continue
            try:
                if sock is None:
                    sock = socket.create_connection((self.broker.host, self.broker.port), timeout=1.0)
                first, start = self.current, time.monotonic()
                sock.sendall(ping)
                if not _read_until_ping(sock, start + 120.0, self._halt):
                    raise ConnectionError("no ping answer")
                took = time.monotonic() - start
                if took > self.stall_s and not self.paused.is_set():
                    self.stalls.append((first, self.current, took))
            except OSError:
                if sock is not None:
                    sock.close()
                sock = None
            self._halt.wait(0.2)
        if sock is not None:
            sock.close()


def _recv_exact(sock: socket.socket, n: int, deadline: float, stop: threading.Event | None = None) -> bytes | None:
    """``n`` bytes, or None on EOF/reset; TimeoutError past ``deadline``."""
    buf = bytearray()
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0 or (stop is not None and stop.is_set()):
            raise TimeoutError
        sock.settimeout(min(left, 1.0))
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _read_until_ping(sock: socket.socket, deadline: float, stop: threading.Event | None = None) -> bool:
    while True:
        head = _recv_exact(sock, 4, deadline, stop)
        if head is None:
            return False
        (size,) = _SIZE.unpack(head)
        body = _recv_exact(sock, size, deadline, stop)
        if body is None:
            return False
        if size >= 4 and _SIZE.unpack_from(body)[0] == PING_CORRELATION_ID:
            return True


class Fuzzer:
    def __init__(self, broker: StrataBroker, cfg: FuzzConfig):
        self.broker, self.cfg = broker, cfg
        self.ctx = FuzzContext()
        self.summary = Summary(cfg.seed)
        self.canary = Canary(cfg.seed)
        self._findings: dict[tuple[str, str, str, str], Finding] = {}
        self._log_pos = 0
        self.cfg.out_dir.mkdir(parents=True, exist_ok=True)
        self.findings_path = self.cfg.out_dir / f"findings-{cfg.seed}.jsonl"
        self.watchdog = Watchdog(broker, cfg.stall_s)

    # -- setup -------------------------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Bombs built up front (so the watchdog measures the broker, not us), canary written, topics made."""
        for codec in (1, 2, 3, 4):
            for kind in ("zeros", "records"):
                batches.bomb_payload(
                    codec, self.cfg.bomb_bytes if codec != 2 else min(self.cfg.bomb_bytes, 64 << 20), kind
                )
        self.canary.write(self.broker.bootstrap)
        self.ensure_topics()
        self._log_pos = self._log_size()

    def ensure_topics(self) -> None:
        """(Re)create the fuzzer's topics (inputs may delete them) and learn their topic ids."""
        with WireClient(self.broker.host, self.broker.port, timeout=self.cfg.health_s) as c:
            T = CreateTopicsRequest.CreatableTopic
            topics = [
                T(
                    name=name,
                    num_partitions=n,
                    replication_factor=1,
                    assignments=[],
                    configs=[T.CreatableTopicConfig(name=k, value=v) for k, v in cfg.items()],
                )
                for name, (n, cfg) in FUZZ_TOPICS.items()
            ]
            c.request(CreateTopicsRequest[4](topics=topics, timeout_ms=10000, validate_only=False))
            md = c.metadata(list(FUZZ_TOPICS), version=12)
        self.ctx.topics = {
            t.name: (t.topic_id if isinstance(t.topic_id, uuid.UUID) else uuid.UUID(int=0), len(t.partitions))
            for t in md.topics
            if t.error_code == 0
        }

    # -- the loop ----------------------------------------------------------------------------------------------
    def run(self) -> Summary:
        cfg, s = self.cfg, self.summary
        start = time.monotonic()
        self.watchdog.start()
        batch_start, batch_n, index = time.monotonic(), 0, 0
        last_restart = time.monotonic()
        kill_next = False
        try:
            while True:
                elapsed = time.monotonic() - start
                if (cfg.max_inputs and index >= cfg.max_inputs) or elapsed >= cfg.max_seconds:
                    break
                inp = make_input(
                    cfg.seed,
                    index,
                    self.ctx,
                    bomb_bytes=cfg.bomb_bytes,
                    max_items=cfg.max_items,
                    max_request_bytes=cfg.max_request_bytes,
                )
                self.watchdog.current = index
                self._one(inp)
                index += 1
                batch_n += 1
                if batch_n >= cfg.batch_inputs or time.monotonic() - batch_start >= cfg.batch_s:
                    self.batch_check(index)
                    batch_start, batch_n = time.monotonic(), 0
                    if cfg.restart_every_s and time.monotonic() - last_restart >= cfg.restart_every_s:
                        self.restart_check(kill=kill_next, index=index)
                        kill_next = not kill_next
                        last_restart = time.monotonic()
            self.batch_check(index)
            self.restart_check(kill=False, index=index)
            self.restart_check(kill=True, index=index)
        finally:
            self.watchdog.stop()
            self._collect_stalls()
            s.inputs = index
            s.seconds = time.monotonic() - start
            s.findings = sorted(self._findings.values(), key=lambda f: (f.kind, f.api, -f.count))
            (cfg.out_dir / f"summary-{cfg.seed}.txt").write_text(s.text() + "\n")
        return s

    def _one(self, inp: FuzzInput) -> None:
        s, cfg = self.summary, self.cfg
        s.per_api[inp.api] += 1
        s.per_strategy[inp.strategy] += 1
        bound = cfg.huge_hang_s if inp.strategy == "huge" else cfg.hang_s
        outcome, responses = self.send(inp, bound)
        s.outcomes[outcome] += 1
        if outcome == "hang":
            if self._legit_wait(inp):
                s.long_waits += 1
            else:
                self.record("hang", inp, f"neither answered nor closed within {bound:.0f}s ({inp.strategy})", "")
        elif outcome == "answered" and inp.correlation_id is not None:
            self._check_response(inp, responses)
        self._scan_log(inp)
        s.max_rss_mib = max(s.max_rss_mib, rss_mib(self.broker.pid))
        if not self.broker.is_running():
            rc = self.broker.proc.returncode if self.broker.proc else None
            self.record("crash", inp, f"broker exited with code {rc}", "")
            self._recover(inp.index, "crash")
        elif outcome == "hang" and not self.probe():
            self.record(
                "unresponsive",
                inp,
                f"no ApiVersions+Metadata answer on a new connection within {cfg.health_s:.0f}s",
                "",
            )
            self._recover(inp.index, "unresponsive")

    def send(self, inp: FuzzInput, hang_s: float) -> tuple[str, list[bytes]]:
        """Send one input (and a ping when it ends on a frame boundary); "answered", "closed", "hang" or "refused"."""
        try:
            sock = socket.create_connection((self.broker.host, self.broker.port), timeout=self.cfg.health_s)
        except OSError:
            return "refused", []
        responses: list[bytes] = []
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                sock.sendall(inp.data + (ping_frame() if inp.framed else b""))
                if inp.half_close:
                    sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # closed while we were still sending: the outcome is what we read next
            deadline = time.monotonic() + hang_s
            while True:
                try:
                    head = _recv_exact(sock, 4, deadline)
                    if head is None:
                        return "closed", responses
                    (size,) = _SIZE.unpack(head)
                    body = _recv_exact(sock, size, deadline)
                except TimeoutError:
                    return "hang", responses
                if body is None:
                    return "closed", responses
                if size >= 4 and _SIZE.unpack_from(body)[0] == PING_CORRELATION_ID:
                    return "answered", responses
                responses.append(body)
        finally:
            sock.close()

    def _legit_wait(self, inp: FuzzInput) -> bool:
        """A request that asks the broker to wait longer than the hang bound (Kafka would wait too).

        JoinGroup and SyncGroup wait for the group's other members, up to their timeouts, except in a group of
        the request's own (``FRESH_GROUP_PREFIX``): a JoinGroup there has nobody to wait for. Byte-mutated inputs
        are decoded in a child process with a time bound: kafka-python's decoder can take hours on some inputs."""
        tags: dict[str, Any] | None = inp.tags
        if inp.strategy == "bytes":
            tags = _decode_waits(inp, timeout=10.0)
        if tags is None:
            return inp.api_key in (11, 14)
        if inp.api_key in (11, 14):
            return not (inp.api_key == 11 and str(tags.get("group_id") or "").startswith(FRESH_GROUP_PREFIX))
        return int(tags.get("wait_ms") or 0) > self.cfg.hang_s * 1000

    def _check_response(self, inp: FuzzInput, responses: list[bytes]) -> None:
        if inp.tags.get("acks0") or (not responses and _produce_acks(inp.data) == 0):
            return  # acks=0 as built, or as a byte mutation made it: Kafka answers nothing
        if len(responses) != 1:
            self.record("bad-response", inp, f"{len(responses)} responses to one request", "")
            return
        body = responses[0]
        corr = _SIZE.unpack_from(body)[0] if len(body) >= 4 else None
        if corr != inp.correlation_id:
            self.record("bad-response", inp, f"correlation id {corr} != {inp.correlation_id}", "")
            return
        if len(body) > 256 * 1024:  # kafka-python's decoder is quadratic on some large messages: do not wait on it
            return
        try:
            resp = RESPONSE_CLASSES[inp.api_key].decode(body, version=inp.version, header=True)
        except Exception as e:  # noqa: BLE001 - the client's codec refuses what the broker wrote
            self.record("bad-response", inp, f"response undecodable: {type(e).__name__}: {e}"[:200], "")
            return
        if inp.tags.get("refuse"):
            # a batch Kafka refuses (CORRUPT_MESSAGE, INVALID_RECORD, ...) must not be acknowledged
            kind = inp.detail.split(" -> ")[0]
            for t in resp.responses:
                for p in t.partition_responses:
                    if p.error_code == 0:
                        why = f"bad batch {kind} acknowledged with error 0 (base offset {p.base_offset})"
                        self.record("accepted", inp, why, "")

    # -- log ---------------------------------------------------------------------------------------------------
    def _log_size(self) -> int:
        try:
            return self.broker.output_path.stat().st_size
        except OSError:
            return 0

    def _scan_log(self, inp: FuzzInput | None) -> None:
        size = self._log_size()
        if size <= self._log_pos:
            self._log_pos = min(self._log_pos, size)
            return
        with open(self.broker.output_path, "rb") as f:
            f.seek(self._log_pos)
            chunk = f.read(size - self._log_pos).decode("utf-8", "replace")
        self._log_pos = size
        if not any(m in chunk for m in LOG_MARKERS):
            return
        for symptom, where, excerpt in _tracebacks(chunk):
            self.record("traceback", inp, symptom, where, excerpt)

    # -- checks ------------------------------------------------------------------------------------------------
    def probe(self) -> bool:
        """A new connection gets ApiVersions and Metadata answered within ``health_s``."""
        try:
            with WireClient(self.broker.host, self.broker.port, timeout=self.cfg.health_s) as c:
                av = c.api_versions(3)
                md = c.metadata(None, version=12)
                return av.error_code == 0 and len(md.brokers) == 1
        except Exception:  # noqa: BLE001 - any failure: not answering
            return False

    def batch_check(self, index: int) -> None:
        cfg, s = self.cfg, self.summary
        last = _placeholder(index - 1, "batch check")
        if not self.broker.is_running():
            self.record("crash", last, "broker not running at batch check", "")
            self._recover(index, "crash")
        if not self.probe():
            self.record("unresponsive", last, "no ApiVersions+Metadata answer at batch check", "")
            self._recover(index, "unresponsive")
        rss = rss_mib(self.broker.pid)
        s.max_rss_mib = max(s.max_rss_mib, rss)
        if rss > cfg.rss_limit_mib:
            self.record("rss", last, f"RSS {rss:.0f} MiB > {cfg.rss_limit_mib} MiB after inputs up to #{index - 1}", "")
        self.check_canary(index, "batch")
        self._collect_stalls()
        with contextlib.suppress(Exception):
            self.ensure_topics()

    def check_canary(self, index: int, when: str) -> None:
        s = self.summary
        s.canary_checks += 1
        self.watchdog.paused.set()
        try:
            self.canary.verify(self.broker.bootstrap)
        except Exception as e:  # noqa: BLE001 - any failure to read it back is a finding
            s.canary_ok = False
            self.record("canary", _placeholder(index - 1, f"canary check ({when})"), str(e)[:300], "")
        finally:
            self.watchdog.paused.clear()
        self._scan_log(_placeholder(index - 1, f"canary check ({when})"))

    def restart_check(self, kill: bool, index: int) -> None:
        how = "kill -9" if kill else "clean"
        self.watchdog.paused.set()
        try:
            if kill:
                self.broker.kill9()
            else:
                rc = self.broker.stop()
                if rc not in (0, None) and rc != -15:
                    self.record("crash", _placeholder(index - 1, "clean stop"), f"exit code {rc} on SIGTERM", "")
                elif rc is None:
                    self.record("hang", _placeholder(index - 1, "clean stop"), "no exit within 20s of SIGTERM", "")
            self._log_pos = self._log_size()
            self.broker.start()
            self.summary.restarts.append(f"{how}@{index}")
        except Exception as e:  # noqa: BLE001 - a broker that does not start again is a finding
            self.record("crash", _placeholder(index - 1, f"restart ({how})"), f"restart failed: {e}"[:300], "")
            return
        finally:
            self.watchdog.paused.clear()
        self._scan_log(_placeholder(index - 1, f"restart ({how})"))
        self.check_canary(index, f"after {how} restart")

    def _recover(self, index: int, why: str) -> None:
        """Kill and restart the broker so the run can go on (its data is kept)."""
        self.watchdog.paused.set()
        try:
            self.broker.kill9()
            self._log_pos = self._log_size()
            self.broker.start()
            self.summary.restarts.append(f"recover-{why}@{index}")
            with contextlib.suppress(Exception):
                self.ensure_topics()
        finally:
            self.watchdog.paused.clear()

    def _collect_stalls(self) -> None:
        while self.watchdog.stalls:
            first, last, took = self.watchdog.stalls.pop(0)
            idx = max(first, 0)
            inp = make_input(
                self.cfg.seed,
                idx,
                self.ctx,
                bomb_bytes=self.cfg.bomb_bytes,
                max_items=self.cfg.max_items,
                max_request_bytes=self.cfg.max_request_bytes,
            )
            self.record(
                "stall", inp, f"event loop answered a ping after {took:.1f}s (inputs #{first}..#{last} in flight)", ""
            )

    # -- findings ----------------------------------------------------------------------------------------------
    def record(self, kind: str, inp: FuzzInput | None, symptom: str, where: str, excerpt: str = "") -> None:
        inp = inp or _placeholder(-1, "no input")
        f = Finding(
            kind,
            inp.api,
            inp.version,
            symptom,
            where,
            self.cfg.seed,
            inp.index,
            inp.describe(),
            inp.data[: self.cfg.log_hex_bytes].hex(),
            "",
            log_excerpt=excerpt[-3000:],
        )
        old = self._findings.get(f.key())
        if old is not None:
            old.count += 1
            return
        if inp.data:
            p = self.cfg.out_dir / f"input-{self.cfg.seed}-{inp.index}.bin"
            p.write_bytes(inp.data)
            f.bin_path = str(p)
        self._findings[f.key()] = f
        with open(self.findings_path, "a") as out:
            out.write(json.dumps(asdict(f)) + "\n")


_DECODE_WAITS = """
import json, sys
from strata.protocol.registry import REQUEST_CLASSES
k, v = int(sys.argv[1]), int(sys.argv[2])
body = REQUEST_CLASSES[k].decode(sys.stdin.buffer.read()[4:], version=v, header=True)
waits = [getattr(body, f, 0) for f in sys.argv[3:]]
print(json.dumps({"wait_ms": max([w for w in waits if isinstance(w, int)], default=0),
                  "group_id": getattr(body, "group_id", None) if k == 11 else None}))
"""


def _decode_waits(inp: FuzzInput, timeout: float) -> dict[str, Any] | None:
    """The wait fields of a mutated request, decoded by kafka-python in a child process (None: not decodable)."""
    try:
        r = subprocess.run(
            [sys.executable, "-c", _DECODE_WAITS, str(inp.api_key), str(inp.version), *WAIT_FIELDS],
            input=inp.data,
            cwd=REPO_ROOT,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    if r.returncode != 0:
        return None
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def _placeholder(index: int, what: str) -> FuzzInput:
    return FuzzInput(index, "check", -1, -1, what, b"")


def _tracebacks(chunk: str) -> list[tuple[str, str, str]]:
    """(symptom, where, excerpt) of each traceback or error line in a piece of broker output.

    The symptom is the last exception of a chain ("During handling of the above exception ..."), where is the
    innermost frame in Strata's code."""
    lines = chunk.splitlines()
    out: list[tuple[str, str, str]] = []
    i = 0
    while i < len(lines):
        if not any(m in lines[i] for m in LOG_MARKERS):
            i += 1
            continue
        j, where, symptom, in_tb = i, "", "", False
        while j < len(lines) and j < i + 600:
            line = lines[j]
            if line.startswith("Traceback (most recent call last)"):
                in_tb = True
            elif in_tb:
                m = _FRAME_LINE.search(line)
                if m:
                    if "site-packages" not in m.group(1) and "/lib/python" not in m.group(1):
                        where = f"{_short_path(m.group(1))}:{m.group(2)} {m.group(3)}"
                elif line.strip() and not line[0].isspace():
                    symptom, in_tb = line.strip(), False
                    nxt = next((x for x in lines[j + 1 : j + 4] if x.strip()), "")
                    if not nxt.startswith(("During handling", "The above exception")):
                        break
            elif j > i and any(mk in line for mk in LOG_MARKERS):
                j -= 1  # the next event starts here
                break
            j += 1
        out.append(((symptom or lines[i].strip())[:300], where, "\n".join(lines[i : j + 1])))
        i = j + 1
    return out


def _short_path(path: str) -> str:
    for root in ("/broker/", "/protocol/", "/storage/", "/remote/", "/config/", "/strata/"):
        if root in path:
            return path[path.rindex(root) + 1 :]
    return path


def replay(broker: StrataBroker, data: bytes, framed: bool = True, hang_s: float = 15.0) -> str:
    """Send one input's bytes to ``broker`` as the fuzzer did; the outcome and any new broker output."""
    fz = Fuzzer(broker, FuzzConfig(hang_s=hang_s, out_dir=Path(os.environ.get("TMPDIR", "/tmp")) / "fuzz-replay"))
    fz._log_pos = fz._log_size()
    inp = FuzzInput(0, "replay", -1, -1, "replay", data, framed=framed)
    outcome, responses = fz.send(inp, hang_s)
    with open(broker.output_path, "rb") as f:
        f.seek(fz._log_pos)
        new = f.read().decode("utf-8", "replace")
    return f"outcome: {outcome}, {len(responses)} response(s), broker alive: {broker.is_running()}\n{new}"


def _produce_acks(frame: bytes) -> int | None:
    """The acks of a framed Produce (v3+) as the broker reads it, or None when the bytes do not get that far: a
    byte mutation can turn acks into 0, to which no answer is the right answer."""
    try:
        pos = 4  # frame size
        api_key, version = struct.unpack_from(">hh", frame, pos)
        if api_key != 0 or version < 3:
            return None
        pos += 8
        (client_id_len,) = struct.unpack_from(">h", frame, pos)
        pos += 2 + max(client_id_len, 0)
        flexible = version >= 9
        if flexible:  # header tagged fields: the count only (a non-empty set is not worth parsing here)
            if frame[pos] != 0:
                return None
            pos += 1
            length = frame[pos] - 1  # compact nullable string (one-byte varint lengths only)
            pos += 1 + max(length, 0)
        else:
            (length,) = struct.unpack_from(">h", frame, pos)
            pos += 2 + max(length, 0)
        (acks,) = struct.unpack_from(">h", frame, pos)
        return int(acks)
    except (struct.error, IndexError):
        return None
