"""Load generators: librdkafka (confluent-kafka) producers and consumers, one OS process each.

The same code drives every broker. Each worker connects and fetches metadata first, then waits on a barrier so all
workers (and the parent, which samples the broker's CPU time) start the measured phase together. Every worker is
bounded twice: by a record count and by a wall-clock cap. Times are CLOCK_MONOTONIC, which is system-wide on Linux,
so start/end stamps from different processes are comparable.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from threading import BrokenBarrierError
from typing import Any

MiB = 1024 * 1024

PRODUCER_DEFAULTS = {
    "linger.ms": 5,
    "batch.size": MiB,
    "compression.type": "none",
    "enable.idempotence": False,
    "queue.buffering.max.kbytes": 256 * 1024,
    "queue.buffering.max.messages": 500_000,
    "message.timeout.ms": 120_000,
}

CONSUMER_DEFAULTS = {
    "group.id": "strata-bench-unused",  # never joined: partitions are assigned, nothing is committed
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "fetch.max.bytes": 64 * MiB,
    "max.partition.fetch.bytes": 16 * MiB,
    "receive.message.max.bytes": 65 * MiB,
    "queued.max.messages.kbytes": 256 * 1024,
    "fetch.wait.max.ms": 100,
}


def _percentiles(xs: list[float], qs=(50, 95, 99)) -> dict[str, float]:
    if not xs:
        return {}
    s = sorted(xs)
    out = {f"p{q}": s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))] for q in qs}
    out["max"] = s[-1]
    out["min"] = s[0]
    out["mean"] = sum(s) / len(s)
    return out


# --------------------------------------------------------------------------------------------------------------
# Worker bodies (run in spawned processes)
# --------------------------------------------------------------------------------------------------------------


def produce_worker(cfg: dict, barrier, out) -> None:
    """Produce ``cfg['count']`` records of ``cfg['record_size']`` bytes as fast as possible (or until the cap)."""
    from confluent_kafka import Producer

    res: dict[str, Any] = {"worker": cfg["worker"]}
    try:
        conf = {"bootstrap.servers": cfg["bootstrap"], "acks": str(cfg["acks"]),
                "client.id": f"bench-p{cfg['worker']}", **PRODUCER_DEFAULTS, **cfg.get("producer_conf", {})}
        p = Producer(conf)
        p.list_topics(topic=cfg["topic"], timeout=15)  # connect + metadata before the clock starts
        value = os.urandom(cfg["record_size"])
        topic, count, cap = cfg["topic"], cfg["count"], cfg["time_cap"]
        st = {"ok": 0, "bytes": 0, "err": 0, "last": 0.0, "first_err": None}
        per_part: dict[int, int] = {}
        lat: list[float] = []
        sample_every = max(1, count // 20_000)  # keep at most ~20k latency samples per worker

        def on_delivery(err, msg):
            if err is None:
                st["ok"] += 1
                st["bytes"] += len(msg)
                st["last"] = time.monotonic()
                part = msg.partition()
                per_part[part] = per_part.get(part, 0) + 1
                if st["ok"] % sample_every == 0:
                    lat.append(msg.latency())
            else:
                st["err"] += 1
                if st["first_err"] is None:
                    st["first_err"] = str(err)

        barrier.wait(timeout=120)
        start = time.monotonic()
        deadline = start + cap
        sent = 0
        capped = False
        produce = p.produce
        poll = p.poll
        for i in range(count):
            if (i & 1023) == 0:
                poll(0)
                if time.monotonic() > deadline:
                    capped = True
                    break
            while True:
                try:
                    produce(topic, value, on_delivery=on_delivery)
                    sent += 1
                    break
                except BufferError:  # local queue full: serve callbacks until there is room
                    poll(0.005)
                    if time.monotonic() > deadline:
                        capped = True
                        break
            if capped:
                break
        left = p.flush(max(0.5, deadline - time.monotonic()) + cfg.get("drain_grace", 5.0))
        if left:
            capped = True
            p.purge()
            p.flush(1)
        end = st["last"] or time.monotonic()
        res.update(start=start, end=end, sent=sent, delivered=st["ok"], bytes=st["bytes"], errors=st["err"],
                   first_error=st["first_err"], undelivered=left, capped=capped, per_partition=per_part,
                   latency_ms=_percentiles([x * 1000 for x in lat]))
    except BrokenBarrierError:
        res["error"] = "barrier broken (another worker failed)"
    except Exception:  # noqa: BLE001
        res["error"] = traceback.format_exc(limit=3)
        with contextlib.suppress(Exception):
            barrier.abort()
    out.put(res)


def latency_worker(cfg: dict, barrier, out) -> None:
    """Produce at a fixed rate for ``cfg['duration']`` seconds; latency from librdkafka's per-message latency."""
    from confluent_kafka import Producer

    res: dict[str, Any] = {"worker": cfg["worker"]}
    try:
        conf = {"bootstrap.servers": cfg["bootstrap"], "acks": str(cfg["acks"]),
                "client.id": f"bench-l{cfg['worker']}", **PRODUCER_DEFAULTS, **cfg.get("producer_conf", {})}
        p = Producer(conf)
        p.list_topics(topic=cfg["topic"], timeout=15)
        value = os.urandom(cfg["record_size"])
        rate = cfg["rate_bytes"] / cfg["record_size"]  # records per second
        duration = cfg["duration"]
        lat: list[float] = []
        st = {"ok": 0, "err": 0, "first_err": None, "last": 0.0}

        def on_delivery(err, msg):
            if err is None:
                st["ok"] += 1
                st["last"] = time.monotonic()
                lat.append(msg.latency())
            else:
                st["err"] += 1
                if st["first_err"] is None:
                    st["first_err"] = str(err)

        barrier.wait(timeout=120)
        start = time.monotonic()
        sent = 0
        while True:
            now = time.monotonic()
            el = now - start
            if el >= duration:
                break
            due = int(el * rate) + 1
            while sent < due:
                try:
                    p.produce(cfg["topic"], value, on_delivery=on_delivery)
                except BufferError:
                    break
                sent += 1
            p.poll(0.001)  # serves delivery callbacks; 1 ms pacing tick
        produced_for = time.monotonic() - start
        left = p.flush(cfg.get("drain_grace", 10.0))
        if left:
            p.purge()
            p.flush(1)
        res.update(start=start, end=st["last"] or time.monotonic(), sent=sent, delivered=st["ok"],
                   errors=st["err"], first_error=st["first_err"], undelivered=left,
                   bytes=st["ok"] * cfg["record_size"], produced_for=produced_for,
                   achieved_rate_mbs=sent * cfg["record_size"] / MiB / max(produced_for, 1e-9),
                   latencies_ms=[x * 1000 for x in lat])
    except BrokenBarrierError:
        res["error"] = "barrier broken (another worker failed)"
    except Exception:  # noqa: BLE001
        res["error"] = traceback.format_exc(limit=3)
        with contextlib.suppress(Exception):
            barrier.abort()
    out.put(res)


