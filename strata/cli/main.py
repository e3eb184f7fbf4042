"""``strata`` command line: argument parsing, subcommand dispatch, and what every subcommand shares at the top:
quiet exit when stdout's reader goes away (``| head``), one error line instead of a traceback.

Each subcommand is a module of this package (see strata.cli.common.Command); adding one means writing that
module and naming it in COMMANDS and USAGE. Only ``serve`` imports the broker runtime; the admin commands speak
the Kafka protocol through strata.cli.admin_client, the data-path ones (console producer/consumer, perf tests)
through kafka-python's clients, so they work against any Kafka-compatible broker; ``dump-log`` reads files offline.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from . import (
    acls,
    broker_api_versions,
    configs,
    console_consumer,
    console_producer,
    consumer_perf_test,
    delete_records,
    dump_log,
    get_offsets,
    groups,
    iceberg,
    leader_election,
    log_dirs,
    pipeline,
    producer_perf_test,
    quotas,
    reassign_partitions,
    recovery,
    remote_log_metadata,
    serve,
    topics,
    transactions,
    users,
)
from .command_config import CommandConfigError, load_command_config, process_security, use_for_this_process
from .common import Command

# in the order of `strata --help`
COMMANDS: tuple[Command, ...] = (
    serve,
    topics,
    configs,
    users,
    quotas,
    acls,
    dump_log,
    groups,
    transactions,
    remote_log_metadata,
    recovery,
    iceberg,
    pipeline,
    console_producer,
    console_consumer,
    get_offsets,
    delete_records,
    log_dirs,
    broker_api_versions,
    reassign_partitions,
    leader_election,
    producer_perf_test,
    consumer_perf_test,
)
# The usage line has always listed them in this other order; kept as it was (tests/unit/test_cli_layering.py
# checks that it names every command).
USAGE = (
    "{serve,topics,configs,groups,dump-log,remote-log-metadata,pipeline,console-producer,console-consumer,"
    "get-offsets,delete-records,log-dirs,broker-api-versions,reassign-partitions,leader-election,"
    "producer-perf-test,consumer-perf-test,users,acls,quotas,transactions,iceberg,recovery}"
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="strata", description="Strata: a Kafka-wire-compatible broker")
    sub = p.add_subparsers(dest="command", required=True, metavar=USAGE)
    for command in COMMANDS:
        command.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    before = process_security()
    if getattr(args, "command_config", None) is not None:
        try:
            use_for_this_process(load_command_config(args.command_config))
        except CommandConfigError as e:
            print(f"strata {args.command}: error: --command-config: {e}", file=sys.stderr)
            return 1
    try:
        return _run(args)
    finally:
        use_for_this_process(before)  # a caller that runs several commands in one process (tests) starts afresh


def _run(args: argparse.Namespace) -> int:
    try:
        result: int = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader of stdout went away (`strata ... | head`): stop quietly, as a Unix tool killed by SIGPIPE
        # does; stdout is pointed at /dev/null so that the interpreter's final flush cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a tool's bug or an unforeseen failure: one line, never a traceback
        if args.command in ("serve", "pipeline"):
            raise  # a server or a Spark job that dies keeps its traceback for its log
        print(f"strata {args.command}: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return result
