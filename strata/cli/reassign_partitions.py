"""``strata reassign-partitions``: move partition replicas between brokers, like kafka-reassign-partitions.sh:
``generate`` proposes an assignment of topics over brokers, ``execute`` starts a reassignment from its JSON file
(AlterPartitionReassignments), ``verify`` reports each partition's progress, ``list`` the ongoing ones. JSON files
and printed lines are Kafka's. Not supported: throttles and log-dir moves (``log_dirs`` other than "any")."""

from __future__ import annotations

import argparse
import json
from typing import Any

from strata.protocol.registry import REQUEST_CLASSES, ApiKey

from .admin_client import AdminClient, AdminError, at_controller, check_error, error_text
from .common import SubParsers, UsageError, add_action_command, run_action

NAME = "reassign-partitions"
Assignment = dict[tuple[str, int], list[int]]


def register(sub: SubParsers) -> None:
    action = add_action_command(
        sub, NAME, "move partition replicas between brokers (kafka-reassign-partitions.sh)", run
    )
    g = action("generate", _generate, "propose an assignment of topics over brokers")
    g.add_argument("--topics-to-move-json-file", required=True, metavar="FILE", help='{"topics": [{"topic": "t"}]}')
    g.add_argument("--broker-list", required=True, metavar="ID1,ID2")
    g.add_argument("--disable-rack-aware", action="store_true", help="accepted; the proposal ignores racks")
    e = action("execute", _execute, "start the reassignment of a JSON file")
    e.add_argument("--reassignment-json-file", required=True, metavar="FILE")
    e.add_argument("--additional", action="store_true", help="allow it while other reassignments run")
    v = action("verify", _verify, "report the progress of the reassignment of a JSON file")
    v.add_argument("--reassignment-json-file", required=True, metavar="FILE")
    action("list", _list, "ongoing reassignments")


def run(args: argparse.Namespace) -> int:
    return run_action("strata reassign-partitions", AdminClient, args)


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{path} is not JSON: {e}") from None


def format_assignment(assignment: Assignment) -> str:
    """Kafka's reassignment JSON (version 1, log_dirs "any"), one line."""
    parts = [
        {"topic": t, "partition": p, "replicas": rs, "log_dirs": ["any"] * len(rs)}
        for (t, p), rs in sorted(assignment.items())
    ]
    return json.dumps({"version": 1, "partitions": parts}, separators=(",", ":"))


def parse_assignment(doc: Any) -> Assignment:
    out: Assignment = {}
    try:
        for e in doc["partitions"]:
            tp = (str(e["topic"]), int(e["partition"]))
            replicas = [int(r) for r in e["replicas"]]
            if any(d != "any" for d in e.get("log_dirs", [])):
                raise UsageError(f"{tp[0]}-{tp[1]}: moving replicas between log dirs is not supported")
            if tp in out:
                raise UsageError(f"Reassignment JSON contains multiple entries for {tp[0]}-{tp[1]}")
            if len(set(replicas)) != len(replicas):
                raise UsageError(
                    f"Partition replica lists may not contain duplicate entries: {tp[0]}-{tp[1]} "
                    f"contains multiple entries for {','.join(map(str, replicas))}"
                )
            out[tp] = replicas
    except (KeyError, TypeError, ValueError):
        raise UsageError('the reassignment JSON must be {"partitions": [{"topic", "partition", "replicas"}]}') from None
    if not out:
        raise UsageError("Partition reassignment list cannot be empty")
    return out


def current_assignment(a: AdminClient, topics: list[str]) -> Assignment:
    resp = a.metadata(sorted(set(topics)))
    out: Assignment = {}
    for t in resp.topics:
        check_error(t.error_code, None, f"topic {t.name!r}: ")
        for p in t.partitions:
            out[(t.name, p.partition_index)] = list(p.replica_nodes)
    return out


def propose(current: Assignment, brokers: list[int]) -> Assignment:
    """Each topic's partitions spread round-robin over `brokers`, keeping each partition's replica count; the
    first replica (the preferred leader) rotates with the partition, as Kafka's rack-unaware assignment does."""
    out: Assignment = {}
    n = len(brokers)
    for (t, p), replicas in sorted(current.items()):
        rf = len(replicas)
        if rf > n:
            raise UsageError(f"Replication factor: {rf} larger than available brokers: {n}.")
        out[(t, p)] = [brokers[(p + j) % n] for j in range(rf)]
    return out


