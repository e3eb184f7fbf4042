"""Tiered storage benchmark (issue 4): Strata with KIP-405 remote storage on SeaweedFS, Strata only.

``run(results)`` (the optional-group interface of ``bench.run``) starts SeaweedFS (``weed mini``) and a Strata broker
of its own with ``remote.log.storage.manager.class.name=s3`` pointed at it, then measures, in one run:

1. **produce with tiering on vs off**: the same topic settings (1 partition, ``segment.bytes`` 8 MiB,
   ``local.retention.bytes`` 8 MiB) except ``remote.storage.enable``; the librdkafka producers of the main
   scenarios; repetitions alternate on/off and the medians are compared (aim: on >= 95 % of off). With tiering on,
   segments are uploaded to S3 while the producers run (``remote.log.manager.task.interval.ms`` 500).
2. **offload**: the data sets are the last two tiering-on topics (~200 MB each). The harness waits until the copy
   lag (``strata_remote_copy_lag_segments``, scraped from the tiered broker's Prometheus endpoint) is 0 and the
   earliest local offset (ListOffsets -4) has stopped moving: everything below it is only in S3.
3. **cold remote read**: the broker is restarted (chunk cache, manifests and remote indexes are in memory: cold),
   then one raw Fetch client (``bench/rawfetch.py``, no record decoding, 16 MiB per partition per request) reads
   [0, earliest local offset) of data set A -- all of it from S3 through the RemoteLogReader pool and the chunk
   cache -- then the same of data set B. A is the first read of a just-started process (its heap still growing:
   ~30 % more CPU per GiB); B is what a running broker's cold read costs, and carries the aim.
4. **raw GET**: after each cold read, the same bytes fetched directly with aiobotocore: list the partition's
   ``.log`` objects below the earliest local offset and GET each of them whole, one after the other (aim: cold read
   of B >= 80 % of this). Steps 3 and 4 repeat ``tiered_read_reps`` times and their medians are compared.
5. **warm remote read**: data set B again; the chunk cache (``rsm.config.fetch.chunk.cache.size`` 256 MiB, larger
   than one data set) serves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import tempfile
import time
import traceback
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from tests.support.s3_servers import ACCESS_KEY, REGION, SECRET_KEY, SeaweedServer

from . import load, rawfetch
from .brokers import Broker, free_port, make_strata

MiB = load.MiB
SEGMENT_BYTES = 8 * MiB
LOCAL_RETENTION_BYTES = 8 * MiB
CHUNK_CACHE_BYTES = 256 * MiB
KEY_PREFIX = "bench/"
_LOG_OBJECT = re.compile(r"/(\d{20})-[A-Za-z0-9_-]{22}\.log$")


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] tiered: {msg}", flush=True)


def scrape_metric(url: str, name: str, labels: dict[str, str]) -> float | None:
    """Value of one Prometheus sample (text format) whose labels include ``labels``; None if absent."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            try:
                return float(value)
            except ValueError:
                return None
    return None


REMOTE_READ_METRICS = (
    "strata_remote_fetch_requests_total",
    "strata_remote_fetch_bytes_total",
    "strata_delayed_remote_fetch_expires_total",
    "strata_remote_fetch_errors_total",
)


def remote_counters(url: str, topic: str) -> dict[str, float | None]:
    return {m: scrape_metric(url, m, {"topic": topic}) for m in REMOTE_READ_METRICS}


def _delta(a: dict, b: dict) -> dict:
    return {
        k.removeprefix("strata_").removesuffix("_total"): (b[k] - (a.get(k) or 0.0)) if b.get(k) is not None else None
        for k in b
    }


