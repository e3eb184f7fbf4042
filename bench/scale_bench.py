"""Many partitions (issue 22): what one idle broker costs per partition, and how fast it comes back.

For each size (1,000 / 5,000 / 20,000 one-record partitions, topics of 1,000 partitions made in one CreateTopics
request, one record produced to every partition through one Produce request per topic) on a fresh broker:

- idle CPU (% of one core over 10 s, once the broker has been quiet for 0.5 s), RSS (MiB) and open file descriptors
  (`/proc/<pid>/fd`, the broker process alone);
- all-topics Metadata latency (median of 5 raw requests, from send to the last byte of the response: the client's
  decoding is not timed);
- Strata only (Tansu here keeps its data in memory): time to listen and to serve every partition (one Fetch for all
  partitions at offset 0 answers each partition's record) after a clean stop (SIGTERM) and after `kill -9`.

Then produce throughput and p99 request latency over 1,000 partitions with small batches (confluent-kafka, acks=1,
linger.ms=1, 100-byte values spread round-robin over the partitions, at most 5 requests in flight per connection,
p99 of librdkafka's own request round trip from `stats_cb`). RSS with 10,000 idle connections is taken
from `bench.conn_bench` when that module exists (`connections(results)` hook).

Standalone: ``python -m bench.scale_bench [--quick] [--sizes 1000,5000] [--only strata]``; ``make bench`` runs it
as the "scale" group. Quick mode: sizes 1,000 and 5,000 (20,000 with --sizes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.support.many_partitions import create_topics, fetch_all, produce_one_each, topics_for  # noqa: E402

IDLE_WINDOW_S = 10.0
FULL_SIZES = (1000, 5000, 20000)
QUICK_SIZES = (1000, 5000)


def fd_count(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def metadata_latency(bootstrap: str, reps: int = 5) -> float:
    """Median seconds from sending an all-topics Metadata v8 to the last byte of its response (not decoded)."""
    from kafka.protocol.metadata import MetadataRequest

    times = []
    from tests.support.kafka_wire import WireClient

    with WireClient.connect(bootstrap, timeout=120.0) as c:
        for _ in range(reps):
            req = MetadataRequest[8](
                topics=None,
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
            t0 = time.perf_counter()
            c.send(req)
            c.recv_frame()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def idle_cost(pid: int, cpu_of: Any, window: float = IDLE_WINDOW_S) -> dict[str, float | None]:
    from bench.brokers import rss_mib

    c0, t0 = cpu_of(pid), time.monotonic()
    deadline = t0 + window
    while time.monotonic() < deadline:  # the window itself: the quantity measured is CPU over wall time
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    c1, t1 = cpu_of(pid), time.monotonic()
    cpu_pct = None if c0 is None or c1 is None else 100.0 * (c1 - c0) / (t1 - t0)
    return {"idle_cpu_pct": cpu_pct, "rss_mib": rss_mib(pid), "open_fds": fd_count(pid)}


def wait_quiet(pid: int, cpu_of: Any, max_wait: float = 60.0, window: float = 0.5, busy: float = 0.05) -> None:
    t0 = time.monotonic()
    prev = cpu_of(pid)
    while prev is not None and time.monotonic() - t0 < max_wait:
        time.sleep(window)  # sampling window of a condition wait
        cur = cpu_of(pid)
        if cur is None or cur - prev < busy * window:
            return
        prev = cur


def restart_times(broker: Any, topics: list[tuple[str, int]], kill: bool, timeout: float = 300.0) -> dict[str, float]:
    """Stop (SIGTERM, or kill -9) and start again: seconds from SIGTERM to the process's exit (clean stop only;
    an exit code other than 0 fails the run), from the start to the first ApiVersions answer, and to a Fetch that
    returns every partition's record."""
    from tests.support.kafka_wire import WireClient

    out: dict[str, float] = {}
    if kill:
        broker.kill9()
    else:
        t0 = time.monotonic()
        rc = broker.stop(timeout)
        out["stop_s"] = time.monotonic() - t0
        if rc != 0:
            raise RuntimeError(f"clean stop exited with {rc} after {out['stop_s']:.1f}s")
    t0 = time.monotonic()
    broker.start(timeout)
    listen = time.monotonic() - t0
    want = sum(n for _, n in topics)
    deadline = t0 + timeout
    got = 0
    while time.monotonic() < deadline:
        with WireClient.connect(broker.bootstrap, timeout=timeout) as c:
            got = fetch_all(c, topics)
        if got == want:
            return {**out, "listen_s": listen, "serve_all_s": time.monotonic() - t0}
        time.sleep(0.1)  # retry interval of a condition wait
    raise TimeoutError(f"only {got}/{want} partitions served {timeout}s after the restart")


