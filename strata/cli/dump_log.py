"""``strata dump-log``: print segment files like kafka-dump-log.sh, offline (no broker, no connection): local and
remote (``<base offset>-<segment id>.log``) segments, their indexes, producer-state ``.snapshot`` files and
leader-epoch checkpoints. A big ``.log`` shows its progress on stderr."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .common import Progress, SubParsers, error

NAME = "dump-log"


def register(sub: SubParsers) -> None:
    dl = sub.add_parser(
        NAME,
        help="print segment files like kafka-dump-log.sh (.log, .index, .timeindex, .txnindex, .snapshot, "
        "leader-epoch-checkpoint)",
    )
    dl.add_argument("files", nargs="*", metavar="FILE")
    dl.add_argument("--files", dest="files_csv", metavar="F1,F2", help="comma-separated files (kafka-dump-log style)")
    dl.add_argument("--print-data-log", action="store_true", help="also print each record's key and payload")
    dl.add_argument("--deep-iteration", action="store_true", help="print every record's metadata")
    dl.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.storage.dump import dump_file

    files = [f for f in (args.files_csv or "").split(",") if f] + list(args.files)
    if not files:
        error("strata dump-log", "give at least one file to dump")
        return 2
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        error("strata dump-log", f"no such file: {', '.join(missing)}")
        return 1
    for f in files:
        progress = Progress(f"dump-log {f}")
        try:
            dump_file(
                Path(f),
                print_data_log=args.print_data_log,
                deep_iteration=args.deep_iteration,
                progress=progress.percent,
            )
        except (OSError, ValueError) as e:  # unreadable file, or a name that is not <20-digit offset>.log
            error("strata dump-log", f"cannot dump {f}: {getattr(e, 'strerror', None) or e}")
            return 1
    return 0
