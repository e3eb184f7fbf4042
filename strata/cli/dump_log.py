"""``strata dump-log``: print segment files like kafka-dump-log.sh, offline (no broker, no connection)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .common import SubParsers, error

NAME = "dump-log"


def register(sub: SubParsers) -> None:
    dl = sub.add_parser(NAME, help="print segment files like kafka-dump-log.sh (.log, .index, .timeindex)")
    dl.add_argument("files", nargs="*", metavar="FILE")
    dl.add_argument("--files", dest="files_csv", metavar="F1,F2", help="comma-separated files (kafka-dump-log style)")
    dl.add_argument("--print-data-log", action="store_true", help="also print each record's key and payload")
    dl.add_argument("--deep-iteration", action="store_true", help="print every record's metadata")
    dl.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.storage.dump import dump_file

    files = [f for f in (args.files_csv or "").split(",") if f] + list(args.files)
    if not files:
        error("strata dump-log", "give at least one .log, .index or .timeindex file")
        return 2
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        error("strata dump-log", f"no such file: {', '.join(missing)}")
        return 1
    for f in files:
        try:
            dump_file(Path(f), print_data_log=args.print_data_log, deep_iteration=args.deep_iteration)
        except (OSError, ValueError) as e:  # unreadable file, or a name that is not <20-digit offset>.log
            error("strata dump-log", f"cannot dump {f}: {getattr(e, 'strerror', None) or e}")
            return 1
    return 0
