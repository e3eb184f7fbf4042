"""Cost of a leader's append (`UnifiedLog.append_as_leader`) per batch and per MB, before and after a change:
``python -m bench.validate_bench [--old /work/main] [--rounds 7] [--appends 200]``.

Each checkout (this one and ``--old``) runs in its own process (``python -m bench.validate_bench --worker`` with
cwd = the checkout, so `strata` is that checkout's code); the rounds alternate between them and the best round
of each case is printed (best of N: the least disturbed by other work on the machine). Cases: 500 records of 100
and of 1,000 bytes (half random, half repeated so that codecs have something to do), uncompressed and with each
codec. Also printed: the record walk alone (`scan_records`) and an asyncio thread hop, which decide where the
Produce handler moves the walk off the event loop.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
SIZES = (100, 1000)
RECORDS = 500


def _batch(size: int, codec: int) -> bytes:
    from strata.protocol.records import build_batch

    # a third random (per record), the rest text: compresses about 2-3x, like typical payloads
    values = [
        (b"key-%d" % i, os.urandom(size // 6).hex().encode() + (b" value %d" % i).ljust(size - size // 3, b"x"))
        for i in range(RECORDS)
    ]
    return build_batch(values, compression=codec)


def worker(appends: int) -> dict[str, float]:
    """{case: best microseconds per append} for this checkout."""
    from strata.config.topic_config import default_log_config
    from strata.storage.log import UnifiedLog

    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in SIZES:
            for name, codec in CODECS.items():
                b = _batch(size, codec)
                cfg = default_log_config(segment_bytes=1 << 30)
                log = UnifiedLog.open(Path(tmp) / f"t{size}{name}-0", uuid.uuid4(), cfg, needs_recovery=False)
                best = float("inf")
                for _ in range(appends):
                    t = time.perf_counter()
                    log.append_as_leader(b, 0)
                    best = min(best, time.perf_counter() - t)
                log.close()
                out[f"{name:6} {size:4}B x{RECORDS}"] = best * 1e6
    return out


def extras() -> dict[str, float]:
    """The record walk alone and one asyncio.to_thread hop, in microseconds (best of many)."""
    import asyncio

    from strata.protocol import record_validation as rv

    out: dict[str, float] = {}
    impls = {"py": rv._walk_py} | ({"c": rv._walk_c} if rv.COMPILED_WALK else {})
    for impl, fn in impls.items():
        rv._walk = fn
        for size in SIZES:
            for name in ("none", "lz4", "zstd"):
                b = _batch(size, CODECS[name])
                best = float("inf")
                for _ in range(100):
                    t = time.perf_counter()
                    rv.scan_records(b, 0, len(b), CODECS[name], RECORDS, want_keyless=False, limit=1 << 26)
                    best = min(best, time.perf_counter() - t)
                out[f"scan ({impl}) {name:6} {size:4}B x{RECORDS}"] = best * 1e6

    async def hops() -> float:
        best = float("inf")
        for _ in range(300):
            t = time.perf_counter()
            await asyncio.to_thread(int)
            best = min(best, time.perf_counter() - t)
        return best

    out["asyncio.to_thread hop"] = asyncio.run(hops()) * 1e6
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.validate_bench", description=__doc__)
    ap.add_argument("--old", type=Path, default=None, help="checkout to compare with (e.g. /work/main)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--appends", type=int, default=200, help="appends per case and round")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        import strata

        assert Path(strata.__file__).resolve().is_relative_to(Path.cwd().resolve()), strata.__file__
        print(json.dumps(worker(args.appends)))
        return 0
    here = Path(__file__).resolve().parent.parent
    repos = {"new": here} | ({"old": args.old.resolve()} if args.old else {})
    best: dict[str, dict[str, float]] = {k: {} for k in repos}
    for _ in range(args.rounds):
        for label, repo in repos.items():
            # -c puts the checkout (cwd) first on sys.path: the worker imports that checkout's strata
            code = f"import runpy, sys; sys.argv = ['w', '--worker', '--appends', '{args.appends}']; "
            code += f"runpy.run_path({str(Path(__file__).resolve())!r}, run_name='__main__')"
            cmd = [sys.executable, "-c", code]
            res = json.loads(subprocess.run(cmd, cwd=repo, check=True, capture_output=True, text=True).stdout)
            for case, us in res.items():
                best[label][case] = min(best[label].get(case, float("inf")), us)
    print(
        f"{'case (us per append, per MB of records)':36} "
        + " ".join(f"{k + ' us':>10} {k + ' us/MB':>11}" for k in repos)
    )
    for case in best["new"]:
        mb = RECORDS * int(case.split()[1].rstrip("B")) / 1e6  # per MB of records (uncompressed)
        cols = " ".join(f"{best[k][case]:10.1f} {best[k][case] / mb:11.0f}" for k in repos)
        print(f"{case:36} {cols}")
    for case, us in extras().items():
        print(f"{case:36} {us:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
