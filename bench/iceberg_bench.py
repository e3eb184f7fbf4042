"""Iceberg topics: translation vs produce throughput, and Spark queries over a topic's table vs the topic itself.

Translation throughput against produce throughput on one partition, and two Spark queries (an aggregate, a
per-partition scan) over a topic read from its Iceberg table against the same topic read in direct and broker mode.

    python -m bench.iceberg_bench [--mib 512] [--translate-mib 128] [--reps 2] [--tier s3|local|both] [--quick]
                                  [--json F]

or from the harness: ``from bench import iceberg_bench; iceberg_bench.run(results)`` (adds ``results["iceberg"]``).

Set-up (not timed): SeaweedFS (``weed mini``) as the S3 server, one Strata broker tiering to it, with Iceberg topics
in its embedded SQLite catalog and the warehouse in the same bucket (the broker's defaults).

1. **Translation vs produce** (aim: >= 0.5). A one-partition topic with ``iceberg.enable=true`` and
   ``iceberg.target.lag.ms=1000``; an idempotent confluent-kafka producer (acks=all, 1 KiB incompressible values)
   sends ``--translate-mib`` as fast as the broker takes them while the translator runs beside it on the same 2
   cores. Produce rate = records / produce time; translation rate = records / the time from the first send until
   the table's committed next offset (its snapshot summary) reaches the log end. Their ratio is the figure.
2. **Spark queries** (aim: table >= 2x direct). A 2-partition tiered topic (``local.retention.bytes=1``, so almost
   all of it lives only in the tier) with ``iceberg.enable=true`` and ``iceberg.target.lag.ms=30000`` (so the
   translator commits by size, not a small file a second) is filled with ``--mib`` (default 512) and fully
   translated. Then one local SparkSession runs two queries over it: the aggregate ``count(*), sum(length(value)) +
   sum(length(key)), count(DISTINCT key)`` (whose key shuffle every read pays alike) and the scan-bound query a
   pipeline runs per partition, ``groupBy(partition)`` with ``count(*), sum(length(value)), min(offset),
   max(offset)`` (each partition's offsets checked to be 0..n-1). Each read is warmed up once with both, then
   timed in ``--reps`` rounds over all reads (best wall time, least CPU seconds of Spark's processes):
   ``strata.pipeline.read_table`` (the table: Spark's own Parquet reader on the files pyiceberg plans, the row the
   issue names), ``format("strata-iceberg")`` (the table through the Python data source), ``format("strata")``
   with ``read.mode=direct`` (tiered segments decoded by the executors) and with ``read.mode=broker``. MB/s counts
   key + value bytes for the aggregate, value bytes for the per-partition query.
3. **Where**: ``--tier s3`` (SeaweedFS: translation and the reads, warehouse in the bucket), ``--tier local``
   (LocalTieredStorage, warehouse on a file path beside it) or ``both`` (the default). ``read_table`` needs the JVM
   to open the table's files: always on a file path; on S3 only with Hadoop's S3A file system (hadoop-aws and the
   AWS SDK bundle on Spark's class path), which the pyspark wheel does not ship. Without it the S3 tier reports the
   ``read_table`` row as not run, and why, rather than timing its fallback (``strata-iceberg``) twice.

``--quick`` (the bench's own test) uses 4 MiB and one repetition.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
VALUE_BYTES = 1024
TRANSLATE_TOPIC = "iceberg-bench-translate"
READ_TOPIC = "iceberg-bench-read"
AGGREGATE = ("count(*) AS n", "sum(length(value)) + sum(length(key)) AS b", "count(DISTINCT key) AS k")
# the scan-bound query a pipeline runs per partition: no shuffle beyond one row per partition, so the read itself
# is most of its cost (AGGREGATE's count(DISTINCT key) shuffles every key, which every reader pays alike)
PER_PARTITION = (
    "count(*) AS n",
    "sum(length(value)) AS b",
    "min(offset) AS lo",
    "max(offset) AS hi",
)
QUERIES = ("aggregate", "per_partition")


def _produce(bootstrap: str, topic: str, partitions: int, mib: int) -> tuple[int, float]:
    """Returns (records, seconds from the first send until all are acknowledged)."""
    from bench.spark_bench import _fill

    t0 = time.monotonic()
    n, _ = _fill(bootstrap, partitions, mib, topic)
    return n, time.monotonic() - t0


def _catalog_options(broker: Any, s3: Any, prefix: str) -> dict[str, str]:
    """The ``strata-iceberg`` options for the broker's default catalog (SQLite under its log dir, warehouse in S3)."""
    return {
        "iceberg.catalog.uri": f"sqlite:///{broker.log_dir}/iceberg/catalog.db",
        "iceberg.catalog.warehouse": f"s3://{s3.bucket}/{prefix}iceberg/",
        "iceberg.catalog.prop.s3.endpoint": s3.endpoint,
        "iceberg.catalog.prop.s3.region": "us-east-1",
        "iceberg.catalog.prop.s3.access-key-id": "strata-test",
        "iceberg.catalog.prop.s3.secret-access-key": "strata-test-secret",
        "iceberg.catalog.prop.s3.path-style-access": "true",
    }


