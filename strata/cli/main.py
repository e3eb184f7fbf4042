"""``strata`` command line: argument parsing and subcommand dispatch.

Each subcommand is a module of this package (see strata.cli.common.Command); adding one means writing that
module and naming it in COMMANDS and USAGE. Only ``serve`` imports the broker runtime; the others speak the
Kafka protocol through strata.cli.admin_client, so they work against any Kafka-compatible broker, or read
files offline (``dump-log``).
"""

from __future__ import annotations

import argparse

from . import configs, dump_log, groups, pipeline, remote_log_metadata, serve, topics
from .common import Command

# in the order of `strata --help`
COMMANDS: tuple[Command, ...] = (serve, topics, configs, dump_log, groups, remote_log_metadata, pipeline)
# The usage line has always listed them in this other order; kept as it was (tests/unit/test_cli_layering.py
# checks that it names every command).
USAGE = "{serve,topics,configs,groups,dump-log,remote-log-metadata,pipeline}"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="strata", description="Strata: a Kafka-wire-compatible broker")
    sub = p.add_subparsers(dest="command", required=True, metavar=USAGE)
    for command in COMMANDS:
        command.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result
