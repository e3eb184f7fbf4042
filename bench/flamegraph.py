"""Flame graph of the broker on one hot path: ``python -m bench.flamegraph [produce|produce-raw|fetch]``.

Starts one Strata broker (this checkout, or ``--source-dir``), drives the path with the bench's own load
(``produce``: ``produce-8p-acksall``'s librdkafka producers, 2 processes, 1 KiB records; ``produce-raw``: the
pre-encoded ~1 MB Produce requests of ``bench/rawproduce.py``; ``fetch``: the ``produce`` topic read by the raw Fetch
workers of ``bench/rawfetch.py``) and records the broker with py-spy (``pip install py-spy``, in the
``bench`` extra) while the load runs, writing ``bench/results/flame-<path>.svg`` (``--format speedscope`` or
``raw`` for other viewers; ``--native`` adds C frames: uvloop, crc32c, the kernel's share shows as the syscall).
The broker's CPU s/GiB of the run is printed; py-spy's sampling (``--nonblocking``) adds a little to it.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from .brokers import make_strata
from .scenarios import ProduceThroughput, RawFetchThroughput, RunContext, Settings

RESULTS = Path(__file__).resolve().parent / "results"


def py_spy(pid: int, out: str, seconds: float, fmt: str = "flamegraph", native: bool = False) -> subprocess.Popen:
    """Start `py-spy record` of `pid` for `seconds` (250 samples/s, without pausing the process unless `native`)."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    cmd = [exe, "record", "-o", out, "--pid", str(pid), "-d", str(max(1, int(seconds))), "-r", "250", "-f", fmt]
    cmd += ["--native"] if native else ["--nonblocking"]  # native stacks need to pause the process
    return subprocess.Popen(cmd)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.flamegraph", description=__doc__)
    ap.add_argument("path", choices=["produce", "produce-raw", "fetch"], nargs="?", default="produce")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--records", type=int, default=1_000_000, help="records produced (the load ends earlier)")
    ap.add_argument("--out", default=None, help="output file (default bench/results/flame-<path>.svg)")
    ap.add_argument("--format", default="flamegraph", help="py-spy output format")
    ap.add_argument("--native", action="store_true", help="include native (C) frames")
    ap.add_argument("--source-dir", type=Path, default=None)
    ap.add_argument("--override", action="append", default=[], help="extra Strata --override KEY=VALUE")
    ap.add_argument("--log-dir", type=Path, default=Path("/tmp/strata-flamegraph"))
    args = ap.parse_args(argv)
    out = args.out or str(RESULTS / f"flame-{args.path}.svg")

    b = make_strata(args.log_dir, extra_overrides=args.override, source_dir=args.source_dir)
    b.start()
    try:
        if args.path == "produce-raw":
            from .floor import raw_produce

            spy = py_spy(b.pid, out, args.seconds, args.format, args.native)
            print(f"produce-raw-8p: {raw_produce(b, quick=False)}")
            spy.wait(timeout=args.seconds + 60)
            return 0
        recording = args.path == "produce"
        s = Settings(
            produce_records=args.records if recording else 200_000,
            produce_time_cap=args.seconds + 5 if recording else 20.0,
            consume_min_seconds=args.seconds,
            consume_max_passes=1000,
            consume_time_cap=args.seconds + 10,
        )
        ctx = RunContext(settings=s, run_id=uuid.uuid4().hex[:6])
        prod = ProduceThroughput(8, -1)
        sc = prod if recording else RawFetchThroughput(prod)
        if not recording:
            prod.run(b, ctx)
            b.wait_quiet()
        spy = py_spy(b.pid, out, args.seconds, args.format, args.native)
        r = sc.run(b, ctx)
        spy.wait(timeout=args.seconds + 60)
        print(f"{sc.name}: {r.get('metrics')} cpu_s_per_gib={r.get('broker_cpu_s_per_gib')} {r.get('errors') or ''}")
        print(f"flame graph: {out}")
    finally:
        b.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