def _wait_translated(catalog_opts: dict[str, str], topic: str, ends: dict[int, int], timeout: float) -> float:
    """Wait until the table's committed next offsets reach ``ends``; returns the monotonic time it did."""
    from strata.pipeline.table_planning import load_table, parse_table_options
    from strata.remote.iceberg.offsets import committed_next_offsets

    opts = parse_table_options({"subscribe": topic, **catalog_opts})
    deadline = time.monotonic() + timeout
    seen: dict[int, int] = {}
    while time.monotonic() < deadline:
        try:
            seen = committed_next_offsets(load_table(opts))
        except Exception:  # noqa: BLE001 - no table before the first commit
            seen = {}
        if all(seen.get(p, 0) >= end for p, end in ends.items()):
            return time.monotonic()
        time.sleep(0.1)  # polling interval of a bounded condition wait
    raise RuntimeError(f"{topic}: the table reached {seen}, not {ends}, within {timeout:.0f} s")


def _create(bootstrap: str, topic: str, partitions: int, configs: dict[str, str]) -> None:
    from strata.cli.admin_client import AdminClient

    with AdminClient(bootstrap) as a:
        a.create_topic(topic, partitions, 1, {"iceberg.enable": "true", **configs})


def _ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from strata.cli.admin_client import AdminClient

    with AdminClient(bootstrap) as a:
        return dict(a.list_offsets(topic, range(partitions), -1))


def measure_translation(broker: Any, catalog_opts: dict[str, str], mib: int) -> dict[str, Any]:
    _create(broker.bootstrap, TRANSLATE_TOPIC, 1, {"iceberg.target.lag.ms": "1000"})
    t0 = time.monotonic()
    records, produce_s = _produce(broker.bootstrap, TRANSLATE_TOPIC, 1, mib)
    done = _wait_translated(catalog_opts, TRANSLATE_TOPIC, _ends(broker.bootstrap, TRANSLATE_TOPIC, 1), 900)
    translate_s = done - t0
    return {
        "records": records,
        "mib": mib,
        "produce_s": round(produce_s, 2),
        "produce_mb_per_s": round(records * VALUE_BYTES / produce_s / 1e6, 1),
        "translate_s": round(translate_s, 2),
        "translate_mb_per_s": round(records * VALUE_BYTES / translate_s / 1e6, 1),
        "translate_vs_produce": round(produce_s / translate_s, 2),
    }


