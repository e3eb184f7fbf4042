"""``strata recovery status``: the topics recovered from the bucket (topic recovery, whole-cluster restore; issue 24)
and, per partition, what was recovered and where the log stands now.

The recovery record comes from DescribeConfigs' read-only `remote.recovery.state` entry, which the broker answers
only when it is asked for by name; the current offsets from Metadata and ListOffsets, as `strata topics describe`.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from .admin_client import RESOURCE_TOPIC, AdminClient, PartitionDescription
from .common import SubParsers, add_action_command, run_action

NAME = "recovery"
RECOVERY_STATE_KEY = "remote.recovery.state"


def register(sub: SubParsers) -> None:
    action = add_action_command(sub, NAME, "topics recovered from the bucket and their partitions' state", run)
    s = action("status", _status, "recovered topics: per partition the recovered offsets and segments, and the log now")
    s.add_argument("--topic", help="one topic (default: every recovered topic)")


def run(args: argparse.Namespace) -> int:
    return run_action("strata recovery", AdminClient, args)


def recovery_state(a: AdminClient, topic: str) -> dict[str, Any] | None:
    """The topic's recovery record, None for a topic that was not recovered."""
    for c in a.describe_configs(RESOURCE_TOPIC, topic, keys=[RECOVERY_STATE_KEY]):
        if c.name == RECOVERY_STATE_KEY and c.value:
            state: dict[str, Any] = json.loads(c.value)
            return state
    return None


def partition_line(topic: str, p: PartitionDescription, rec: dict[str, Any]) -> str:
    """One partition's recovered range and its log now; State is RECOVERED until it has new records, then ACTIVE."""
    up_to = int(rec["next_offset"]) - 1
    state = "ACTIVE" if p.end_offset > up_to + 1 else "RECOVERED"
    line = (
        f"\tTopic: {topic}\tPartition: {p.partition}\tRecoveredSegments: {rec['segments']}\t"
        f"RecoveredBytes: {rec['bytes']}\tRecoveredFrom: {rec['log_start_offset']}\tRecoveredUpTo: {up_to}\t"
        f"LogStartOffset: {p.log_start_offset}\tEndOffset: {p.end_offset}\tState: {state}"
    )
    if rec.get("problems"):
        line += f"\tSkipped: {len(rec['problems'])}"
    return line


def _status(a: AdminClient, args: argparse.Namespace) -> int:
    shown = 0
    for t in a.describe_topics([args.topic] if args.topic else None):
        if t.internal:
            continue
        rec = recovery_state(a, t.name)
        if rec is None:
            continue
        shown += 1
        parts = rec.get("partitions", {})
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(rec["recovered_at_ms"]) / 1000))
        print(
            f"Topic: {t.name}\tTopicId: {t.topic_id}\tRecoveredAt: {when}\tPartitionCount: {len(t.partitions)}\t"
            f"RecoveredSegments: {sum(int(r['segments']) for r in parts.values())}\t"
            f"RecoveredBytes: {sum(int(r['bytes']) for r in parts.values())}\t"
            f"RetentionBytes: {rec['retention_bytes']}\tRetentionMs: {rec['retention_ms']}"
        )
        for p in t.partitions:
            if str(p.partition) in parts:
                print(partition_line(t.name, p, parts[str(p.partition)]))
    if not shown:
        print("No recovered topics." if not args.topic else f"Topic {args.topic} was not recovered from the bucket.")
    return 0
