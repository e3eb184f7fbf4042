"""TLS and SCRAM costs (issue 18), Strata only, on one broker of its own with four listeners: PLAINTEXT, SSL,
SASL_PLAINTEXT and SASL_SSL (SCRAM-SHA-256 and SCRAM-SHA-512), certificates from scripts/gen_certs.py (ECDSA
P-256, as the quick start uses).

* ``tls-produce-8p-acks1`` / ``tls-consume-8p``: the main scenarios' producer and consumer workers (bench/load.py:
  same client settings, 1 KiB incompressible values, 2 producer processes, 8 partitions, acks=1; one consumer process
  reading with ``assign()``) against the PLAINTEXT and the SSL listener of the same broker. Rounds alternate which
  listener goes first; each round produces a fresh topic over each listener, then reads the plaintext round's topic
  over both listeners (the same bytes from the page cache). The table shows medians and TLS/plaintext ratios of
  MiB/s and of broker CPU s/GiB (aim: TLS throughput >= 0.7 of plaintext).
* ``scram-connect``: SCRAM connection set-up rate: one client connects, sends ApiVersions, SaslHandshake and the two
  SaslAuthenticate rounds (scramp's client, credentials with 4096 iterations, kafka-configs' default) and closes,
  sequentially, for a fixed count (3,000; 300 with ``--quick``) or 10 s. Connections per second, and the broker's
  CPU ms per connection (the client's PBKDF2, ~1 ms per connection, is in the rate but not in the broker's CPU).

Standalone: ``python -m bench.security_bench [--quick] [--rounds N] [--out DIR]``; in ``make bench`` it is the
optional group ``security`` (a section of results.md).
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from .brokers import Broker, cpu_seconds, free_port, make_strata
from .load import MiB, consume_worker, produce_worker, run_workers, split

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # tests.support.client_security
    sys.path.insert(0, str(REPO_ROOT))
PARTITIONS = 8
RECORD = 1024
SCRAM_ITERATIONS = 4096
SCRAM_USERS = {"SCRAM-SHA-256": ("bench256", "bench-256-pw"), "SCRAM-SHA-512": ("bench512", "bench-512-pw")}


class SecureBench:
    """The broker with its four listeners, and the client settings of each."""

    def __init__(self, log_dir: Path, certs: Path, source_dir: Path | None = None) -> None:
        self.certs = certs
        self.ports = {"SSL": free_port(), "SASL_PLAINTEXT": free_port(), "SASL_SSL": free_port()}
        self.broker: Broker = make_strata(log_dir, name="strata-security", source_dir=source_dir)
        listeners = f"PLAINTEXT://127.0.0.1:{self.broker.port}," + ",".join(
            f"{n}://127.0.0.1:{p}" for n, p in self.ports.items()
        )
        for o in (
            f"listeners={listeners}",
            "inter.broker.listener.name=PLAINTEXT",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={certs / 'broker.pem'}",
            "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
        ):
            self.broker.cmd += ["--override", o]

    def bootstrap(self, listener: str) -> str:
        return self.broker.bootstrap if listener == "PLAINTEXT" else f"127.0.0.1:{self.ports[listener]}"

    def client_conf(self, listener: str) -> dict[str, str]:
        if listener == "PLAINTEXT":
            return {}
        return {"security.protocol": "SSL", "ssl.ca.location": str(self.certs / "ca.pem")}

    def add_scram_users(self) -> None:
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialAlteration,
            UserScramCredentialUpsertion,
        )

        mechs = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
        ups: list[UserScramCredentialAlteration] = [
            UserScramCredentialUpsertion(user, ScramCredentialInfo(mechs[m], SCRAM_ITERATIONS), pw.encode())
            for m, (user, pw) in SCRAM_USERS.items()
        ]
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap, "log_level": 3})
        for fut in admin.alter_user_scram_credentials(ups).values():
            fut.result(30)


# -- throughput -------------------------------------------------------------------------------------------------
def _gib_cpu(cpu0: float | None, cpu1: float | None, nbytes: int) -> float | None:
    if cpu0 is None or cpu1 is None or nbytes <= 0:
        return None
    return (cpu1 - cpu0) / (nbytes / 1024**3)


def produce_round(sb: SecureBench, listener: str, topic: str, records: int, procs: int, cap: float) -> dict:
    b = sb.broker
    b.create_topic(topic, PARTITIONS)
    cfgs = [
        {
            "worker": i,
            "bootstrap": sb.bootstrap(listener),
            "topic": topic,
            "acks": 1,
            "count": n,
            "record_size": RECORD,
            "time_cap": cap,
            "producer_conf": sb.client_conf(listener),
        }
        for i, n in enumerate(split(records, procs))
    ]
    run = run_workers(produce_worker, cfgs, hard_timeout=cap + 60, probe=lambda: cpu_seconds(b.pid))
    ok = run.ok
    start, end = min(r["start"] for r in ok), max(r["end"] for r in ok)
    nbytes = sum(r["bytes"] for r in ok)
    per_part: dict[int, int] = {}
    for r in ok:
        for p, n in r["per_partition"].items():
            per_part[int(p)] = per_part.get(int(p), 0) + n
    return {
        "mib_s": nbytes / MiB / max(end - start, 1e-9),
        "cpu_s_per_gib": _gib_cpu(run.probe_start, run.probe_end, nbytes),
        "bytes": nbytes,
        "errors": run.errors + [r["first_error"] for r in ok if r.get("first_error")],
        "per_partition": per_part,
    }


def consume_round(sb: SecureBench, listener: str, topic: str, targets: dict[int, int], cap: float) -> dict:
    b = sb.broker
    cfg = {
        "worker": 0,
        "bootstrap": sb.bootstrap(listener),
        "topic": topic,
        "targets": targets,
        "time_cap": cap,
        "min_seconds": 2.0,
        "max_passes": 5,
        "consumer_conf": sb.client_conf(listener),
    }
    run = run_workers(consume_worker, [cfg], hard_timeout=cap + 60, probe=lambda: cpu_seconds(b.pid))
    ok = run.ok
    if not ok:
        return {"mib_s": None, "cpu_s_per_gib": None, "errors": run.errors}
    r = ok[0]
    return {
        "mib_s": r["bytes"] / MiB / max(r["end"] - r["start"], 1e-9),
        "cpu_s_per_gib": _gib_cpu(run.probe_start, run.probe_end, r["bytes"]),
        "bytes": r["bytes"],
        "passes": r["passes"],
        "errors": run.errors + ([r["first_error"]] if r.get("first_error") else []),
    }


# -- SCRAM connection set-up --------------------------------------------------------------------------------------
def _frame(api_key: int, version: int, corr: int, body: bytes, flexible: bool = False) -> bytes:
    client = b"bench-scram"
    hdr = struct.pack(">hhih", api_key, version, corr, len(client)) + client + (b"\x00" if flexible else b"")
    return struct.pack(">i", len(hdr) + len(body)) + hdr + body


def _answer(s: socket.socket) -> bytes:
    from tests.support.client_security import recv_exact

    (size,) = struct.unpack(">i", recv_exact(s, 4))
    return recv_exact(s, size)


def scram_connect(port: int, mechanism: str, user: str, password: str, tls: ssl.SSLContext | None) -> None:
    """One connection as a client makes it: ApiVersions v0, SaslHandshake v1, two SaslAuthenticate v1, close."""
    import scramp

    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    s: socket.socket = tls.wrap_socket(raw, server_hostname="127.0.0.1") if tls else raw
    try:
        s.sendall(_frame(18, 0, 1, b""))
        _answer(s)
        mech = mechanism.encode()
        s.sendall(_frame(17, 1, 2, struct.pack(">h", len(mech)) + mech))
        if struct.unpack_from(">h", _answer(s), 4)[0] != 0:
            raise ConnectionError("SaslHandshake refused")
        client = scramp.ScramClient([mechanism], user, password)
        for corr, msg in ((3, client.get_client_first), (4, client.get_client_final)):
            token = msg().encode()
            s.sendall(_frame(36, 1, corr, struct.pack(">i", len(token)) + token))
            answer = _answer(s)
            error, mlen = struct.unpack_from(">hh", answer, 4)
            if error:
                raise ConnectionError(f"SaslAuthenticate failed with error {error}")
            off = 8 + max(mlen, 0)
            (n,) = struct.unpack_from(">i", answer, off)
            server = answer[off + 4 : off + 4 + n].decode()
            if corr == 3:
                client.set_server_first(server)
            else:
                client.set_server_final(server)
    finally:
        s.close()


def scram_rate(sb: SecureBench, listener: str, mechanism: str, count: int, cap: float) -> dict:
    user, password = SCRAM_USERS[mechanism]
    tls = ssl.create_default_context(cafile=str(sb.certs / "ca.pem")) if listener == "SASL_SSL" else None
    port = sb.ports[listener]
    scram_connect(port, mechanism, user, password, tls)  # warm-up (and a check that it works)
    cpu0 = cpu_seconds(sb.broker.pid)
    t0 = time.monotonic()
    n = 0
    while n < count and time.monotonic() - t0 < cap:
        scram_connect(port, mechanism, user, password, tls)
        n += 1
    elapsed = time.monotonic() - t0
    cpu1 = cpu_seconds(sb.broker.pid)
    cpu_ms = (cpu1 - cpu0) * 1000 / n if cpu0 is not None and cpu1 is not None and n else None
    return {"connections": n, "seconds": elapsed, "per_s": n / elapsed, "broker_cpu_ms_per_connection": cpu_ms}


# -- the run ------------------------------------------------------------------------------------------------------
def measure(log_dir: Path, quick: bool = False, rounds: int | None = None, source_dir: Path | None = None) -> dict:
    rounds = rounds or (1 if quick else 3)
    records = 30_000 if quick else 150_000
    scram_count = 300 if quick else 3000
    out: dict[str, Any] = {
        "rounds": rounds,
        "records": records,
        "record_size": RECORD,
        "partitions": PARTITIONS,
        "producer_procs": 2,
        "scram_iterations": SCRAM_ITERATIONS,
        "produce": {"PLAINTEXT": [], "SSL": []},
        "consume": {"PLAINTEXT": [], "SSL": []},
        "scram": {},
        "errors": [],
    }
    with tempfile.TemporaryDirectory(prefix="strata-bench-certs-") as tmp:
        certs = Path(tmp)
        subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gen_certs.py"), str(certs)], check=True)
        sb = SecureBench(log_dir, certs, source_dir)
        sb.broker.start()
        try:
            sb.add_scram_users()
            run_id = uuid.uuid4().hex[:6]
            for rnd in range(rounds):
                order = ["PLAINTEXT", "SSL"] if rnd % 2 == 0 else ["SSL", "PLAINTEXT"]
                topics: dict[str, tuple[str, dict[int, int]]] = {}
                for listener in order:
                    sb.broker.wait_quiet()
                    topic = f"sec-{run_id}-{rnd}-{listener.lower()}"
                    r = produce_round(sb, listener, topic, records, 2, cap=60.0)
                    out["produce"][listener].append(r)
                    out["errors"] += r["errors"]
                    topics[listener] = (topic, r.pop("per_partition"))
                source, targets = topics["PLAINTEXT"]
                for listener in order:
                    sb.broker.wait_quiet()
                    r = consume_round(sb, listener, source, targets, cap=30.0)
                    out["consume"][listener].append(r)
                    out["errors"] += r["errors"]
                for listener in order:
                    sb.broker.delete_topic(topics[listener][0])
            for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
                for mech in SCRAM_USERS:
                    sb.broker.wait_quiet()
                    out["scram"][f"{listener} {mech}"] = scram_rate(sb, listener, mech, scram_count, cap=10.0)
        finally:
            sb.broker.stop()
    return out


def _median(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def _num(x: float | None, fmt: str = "{:.1f}") -> str:
    return fmt.format(x) if x is not None else "-"


def table(m: dict) -> str:
    lines = [
        "| scenario | plaintext MiB/s | TLS MiB/s | TLS/plaintext | plaintext CPU s/GiB | TLS CPU s/GiB | CPU ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, name in (("produce", "tls-produce-8p-acks1"), ("consume", "tls-consume-8p")):
        plain = m[kind]["PLAINTEXT"]
        tls = m[kind]["SSL"]
        pm, tm = _median([r["mib_s"] for r in plain]), _median([r["mib_s"] for r in tls])
        pc, tc = _median([r["cpu_s_per_gib"] for r in plain]), _median([r["cpu_s_per_gib"] for r in tls])
        lines.append(
            f"| {name} | {_num(pm)} | {_num(tm)} | {_ratio(tm, pm)} | {_num(pc, '{:.2f}')} | {_num(tc, '{:.2f}')} | "
            f"{_ratio(tc, pc)} |"
        )
    per_round = "; ".join(
        f"{kind} round {i + 1}: {_ratio(t['mib_s'], p['mib_s'])}"
        for kind in ("produce", "consume")
        for i, (p, t) in enumerate(zip(m[kind]["PLAINTEXT"], m[kind]["SSL"]))
    )
    lines += ["", f"TLS/plaintext per round (interleaved): {per_round}", ""]
    lines += [
        f"| SCRAM connection set-up ({m['scram_iterations']} iterations) | connections | conn/s | broker CPU ms/conn |",
        "|---|---:|---:|---:|",
    ]
    for name, r in m["scram"].items():
        lines.append(
            f"| scram-connect {name} | {r['connections']} | {r['per_s']:.0f} | "
            f"{_num(r['broker_cpu_ms_per_connection'], '{:.2f}')} |"
        )
    return "\n".join(lines)


def run(results: dict) -> None:
    """The `security` group of bench.run: one section of results.md, raw numbers under results['security']."""
    bench = results.get("bench") or {}
    log_dir = Path(bench.get("log_dir") or tempfile.gettempdir())
    m = measure(log_dir, quick=bool(bench.get("quick")))
    results["security"] = m
    results["sections"].append(
        {
            "name": "security",
            "title": "TLS vs plaintext, SCRAM connection set-up (bench/security_bench.py)",
            "intro": (
                f"One broker, PLAINTEXT and SSL listeners, the same client settings; {m['rounds']} interleaved "
                f"rounds of {m['records']} x {RECORD} B records (2 producer processes, 8 partitions, acks=1), "
                "medians. SCRAM: one sequential client, connect + ApiVersions + SaslHandshake + 2 SaslAuthenticate "
                "+ close."
            ),
            "markdown": table(m),
            "errors": m["errors"][:5],
            "raw": m,
        }
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.security_bench", description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--strata-dir", type=Path, help="run the broker from another checkout (before/after runs)")
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "strata-security-bench")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    m = measure(args.out, quick=args.quick, rounds=args.rounds, source_dir=args.strata_dir)
    (args.out / "security.json").write_text(json.dumps(m, indent=1))
    print(table(m))
    if m["errors"]:
        print("errors:", m["errors"][:5])
    return 0


if __name__ == "__main__":
    sys.exit(main())