def _tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system, reaped children included) of ``root`` and its descendants, from /proc (0.0 where
    there is no /proc)."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, int] = {}
    for d in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # from field 3 (state) on: ppid, ..., utime stime cutime cstime
        children.setdefault(int(fields[1]), []).append(int(d))
        cpu[int(d)] = sum(int(x) for x in fields[11:15])
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += cpu.get(pid, 0)
        stack.extend(children.get(pid, ()))
    return total / os.sysconf("SC_CLK_TCK")


# live JVM threads by name prefix: the executor's task threads, HotSpot's JIT compilers, the garbage collector's
JVM_THREADS = (
    ("Executor task", "tasks"),
    ("C1 CompilerThre", "jit"),
    ("C2 CompilerThre", "jit"),
    ("GC Thread", "gc"),
    ("G1 ", "gc"),
    ("VM Thread", "gc"),
)
CPU_PARTS = ("tasks", "jit", "gc", "jvm_other", "python")


def _proc_cpu_ticks(stat_path: str) -> tuple[str, int]:
    """(name, user + system ticks) of a /proc process or thread."""
    stat = Path(stat_path).read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return stat[stat.index("(") + 1 : stat.rindex(")")], int(fields[11]) + int(fields[12])


def _spark_cpu(spark: Any) -> dict[str, float]:
    """CPU seconds so far of the Spark driver (this process) and the local JVM with its Python workers (the work a
    read costs, which the shared machine's load inflates less than wall time), split into the JVM's task threads,
    JIT compilers, garbage collector, its other threads (the scheduler, planning, threads gone since), and Python
    (the driver and the workers). Only ``python`` (the driver) where there is no local JVM or no /proc."""
    out = dict.fromkeys(CPU_PARTS, 0.0)
    out["python"] = time.process_time()
    try:
        jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        _, jvm_ticks = _proc_cpu_ticks(f"/proc/{jvm}/stat")
    except Exception:  # noqa: BLE001 - no local JVM (Spark Connect) or no /proc: the driver alone
        return out
    tick = os.sysconf("SC_CLK_TCK")
    threads = 0.0
    for tid in os.listdir(f"/proc/{jvm}/task"):
        try:
            name, ticks = _proc_cpu_ticks(f"/proc/{jvm}/task/{tid}/stat")
        except (OSError, ValueError):
            continue  # the thread ended meanwhile
        part = next((p for prefix, p in JVM_THREADS if name.startswith(prefix)), "")
        if part:
            out[part] += ticks / tick
            threads += ticks / tick
    out["jvm_other"] = jvm_ticks / tick - threads
    out["python"] += _tree_cpu_s(jvm) - jvm_ticks / tick
    return out


def _aggregate(
    spark: Any, fmt: str, options: dict[str, str], query: str = "aggregate"
) -> tuple[float, dict[str, float], int, int]:
    """``query`` (``aggregate``: AGGREGATE; ``per_partition``: PER_PARTITION grouped by partition) over
    ``format(fmt)``, or over ``strata.pipeline.read_table`` for fmt ``read_table``: (wall seconds, CPU seconds by
    part (``_spark_cpu``), records, bytes: key + value for ``aggregate``, value for ``per_partition``)."""
    from pyspark.sql import functions as F

    from strata.pipeline import read_table

    c0, t0 = _spark_cpu(spark), time.monotonic()
    if fmt == "read_table":
        df = read_table(spark, options["subscribe"], options)
    else:
        df = spark.read.format(fmt).options(**options).load()
    if query == "per_partition":
        rows = df.groupBy("partition").agg(*(F.expr(e) for e in PER_PARTITION)).collect()
        _check_per_partition(rows)
        n, nbytes = sum(int(r["n"]) for r in rows), sum(int(r["b"] or 0) for r in rows)
    else:
        row = df.selectExpr(*AGGREGATE).collect()[0]
        n, nbytes = int(row["n"]), int(row["b"] or 0)
    seconds, c1 = time.monotonic() - t0, _spark_cpu(spark)
    return seconds, {k: c1[k] - c0[k] for k in CPU_PARTS}, n, nbytes