def populate_and_idle(bootstrap: str, pid: int, topics: list[tuple[str, int]], out: dict[str, Any]) -> None:
    """Create the topics, one record to each partition, then the idle cost and the Metadata latency."""
    from bench.brokers import cpu_seconds

    t0 = time.monotonic()
    create_topics(bootstrap, topics)
    out["create_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    produce_one_each(bootstrap, topics)
    out["produce_s"] = time.monotonic() - t0
    wait_quiet(pid, cpu_seconds)
    out.update(idle_cost(pid, cpu_seconds))
    out["metadata_s"] = metadata_latency(bootstrap)


def measure_strata(size: int, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    from bench.brokers import cpu_seconds
    from tests.support.broker_proc import StrataBroker

    topics = topics_for(size)
    out: dict[str, Any] = {"broker": "strata", "partitions": sum(n for _, n in topics)}
    with tempfile.TemporaryDirectory(prefix=f"strata-scale-{size}-") as tmp:
        b = StrataBroker(Path(tmp), {"log.retention.check.interval.ms": 300000, **(overrides or {})})
        b.start()
        try:
            assert b.pid is not None
            populate_and_idle(b.bootstrap, b.pid, topics, out)
            out["clean"] = restart_times(b, topics, kill=False)
            out["kill9"] = restart_times(b, topics, kill=True)
            assert b.pid is not None
            wait_quiet(b.pid, cpu_seconds)
            out["after_restart"] = idle_cost(b.pid, cpu_seconds, window=5.0)
        finally:
            b.stop()
    return out


def measure_tansu(size: int) -> dict[str, Any]:
    from bench.brokers import make_tansu

    topics = topics_for(size)
    out: dict[str, Any] = {"broker": "tansu", "partitions": sum(n for _, n in topics)}
    with tempfile.TemporaryDirectory(prefix=f"tansu-scale-{size}-") as tmp:
        b = make_tansu(Path(tmp), startup_timeout=60)
        b.start()
        try:
            populate_and_idle(b.bootstrap, b.pid, topics, out)
        finally:
            b.stop()
    return out


IN_FLIGHT = 5  # requests in flight per connection: the Java producer's default, and a bound on queueing


def produce_many(bootstrap: str, topic: str, partitions: int, seconds: float) -> dict[str, float]:
    """records/s and request latency of one confluent-kafka producer writing 100-byte values round-robin over
    `partitions` partitions for `seconds` (acks=1, linger.ms=1: many small batches).

    The latency is the broker's, not the producer's backlog: at most IN_FLIGHT requests per connection, and the p99 is
    librdkafka's own request round trip (`stats_cb`, each broker's `rtt` window over one second; the median of those
    per-second p99s, the first second left out). Enqueue-to-delivery latency grew with the producer's queue (the
    loop enqueues as fast as it can), so it measured the backlog; it stays as `delivery_p99_ms`."""
    from confluent_kafka import Producer

    lat: list[float] = []
    rtt_p99s: list[float] = []

    def on_stats(text: str) -> None:
        for b in json.loads(text).get("brokers", {}).values():
            rtt = b.get("rtt") or {}
            if b.get("nodeid", -1) >= 0 and rtt.get("cnt", 0) > 0:
                rtt_p99s.append(rtt["p99"] / 1000.0)  # microseconds

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 1,
            "batch.size": 16384,
            "queue.buffering.max.messages": 200_000,
            "max.in.flight.requests.per.connection": IN_FLIGHT,
            "statistics.interval.ms": 1000,
            "stats_cb": on_stats,
            "log_level": 3,
        }
    )
    p.list_topics(topic, timeout=30)
    value = os.urandom(100)

    def done(sent_at: float, err: Any, _msg: Any) -> None:
        if err is None:
            lat.append(time.monotonic() - sent_at)

    sent = 0
    start = time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        for _ in range(1000):
            try:
                p.produce(topic, value, partition=sent % partitions, on_delivery=partial(done, time.monotonic()))
            except BufferError:
                p.poll(0.01)
                continue
            sent += 1
        p.poll(0)
    p.flush(60)
    elapsed = time.monotonic() - start
    lat.sort()
    windows = rtt_p99s[1:] or rtt_p99s
    return {
        "records_per_s": len(lat) / elapsed,
        "p99_ms": statistics.median(windows) if windows else float("nan"),
        "delivery_p99_ms": 1000 * lat[int(0.99 * (len(lat) - 1))] if lat else float("nan"),
    }


def produce_bench(seconds: float, only: str | None) -> dict[str, Any]:
    from bench.brokers import make_tansu
    from tests.support.broker_proc import StrataBroker

    out: dict[str, Any] = {}
    if only in (None, "strata"):
        with tempfile.TemporaryDirectory(prefix="strata-scale-produce-") as tmp:
            b = StrataBroker(Path(tmp))
            b.start()
            try:
                create_topics(b.bootstrap, [("produce-1000", 1000)])
                out["strata"] = produce_many(b.bootstrap, "produce-1000", 1000, seconds)
            finally:
                b.stop()
    if only in (None, "tansu"):
        with tempfile.TemporaryDirectory(prefix="tansu-scale-produce-") as tmp:
            t = make_tansu(Path(tmp), startup_timeout=60)
            t.start()
            try:
                create_topics(t.bootstrap, [("produce-1000", 1000)])
                out["tansu"] = produce_many(t.bootstrap, "produce-1000", 1000, seconds)
            finally:
                t.stop()
    return out