def consume_worker(cfg: dict, barrier, out) -> None:
    """Read ``cfg['targets']`` ({partition: record count}) of ``cfg['topic']`` from the beginning.

    The counts come from the producers' delivery reports, not from ListOffsets, so a broker that reports a wrong
    high watermark cannot end the measurement early (the watermarks are still recorded for comparison)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    res: dict[str, Any] = {"worker": cfg["worker"]}
    try:
        conf = {"bootstrap.servers": cfg["bootstrap"], "client.id": f"bench-c{cfg['worker']}",
                **CONSUMER_DEFAULTS, **cfg.get("consumer_conf", {})}
        c = Consumer(conf)
        topic = cfg["topic"]
        c.list_topics(topic=topic, timeout=15)
        targets: dict[int, int] = {int(k): v for k, v in cfg["targets"].items() if v > 0}
        watermarks = {}
        for part in targets:
            watermarks[part] = c.get_watermark_offsets(TopicPartition(topic, part), timeout=15)
        expected = sum(targets.values())
        barrier.wait(timeout=120)
        start = time.monotonic()
        deadline = start + cfg["time_cap"]
        min_seconds = cfg.get("min_seconds", 0.0)
        max_passes = cfg.get("max_passes", 1)
        n = nbytes = errs = passes = 0
        first_err = None
        end = start
        capped = False
        got: dict[int, int] = {}
        # Whole passes over the data, repeated while the measurement is shorter than min_seconds (a fast broker
        # reads the data set in well under a second, too short to time on a noisy machine).
        while passes < max_passes:
            c.assign([TopicPartition(topic, part, OFFSET_BEGINNING) for part in targets])
            pending = set(targets)
            got = dict.fromkeys(targets, 0)
            while pending and time.monotonic() < deadline:
                msgs = c.consume(num_messages=10_000, timeout=0.5)
                for m in msgs:
                    if m.error() is not None:
                        errs += 1
                        if first_err is None:
                            first_err = str(m.error())
                        continue
                    n += 1
                    nbytes += len(m)
                    part = m.partition()
                    got[part] += 1
                    if got[part] >= targets[part]:
                        pending.discard(part)
                if msgs:
                    end = time.monotonic()
            c.unassign()
            if pending:
                capped = True
                break
            passes += 1
            if end - start >= min_seconds:
                break
        c.close()
        res.update(start=start, end=end, records=n, bytes=nbytes, expected=expected, errors=errs, passes=passes,
                   first_error=first_err, capped=capped, last_pass_per_partition=got, watermarks=watermarks)
    except BrokenBarrierError:
        res["error"] = "barrier broken (another worker failed)"
    except Exception:  # noqa: BLE001
        res["error"] = traceback.format_exc(limit=3)
        with contextlib.suppress(Exception):
            barrier.abort()
    out.put(res)


# --------------------------------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------------------------------


@dataclass
class WorkerRun:
    results: list[dict]
    errors: list[str]
    probe_start: Any = None
    probe_end: Any = None

    @property
    def ok(self) -> list[dict]:
        return [r for r in self.results if "error" not in r]


def run_workers(target: Callable, cfgs: list[dict], hard_timeout: float,
                probe: Callable[[], Any] | None = None) -> WorkerRun:
    """Run ``target(cfg, barrier, queue)`` in one spawned process per cfg; ``probe`` is sampled at the barrier and
    after the last result arrives (used for the broker's CPU time). Processes still alive at the end are stopped by
    PID (SIGTERM, then SIGKILL)."""
    ctx = mp.get_context("spawn")  # no fork: the parent holds librdkafka threads
    barrier = ctx.Barrier(len(cfgs) + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(cfg, barrier, out), daemon=True) for cfg in cfgs]
    for pr in procs:
        pr.start()
    errors: list[str] = []
    run = WorkerRun(results=[], errors=errors)
    try:
        barrier.wait(timeout=120)
        run.probe_start = probe() if probe else None
    except BrokenBarrierError:
        errors.append("workers failed before the measured phase")
    deadline = time.monotonic() + hard_timeout
    while len(run.results) < len(cfgs):
        try:
            run.results.append(out.get(timeout=max(0.1, min(1.0, deadline - time.monotonic()))))
        except queue_mod.Empty:
            if time.monotonic() > deadline:
                errors.append(f"{len(cfgs) - len(run.results)} worker(s) gave no result within {hard_timeout:.0f}s")
                break
            if all(not pr.is_alive() for pr in procs) and out.empty():
                errors.append("worker process(es) died without a result")
                break
    run.probe_end = probe() if probe else None
    for pr in procs:
        pr.join(timeout=10)
        if pr.is_alive() and pr.pid:
            os.kill(pr.pid, signal.SIGTERM)
            pr.join(timeout=5)
            if pr.is_alive():
                os.kill(pr.pid, signal.SIGKILL)
                pr.join(timeout=5)
    for r in run.results:
        if "error" in r:
            errors.append(f"worker {r['worker']}: {r['error']}")
    return run


def aggregate_window(results: list[dict]) -> tuple[float, float]:
    """(first start, last end) over workers that produced a result."""
    if not results:
        return 0.0, 0.0
    return min(r["start"] for r in results), max(r["end"] for r in results)


def split(n: int, k: int) -> list[int]:
    """Split n into k near-equal positive parts."""
    k = max(1, min(k, n))
    return [n // k + (1 if i < n % k else 0) for i in range(k)]
