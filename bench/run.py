"""Side-by-side benchmark of Strata and Tansu: ``python -m bench.run [--quick] [--only strata] [--scenarios ...]``.

Both brokers are started by the harness, stay up for the whole run, and each scenario runs on one broker after the
other (alternating which goes first), so the ratios Strata/Tansu compare numbers taken minutes apart on the same
machine. Results go to bench/results/ (results.md, results.json, throughput.png).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import platform
import shlex
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import report
from .brokers import FACTORIES, Broker, BrokerError, tansu_binary
from .scenarios import (
    ConsumeThroughput,
    GroupConsumeThroughput,
    GroupJoinLatency,
    ProduceLatency,
    ProduceThroughput,
    RawFetchThroughput,
    RunContext,
    Scenario,
    Settings,
)

BENCH_DIR = Path(__file__).resolve().parent


def build_scenarios() -> list[Scenario]:
    """The scenario list, in run order. Later additions (consumer-group throughput, tiered reads, cluster
    produce) go here."""
    p1 = ProduceThroughput(partitions=1, acks=1)
    p1all = ProduceThroughput(partitions=1, acks=-1)
    p8 = ProduceThroughput(partitions=8, acks=1)
    p8all = ProduceThroughput(partitions=8, acks=-1)
    group = GroupConsumeThroughput(partitions=6, members=3)
    return [
        p1,
        p1all,
        p8,
        p8all,
        ConsumeThroughput(source=p1all),
        ConsumeThroughput(source=p8all),
        RawFetchThroughput(source=p8all),
        ProduceLatency(partitions=1, acks=-1),
        group,
        GroupJoinLatency(source=group),
    ]


def machine_info() -> dict:
    import confluent_kafka

    cpu = "?"
    mem = 0.0
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        mem = next((int(ln.split()[1]) / 1024 / 1024 for ln in f if ln.startswith("MemTotal:")), mem)
    info = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu_model": cpu,
        "mem_total_gib": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "confluent_kafka": getattr(confluent_kafka, "__version__", None) or str(confluent_kafka.version()),
        "librdkafka": confluent_kafka.libversion()[0],
    }
    with contextlib.suppress(Exception):
        info["tansu_version"] = (
            subprocess.run([str(tansu_binary()), "--version"], check=False, capture_output=True, text=True, timeout=10)
            .stdout.strip()
            .split()[-1]
        )
    with contextlib.suppress(Exception):
        info["git_rev"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            check=False,
            capture_output=True,
            text=True,
            cwd=BENCH_DIR.parent,
            timeout=10,
        ).stdout.strip()
    return info


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small amounts and short caps (smoke test, ~1 min)")
    ap.add_argument(
        "--only", action="append", choices=sorted(FACTORIES), help="run only this broker (repeatable); default: all"
    )
    ap.add_argument(
        "--scenarios",
        default="",
        help="comma-separated substrings; run only scenarios whose name contains one of them "
        "(consume scenarios pull in the produce scenario they read)",
    )
    ap.add_argument("--procs", type=int, help="producer processes per produce scenario")
    ap.add_argument("--records", type=int, help="records per produce scenario (split across processes)")
    ap.add_argument("--latency-rate", type=float, help="latency scenario rate, MiB/s")
    ap.add_argument("--reps", type=int, help="max repetitions of a produce scenario (1 = no repetition)")
    ap.add_argument("--out", type=Path, default=BENCH_DIR / "results", help="output directory")
    ap.add_argument("--strata-startup-timeout", type=float, default=60.0)
    ap.add_argument(
        "--strata-override",
        action="append",
        default=[],
        help="extra --override KEY=VALUE passed to Strata (repeatable)",
    )
    ap.add_argument(
        "--strata-launcher",
        default=None,
        help="command replacing 'python -m strata' (shell-split), e.g. a profiler wrapper",
    )
    ap.add_argument(
        "--groups",
        default=None,
        help="optional scenario groups to run after the side-by-side scenarios, comma-separated "
        f"({', '.join(g for g, _ in OPTIONAL_GROUPS)}, all, none); default: all, or with "
        "--scenarios only the groups it names",
    )
    ap.add_argument(
        "--strata-dir",
        type=Path,
        default=None,
        help="run Strata from another checkout (e.g. `git archive HEAD` unpacked) for before/after runs",
    )
    return ap.parse_args(argv)


def select(scenarios: list[Scenario], spec: str) -> list[Scenario]:
    if not spec:
        return scenarios
    wanted = [w.strip() for w in spec.split(",") if w.strip()]
    keep = {sc.name for sc in scenarios if any(w in sc.name for w in wanted)}
    for sc in scenarios:
        src = getattr(sc, "source", None)
        if sc.name in keep and src is not None:
            keep.add(src.name)
    return [sc for sc in scenarios if sc.name in keep]


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _exit_code(b: Broker) -> int | None:
    """The exit code of the broker's process (None: still running, or not started)."""
    return b.proc.returncode if b.proc is not None else None


