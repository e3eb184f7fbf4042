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
        conf = {
            "bootstrap.servers": cfg["bootstrap"],
            "acks": str(cfg["acks"]),
            "client.id": f"bench-p{cfg['worker']}",
            **PRODUCER_DEFAULTS,
            **cfg.get("producer_conf", {}),
        }
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
        res.update(
            start=start,
            end=end,
            sent=sent,
            delivered=st["ok"],
            bytes=st["bytes"],
            errors=st["err"],
            first_error=st["first_err"],
            undelivered=left,
            capped=capped,
            per_partition=per_part,
            latency_ms=_percentiles([x * 1000 for x in lat]),
        )
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
        conf = {
            "bootstrap.servers": cfg["bootstrap"],
            "acks": str(cfg["acks"]),
            "client.id": f"bench-l{cfg['worker']}",
            **PRODUCER_DEFAULTS,
            **cfg.get("producer_conf", {}),
        }
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
        res.update(
            start=start,
            end=st["last"] or time.monotonic(),
            sent=sent,
            delivered=st["ok"],
            errors=st["err"],
            first_error=st["first_err"],
            undelivered=left,
            bytes=st["ok"] * cfg["record_size"],
            produced_for=produced_for,
            achieved_rate_mbs=sent * cfg["record_size"] / MiB / max(produced_for, 1e-9),
            latencies_ms=[x * 1000 for x in lat],
        )
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
        conf = {
            "bootstrap.servers": cfg["bootstrap"],
            "client.id": f"bench-c{cfg['worker']}",
            **CONSUMER_DEFAULTS,
            **cfg.get("consumer_conf", {}),
        }
        c = Consumer(conf)
        topic = cfg["topic"]
        c.list_topics(topic=topic, timeout=15)
        targets: dict[int, int] = {int(k): v for k, v in cfg["targets"].items() if v > 0}
        watermarks = {}
        for p in targets:
            watermarks[p] = c.get_watermark_offsets(TopicPartition(topic, p), timeout=15)
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
                    assert part is not None  # a message (not an error event) always names its partition
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
        res.update(
            start=start,
            end=end,
            records=n,
            bytes=nbytes,
            expected=expected,
            errors=errs,
            passes=passes,
            first_error=first_err,
            capped=capped,
            last_pass_per_partition=got,
            watermarks=watermarks,
        )
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


def run_workers(
    target: Callable, cfgs: list[dict], hard_timeout: float, probe: Callable[[], Any] | None = None
) -> WorkerRun:
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


# --------------------------------------------------------------------------------------------------------------
# Consumer groups (subscribe): throughput of a stable group, and join time
# --------------------------------------------------------------------------------------------------------------

GROUP_CONSUMER_CONF = {
    "session.timeout.ms": 10_000,  # Tansu holds a JoinGroup for about session.timeout/2 (5 s here, 23 s at 45 s)
    "heartbeat.interval.ms": 1_000,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": True,  # a realistic group member: positions committed every 5 s
    "enable.auto.offset.store": True,
}


