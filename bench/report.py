"""Results: markdown table (stdout + results.md), JSON with raw numbers, and a matplotlib (Agg) bar chart."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

BROKERS = ("strata", "tansu")


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    if isinstance(v, float) and math.isnan(v):
        return "—"
    a = abs(v)
    if a >= 10_000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _ratio(s: Any, t: Any) -> str:
    if not isinstance(s, (int, float)) or not isinstance(t, (int, float)) or not t:
        return "—"
    return f"{s / t:.2f}"


def table_rows(results: dict) -> list[dict]:
    """One row per (scenario, metric) plus the RSS rows. A label used by two scenarios (e.g. the same inner
    scenario at two rates) gets the scenario name appended, so rows stay distinguishable."""
    rows: list[dict] = []
    counts: dict[str, int] = {}
    for sc in results["scenarios"]:
        for m in sc["metric_specs"]:
            counts[m["label"]] = counts.get(m["label"], 0) + 1
    for sc in results["scenarios"]:
        for m in sc["metric_specs"]:
            vals: dict[str, Any] = {}  # a metric (JSON number), None or "FAILED", per broker
            for b in BROKERS:
                r = sc["results"].get(b)
                if r is None:
                    vals[b] = None
                elif "metrics" in r and r["metrics"].get(m["key"]) is not None:
                    vals[b] = r["metrics"][m["key"]]
                else:
                    vals[b] = "FAILED" if r.get("errors") or r.get("error") else None
            label = m["label"] if counts[m["label"]] == 1 else f"{m['label']} [{sc['name']}]"
            rows.append(
                {
                    "scenario": label,
                    "plot": m.get("plot"),
                    "higher_is_better": m["higher_is_better"],
                    "scenario_name": sc["name"],
                    "key": m["key"],
                    **vals,
                }
            )
    for key, label in (
        ("idle_rss_mib", "broker RSS idle after startup (MiB)"),
        ("after_rss_mib", "broker RSS after the run (MiB)"),
        ("peak_rss_mib", "broker peak RSS, VmHWM (MiB)"),
    ):
        vals = {b: results["brokers"].get(b, {}).get(key) for b in BROKERS}
        rows.append(
            {"scenario": label, "plot": "rss", "higher_is_better": False, "scenario_name": "rss", "key": key, **vals}
        )
    return rows


def cpu_rows(results: dict) -> list[dict]:
    rows = []
    for sc in results["scenarios"]:
        vals = {b: (sc["results"].get(b) or {}).get("broker_cpu_s_per_gib") for b in BROKERS}
        if any(v is not None for v in vals.values()):
            rows.append({"scenario": sc["name"], "plot": "cpu", "higher_is_better": False, **vals})
    return rows


def markdown_table(rows: list[dict]) -> str:
    out = ["| scenario | Strata | Tansu | ratio Strata/Tansu | better |", "|---|---:|---:|---:|:---:|"]
    for r in rows:
        out.append(
            f"| {r['scenario']} | {_fmt(r['strata'])} | {_fmt(r['tansu'])} | {_ratio(r['strata'], r['tansu'])} "
            f"| {'higher' if r['higher_is_better'] else 'lower'} |"
        )
    return "\n".join(out)


def cpu_table(results: dict) -> str:
    out = ["| scenario | Strata | Tansu | ratio Strata/Tansu |", "|---|---:|---:|---:|"]
    rows = cpu_rows(results)
    for r in rows:
        out.append(
            f"| {r['scenario']} | {_fmt(r['strata'])} | {_fmt(r['tansu'])} | {_ratio(r['strata'], r['tansu'])} |"
        )
    return "\n".join(out) if rows else "(no CPU samples)"


def reps_table(results: dict) -> str | None:
    out = ["| scenario | Strata | Tansu |", "|---|---|---|"]
    any_row = False
    for sc in results["scenarios"]:
        cells = {}
        for b in BROKERS:
            r = sc["results"].get(b) or {}
            reps = r.get("repetitions") or ([r] if "metrics" in r else [])
            cells[b] = ", ".join(_fmt((x.get("metrics") or {}).get("mib_s")) for x in reps) or "—"
            any_row |= len(reps) > 1
        if cells["strata"] != "—" or cells["tansu"] != "—":
            out.append(f"| {sc['name']} | {cells['strata']} | {cells['tansu']} |")
    return "\n".join(out) if any_row else None


def _cell(v: Any, col: str) -> str:
    if col == "ratio" and isinstance(v, (int, float)):
        return f"{v:.2f}"
    return _fmt(v)


def section_markdown(sec: dict) -> str:
    """A section of an optional group: its own table (first column = label), intro and notes."""
    cols = sec.get("columns") or ["measurement", "value"]
    lines = [f"## {sec.get('title') or sec.get('name')}", ""]
    if sec.get("intro"):
        lines += [sec["intro"], ""]
    if sec.get("markdown"):  # pre-rendered by the group itself
        lines.append(sec["markdown"])
    elif sec.get("rows"):
        lines.append("| " + " | ".join(cols) + " |")
        lines.append("|---|" + "|".join("---:" for _ in cols[1:]) + "|")
        for row in sec["rows"]:
            cells = [str(row[0])] + [_cell(v, c) for v, c in zip(row[1:], cols[1:])]
            lines.append("| " + " | ".join(cells) + " |")
    else:
        lines.append("(no results)")
    for n in sec.get("notes") or []:
        lines += ["", f"- {n}"]
    return "\n".join(lines)


def problems(results: dict) -> list[str]:
    out: list[str] = []
    for sec in results.get("sections", []):
        for e in sec.get("errors") or []:
            out.append(f"{sec.get('name')}: {e}")
    for g in results.get("groups", []):
        if g.get("error"):
            out.append(f"group {g['name']}: {g['error']}")
        elif g.get("skipped"):
            out.append(f"group {g['name']} skipped: {g['skipped']}")
    for b, info in results["brokers"].items():
        if info.get("error"):
            out.append(f"**{b}**: {info['error']}")
        for n in info.get("notes", []):
            out.append(f"{b}: {n}")
    for sc in results["scenarios"]:
        for b, r in sc["results"].items():
            if r is None:
                continue
            for e in r.get("errors", []) or []:
                out.append(f"{sc['name']} on {b}: {e}")
            for n in r.get("notes", []) or []:
                out.append(f"{sc['name']} on {b}: {n}")
            if r.get("error"):
                out.append(f"{sc['name']} on {b}: {r['error']}")
            summ = r.get("summary") or {}
            if summ.get("capped"):
                out.append(f"{sc['name']} on {b}: hit its time cap (partial amount: {summ.get('records')} records)")
    return out


def render_markdown(results: dict) -> str:
    m = results["machine"]
    st = results["settings"]
    rows = table_rows(results)
    lines = [
        "# Strata vs Tansu benchmark",
        "",
        f"- date: {m['date']}  ",
        f"- machine: nproc={m['nproc']}, {m['cpu_model']}, {m['mem_total_gib']:.1f} GiB RAM, {m['kernel']}  ",
        (
            f"- python {m['python']}, confluent-kafka {m['confluent_kafka']} (librdkafka {m['librdkafka']}), "
            f"tansu {m.get('tansu_version', '?')}, strata git {m.get('git_rev', '?')}  "
        ),
        (
            f"- mode: {results['mode']}; records of {st['record_size']} B; {st['producer_procs']} producer processes, "
            f"{st['produce_records']} records per produce scenario (cap {st['produce_time_cap']} s, up to "
            f"{st['max_reps']} repetitions); latency at {st['latency_rate_mib']} MiB/s for {st['latency_duration']} s; "
            f"total wall time {results.get('wall_s', 0):.0f} s"
        ),
        "",
        (
            "Ratios are Strata/Tansu from the same run. For MiB/s and rec/s higher is better (ratio > 1: Strata "
            "faster); for latency, RSS and CPU lower is better (ratio < 1: Strata better)."
        ),
        "",
        markdown_table(rows),
        "",
        "## Broker CPU seconds per GiB moved (lower is better)",
        "",
        cpu_table(results),
    ]
    for sec in results.get("sections", []):
        lines += ["", section_markdown(sec)]
    rt = reps_table(results)
    if rt:
        lines += ["", "## MiB/s of each repetition (the table above shows the median)", "", rt]
    probs = problems(results)
    if probs:
        lines += ["", "## Problems seen in this run", ""]
        for p in probs:
            head, _, rest = p.partition("\n")
            lines.append(f"- {head}")
            if rest.strip():
                lines += ["", "  ```"] + [f"  {x}" for x in rest.splitlines()] + ["  ```", ""]
    return "\n".join(lines) + "\n"


def _short_label(label: str) -> str:
    """Chart label: no unit, and a scenario-name suffix (added to duplicate labels) cut to its last part."""
    label = label.replace(" (MiB/s)", "").replace(" (ms)", "").replace(" (MiB)", "")
    label = re.sub(r" \[[^\]]*-([^\]-]+)\]$", r" @\1", label)
    return label.replace("3 brokers RF=3: ", "RF=3 ")


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = table_rows(results) + cpu_rows(results)
    panels = [
        ("throughput", "throughput (MiB/s, higher is better)"),
        ("cpu", "broker CPU seconds per GiB moved (lower is better)"),
        ("latency", "produce latency (ms, lower is better)"),
        ("rss", "broker RSS (MiB, lower is better)"),
    ]
    present = [(k, t) for k, t in panels if any(r["plot"] == k for r in rows)]
    extra = [sec for sec in results.get("sections", []) if (sec.get("plot") or {}).get("bars")]
    n = len(present) + len(extra)
    if n == 0:
        return
    fig, axes = plt.subplots(n, 1, figsize=(11, 3.6 * n), squeeze=False)
    for ax, sec in zip(axes[len(present) :, 0], extra):
        bars = [(lbl, v) for lbl, v in sec["plot"]["bars"]]
        vals = [v if isinstance(v, (int, float)) else 0.0 for _, v in bars]
        drawn = ax.bar(range(len(bars)), vals, 0.6, color="#3b6fb6")
        for bar, (_, v) in zip(drawn, bars):
            ax.annotate(
                _fmt(v) if isinstance(v, (int, float)) else "n/a",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=7,
                xytext=(0, 1),
                textcoords="offset points",
            )
        ax.set_xticks(list(range(len(bars))))
        ax.set_xticklabels([lbl for lbl, _ in bars], rotation=15, ha="right", fontsize=8)
        ax.set_title(sec["plot"].get("title") or sec.get("title") or sec.get("name"), fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    colors = {"strata": "#3b6fb6", "tansu": "#e07b39"}
    for ax, (key, title) in zip(axes[:, 0], present):
        sel = [r for r in rows if r["plot"] == key]
        labels = [_short_label(r["scenario"]) for r in sel]
        x = range(len(sel))
        w = 0.38
        for i, b in enumerate(BROKERS):
            vals = [r[b] if isinstance(r[b], (int, float)) else 0.0 for r in sel]
            bars = ax.bar([xi + (i - 0.5) * w for xi in x], vals, w, label=b.capitalize(), color=colors[b])
            for bar, r in zip(bars, sel):
                v = r[b]
                txt = _fmt(v) if isinstance(v, (int, float)) else ("failed" if v == "FAILED" else "n/a")
                ax.annotate(
                    txt,
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                    xytext=(0, 1),
                    textcoords="offset points",
                )
        if key == "latency":
            pos = [r[b] for r in sel for b in BROKERS if isinstance(r[b], (int, float)) and r[b] > 0]
            if pos and max(pos) / max(min(pos), 1e-9) > 50:
                ax.set_yscale("log")
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    m = results["machine"]
    fig.suptitle(f"Strata vs Tansu — nproc={m['nproc']}, {m['date']}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_all(results: dict, out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    md = render_markdown(results)
    (out_dir / "results.md").write_text(md)
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    try:
        plot(results, out_dir / "throughput.png")
    except Exception as e:  # noqa: BLE001 - a plotting problem must not lose the numbers
        print(f"warning: plot failed: {e!r}")
    return md
