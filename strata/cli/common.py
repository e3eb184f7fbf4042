"""What the ``strata`` subcommands share: the subcommand interface, the connection options and error output.

A subcommand is one module of this package with ``NAME`` (as typed) and ``register(sub)``, listed in
``strata.cli.main.COMMANDS``; the helpers here keep the options that several of them take spelled alike.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, Protocol, TypeAlias

from .command_config import add_command_config_option

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


def raw_key_value(s: str) -> tuple[str, str]:
    """argparse type of the console tools' KEY=VALUE properties: the value kept as typed, since separators such
    as ``key.separator= `` or a tab are whitespace (Kafka does not trim them either)."""
    k, sep, v = s.partition("=")
    if not sep or not k.strip():
        raise argparse.ArgumentTypeError(f"{s!r} is not of the form key=value")
    return k.strip(), v


def add_property_options(p: argparse.ArgumentParser, names: tuple[str, ...], what: str, files: tuple[str, ...]) -> None:
    """A console tool's ``--property KEY=VALUE`` (repeatable, under Kafka's aliases `names`, into
    ``args.property``) and its properties-file option (`files`, into ``args.property_file``)."""
    p.add_argument(
        *names, dest="property", type=raw_key_value, action="append", default=[], metavar="KEY=VALUE", help=what
    )
    p.add_argument(*files, dest="property_file", metavar="FILE", help="the same properties from a file")


def add_bootstrap_option(p: argparse.ArgumentParser, command_config: bool = True) -> None:
    """--bootstrap-server and --command-config (how to connect: every command that talks to a broker takes both;
    the kafka-python commands, whose --command-config is their client config file, add theirs themselves)."""
    p.add_argument(
        "--bootstrap-server",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT",
        help=f"broker to talk to (default {DEFAULT_BOOTSTRAP})",
    )
    if command_config:
        add_command_config_option(p)


def add_client_config_options(p: argparse.ArgumentParser, kind: str, properties: bool = False) -> None:
    """A kafka-python command's client config file, ``--<kind>.config`` or (KIP-1147) ``--command-config``, into
    ``args.<kind>_config``; with `properties`, ``--<kind>-property`` / ``--command-property KEY=VALUE`` into
    ``args.<kind>_property``. Security keys in either are read as the admin commands read them."""
    if properties:
        p.add_argument(
            f"--{kind}-property",
            "--command-property",
            dest=f"{kind}_property",
            type=key_value,
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=f"{kind} property (wins over the file's)",
        )
    p.add_argument(
        f"--{kind}.config",
        "--command-config",
        dest=f"{kind}_config",
        metavar="FILE",
        help="client properties file (security.protocol, sasl.*, ssl.*, ...); --command-config is its KIP-1147 name",
    )


def add_timeout_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the broker (default 30)")


ActionAdder: TypeAlias = Callable[[str, Callable[..., int], str], argparse.ArgumentParser]


def run_action(prog: str, connect: Callable[[str, float], Any], args: argparse.Namespace) -> int:
    """Run the chosen action (``args.action_func(client, args)``) over one connection; a readable error (AdminError,
    or the command's own usage error, a subclass of UsageError) becomes one line and exit code 1."""
    from .admin_client import AdminError

    try:
        with connect(args.bootstrap_server, args.timeout) as client:
            result: int = args.action_func(client, args)
            return result
    except (AdminError, UsageError) as e:
        error(prog, str(e))
        return 1


class UsageError(Exception):
    """Options that do not fit together, found after parsing; printed as one line."""


def add_action_command(sub: SubParsers, name: str, help: str, run: Callable[[argparse.Namespace], int]) -> ActionAdder:
    """A command with actions over one broker connection (``strata topics create``, ``strata groups list``):
    --bootstrap-server, --command-config and --timeout before the action, the first two also after it, as
    kafka-topics.sh users type them anywhere. Returns the function that adds an action; that action's function lands in
    ``args.action_func``."""
    p = sub.add_parser(name, help=help)
    add_bootstrap_option(p)
    add_timeout_option(p)
    p.set_defaults(func=run)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap-server", default=argparse.SUPPRESS, metavar="HOST:PORT")
    add_command_config_option(common, default=argparse.SUPPRESS)
    actions = p.add_subparsers(dest="action", required=True)

    def action(action_name: str, fn: Callable[..., int], action_help: str) -> argparse.ArgumentParser:
        ap = actions.add_parser(action_name, parents=[common], help=action_help)
        ap.set_defaults(action_func=fn)
        return ap

    return action


class Progress:
    """Progress of long work on stderr (never stdout, which may be piped into another tool): silent for the first
    `after` seconds, then one line every `every` seconds, so quick runs print nothing extra."""

    def __init__(self, what: str, total: int | None = None, after: float = 2.0, every: float = 2.0) -> None:
        import time

        self._clock = time.monotonic
        self.what, self.total, self.every = what, total, every
        self._next = self._clock() + after
        self.shown = False

    def update(self, done: int, unit: str = "") -> None:
        now = self._clock()
        if now < self._next:
            return
        self._next = now + self.every
        of = f"/{self.total}" if self.total is not None else ""
        print(f"{self.what}: {done}{of}{' ' + unit if unit else ''}", file=sys.stderr, flush=True)
        self.shown = True

    def percent(self, done: int, total: int) -> None:
        self.update(done * 100 // max(total, 1), "% done")


def table(rows: list[list[str]]) -> str:
    """Left-aligned columns as kafka-consumer-groups.sh prints them (trailing blanks trimmed)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(" ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
