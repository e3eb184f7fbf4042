"""What the ``strata`` subcommands share: the subcommand interface, the connection options and error output.

A subcommand is one module of this package with ``NAME`` (as typed) and ``register(sub)``, listed in
``strata.cli.main.COMMANDS``; the helpers here keep the options that several of them take spelled alike.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Protocol, TypeAlias

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class Command(Protocol):
    """A subcommand module: registers its parser, which sets ``func`` (Namespace -> exit code) as default."""

    NAME: str

    def register(self, sub: SubParsers) -> None: ...


def error(prog: str, msg: str) -> None:
    print(f"{prog}: error: {msg}", file=sys.stderr)


def key_value(s: str) -> tuple[str, str]:
    """argparse type of KEY=VALUE options (--config, --set, --override)."""
    k, sep, v = s.partition("=")
    if not sep or not k.strip():
        raise argparse.ArgumentTypeError(f"{s!r} is not of the form key=value")
    return k.strip(), v.strip()


def add_bootstrap_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap-server",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT",
        help=f"broker to talk to (default {DEFAULT_BOOTSTRAP})",
    )


def add_timeout_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the broker (default 30)")


ActionAdder: TypeAlias = Callable[[str, Callable[..., int], str], argparse.ArgumentParser]


def add_action_command(sub: SubParsers, name: str, help: str, run: Callable[[argparse.Namespace], int]) -> ActionAdder:
    """A command with actions over one broker connection (``strata topics create``, ``strata groups list``):
    --bootstrap-server and --timeout before the action, --bootstrap-server also after it, as kafka-topics.sh
    users type it anywhere. Returns the function that adds an action; that action's function lands in
    ``args.action_func``."""
    p = sub.add_parser(name, help=help)
    add_bootstrap_option(p)
    add_timeout_option(p)
    p.set_defaults(func=run)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap-server", default=argparse.SUPPRESS, metavar="HOST:PORT")
    actions = p.add_subparsers(dest="action", required=True)

    def action(action_name: str, fn: Callable[..., int], action_help: str) -> argparse.ArgumentParser:
        ap = actions.add_parser(action_name, parents=[common], help=action_help)
        ap.set_defaults(action_func=fn)
        return ap

    return action