def _check_per_partition(rows: list[Any]) -> None:
    """Each partition's offsets are 0..n-1 (the bench's topics are never truncated): a reader that lost or repeated
    records fails here, not only in the total count."""
    for r in rows:
        if (r["lo"], r["hi"]) != (0, int(r["n"]) - 1):
            raise RuntimeError(f"partition {r['partition']}: offsets {r['lo']}..{r['hi']} for {r['n']} records")


def _read_table_unavailable(spark: Any, catalog_opts: dict[str, str]) -> str:
    """Why ``read_table`` cannot read this warehouse with Spark's Parquet reader ("" when it can)."""
    from strata.pipeline.table_native import s3a_available

    if catalog_opts["iceberg.catalog.warehouse"].startswith("file:") or s3a_available(spark):
        return ""
    return (
        "not run: the warehouse is in S3 and this Spark has no S3A file system (the pyspark wheel ships "
        "hadoop-client 3.5 without hadoop-aws and the AWS SDK bundle); read_table would fall back to strata-iceberg"
    )


def _s3a_conf(catalog_opts: dict[str, str]) -> dict[str, str]:
    """Hadoop S3A settings for the bench's S3 server (used only when hadoop-aws is on Spark's class path)."""
    prop = "iceberg.catalog.prop.s3."
    if prop + "endpoint" not in catalog_opts:
        return {}
    return {
        "spark.hadoop.fs.s3a.endpoint": catalog_opts[prop + "endpoint"],
        "spark.hadoop.fs.s3a.endpoint.region": catalog_opts[prop + "region"],
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.access.key": catalog_opts[prop + "access-key-id"],
        "spark.hadoop.fs.s3a.secret.key": catalog_opts[prop + "secret-access-key"],
    }


def measure_reads(
    broker: Any, direct_opts: dict[str, str], catalog_opts: dict[str, str], mib: int, reps: int, lag_ms: int
) -> dict:
    from bench.spark_bench import _wait_offloaded
    from strata.pipeline.session import get_spark

    partitions = 2
    _create(
        broker.bootstrap,
        READ_TOPIC,
        partitions,
        {
            "remote.storage.enable": "true",
            "segment.bytes": str(8 << 20),
            "local.retention.bytes": "1",
            "retention.ms": "-1",
            "iceberg.partition.spec": "",
            # commits by size (iceberg.translator.max.file.bytes) while the topic fills, not every second: the
            # table's files are what a topic gets once translation keeps up, not a file per second of backlog
            "iceberg.target.lag.ms": str(lag_ms),
        },
    )
    records, _ = _produce(broker.bootstrap, READ_TOPIC, partitions, mib)
    _wait_translated(catalog_opts, READ_TOPIC, _ends(broker.bootstrap, READ_TOPIC, partitions), 1800)
    _wait_offloaded(broker.bootstrap, partitions, topic=READ_TOPIC)
    spark = get_spark("strata-iceberg-bench", conf=_s3a_conf(catalog_opts))
    try:
        base = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": READ_TOPIC}
        table_opts = {"subscribe": READ_TOPIC, **catalog_opts}
        readers = {
            "table": ("strata-iceberg", table_opts),
            "direct": ("strata", {**base, "read.mode": "direct", **direct_opts}),
            "broker": ("strata", base),
        }
        out: dict[str, Any] = {"mib": mib, "records": records}
        why = _read_table_unavailable(spark, catalog_opts)
        if why:
            out["table_jvm_skipped"] = why
        else:
            readers = {"table_jvm": ("read_table", table_opts), **readers}
        for fmt, o in readers.values():  # warm-up: Python workers, imports, JIT
            for query in QUERIES:
                _aggregate(spark, fmt, o, query)
        # rounds over all readers, not one reader's repetitions in a row: a burst of load from other jobs, or the
        # JIT still warming, then weighs on every reader alike
        per_partition: dict[str, Any] = {}
        for _ in range(reps):
            for query in QUERIES:
                into = out if query == "aggregate" else per_partition
                for name, (fmt, o) in readers.items():
                    seconds, cpu, n, nbytes = _aggregate(spark, fmt, o, query)
                    if n != records:
                        raise RuntimeError(f"{name} ({query}): {n} records, expected {records}")
                    _keep_best(into, name, seconds, cpu, nbytes)
        _ratios(out)
        _ratios(per_partition)
        out["per_partition"] = per_partition
        return out
    finally:
        spark.stop()