def run_one(
    sc: Scenario, name: str, b: Broker | None, ctx: RunContext, rep: int, others: list[Broker] | None = None
) -> dict:
    """One repetition of one scenario on one broker; never raises. It starts once every broker of the run is
    quiet: on 2 cores the other broker's leftover work (a deleted topic's files, freed memory) would run during
    this measurement and slow it down."""
    if b is None:
        return {"skipped": f"{name} is not running"}
    if not b.alive():
        log(f"{sc.name} on {name}: broker is down")
        return {"error": f"{name} exited with code {_exit_code(b)}; log tail:\n{b.log_tail(20)}"}
    others_quiet_s = sum(o.wait_quiet() for o in others or () if o is not b and o.alive())
    quiet_s = b.wait_quiet()
    t0 = time.monotonic()
    try:
        r = sc.run(b, ctx)
    except Exception as e:  # noqa: BLE001 - one broker's failure must not stop the comparison
        r = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=4)}
    r["wall_s"] = time.monotonic() - t0
    r["waited_for_quiet_s"] = quiet_s
    r["waited_for_others_quiet_s"] = others_quiet_s
    if not b.alive():
        r.setdefault("errors", []).append(
            f"broker exited with code {_exit_code(b)} during the scenario; log tail:\n{b.log_tail(20)}"
        )
    mt = r.get("metrics") or {}
    shown = ", ".join(f"{k}={report._fmt(v)}" for k, v in mt.items())
    errs = (r.get("errors") or ([r["error"]] if r.get("error") else [])) + (r.get("notes") or [])
    log(
        f"{sc.name}{f' rep {rep + 1}' if rep else ''} on {name}: {shown or 'no result'} ({r['wall_s']:.1f}s)"
        + (f" PROBLEMS: {errs[0][:300]}" if errs else "")
    )
    return r


# Optional scenario groups: each lives in its own module and is skipped (with a note in the report) when that
# module does not import. Two shapes are supported:
#   * scenarios in the side-by-side loop: the module has ``cluster_scenarios()`` (or ``scenarios()``) returning
#     Scenario objects; they run after the built-in ones while the brokers are up (``bench.cluster_bench`` runs its
#     own three-broker cluster in the "strata" slot and skips the Tansu slot), then ``stop_shared_cluster()`` is
#     called if the module has it;
#   * a ``run(results: dict)`` function called after the side-by-side scenarios, once the main brokers are stopped.
#     It appends to ``results["sections"]`` (a table of its own: see bench/README.md "Adding scenarios") and/or
#     stores its numbers under a key of its own (``spark_bench`` stores ``results["spark_read"]``, which is shown
#     with its ``table()``). ``results["bench"]`` carries the run's context (quick mode, log dir, Strata overrides).
OPTIONAL_GROUPS: list[tuple[str, str]] = [
    ("cluster", "bench.cluster_bench"),  # replication: RF=3 produce, latency, leader fail-over (3-broker cluster)
    ("tiered", "bench.tiered"),  # issue 4: remote reads on SeaweedFS vs raw GET, produce tiering on/off
    ("spark", "bench.spark_bench"),  # the PySpark data source: direct vs broker vs consumer reads
    ("rejoin", "bench.rejoin_bench"),  # issue 6: wiped follower rejoining the ISR, tiered vs untiered
    ("quotas", "bench.quota_bench"),  # issue 18: achieved rate under producer_byte_rate / consumer_byte_rate
    ("security", "bench.security_bench"),  # issue 18: TLS vs plaintext throughput, SCRAM connection set-up rate
    ("transactions", "bench.txn_bench"),  # issue 19: transactional vs idempotent produce, READ_COMMITTED consume
    ("connections", "bench.conn_bench"),  # issue 22: broker RSS with 10,000 idle client connections
    ("rebalance", "bench.rebalance_bench"),  # issue 20: a 7th member joins 6: classic eager/cooperative vs KIP-848
    ("iceberg", "bench.iceberg_bench"),  # issue 23: translation vs produce rate, Spark aggregate table vs topic
    ("scale", "bench.scale_bench"),  # issue 22: idle cost, Metadata and restarts with 1,000-20,000 partitions
    ("floor", "bench.floor"),  # issue 22: produce/fetch floors of this machine and Strata's ratio to them
    ("restore", "bench.restore_bench"),  # issue 24: cluster restore from the bucket vs re-replication; read replicas
]


