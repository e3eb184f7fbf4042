"""``strata leader-election``: preferred or unclean leader elections, like kafka-leader-election.sh (ElectLeaders),
for --topic/--partition, a --path-to-json-file, or --all-topic-partitions, printing Kafka's result lines."""

from __future__ import annotations

import argparse
import json
from typing import Any

from strata.protocol.errors import ErrorCode
from strata.protocol.registry import REQUEST_CLASSES, ApiKey

from .admin_client import AdminClient, AdminError, at_controller, check_error, error_text
from .common import SubParsers, add_bootstrap_option, add_timeout_option, error

NAME = "leader-election"
PROG = "strata leader-election"
TYPES = {"preferred": 0, "unclean": 1}


class _UsageError(Exception):
    pass


def register(sub: SubParsers) -> None:
    p = sub.add_parser(NAME, help="elect preferred or unclean leaders (kafka-leader-election.sh)")
    add_bootstrap_option(p)
    add_timeout_option(p)
    p.add_argument("--election-type", required=True, type=str.lower, choices=sorted(TYPES))
    p.add_argument("--topic")
    p.add_argument("--partition", type=int)
    p.add_argument("--path-to-json-file", metavar="FILE", help='{"partitions": [{"topic": "t", "partition": 0}]}')
    p.add_argument("--all-topic-partitions", action="store_true")
    p.set_defaults(func=run)


def _scope(args: argparse.Namespace) -> dict[str, list[int]] | None:
    """The partitions to elect (None: every eligible partition)."""
    given = [args.topic is not None, args.path_to_json_file is not None, args.all_topic_partitions]
    if sum(given) != 1:
        raise _UsageError("exactly one of --topic, --path-to-json-file or --all-topic-partitions is required")
    if args.partition is not None and args.topic is None:
        raise _UsageError("Option --partition is only allowed if --topic is used")
    if args.all_topic_partitions:
        return None
    if args.topic is not None:
        if args.partition is None:
            raise _UsageError("Missing required option(s): partition")
        return {args.topic: [args.partition]}
    try:
        with open(args.path_to_json_file, encoding="utf-8") as f:
            doc: Any = json.load(f)
        entries = [(str(e["topic"]), int(e["partition"])) for e in doc["partitions"]]
    except OSError as e:
        raise _UsageError(f"cannot read {args.path_to_json_file}: {e.strerror or e}") from None
    except (ValueError, KeyError, TypeError):
        raise _UsageError('Replica election data must be {"partitions": [{"topic": ..., "partition": ...}]}') from None
    if not entries:
        raise _UsageError("Replica election data is empty")
    dups = sorted({f"{t}-{p}" for t, p in entries if entries.count((t, p)) > 1})
    if dups:
        raise _UsageError(f"Replica election data contains duplicate partitions: {','.join(dups)}")
    out: dict[str, list[int]] = {}
    for t, p in entries:
        out.setdefault(t, []).append(p)
    return out


@at_controller
def elect_leaders(a: AdminClient, election_type: int, scope: dict[str, list[int]] | None) -> dict[tuple[str, int], int]:
    """Error code per partition (0: elected, ELECTION_NOT_NEEDED: the right leader already leads)."""
    cls = REQUEST_CLASSES[ApiKey.ELECT_LEADERS]
    tps = None if scope is None else [cls.TopicPartitions(topic=t, partitions=ps) for t, ps in scope.items()]
    v = a.api_version(ApiKey.ELECT_LEADERS)
    fields: dict[str, Any] = {"topic_partitions": tps, "timeout_ms": int(a.timeout * 1000)}
    if v >= 1:
        fields["election_type"] = election_type
    elif election_type != 0:
        raise AdminError("the broker cannot run unclean elections (ElectLeaders v0)")
    resp = a.request(ApiKey.ELECT_LEADERS, v, **fields)
    check_error(getattr(resp, "error_code", 0), None, "ElectLeaders: ")
    return {(r.topic, p.partition_id): p.error_code for r in resp.replica_election_results for p in r.partition_result}


def run(args: argparse.Namespace) -> int:
    kind = args.election_type.upper()
    try:
        scope = _scope(args)
        with AdminClient(args.bootstrap_server, timeout=args.timeout) as a:
            results = elect_leaders(a, TYPES[args.election_type], scope)
    except (_UsageError, AdminError) as e:
        error(PROG, str(e))
        return 1
    names = {tp: f"{tp[0]}-{tp[1]}" for tp in results}
    done = [names[tp] for tp, c in sorted(results.items()) if c == 0]
    noop = [names[tp] for tp, c in sorted(results.items()) if c == ErrorCode.ELECTION_NOT_NEEDED]
    failed = {tp: c for tp, c in sorted(results.items()) if c not in (0, ErrorCode.ELECTION_NOT_NEEDED)}
    if done:
        print(f"Successfully completed leader election ({kind}) for partitions {', '.join(done)}")
    if noop:
        print(f"Valid replica already elected for partitions {', '.join(noop)}")
    for tp, code in failed.items():
        print(f"Error completing leader election ({kind}) for partition: {names[tp]}: {error_text(code)}")
    if failed:
        error(PROG, f"{len(failed)} replica(s) could not be elected")
        return 1
    return 0