def _keep_best(into: dict[str, Any], name: str, seconds: float, cpu: dict[str, float], nbytes: int) -> None:
    """Best wall time and least CPU (with that round's split) over the rounds: each the figure the other jobs' load
    inflated least."""
    prev = into.get(name)
    cpu_s = round(sum(cpu.values()), 2)
    if prev is None or seconds < prev["seconds"]:
        into[name] = {"seconds": round(seconds, 2), "mb_per_s": round(nbytes / seconds / 1e6, 1)}
    if prev is None or cpu_s < prev["cpu_s"]:
        into[name]["cpu_s"], into[name]["cpu_split"] = cpu_s, {k: round(v, 2) for k, v in cpu.items()}
    else:
        into[name]["cpu_s"], into[name]["cpu_split"] = prev["cpu_s"], prev["cpu_split"]


def _ratios(r: dict[str, Any]) -> None:
    """The table reads against the topic reads: by throughput (wall) and by CPU seconds (direct's / the table's)."""
    for table in ("table", "table_jvm"):
        if table in r:
            r[f"{table}_vs_direct"] = round(r[table]["mb_per_s"] / r["direct"]["mb_per_s"], 2)
            r[f"{table}_vs_broker"] = round(r[table]["mb_per_s"] / r["broker"]["mb_per_s"], 2)
            if r[table]["cpu_s"] > 0:
                r[f"{table}_cpu_vs_direct"] = round(r["direct"]["cpu_s"] / r[table]["cpu_s"], 2)


def _tiered_broker(work: Path, tier: str, s3: Any, prefix: str) -> Any:
    from tests.support.broker_proc import StrataBroker

    rsm: dict[str, object] = (
        {f"rsm.config.{k}": v for k, v in s3.rsm_config(**{"key.prefix": prefix}).items()}
        if tier == "s3"
        else {"rsm.config.dir": str(work / "tiered")}
    )
    overrides: dict[str, object] = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": tier,
        "remote.log.manager.task.interval.ms": 300,
        "remote.log.metadata.topic.num.partitions": 5,
        "log.retention.check.interval.ms": 300,
        "log.segment.delete.delay.ms": 0,
        **rsm,
    }
    return StrataBroker(work / f"broker-{tier}", overrides, name=f"strata-iceberg-bench-{tier}")


def measure_local(work: Path, mib: int, reps: int) -> dict[str, Any]:
    """The Spark aggregate with LocalTieredStorage: the warehouse on a file path, so Spark's Parquet reader
    (``read_table``) can open it; direct mode reads the same local tier."""
    broker = _tiered_broker(work, "local", None, "")
    try:
        broker.start()
        tier_dir = work / "tiered"
        catalog_opts = {
            "iceberg.catalog.uri": f"sqlite:///{broker.log_dir}/iceberg/catalog.db",
            "iceberg.catalog.warehouse": f"file://{tier_dir.resolve() / 'iceberg'}",
        }
        direct = {"rsm.class.name": "local", "rsm.config.dir": str(tier_dir)}
        return measure_reads(broker, direct, catalog_opts, mib, reps, 30_000 if mib > 16 else 1000)
    finally:
        broker.stop()