def selected_groups(args: argparse.Namespace) -> list[tuple[str, str]]:
    if args.groups is not None:
        wanted = {g.strip() for g in args.groups.split(",") if g.strip()}
        if wanted & {"none", ""}:
            return []
        if "all" in wanted:
            return list(OPTIONAL_GROUPS)
        return [g for g in OPTIONAL_GROUPS if g[0] in wanted]
    if args.scenarios:  # --scenarios alone: only the groups it names
        named = [w.strip() for w in args.scenarios.split(",") if w.strip()]
        return [g for g in OPTIONAL_GROUPS if any(w in g[0] for w in named)]
    return list(OPTIONAL_GROUPS)


def load_groups(groups: list[tuple[str, str]], results: dict) -> list[tuple[str, Any]]:
    """Import the selected group modules; the ones that do not import are recorded as skipped."""
    import importlib

    loaded = []
    for name, module in groups:
        entry = {"name": name, "module": module}
        results["groups"].append(entry)
        try:
            mod = importlib.import_module(module)
        except Exception as e:  # noqa: BLE001 - ImportError, or a module that fails at import time
            entry["skipped"] = f"{module} does not import ({type(e).__name__}: {e})"
            log(f"group {name}: skipped, {entry['skipped']}")
            continue
        loaded.append((name, mod))
    return loaded


def group_scenarios(loaded: list[tuple[str, Any]], results: dict) -> list[Scenario]:
    out: list[Scenario] = []
    for name, mod in loaded:
        fn = getattr(mod, "cluster_scenarios", None) or getattr(mod, "scenarios", None)
        if fn is None:
            continue
        try:
            scs = list(fn())
        except Exception as e:  # noqa: BLE001
            _group_entry(results, name)["error"] = f"building its scenarios failed: {e!r}"
            continue
        _group_entry(results, name)["scenarios"] = [sc.name for sc in scs]
        out += scs
    return out


def _group_entry(results: dict, name: str) -> dict:
    return next(g for g in results["groups"] if g["name"] == name)


def _spark_section(results: dict, mod: Any) -> None:
    runs = [results[k] for k in sorted(results) if k == "spark_read" or k.startswith("spark_read_")]
    if not runs or not hasattr(mod, "table"):
        return
    results["sections"].append(
        {
            "name": "spark",
            "title": "Spark data source (bench/spark_bench.py)",
            "markdown": "\n\n".join(mod.table(r) for r in runs),
            "raw": runs[0] if len(runs) == 1 else runs,
        }
    )


SECTION_ADAPTERS: dict[str, Callable[[dict, Any], None]] = {"spark": _spark_section}


