"""``python -m tests.fuzz [--seconds S] [--seed N]`` (``make fuzz``): fuzz a fresh broker, print the summary.

``python -m tests.fuzz replay --seed N --index I`` regenerates input I of seed N and sends it to a fresh broker;
``python -m tests.fuzz replay --bin FILE`` sends the bytes the fuzzer saved for a finding. Exit code 1 when the
run found anything or the canary broke.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from tests.support.broker_proc import StrataBroker

from .inputs import make_input
from .runner import FuzzConfig, Fuzzer, replay


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz")
    ap.add_argument("command", nargs="?", default="run", choices=("run", "replay"))
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("FUZZ_SECONDS", "1200")))
    ap.add_argument("--inputs", type=int, default=int(os.environ.get("FUZZ_INPUTS", "0")))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("FUZZ_SEED", "1")))
    ap.add_argument("--index", type=int, help="replay: the input's index")
    ap.add_argument("--bin", type=Path, help="replay: a saved input file")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("FUZZ_OUT", "fuzz-out")))
    ap.add_argument("--rss-limit-mib", type=int, default=int(os.environ.get("FUZZ_RSS_LIMIT_MIB", "1024")))
    ap.add_argument("--bomb-mib", type=int, default=int(os.environ.get("FUZZ_BOMB_MIB", "512")))
    ap.add_argument("--restart-every", type=float, default=float(os.environ.get("FUZZ_RESTART_EVERY", "300")))
    args = ap.parse_args(argv)
    cfg = FuzzConfig(
        seed=args.seed,
        max_inputs=args.inputs,
        max_seconds=args.seconds,
        rss_limit_mib=args.rss_limit_mib,
        bomb_bytes=args.bomb_mib << 20,
        restart_every_s=args.restart_every,
        out_dir=args.out,
    )
    with tempfile.TemporaryDirectory(prefix="strata-fuzz-") as tmp:
        broker = StrataBroker(Path(tmp), {"auto.create.topics.enable": "false"}, name="fuzz")
        broker.start()
        try:
            fz = Fuzzer(broker, cfg)
            fz.prepare()
            if args.command == "replay":
                if args.bin is not None:
                    data = args.bin.read_bytes()
                else:
                    assert args.index is not None, "replay needs --index or --bin"
                    inp = make_input(
                        cfg.seed,
                        args.index,
                        fz.ctx,
                        bomb_bytes=cfg.bomb_bytes,
                        max_items=cfg.max_items,
                        max_request_bytes=cfg.max_request_bytes,
                    )
                    print(inp.describe())
                    data = inp.data
                print(replay(broker, data))
                return 0
            summary = fz.run()
            print(summary.text())
            print(f"details: {fz.findings_path} and {cfg.out_dir}/")
            return 1 if summary.failed() else 0
        finally:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