def measure(mib: int = 512, translate_mib: int = 128, reps: int = 2, tier: str = "both") -> dict[str, Any]:
    """``tier``: ``s3`` (SeaweedFS: translation and the reads), ``local`` (LocalTieredStorage: the reads, with
    Spark's Parquet reader on the table) or ``both``."""
    from tests.support.s3_servers import SeaweedServer

    work = Path(tempfile.mkdtemp(prefix="strata-iceberg-bench-"))
    try:  # the work directory holds the topic's tiered copy and the table (~0.6 GB at 512 MiB)
        out: dict[str, Any] = {"run": _run_info()}
        if tier in ("s3", "both"):
            s3 = SeaweedServer(work / "seaweedfs")
            s3.start()
            prefix = f"bench-{uuid.uuid4().hex[:8]}/"
            broker = _tiered_broker(work, "s3", s3, prefix)
            try:
                broker.start()
                catalog_opts = _catalog_options(broker, s3, prefix)
                direct = {
                    "rsm.class.name": "s3",
                    **{f"rsm.config.{k}": str(v) for k, v in s3.rsm_config(**{"key.prefix": prefix}).items()},
                }
                out["translation"] = measure_translation(broker, catalog_opts, translate_mib)
                out["spark_aggregate"] = measure_reads(
                    broker, direct, catalog_opts, mib, reps, 30_000 if mib > 16 else 1000
                )
            finally:
                broker.stop()
                s3.stop()
        if tier in ("local", "both"):
            out["spark_aggregate_local"] = measure_local(work, mib, reps)
        out["run"]["load_after"] = round(os.getloadavg()[0], 1)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_info() -> dict[str, Any]:
    """When, on which commit and how loaded the machine was (the 1-minute load average before and after)."""
    try:
        git = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=7"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        git = ""
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "git": git or "unknown",
        "load_before": round(os.getloadavg()[0], 1),
    }


READ_ROWS = (
    ("table_jvm", "the table, `strata.pipeline.read_table` (Spark's Parquet reader)"),
    ("table", 'the table, `format("strata-iceberg")` (Python data source)'),
    ("direct", 'format("strata"), read.mode=direct'),
    ("broker", 'format("strata"), read.mode=broker'),
)


def _cells(r: dict[str, Any], key: str) -> list[str]:
    """One query's cells for one read: MB/s, seconds, / direct by wall, CPU s, direct's CPU / its CPU."""
    if key not in r:
        return [""] * 5
    x, d = r[key], r["direct"]
    cpu = round(d["cpu_s"] / x["cpu_s"], 2) if x.get("cpu_s") else ""
    return [
        str(v) for v in (x["mb_per_s"], x["seconds"], round(x["mb_per_s"] / d["mb_per_s"], 2), x.get("cpu_s", ""), cpu)
    ]


def _ratio_line(r: dict[str, Any], what: str) -> list[str]:
    out = []
    if "table_jvm_vs_direct" in r:
        met = "met" if r["table_jvm_vs_direct"] >= 2 else "not met"
        out.append(
            f"{what}: table (read_table) / direct: {r['table_jvm_vs_direct']}x by wall (aim >= 2: {met}), "
            f"{r.get('table_jvm_cpu_vs_direct', '?')}x by CPU; / broker: {r['table_jvm_vs_broker']}x"
        )
    if "table_vs_direct" in r:
        out.append(
            f"{what}: table (strata-iceberg) / direct: {r['table_vs_direct']}x by wall, "
            f"{r.get('table_cpu_vs_direct', '?')}x by CPU; / broker: {r['table_vs_broker']}x"
        )
    return out