def run_groups(loaded: list[tuple[str, Any]], results: dict, quick: bool) -> None:
    for name, mod in loaded:
        entry = _group_entry(results, name)
        stop = getattr(mod, "stop_shared_cluster", None)
        if stop is not None:  # scenarios in the main loop left a shared cluster running
            with contextlib.suppress(Exception):
                stop()
        fn = getattr(mod, "run", None)
        if fn is None:
            continue
        kwargs: dict[str, Any] = {}
        if quick and name == "spark":  # its own knobs: a smaller topic, one repetition
            params = inspect.signature(fn).parameters
            kwargs = {k: v for k, v in (("mib", 32), ("reps", 1)) if k in params}
        log(f"group {name}: running {mod.__name__}.run")
        t0 = time.monotonic()
        try:
            fn(results, **kwargs)
            adapter = SECTION_ADAPTERS.get(name)
            if adapter is not None:
                adapter(results, mod)
        except Exception as e:  # noqa: BLE001 - a group's failure must not lose the rest of the run
            entry["error"] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}"
            log(f"group {name}: failed: {e!r}")
        entry["wall_s"] = time.monotonic() - t0
        log(f"group {name}: done in {entry['wall_s']:.0f}s")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t_start = time.monotonic()
    settings = Settings.quick() if args.quick else Settings()
    if args.procs:
        settings.producer_procs = args.procs
    if args.records:
        settings.produce_records = args.records
    if args.reps:
        settings.max_reps = args.reps
    if args.latency_rate:
        settings.latency_rate_mib = args.latency_rate
    names = args.only or list(FACTORIES)
    groups = selected_groups(args)
    out_dir: Path = args.out
    log_dir = out_dir / "logs"
    ctx = RunContext(settings=settings, run_id=uuid.uuid4().hex[:8])

    results: dict = {
        "mode": "quick" if args.quick else "full",
        "machine": machine_info(),
        "settings": vars(settings),
        "bench": {
            "quick": args.quick,
            "run_id": ctx.run_id,
            "out_dir": str(out_dir),
            "log_dir": str(log_dir),
            "strata_dir": str(args.strata_dir) if args.strata_dir else None,
            "strata_overrides": list(args.strata_override),
            "only": names,
        },
        "brokers": {},
        "scenarios": [],
        "sections": [],
        "groups": [],
    }
    loaded = load_groups(groups, results)
    scenarios = select(build_scenarios(), args.scenarios) + group_scenarios(loaded, results)
    brokers: dict[str, Broker] = {}
    try:
        if scenarios:
            for name in names:
                info = results["brokers"].setdefault(name, {"notes": []})
                if name == "strata":
                    b = FACTORIES[name](
                        log_dir,
                        startup_timeout=args.strata_startup_timeout,
                        extra_overrides=args.strata_override,
                        launcher=shlex.split(args.strata_launcher) if args.strata_launcher else None,
                        source_dir=args.strata_dir,
                    )
                else:
                    b = FACTORIES[name](log_dir)
                info["cmd"] = b.cmd
                log(f"starting {name}: {' '.join(b.cmd)}")
                try:
                    b.start()
                except (BrokerError, OSError) as e:
                    info["error"] = str(e)
                    log(f"{name} did not start:\n{e}")
                    continue
                brokers[name] = b
                info["pid"] = b.pid
                info["startup_s"] = b.startup_s
                info["idle_rss_mib"] = b.measure_idle_rss()
                log(
                    f"{name} up on {b.bootstrap} (pid {b.pid}) in {b.startup_s:.2f}s, idle RSS "
                    f"{info['idle_rss_mib']:.1f} MiB"
                )

        for i, sc in enumerate(scenarios):
            entry: dict[str, Any] = {
                "name": sc.name,
                "kind": sc.kind,
                "params": sc.params(),
                "metric_specs": [vars(m) for m in sc.metrics()],
                "results": {},
            }
            results["scenarios"].append(entry)
            order = names if i % 2 == 0 else list(reversed(names))
            reps: dict[str, list[dict]] = {name: [] for name in names}
            for rep in range(max(1, settings.max_reps if sc.repeatable else 1)):
                for name in order:
                    if rep > 0 and not sc.wants_another_rep(reps[name], ctx):
                        continue
                    reps[name].append(run_one(sc, name, brokers.get(name), ctx, rep, list(brokers.values())))
            for name in names:
                entry["results"][name] = sc.combine(reps[name])

        for name, b in brokers.items():
            info = results["brokers"][name]
            if b.alive():
                info["after_rss_mib"] = b.measure_idle_rss()
                info["peak_rss_mib"] = b.peak_rss()
            else:
                info["notes"].append(f"not alive at the end (exit code {_exit_code(b)})")
    finally:
        for name, b in brokers.items():
            t0 = time.monotonic()
            code = b.stop()
            info = results["brokers"][name]
            info["exit_code"] = code
            info["stop_s"] = time.monotonic() - t0
            info["notes"].extend(b.notes)
            log(f"stopped {name} (exit code {code}, {info['stop_s']:.1f}s)")

    run_groups(loaded, results, args.quick)

    results["wall_s"] = time.monotonic() - t_start
    md = report.write_all(results, out_dir)
    print()
    print(md)
    log(f"wrote {out_dir}/results.md, results.json, throughput.png in {results['wall_s']:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
