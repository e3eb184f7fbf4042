"""``strata broker-api-versions``: the API versions every broker of the cluster advertises, like
kafka-broker-api-versions.sh, in its format: ``host:port (id: N rack: R) -> (`` then one
``Name(key): min to max [usable: v]`` line per API, where `usable` is the highest version this client
(kafka-python's codec) speaks too."""

from __future__ import annotations

import argparse

from strata.protocol.registry import REQUEST_CLASSES

from .admin_client import AdminClient, AdminError
from .common import SubParsers, add_bootstrap_option, add_timeout_option, error

NAME = "broker-api-versions"


def register(sub: SubParsers) -> None:
    p = sub.add_parser(NAME, help="API versions of every broker (kafka-broker-api-versions.sh)")
    add_bootstrap_option(p)
    add_timeout_option(p)
    p.set_defaults(func=run)


def _name(key: int) -> str | None:
    cls = REQUEST_CLASSES.get(key)
    return cls.__name__.removesuffix("Request") if cls is not None else None


def api_lines(versions: dict[int, tuple[int, int]]) -> list[str]:
    """NodeApiVersions.toString's entries, by api key."""
    out = []
    for key in sorted(set(versions) | set(REQUEST_CLASSES)):
        name = _name(key)
        if key not in versions:
            out.append(f"{name}({key}): UNSUPPORTED")
            continue
        lo, hi = versions[key]
        text = f"{name or 'UNKNOWN'}({key}): " + (str(lo) if lo == hi else f"{lo} to {hi}")
        if name is not None:
            cls = REQUEST_CLASSES[key]
            if cls.max_version < lo:
                text += " [unusable: node too new]"
            elif hi < cls.min_version:
                text += " [unusable: node too old]"
            else:
                text += f" [usable: {min(cls.max_version, hi)}]"
        out.append(text)
    return out


def run(args: argparse.Namespace) -> int:
    try:
        with AdminClient(args.bootstrap_server, timeout=args.timeout) as a:
            for node in a.brokers():
                try:
                    versions = a.peer(node.host, node.port).versions
                except AdminError as e:
                    print(f"{node} -> ERROR: {e}")
                    continue
                print(f"{node} -> (\n\t" + ",\n\t".join(api_lines(versions)) + "\n)")
    except AdminError as e:
        error("strata broker-api-versions", str(e))
        return 1
    return 0
