"""Profile Strata's consume path: ``python -m bench.profile_fetch [--mode raw|consume] [--py-spy out.svg]``.

Starts one Strata broker (from this checkout, or ``--source-dir`` for another one, e.g. ``git archive HEAD``
unpacked in /tmp), produces the ``produce-8p-acksall`` data set, then reads it with the raw Fetch workers
(``bench/rawfetch.py``) or the librdkafka consumer for ``--seconds``, printing MiB/s and broker CPU s/GiB. With
``--py-spy FILE`` it records the broker with py-spy (``pip install py-spy``; ``--format`` flamegraph, speedscope
or raw) during the read phase. ``--repeat N`` reads N times (a before/after comparison wants several samples).
"""

from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path

from .brokers import make_strata
from .flamegraph import py_spy
from .scenarios import ConsumeThroughput, ProduceThroughput, RawFetchThroughput, RunContext, Settings


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile_fetch", description=__doc__)
    ap.add_argument("--mode", choices=["raw", "consume"], default="raw")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--procs", type=int, default=3, help="raw Fetch worker processes")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--source-dir", type=Path, default=None)
    ap.add_argument("--py-spy", dest="py_spy", default=None, help="output file of py-spy record")
    ap.add_argument("--format", default="flamegraph", help="py-spy output format")
    ap.add_argument("--override", action="append", default=[], help="extra Strata --override KEY=VALUE")
    ap.add_argument("--log-dir", type=Path, default=Path("/tmp/strata-profile-fetch"))
    args = ap.parse_args(argv)

    b = make_strata(args.log_dir, extra_overrides=args.override, source_dir=args.source_dir)
    b.start()
    try:
        s = Settings(consume_min_seconds=args.seconds, consume_max_passes=1000, consume_time_cap=args.seconds + 10)
        ctx = RunContext(settings=s, run_id=uuid.uuid4().hex[:6])
        prod = ProduceThroughput(args.partitions, -1)
        r = prod.run(b, ctx)
        print(f"produce: {r.get('metrics')} {r.get('errors') or ''}", flush=True)
        sc = RawFetchThroughput(prod, procs=args.procs) if args.mode == "raw" else ConsumeThroughput(prod)
        for i in range(args.repeat):
            b.wait_quiet()
            spy = py_spy(b.pid, args.py_spy, args.seconds, args.format) if args.py_spy and i == 0 else None
            r = sc.run(b, ctx)
            print(
                f"{sc.name}: {r.get('metrics')} cpu_s_per_gib={r.get('broker_cpu_s_per_gib')} {r.get('errors') or ''}",
                flush=True,
            )
            if spy is not None:
                spy.wait(timeout=args.seconds + 60)
    finally:
        b.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