def _read_table_md(a: dict[str, Any], where: str) -> list[str]:
    pp = a.get("per_partition", {})
    lines = [
        f"Spark over {a['mib']} MiB, 2 partitions, {where}. aggregate: count, sum(length(value)) + "
        "sum(length(key)), count(DISTINCT key) (MB/s of key + value); per partition: groupBy(partition) count, "
        "sum(length(value)), min/max(offset) (MB/s of value); / direct by wall; CPU s: Spark's processes; "
        "direct's CPU / the read's",
        "",
        "| read | aggregate MB/s | s | / direct | CPU s | CPU: direct / it "
        "| per partition MB/s | s | / direct | CPU s | CPU: direct / it |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, label in READ_ROWS:
        if key in a:
            lines.append("| " + " | ".join([label, *_cells(a, key), *_cells(pp, key)]) + " |")
    lines.append("")
    if "table_jvm_skipped" in a:
        lines.append(f"the table through `strata.pipeline.read_table`: {a['table_jvm_skipped']}")
    lines += _ratio_line(a, "aggregate")
    lines += _ratio_line(pp, "per partition")
    return lines + _cpu_split_md(a, pp)


def _cpu_split_md(a: dict[str, Any], pp: dict[str, Any]) -> list[str]:
    """Where each read's CPU seconds went (its least-CPU round)."""
    rows = [
        f"| {key} | {query} | " + " | ".join(str(r[key]["cpu_split"][p]) for p in CPU_PARTS) + " |"
        for query, r in (("aggregate", a), ("per partition", pp))
        for key, _ in READ_ROWS
        if "cpu_split" in r.get(key, {})
    ]
    if not rows:
        return []
    return [
        "",
        "CPU seconds by part: the JVM's Spark task threads, JIT compilers, garbage collector, other threads "
        "(scheduling, planning), and Python (driver and workers)",
        "",
        "| read | query | tasks | JIT | GC | other JVM | Python |",
        "|---|---|---:|---:|---:|---:|---:|",
        *rows,
    ]


def table(r: dict[str, Any]) -> str:
    lines: list[str] = []
    if "run" in r:
        i = r["run"]
        lines += [f"{i['date']}, git {i['git']}, load average {i['load_before']} -> {i.get('load_after', '?')}", ""]
    if "translation" in r:
        t = r["translation"]
        lines += [
            f"Translation vs produce, one partition ({t['mib']} MiB of 1 KiB records, broker and translator on one "
            "host)",
            "",
            "| | MB/s | seconds |",
            "|---|---:|---:|",
            f"| produce (acks=all, idempotent) | {t['produce_mb_per_s']} | {t['produce_s']} |",
            f"| translated into the table | {t['translate_mb_per_s']} | {t['translate_s']} |",
            "",
            f"translation / produce: {t['translate_vs_produce']} (aim >= 0.5)",
            "",
        ]
    if "spark_aggregate" in r:
        lines += [*_read_table_md(r["spark_aggregate"], "tiered to S3 (SeaweedFS), warehouse in S3"), ""]
    if "spark_aggregate_local" in r:
        lines += _read_table_md(r["spark_aggregate_local"], "LocalTieredStorage, warehouse on a file path")
    return "\n".join(lines).rstrip()


def run(results: dict) -> None:
    """`make bench` group: 512 MiB read, 128 MiB translated (4 MiB each, one repetition, in quick mode)."""
    quick = bool(results.get("bench", {}).get("quick"))
    r = measure(mib=4, translate_mib=4, reps=1) if quick else measure()
    results["iceberg"] = r
    results["sections"].append(
        {
            "name": "iceberg",
            "title": "Iceberg topics: translation vs produce, Spark aggregate and per-partition scan from the table vs "
            "the topic (bench/iceberg_bench.py)",
            "markdown": table(r),
            "raw": r,
        }
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.iceberg_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=512, help="size of the topic the Spark aggregate reads (MiB)")
    ap.add_argument("--translate-mib", type=int, default=128, help="size produced for the translation figure")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--tier", choices=("s3", "local", "both"), default="both", help="where the topic is tiered")
    ap.add_argument("--quick", action="store_true", help="4 MiB, one repetition (the bench's test)")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO_ROOT))
    if args.quick:
        r = measure(mib=4, translate_mib=4, reps=1, tier=args.tier)
    else:
        r = measure(mib=args.mib, translate_mib=args.translate_mib, reps=args.reps, tier=args.tier)
    print(table(r))
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
