"""``strata`` command line: serve a broker, manage topics, dump log segments."""
from __future__ import annotations

import argparse
import sys


def _cmd_serve(args: argparse.Namespace) -> int:
    from config import BrokerConfig, ConfigError

    try:
        config = BrokerConfig.load(args.config, args.override or [])
        config.listeners, config.advertised_listeners  # parsed lazily; fail here with exit 2, not in startup
    except ConfigError as e:
        print(f"strata: configuration error: {e}", file=sys.stderr)
        return 2
    from broker.server import run  # imported late: `strata topics` must not pay for the storage stack

    return run(config)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="strata", description="Strata: a Kafka-wire-compatible broker")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run a broker")
    s.add_argument("config", nargs="?", help="server.properties file")
    s.add_argument("--override", action="append", metavar="KEY=VALUE", help="override a property (repeatable)")
    s.set_defaults(func=_cmd_serve)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)