def _generate(a: AdminClient, args: argparse.Namespace) -> int:
    doc = _read_json(args.topics_to_move_json_file)
    try:
        topics = [str(e["topic"]) for e in doc["topics"]]
        brokers = [int(b) for b in args.broker_list.split(",") if b]
    except (KeyError, TypeError, ValueError):
        raise UsageError('topics to move must be {"topics": [{"topic": ...}]} and --broker-list ids') from None
    if len(set(brokers)) != len(brokers):
        raise UsageError(f"Broker list contains duplicate entries: {args.broker_list}")
    if len(set(topics)) != len(topics):
        raise UsageError(f"List of topics to reassign contains duplicate entries: {', '.join(topics)}")
    _check_brokers(a, brokers)
    current = current_assignment(a, topics)
    print(f"Current partition replica assignment\n{format_assignment(current)}\n")
    print(f"Proposed partition reassignment configuration\n{format_assignment(propose(current, brokers))}")
    return 0


def _check_brokers(a: AdminClient, ids: list[int]) -> None:
    unknown = sorted(set(ids) - {b.node_id for b in a.brokers()})
    if unknown:
        raise UsageError(f"Unknown broker id(s): {','.join(map(str, unknown))}")


def ongoing(a: AdminClient) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    """(replicas, adding, removing) of every ongoing reassignment."""
    _, resp = a.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, timeout_ms=int(a.timeout * 1000), topics=None)
    check_error(resp.error_code, resp.error_message, "ListPartitionReassignments: ")
    return {
        (t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
        for t in resp.topics
        for p in t.partitions
    }


@at_controller
def alter_reassignments(a: AdminClient, target: Assignment) -> dict[tuple[str, int], str]:
    """Start the reassignments; the error text of each partition that was refused."""
    cls = REQUEST_CLASSES[ApiKey.ALTER_PARTITION_REASSIGNMENTS]
    T = cls.ReassignableTopic
    by_topic: dict[str, list[Any]] = {}
    for (t, p), rs in sorted(target.items()):
        by_topic.setdefault(t, []).append(T.ReassignablePartition(partition_index=p, replicas=rs))
    v = a.api_version(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
    fields: dict[str, Any] = {
        "timeout_ms": int(a.timeout * 1000),
        "topics": [T(name=t, partitions=ps) for t, ps in by_topic.items()],
    }
    if v >= 1:
        fields["allow_replication_factor_change"] = True
    resp = a.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, v, **fields)
    check_error(resp.error_code, resp.error_message, "AlterPartitionReassignments: ")
    return {
        (t.name, p.partition_index): error_text(p.error_code, p.error_message)
        for t in resp.responses
        for p in t.partitions
        if p.error_code
    }


def _execute(a: AdminClient, args: argparse.Namespace) -> int:
    target = parse_assignment(_read_json(args.reassignment_json_file))
    if not args.additional and ongoing(a):
        raise UsageError(
            "Cannot execute because there is an existing partition assignment. Use --additional to override "
            "this and create a new partition assignment in addition to the existing one. The --additional flag "
            "can also be used to change the throttle by resubmitting the current reassignment."
        )
    _check_brokers(a, sorted({b for rs in target.values() for b in rs}))
    current = current_assignment(a, [t for t, _ in target])
    missing = sorted(set(target) - set(current))
    if missing:
        raise UsageError(f"Unable to find partition: {', '.join(f'{t}-{p}' for t, p in missing)}")
    print("Current partition replica assignment\n")
    print(format_assignment({tp: current[tp] for tp in target}))
    print("\nSave this to use as the --reassignment-json-file option during rollback")
    errors = alter_reassignments(a, target)
    if errors:
        raise AdminError(
            "Error reassigning partition(s): " + "; ".join(f"{t}-{p}: {e}" for (t, p), e in sorted(errors.items()))
        )
    names = ",".join(f"{t}-{p}" for t, p in sorted(target))
    print(f"Successfully started partition reassignment{'' if len(target) == 1 else 's'} for {names}")
    return 0


def _verify(a: AdminClient, args: argparse.Namespace) -> int:
    target = parse_assignment(_read_json(args.reassignment_json_file))
    running = ongoing(a)
    current = current_assignment(a, [t for t, _ in target])
    lines = ["Status of partition reassignment:"]
    for tp in sorted(target):
        name = f"{tp[0]}-{tp[1]}"
        if tp in running:
            lines.append(f"Reassignment of partition {name} is still in progress.")
        elif current.get(tp) == target[tp]:
            lines.append(f"Reassignment of partition {name} is completed.")
        else:
            lines.append(
                f"There is no active reassignment of partition {name}, but replica set is "
                f"{','.join(map(str, current.get(tp, [])))} rather than {','.join(map(str, target[tp]))}."
            )
    print("\n".join(lines))
    return 0


def _list(a: AdminClient, args: argparse.Namespace) -> int:
    running = ongoing(a)
    if not running:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for (t, p), (rs, adding, removing) in sorted(running.items()):
        line = f"{t}-{p}: replicas: {','.join(map(str, rs))}."
        if adding:
            line += f" adding: {','.join(map(str, adding))}."
        if removing:
            line += f" removing: {','.join(map(str, removing))}."
        print(line)
    return 0
