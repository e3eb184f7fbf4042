"""``strata groups reset-offsets`` and ``strata groups delete-offsets``: move or remove a consumer group's
committed offsets, like kafka-consumer-groups.sh --reset-offsets / --delete-offsets, with its scopes (--topic
``t[:p,p]``, --all-topics) and targets (--to-earliest, --to-latest, --to-current, --to-offset, --shift-by,
--to-datetime, --by-duration). A reset is a dry run unless --execute, and only for an inactive group."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from strata.protocol.errors import ErrorCode

from .admin_client import EARLIEST, LATEST, AdminError, error_text
from .common import Progress, table
from .timestamps import TimestampError, parse_duration_ms, parse_timestamp

if TYPE_CHECKING:
    from .groups import GroupAdmin

TopicPartition = tuple[str, int]


def register_actions(action: Callable[..., argparse.ArgumentParser]) -> None:
    r = action("reset-offsets", _reset, "move an inactive group's committed offsets")
    r.add_argument("--group", required=True)
    scope = r.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P1,P2]", help="repeatable")
    scope.add_argument("--all-topics", action="store_true", help="every partition the group has committed")
    to = r.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-current", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--shift-by", type=int, metavar="N", help="committed offset + N (N may be negative)")
    to.add_argument("--to-datetime", metavar="DATETIME", help="yyyy-MM-ddTHH:mm:SS.sss[zone] or epoch ms")
    to.add_argument("--by-duration", metavar="DURATION", help="ISO 8601 duration back from now, e.g. PT1H, P1D")
    r.add_argument("--execute", action="store_true", help="commit (default: print the plan only)")
    r.add_argument("--dry-run", action="store_true", help="print the plan only (the default)")
    d = action("delete-offsets", _delete_offsets, "delete a group's committed offsets of topics")
    d.add_argument("--group", required=True)
    d.add_argument("--topic", required=True, action="append", metavar="TOPIC[:P1,P2]", help="repeatable")


def _topic_specs(a: GroupAdmin, specs: list[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for spec in specs:
        topic, _, plist = spec.partition(":")
        try:
            parts = [int(x) for x in plist.split(",") if x] if plist else a.topic_partitions(topic)
        except ValueError:
            raise AdminError(f"--topic {spec!r}: partitions must be comma-separated numbers") from None
        out.setdefault(topic, [])
        out[topic] += [p for p in parts if p not in out[topic]]
    return out


def _target_time(args: argparse.Namespace) -> int | None:
    try:
        if args.to_datetime is not None:
            return parse_timestamp(args.to_datetime)
        if args.by_duration is not None:
            return int(time.time() * 1000) - parse_duration_ms(args.by_duration)
    except TimestampError as e:
        raise AdminError(str(e)) from None
    return None


def plan_reset(a: GroupAdmin, args: argparse.Namespace) -> dict[TopicPartition, int]:
    """New offset of every partition in scope, clamped into [log start, log end] as Kafka does."""
    committed = {tp: o for tp, o in a.fetch_offsets(args.group).items() if o >= 0}
    if args.all_topics:
        scope: dict[str, list[int]] = {}
        for t, p in sorted(committed):
            scope.setdefault(t, []).append(p)
    else:
        scope = _topic_specs(a, args.topic)
    at = _target_time(args)
    plan: dict[TopicPartition, int] = {}
    progress = Progress("reset-offsets: partitions planned", sum(len(ps) for ps in scope.values()))
    for topic, parts in sorted(scope.items()):
        starts = a.list_offsets(topic, parts, EARLIEST)
        ends = a.list_offsets(topic, parts, LATEST)
        by_time = a.list_offsets(topic, parts, at) if at is not None else {}
        for p in parts:
            tp = (topic, p)
            if args.to_earliest:
                target = starts[p]
            elif args.to_latest:
                target = ends[p]
            elif args.to_current:
                target = committed.get(tp, ends[p])
            elif args.shift_by is not None:
                if tp not in committed:
                    raise AdminError(
                        f"Cannot shift offset for partition {topic}-{p} since there is no current committed offset"
                    )
                target = committed[tp] + args.shift_by
            elif at is not None:
                target = by_time[p] if by_time[p] >= 0 else ends[p]  # nothing that late: the log end
            else:
                target = args.to_offset
            if target < starts[p]:
                print(
                    f"New offset ({target}) is lower than earliest offset for topic partition {topic}-{p}. "
                    f"Value will be set to {starts[p]}",
                    file=sys.stderr,
                )
                target = starts[p]
            elif target > ends[p]:
                print(
                    f"New offset ({target}) is higher than latest offset for topic partition {topic}-{p}. "
                    f"Value will be set to {ends[p]}",
                    file=sys.stderr,
                )
                target = ends[p]
            plan[tp] = target
        progress.update(len(plan), "partitions")
    return plan


def _reset(a: GroupAdmin, args: argparse.Namespace) -> int:
    group = args.group
    desc = a.describe_group(group)
    if desc.state not in ("Empty", "Dead"):
        raise AdminError(
            f"Assignments can only be reset if the group '{group}' is inactive, but the current state is {desc.state}."
        )
    plan = plan_reset(a, args)
    if args.execute and plan:
        a.commit_offsets(group, plan)
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    rows += [[group, t, str(p), str(o)] for (t, p), o in sorted(plan.items())]
    print()
    print(table(rows))
    if not args.execute:
        print("\n(dry run: nothing was changed; add --execute to commit these offsets)")
    return 0


_TOP_LEVEL = {
    ErrorCode.INVALID_GROUP_ID: "'{g}' is not valid.",
    ErrorCode.GROUP_ID_NOT_FOUND: "'{g}' does not exist.",
    ErrorCode.NON_EMPTY_GROUP: "Deleting offsets of a consumer group '{g}' is forbidden if the group is not empty.",
}


def _delete_offsets(a: GroupAdmin, args: argparse.Namespace) -> int:
    group = args.group
    results: dict[TopicPartition, int] = {}
    for topic, parts in _topic_specs(a, args.topic).items():
        try:
            for p, code in a.delete_offsets(group, topic, parts).items():
                results[(topic, p)] = code
        except AdminError as e:
            if e.code in _TOP_LEVEL:
                raise AdminError(_TOP_LEVEL[ErrorCode(e.code)].format(g=group), e.code) from None
            raise
    fmt = "\n{:<30} {:<15} {:<15}"
    if not any(results.values()):
        print(f"Request succeed for deleting offsets with topic {', '.join(args.topic)} group {group}")
    else:
        print("\nError: Encounter some partition level error, see the follow-up details:")
    out = fmt.format("TOPIC", "PARTITION", "STATUS")
    for (t, p), code in sorted(results.items(), key=lambda kv: kv[0][0] + str(kv[0][1])):
        out += fmt.format(t, p, f"Error: :{error_text(code)}" if code else "Successful")
    print(out)
    return 1 if any(results.values()) else 0
