"""``strata delete-records``: move partitions' log start offsets, like kafka-delete-records.sh, from its
``--offset-json-file`` (``{"partitions": [{"topic": "t", "partition": 0, "offset": 10}], "version": 1}``, offset
-1 = the high watermark), printing a low watermark or an error per partition."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .admin_client import AdminClient, AdminError
from .common import SubParsers, add_bootstrap_option, add_timeout_option, error

NAME = "delete-records"
PROG = "strata delete-records"


class _BadFile(Exception):
    pass


def register(sub: SubParsers) -> None:
    p = sub.add_parser(NAME, help="delete records below offsets (kafka-delete-records.sh)")
    add_bootstrap_option(p)
    add_timeout_option(p)
    p.add_argument("--offset-json-file", required=True, metavar="FILE")
    p.set_defaults(func=run)


def parse_offset_json(text: str) -> dict[tuple[str, int], int]:
    try:
        doc: Any = json.loads(text)
    except json.JSONDecodeError as e:
        raise _BadFile(f"the offset JSON file is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise _BadFile("the offset JSON file must hold an object with 'partitions'")
    if doc.get("version", 1) != 1:
        raise _BadFile(f"Not supported version field value {doc['version']}")
    parts = doc.get("partitions")
    if not isinstance(parts, list) or not parts:
        raise _BadFile("The offset JSON file has no partitions")
    out: dict[tuple[str, int], int] = {}
    for entry in parts:
        try:
            tp = (str(entry["topic"]), int(entry["partition"]))
            offset = int(entry["offset"])
        except (KeyError, TypeError, ValueError):
            raise _BadFile(f"each partition needs topic, partition and offset: {json.dumps(entry)}") from None
        if tp in out:
            raise _BadFile(f"Offset json file contains duplicate topic partitions: {tp[0]}-{tp[1]}")
        out[tp] = offset
    return out


def run(args: argparse.Namespace) -> int:
    try:
        with open(args.offset_json_file, encoding="utf-8") as f:
            wanted = parse_offset_json(f.read())
    except OSError as e:
        error(PROG, f"cannot read {args.offset_json_file}: {e.strerror or e}")
        return 1
    except _BadFile as e:
        error(PROG, str(e))
        return 1
    failed = False
    try:
        with AdminClient(args.bootstrap_server, timeout=args.timeout) as a:
            print("Executing records delete operation")
            results: dict[tuple[str, int], str] = {}
            for topic in sorted({t for t, _ in wanted}):
                offsets = {p: o for (t, p), o in wanted.items() if t == topic}
                try:
                    for p, low in a.delete_records(topic, offsets).items():
                        results[(topic, p)] = f"low_watermark: {low}"
                except AdminError:  # one bad partition fails the request: ask partition by partition
                    for p, o in offsets.items():
                        try:
                            low = a.delete_records(topic, {p: o})[p]
                            results[(topic, p)] = f"low_watermark: {low}"
                        except AdminError as e:
                            results[(topic, p)] = f"error: {e}"
                            failed = True
            print("Records delete operation completed:")
            for (t, p), text in sorted(results.items()):
                print(f"partition: {t}-{p}\t{text}")
    except AdminError as e:
        error(PROG, str(e))
        return 1
    return 1 if failed else 0