def measure(sizes: tuple[int, ...], only: str | None = None, produce_s: float = 20.0) -> dict[str, Any]:
    r: dict[str, Any] = {"sizes": list(sizes), "runs": [], "errors": []}
    for size in sizes:
        for name, fn in (("strata", measure_strata), ("tansu", measure_tansu)):
            if only not in (None, name):
                continue
            try:
                r["runs"].append(fn(size))
            except Exception as e:  # noqa: BLE001 - one broker's failure is reported, the rest still runs
                r["errors"].append(f"{name} {size}: {type(e).__name__}: {e}")
    try:
        if produce_s > 0:
            r["produce"] = produce_bench(produce_s, only)
    except Exception as e:  # noqa: BLE001
        r["errors"].append(f"produce: {type(e).__name__}: {e}")
    hook = _conn_hook()
    if hook is not None:
        try:
            r["connections"] = hook()
        except Exception as e:  # noqa: BLE001
            r["errors"].append(f"connections: {type(e).__name__}: {e}")
    return r


def _conn_hook() -> Any:
    """RSS with 10,000 idle connections comes from bench/conn_bench.py (the connections work), when it exists."""
    try:
        import bench.conn_bench as cb  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    return getattr(cb, "idle_connections_rss", None)


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def table(r: dict[str, Any]) -> str:
    lines = [
        "| broker | partitions | idle CPU % | RSS MiB | open fds | Metadata (all) ms | clean stop, s | listen / serve "
        "all after stop, s | listen / serve all after kill -9, s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in r["runs"]:
        clean, kill = run.get("clean") or {}, run.get("kill9") or {}
        lines.append(
            f"| {run['broker']} | {run['partitions']:,} | {_f(run.get('idle_cpu_pct'), '.2f')} | "
            f"{_f(run.get('rss_mib'), '.0f')} | {_f(run.get('open_fds'), ',')} | "
            f"{_f((run.get('metadata_s') or 0) * 1000, '.0f')} | {_f(clean.get('stop_s'), '.1f')} | "
            f"{_f(clean.get('listen_s'), '.1f')} / {_f(clean.get('serve_all_s'), '.1f')} | "
            f"{_f(kill.get('listen_s'), '.1f')} / {_f(kill.get('serve_all_s'), '.1f')} |"
        )
    prod = r.get("produce") or {}
    if prod:
        lines += [
            "",
            "| produce over 1,000 partitions | records/s | request p99 ms | delivery p99 ms |",
            "|---|---:|---:|---:|",
        ]
        for name, v in prod.items():
            lines.append(
                f"| {name} | {v['records_per_s']:,.0f} | {v['p99_ms']:.1f} | {_f(v.get('delivery_p99_ms'), '.0f')} |"
            )
    if r.get("connections"):
        lines += ["", f"10,000 idle connections: {r['connections']}"]
    for e in r.get("errors", []):
        lines.append(f"\nerror: {e}")
    return "\n".join(lines)


def run(results: dict) -> None:
    """`make bench` group "scale": sizes 1,000 / 5,000 / 20,000 (1,000 / 5,000 in quick mode)."""
    quick = bool(results.get("bench", {}).get("quick"))
    r = measure(QUICK_SIZES if quick else FULL_SIZES, produce_s=10.0 if quick else 20.0)
    results["scale"] = r
    results["sections"].append(
        {
            "name": "scale",
            "title": "Many partitions: idle cost, Metadata, restart; produce over 1,000 partitions "
            "(bench/scale_bench.py)",
            "markdown": table(r),
            "raw": r,
        }
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="sizes 1,000 and 5,000")
    ap.add_argument("--sizes", help="comma-separated partition counts (multiples of 1,000)")
    ap.add_argument("--only", choices=("strata", "tansu"))
    ap.add_argument("--produce-seconds", type=float, default=20.0)
    ap.add_argument("--out", type=Path, help="also write scale.json and scale.md there")
    args = ap.parse_args(argv)
    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else QUICK_SIZES if args.quick else FULL_SIZES
    r = measure(sizes, args.only, args.produce_seconds)
    print(table(r))
    print(json.dumps(r, indent=1, default=str), file=sys.stderr)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "scale.json").write_text(json.dumps(r, indent=2, default=str))
        (args.out / "scale.md").write_text(table(r) + "\n")
    return 0 if not r["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["measure", "run", "table"]