def group_consume_worker(cfg: dict, barrier, out) -> None:
    """One member of a consumer group (confluent-kafka ``subscribe``) for ``run_group_workers``.

    Join phase: subscribe at the barrier and poll with every assigned partition paused (nothing is fetched), reporting
    each assignment to the parent on ``cfg['status']``. When the parent sees the group stable (every partition owned,
    balanced) it sets ``cfg['go']``: the member resumes its partitions and reads them to ``cfg['targets']``, whole
    passes (seek to the beginning) while the measurement is shorter than ``min_seconds``. It then reports and stays in
    the group (polling) until ``cfg['stop']``, so finished members do not trigger a rebalance of the others."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    res: dict[str, Any] = {"worker": cfg["worker"]}
    reported = False
    status, go, stop = cfg["status"], cfg["go"], cfg["stop"]
    c = None
    try:
        conf = {
            "bootstrap.servers": cfg["bootstrap"],
            "client.id": f"bench-g{cfg['worker']}",
            **CONSUMER_DEFAULTS,
            **GROUP_CONSUMER_CONF,
            "group.id": cfg["group"],
        }
        c = Consumer(conf)
        topic = cfg["topic"]
        c.list_topics(topic=topic, timeout=15)
        targets = {int(k): int(v) for k, v in cfg["targets"].items()}
        st: dict[str, Any] = {"assigned": [], "go": False, "rebalances_after_go": 0, "first_assign": None}

        def on_assign(consumer, parts):
            consumer.assign(parts)
            if not st["go"]:
                consumer.pause(parts)
            else:
                st["rebalances_after_go"] += 1
            st["assigned"] = sorted(p.partition for p in parts)
            now = time.monotonic()
            if st["first_assign"] is None:
                st["first_assign"] = now
            status.put((cfg["worker"], st["assigned"], now))

        def on_revoke(consumer, parts):
            st["assigned"] = []
            status.put((cfg["worker"], [], time.monotonic()))

        barrier.wait(timeout=120)
        t_subscribe = time.monotonic()
        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        join_deadline = t_subscribe + cfg["join_timeout"]
        while not go.is_set():
            c.poll(0.05)
            if time.monotonic() > join_deadline:
                raise TimeoutError(f"group not stable within {cfg['join_timeout']}s (assigned {st['assigned']})")
        st["go"] = True
        start = time.monotonic()
        assigned = list(st["assigned"])
        c.resume([TopicPartition(topic, p) for p in assigned])
        deadline = start + cfg["time_cap"]
        min_seconds, max_passes = cfg.get("min_seconds", 0.0), cfg.get("max_passes", 1)
        n = nbytes = errs = passes = 0
        first_err = None
        end = start
        capped = False
        while passes < max_passes:
            assigned = list(st["assigned"])
            got = dict.fromkeys(assigned, 0)
            pending = {p for p in assigned if targets.get(p, 0) > 0}
            while pending and time.monotonic() < deadline:
                msgs = c.consume(num_messages=10_000, timeout=0.5)
                for m in msgs:
                    if m.error() is not None:
                        errs += 1
                        first_err = first_err or str(m.error())
                        continue
                    n += 1
                    nbytes += len(m)
                    part = m.partition()
                    assert part is not None  # a message (not an error event) always names its partition
                    got[part] = got.get(part, 0) + 1
                    if got[part] >= targets.get(part, 0):
                        pending.discard(part)
                if msgs:
                    end = time.monotonic()
            if pending:
                capped = True
                break
            passes += 1
            if end - start >= min_seconds:
                break
            for p in assigned:  # another pass over the same partitions
                c.seek(TopicPartition(topic, p, OFFSET_BEGINNING))
        res.update(
            start=start,
            end=end,
            records=n,
            bytes=nbytes,
            errors=errs,
            first_error=first_err,
            passes=passes,
            capped=capped,
            assigned=assigned,
            t_subscribe=t_subscribe,
            first_assign=st["first_assign"],
            rebalances_after_go=st["rebalances_after_go"],
        )
        out.put(res)
        reported = True
        with contextlib.suppress(Exception):
            while not stop.wait(0.05):  # stay in the group until every member is done
                c.poll(0)
    except BrokenBarrierError:
        res["error"] = "barrier broken (another worker failed)"
    except Exception:  # noqa: BLE001
        res["error"] = traceback.format_exc(limit=3)
        with contextlib.suppress(Exception):
            barrier.abort()
    finally:
        if not reported:
            out.put(res)
        if c is not None:
            with contextlib.suppress(Exception):
                c.close()


@dataclass
class GroupRun(WorkerRun):
    join: dict | None = None


def run_group_workers(
    cfgs: list[dict], partitions: int, hard_timeout: float, join_timeout: float, probe: Callable[[], Any] | None = None
) -> GroupRun:
    """Start ``group_consume_worker`` processes, wait until the group is stable (the members' latest assignments
    are disjoint, cover all ``partitions`` and differ by at most one partition), then start the measured phase.
    ``run.join`` has the join timings (first subscribe -> stable, per member subscribe -> first assignment)."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(cfgs) + 1)
    out, status = ctx.Queue(), ctx.Queue()
    go, stop = ctx.Event(), ctx.Event()
    cfgs = [{**c, "status": status, "go": go, "stop": stop, "join_timeout": join_timeout} for c in cfgs]
    procs = [ctx.Process(target=group_consume_worker, args=(c, barrier, out), daemon=True) for c in cfgs]
    for pr in procs:
        pr.start()
    run = GroupRun(results=[], errors=[])
    try:
        try:
            barrier.wait(timeout=120)
        except BrokenBarrierError:
            run.errors.append("workers failed before subscribing")
            raise
        t_sub = time.monotonic()
        latest: dict[int, list[int]] = {}
        assignments = 0
        deadline = t_sub + join_timeout
        stable_at = None
        while time.monotonic() < deadline:
            try:
                w, parts, _t = status.get(timeout=0.2)
                latest[w] = parts
                assignments += 1
            except queue_mod.Empty:
                pass
            owned = [p for ps in latest.values() for p in ps]
            sizes = [len(latest.get(i, [])) for i in range(len(cfgs))]
            if (
                len(owned) == partitions
                and len(set(owned)) == partitions
                and min(sizes) >= 1
                and max(sizes) - min(sizes) <= 1
            ):
                stable_at = time.monotonic()
                break
            if not out.empty() or all(not pr.is_alive() for pr in procs):
                break  # a worker failed during the join
        run.join = {
            "stable_s": None if stable_at is None else stable_at - t_sub,
            "assignment_events": assignments,
            "assignments": {str(k): v for k, v in sorted(latest.items())},
        }
        if stable_at is None:
            run.errors.append(f"group not stable within {join_timeout:.0f}s: {latest}")
        else:
            run.probe_start = probe() if probe else None
            go.set()
        deadline = time.monotonic() + hard_timeout
        while len(run.results) < len(cfgs):
            try:
                run.results.append(out.get(timeout=max(0.1, min(1.0, deadline - time.monotonic()))))
            except queue_mod.Empty:
                if time.monotonic() > deadline:
                    run.errors.append(f"{len(cfgs) - len(run.results)} member(s) gave no result")
                    break
                if all(not pr.is_alive() for pr in procs) and out.empty():
                    run.errors.append("member process(es) died without a result")
                    break
        run.probe_end = probe() if probe else None
    except BrokenBarrierError:
        pass
    finally:
        stop.set()
        for pr in procs:
            pr.join(timeout=15)
            if pr.is_alive() and pr.pid:
                os.kill(pr.pid, signal.SIGTERM)
                pr.join(timeout=5)
                if pr.is_alive():
                    os.kill(pr.pid, signal.SIGKILL)
                    pr.join(timeout=5)
    for r in run.results:
        if "error" in r:
            run.errors.append(f"member {r['worker']}: {r['error']}")
    return run


