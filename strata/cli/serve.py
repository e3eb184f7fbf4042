"""``strata serve``: run a broker. The only subcommand that imports the broker runtime, when it runs."""

from __future__ import annotations

import argparse
import sys

from .common import SubParsers

NAME = "serve"


def register(sub: SubParsers) -> None:
    s = sub.add_parser(NAME, help="run a broker")
    s.add_argument("config", nargs="?", help="server.properties file")
    s.add_argument("--override", action="append", metavar="KEY=VALUE", help="override a property (repeatable)")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.config import BrokerConfig, ConfigError

    try:
        config = BrokerConfig.load(args.config, args.override or [])
        config.check_listeners()  # parsed lazily: fail here with exit 2, not in startup
    except ConfigError as e:
        print(f"strata: configuration error: {e}", file=sys.stderr)
        return 2
    from strata.broker.server import run  # imported late: `strata topics` must not pay for the storage stack

    return run(config)