def _py_spy(pid: int, out: Path, seconds: float):
    """``BENCH_TIERED_PYSPY=DIR``: record the broker with py-spy (``pip install py-spy``) during a read."""
    import os
    import subprocess
    import sys

    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.environ.get("BENCH_TIERED_PYSPY") or not Path(exe).exists():
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [
            exe,
            "record",
            "-o",
            str(out),
            "--pid",
            str(pid),
            "-d",
            str(int(seconds)),
            "-r",
            "200",
            "-f",
            "raw",
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _produce(broker: Broker, topic: str, s, configs: dict[str, str], label: str) -> dict:
    import os

    broker.create_topic(topic, 1, s.topic_timeout, configs=configs)
    broker.wait_quiet()
    spy = _py_spy(broker.pid, Path(os.environ.get("BENCH_TIERED_PYSPY", ".")) / f"{label}.txt", 12)
    cfgs = [
        {
            "worker": i,
            "bootstrap": broker.bootstrap,
            "topic": topic,
            "acks": -1,
            "count": n,
            "record_size": s.record_size,
            "time_cap": s.produce_time_cap,
            "drain_grace": s.drain_grace,
        }
        for i, n in enumerate(load.split(s.produce_records, s.producer_procs))
    ]
    wr = load.run_workers(load.produce_worker, cfgs, s.produce_time_cap + s.drain_grace + 60, probe=broker.cpu)
    out: dict[str, Any] = {"topic": topic, "errors": list(wr.errors)}
    if spy is not None:
        spy.wait(timeout=60)
    ok = wr.ok
    if not ok:
        return out
    t0, t1 = load.aggregate_window(ok)
    secs = max(t1 - t0, 1e-9)
    nbytes = sum(r["bytes"] for r in ok)
    errs = sum(r["errors"] for r in ok)
    if errs:
        out["errors"].append(f"{errs} delivery errors")
    if any(r["capped"] for r in ok):
        out["errors"].append("produce hit its time cap")
    out.update(mib_s=nbytes / MiB / secs, seconds=secs, bytes=nbytes, end=t1, records=sum(r["delivered"] for r in ok))
    if wr.probe_start is not None and wr.probe_end is not None and nbytes:
        out["cpu_s_per_gib"] = (wr.probe_end - wr.probe_start) / (nbytes / (1024 * MiB))
    return out


def _raw_read(broker: Broker, topic: str, end_offset: int, s, metrics_url: str, label: str) -> dict:
    """One raw Fetch client reading partition 0 of ``topic`` over [0, end_offset), one pass."""
    import os

    before = remote_counters(metrics_url, topic)
    spy = _py_spy(broker.pid, Path(os.environ.get("BENCH_TIERED_PYSPY", ".")) / f"{label}.txt", 15)
    cfg = {
        "worker": 0,
        "bootstrap": broker.bootstrap,
        "topic": topic,
        "targets": {0: end_offset},
        "warmup_offsets": {0: end_offset},
        "max_bytes": 64 * MiB,
        "partition_max_bytes": 16 * MiB,
        "time_cap": s.tiered_read_time_cap,
        "min_seconds": 0.0,
        "max_passes": 1,
    }
    wr = load.run_workers(rawfetch.raw_fetch_worker, [cfg], s.tiered_read_time_cap + 60, probe=broker.cpu)
    out: dict[str, Any] = {"errors": list(wr.errors)}
    out["remote_metrics"] = _delta(before, remote_counters(metrics_url, topic))
    if spy is not None:
        spy.wait(timeout=60)
    if not wr.ok:
        return out
    r = wr.ok[0]
    secs = max(r["end"] - r["start"], 1e-9)
    out.update(
        mib_s=r["bytes"] / MiB / secs, seconds=secs, bytes=r["bytes"], requests=r["requests"], passes=r["passes"]
    )
    if r["capped"]:
        out["errors"].append(f"read hit its {s.tiered_read_time_cap}s cap after {r['bytes'] / MiB:.0f} MiB")
    if r["errors"]:
        out["errors"].append(f"{r['errors']} partition errors, first: {r['first_error']}")
    if wr.probe_start is not None and wr.probe_end is not None and r["bytes"]:
        out["cpu_s_per_gib"] = (wr.probe_end - wr.probe_start) / (r["bytes"] / (1024 * MiB))
    return out


async def _raw_get(endpoint: str, bucket: str, keys: list[str]) -> dict:
    """GET every key whole, one after the other, with aiobotocore (the RSM's client library and settings)."""
    from aiobotocore.config import AioConfig
    from aiobotocore.session import get_session

    cfg = AioConfig(
        region_name=REGION,
        signature_version="s3v4",
        s3={"addressing_style": "path"},
        retries={"total_max_attempts": 1, "mode": "standard"},
        connect_timeout=30,
        read_timeout=30,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    async with get_session().create_client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        config=cfg,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    ) as client:
        # one small request first so connection setup and botocore's model loading are not timed
        await client.head_bucket(Bucket=bucket)
        t0 = time.monotonic()
        total = 0
        for key in keys:
            resp = await client.get_object(Bucket=bucket, Key=key)
            async with resp["Body"] as body:
                total += len(await body.read())
        secs = max(time.monotonic() - t0, 1e-9)
    return {"mib_s": total / MiB / secs, "seconds": secs, "bytes": total, "objects": len(keys)}


def _wait_offloaded(broker: Broker, topic: str, metrics_url: str, timeout: float) -> dict:
    """Until the copy lag of ``topic`` is 0 and its earliest local offset has not moved for 2 s."""
    t0 = time.monotonic()
    last_local, since = None, t0
    state: dict[str, Any] = {}
    while time.monotonic() - t0 < timeout:
        _, local = rawfetch.list_offset(broker.bootstrap, topic, 0, -4)
        _, tiered = rawfetch.list_offset(broker.bootstrap, topic, 0, -5)
        _, leo = rawfetch.list_offset(broker.bootstrap, topic, 0, -1)
        lag = scrape_metric(metrics_url, "strata_remote_copy_lag_segments", {"topic": topic})
        state = {"earliest_local": local, "latest_tiered": tiered, "log_end": leo, "copy_lag_segments": lag}
        if local != last_local:
            last_local, since = local, time.monotonic()
        if local > 0 and tiered >= local - 1 and (lag is None or lag == 0) and time.monotonic() - since >= 2.0:
            state["seconds"] = time.monotonic() - t0
            return state
        time.sleep(0.5)  # polling interval of a condition wait
    state["timeout"] = True
    state["seconds"] = time.monotonic() - t0
    return state


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _each(runs: list[dict]) -> str:
    return ", ".join(f"{r.get('mib_s', 0):.0f}" for r in runs)


def _median(xs: list[float]) -> float | None:
    s = sorted(xs)
    return s[(len(s) - 1) // 2] if s else None


def run(results: dict) -> None:
    """Optional group ``tiered``: appends a section to ``results['sections']``."""
    from .scenarios import Settings

    ctx = results.get("bench", {})
    s = Settings(**results["settings"]) if "settings" in results else Settings()
    out_dir = Path(ctx.get("log_dir") or "bench/results/logs")
    section: dict[str, Any] = {
        "name": "tiered",
        "title": "Tiered storage (KIP-405) on SeaweedFS, Strata only",
        "intro": (
            "One Strata broker with `remote.log.storage.manager.class.name=s3` on a local SeaweedFS "
            "(`weed mini`), a 1-partition topic with `segment.bytes`=8 MiB and `local.retention.bytes`=8 MiB. "
            "Ratios compare Strata with the reference in the same run (higher is better)."
        ),
        "columns": ["measurement", "Strata", "reference", "ratio", "aim"],
        "rows": [],
        "errors": [],
        "notes": [],
        "raw": {},
    }
    results.setdefault("sections", []).append(section)
    raw = section["raw"]
    work = Path(tempfile.mkdtemp(prefix="strata-bench-tiered-"))
    s3 = SeaweedServer(work / "s3")
    out_dir.mkdir(parents=True, exist_ok=True)
    s3.log_path = out_dir / "seaweedfs.log"
    broker: Broker | None = None
    t_start = time.monotonic()
    try:
        log("starting SeaweedFS")
        s3.start()
        raw["seaweedfs"] = {"endpoint": s3.endpoint, "pid": s3.pid}
        mport = free_port()
        metrics_url = f"http://127.0.0.1:{mport}/metrics"
        overrides = [
            "remote.log.storage.system.enable=true",
            "remote.log.storage.manager.class.name=s3",
            *(f"rsm.config.{k}={v}" for k, v in s3.rsm_config(**{"key.prefix": KEY_PREFIX}).items()),
            f"rsm.config.fetch.chunk.cache.size={CHUNK_CACHE_BYTES}",
            "remote.log.manager.task.interval.ms=500",
            "log.retention.check.interval.ms=500",
            "log.segment.delete.delay.ms=0",
            "remote.log.metadata.topic.num.partitions=5",
            f"metrics.listener={metrics_url}",
            *ctx.get("strata_overrides", []),
        ]
        broker = make_strata(
            out_dir,
            extra_overrides=overrides,
            name="strata-tiered",
            source_dir=Path(ctx["strata_dir"]) if ctx.get("strata_dir") else None,
        )
        raw["cmd"] = broker.cmd
        broker.start()
        log(f"Strata up on {broker.bootstrap} (S3 at {s3.endpoint})")
        base_cfg = {"segment.bytes": str(SEGMENT_BYTES), "local.retention.bytes": str(LOCAL_RETENTION_BYTES)}

        # 1. produce with tiering on / off, alternating; the last "on" topic is the read data set
        prod: dict[str, list[dict]] = {"on": [], "off": []}
        reps = max(1, s.tiered_produce_reps)
        data_topics: list[str] = []  # the last two "on" topics: the read data sets
        for rep in range(reps):
            for mode in ("off", "on") if rep % 2 == 0 else ("on", "off"):
                topic = f"bench-tiered-{mode}-{uuid.uuid4().hex[:6]}"
                cfg = {**base_cfg, "remote.storage.enable": "true" if mode == "on" else "false"}
                r = _produce(broker, topic, s, cfg, f"produce-{mode}-{rep}")
                r["rep"] = rep
                prod[mode].append(r)
                log(
                    f"produce tiering {mode} rep {rep + 1}: {r.get('mib_s', 0):.1f} MiB/s "
                    f"{'; '.join(r['errors']) if r['errors'] else ''}"
                )
                section["errors"] += [f"produce tiering {mode}: {e}" for e in r["errors"]]
                if mode == "on":
                    data_topics.append(topic)
                    if len(data_topics) > 2:
                        broker.delete_topic(data_topics.pop(0))  # keep S3 and the copier to two data sets
                else:
                    broker.delete_topic(topic)
        raw["produce"] = prod
        on = _median([r["mib_s"] for r in prod["on"] if "mib_s" in r])
        off = _median([r["mib_s"] for r in prod["off"] if "mib_s" in r])
        cpu_on = _median([r["cpu_s_per_gib"] for r in prod["on"] if "cpu_s_per_gib" in r])
        cpu_off = _median([r["cpu_s_per_gib"] for r in prod["off"] if "cpu_s_per_gib" in r])
        section["rows"] += [
            ["produce 1p acks=-1, tiering on vs off (MiB/s)", on, off, _ratio(on, off), ">= 0.95"],
            ["produce, broker CPU s/GiB, tiering on vs off", cpu_on, cpu_off, _ratio(cpu_on, cpu_off), "lower"],
        ]
        if not data_topics or not prod["on"] or "mib_s" not in prod["on"][-1]:
            section["errors"].append("no tiered data set was produced; remote reads skipped")
            return
        if len(data_topics) < 2:  # one repetition (--quick): data set B is produced for the reads only
            topic = f"bench-tiered-on-{uuid.uuid4().hex[:6]}"
            extra = _produce(broker, topic, s, {**base_cfg, "remote.storage.enable": "true"}, "produce-b")
            section["errors"] += [f"produce of data set B: {e}" for e in extra["errors"]]
            data_topics.append(topic)

        # 2. offload (both data sets)
        # the last-produced data set first: its wait starts when its produce ended, so its time is the offload's
        states: dict[str, dict] = {}
        for topic in reversed(data_topics):
            state = states[topic] = _wait_offloaded(broker, topic, metrics_url, s.tiered_offload_timeout)
            raw.setdefault("offload", {})[topic] = state
            log(f"offload {topic}: {state}")
            if state.get("timeout"):
                section["errors"].append(f"offload not complete within {s.tiered_offload_timeout}s: {state}")
            if state["earliest_local"] <= 0:
                section["errors"].append(f"nothing of {topic} was moved to remote storage; remote reads skipped")
                return
        ends = [states[t]["earliest_local"] for t in data_topics]
        off_state = states[data_topics[-1]]
        section["notes"].append(
            f"data sets: the last two tiering-on topics, {prod['on'][-1]['records']} records "
            f"({prod['on'][-1]['bytes'] / MiB:.0f} MiB of values) each; offsets [0, {ends[0]}) and [0, {ends[1]}) "
            f"only in S3 after offload ({off_state['seconds']:.1f}s after the last produce)"
        )

        def objects(topic: str, end: int) -> list[str]:
            out = []
            for key in s3.keys(f"{KEY_PREFIX}{topic}-0-"):
                m = _LOG_OBJECT.search(key)
                if m and int(m.group(1)) < end:
                    out.append(key)
            return out

        objs = [objects(t, e) for t, e in zip(data_topics, ends)]

        # 3./4. per repetition: restart the broker; cold read of data set A (the first read of a just-started
        # broker), raw GET of A; cold read of data set B (a running broker reading what it never read: the usual
        # cold read), raw GET of B. Medians compared (one 0.3 s read varies by 10-20 % between repetitions).
        runs: dict[str, list[dict]] = {"restart": [], "running": [], "raw_a": [], "raw_b": []}
        restart_s = 0.0
        for rep in range(max(1, s.tiered_read_reps)):
            restart_s = broker.restart()
            deadline = time.monotonic() + 60
            for topic, end in zip(data_topics, ends):  # remote metadata loaded again (ListOffsets -5, the RLMM)
                while time.monotonic() < deadline:
                    err, tiered = rawfetch.list_offset(broker.bootstrap, topic, 0, -5)
                    if err == 0 and tiered >= end - 1:
                        break
                    time.sleep(0.2)  # polling interval of a condition wait
            broker.wait_quiet()
            for kind, topic, end, keys, raw_kind in (
                ("restart", data_topics[0], ends[0], objs[0], "raw_a"),
                ("running", data_topics[1], ends[1], objs[1], "raw_b"),
            ):
                cold = _raw_read(broker, topic, end, s, metrics_url, f"cold-{kind}-{rep}")
                runs[kind].append(cold)
                log(
                    f"cold remote read ({kind}) rep {rep + 1}: {cold.get('mib_s', 0):.1f} MiB/s "
                    f"{cold['remote_metrics']} {cold['errors'] or ''}"
                )
                section["errors"] += [f"cold read ({kind}): {e}" for e in cold["errors"]]
                rawget = asyncio.run(_raw_get(s3.endpoint, s3.bucket, keys)) if keys else {"errors": ["no objects"]}
                runs[raw_kind].append(rawget)
                log(f"raw GET rep {rep + 1}: {rawget.get('mib_s', 0):.1f} MiB/s ({len(keys)} objects)")
        raw["cold"] = runs

        def med(kind: str, key: str = "mib_s") -> float | None:
            return _median([r[key] for r in runs[kind] if key in r])

        cold_mib_s, cold_cpu, g = med("running"), med("running", "cpu_s_per_gib"), med("raw_b")
        restart_mib_s, restart_cpu, g_a = med("restart"), med("restart", "cpu_s_per_gib"), med("raw_a")

        # 5. warm read (chunk cache): data set B again
        broker.wait_quiet()
        warm = _raw_read(broker, data_topics[1], ends[1], s, metrics_url, "warm")
        raw["warm"] = warm
        log(f"warm remote read: {warm.get('mib_s', 0):.1f} MiB/s {warm['remote_metrics']} {warm['errors'] or ''}")
        section["errors"] += [f"warm read: {e}" for e in warm["errors"]]

        section["rows"] += [
            [
                "cold remote read (MiB/s) vs raw aiobotocore GET of the same objects",
                cold_mib_s,
                g,
                _ratio(cold_mib_s, g),
                ">= 0.80",
            ],
            [
                "cold remote read, first read after a broker restart (MiB/s) vs raw GET",
                restart_mib_s,
                g_a,
                _ratio(restart_mib_s, g_a),
                "—",
            ],
            [
                "warm remote read, chunk cache (MiB/s) vs raw GET",
                warm.get("mib_s"),
                g,
                _ratio(warm.get("mib_s"), g),
                "—",
            ],
            ["cold remote read, broker CPU s/GiB", cold_cpu, None, None, "—"],
            ["cold remote read after a restart, broker CPU s/GiB", restart_cpu, None, None, "—"],
            ["warm remote read, broker CPU s/GiB", warm.get("cpu_s_per_gib"), None, None, "—"],
            ["offload: last produce -> copied and local retention done (s)", off_state.get("seconds"), None, None, "—"],
        ]
        section["notes"].append(
            f"reads: one raw Fetch client (no record decoding, Fetch v11, 16 MiB per partition per request) over "
            f"[0, earliest local offset); each repetition restarts the broker ({restart_s:.1f}s) and reads data set A "
            f"(the first read of the new process) then data set B (cold: never read by this broker), each followed "
            f"by a raw GET of the same `.log` objects ({len(objs[1])}), whole, sequentially, with aiobotocore; "
            f"{len(runs['running'])} repetitions, medians compared (MiB/s cold: {_each(runs['running'])}; raw GET: "
            f"{_each(runs['raw_b'])}; after a restart: {_each(runs['restart'])}; raw GET: {_each(runs['raw_a'])}); "
            f"warm = data set B again"
        )
        section["plot"] = {
            "title": "tiered storage (MiB/s, higher is better)",
            "bars": [
                ("produce, tiering off", off),
                ("produce, tiering on", on),
                ("raw S3 GET", g),
                ("cold remote read", cold_mib_s),
                ("warm remote read", warm.get("mib_s")),
            ],
        }
    except Exception as e:  # noqa: BLE001 - a failure here must not lose the rest of the run
        section["errors"].append(f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}")
        if broker is not None:
            section["errors"].append("strata-tiered log tail:\n" + broker.log_tail(15))
    finally:
        if broker is not None:
            with contextlib.suppress(Exception):
                raw["peak_rss_mib"] = broker.peak_rss()
            broker.stop()
        s3.stop()
        shutil.rmtree(work, ignore_errors=True)
        section["wall_s"] = time.monotonic() - t_start
        log(f"done in {section['wall_s']:.0f}s")