def join_worker(cfg: dict, barrier, out) -> None:
    """``cfg['runs']`` times: a new consumer in a new group subscribes to ``cfg['topic']`` (which holds records);
    time from ``subscribe()`` to its first assignment and to its first record. The consumer is connected (metadata
    fetched) before the clock starts; each run closes its consumer (LeaveGroup) before the next."""
    from confluent_kafka import Consumer

    res: dict[str, Any] = {"worker": cfg["worker"], "runs": []}
    try:
        barrier.wait(timeout=120)
        res["start"] = time.monotonic()
        for i in range(cfg["runs"]):
            conf = {
                "bootstrap.servers": cfg["bootstrap"],
                "client.id": f"bench-j{i}",
                **CONSUMER_DEFAULTS,
                **GROUP_CONSUMER_CONF,
                "group.id": f"{cfg['group_prefix']}-{i}",
                "enable.auto.commit": False,
            }
            c = Consumer(conf)
            try:
                c.list_topics(topic=cfg["topic"], timeout=15)
                st: dict[str, Any] = {"assign": None}

                def on_assign(consumer, parts, st=st):
                    if st["assign"] is None:
                        st["assign"] = time.monotonic()

                t0 = time.monotonic()
                c.subscribe([cfg["topic"]], on_assign=on_assign)
                first = None
                while time.monotonic() - t0 < cfg["run_cap"]:
                    m = c.poll(0.01)
                    if m is not None and m.error() is None:
                        first = time.monotonic()
                        break
                res["runs"].append(
                    {
                        "assign_s": None if st["assign"] is None else st["assign"] - t0,
                        "first_record_s": None if first is None else first - t0,
                    }
                )
            finally:
                c.close()
            if time.monotonic() - res["start"] > cfg["time_cap"]:
                break
        res["end"] = time.monotonic()
    except BrokenBarrierError:
        res["error"] = "barrier broken"
    except Exception:  # noqa: BLE001
        res["error"] = traceback.format_exc(limit=3)
        with contextlib.suppress(Exception):
            barrier.abort()
    out.put(res)
