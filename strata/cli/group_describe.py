"""What `strata groups` knows of a group and the tables kafka-consumer-groups.sh prints from it: a classic group
(DescribeGroups) or a KIP-848 consumer group (ConsumerGroupDescribe, api 69: member epochs, current and target
assignments), the `list --type --state` table and the `describe --members [--verbose]` and `--state` views.
Pure functions of decoded responses, so the formatting is tested without a broker."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .admin_client import AdminError, BrokerNode

CONSUMER_GROUP_DESCRIBE = 69  # ApiKey of KIP-848's ConsumerGroupDescribe

Assignment = list[tuple[str, list[int]]]

# Kafka's GroupState names (ListGroups states_filter, --state) and GroupType names (types_filter, --type).
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling")
GROUP_TYPES = ("Classic", "Consumer")
_TYPE_LABELS = {"classic": "Classic", "consumer": "Consumer", "share": "Share", "streams": "Streams"}
MISSING = "-"  # kafka-consumer-groups.sh's empty column


@dataclass
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: Assignment = field(default_factory=list)
    # KIP-848 consumer groups only (None for a classic group's members):
    member_epoch: int | None = None
    target_assignment: Assignment | None = None

    def partitions(self) -> list[tuple[str, int]]:
        return [(t, p) for t, ps in self.assignment for p in ps]


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str  # the assignment strategy: the classic protocol's name, or the consumer group's assignor
    members: list[MemberDescription] = field(default_factory=list)
    group_type: str = "Classic"
    group_epoch: int | None = None
    assignment_epoch: int | None = None
    coordinator: BrokerNode | None = None


@dataclass
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str


def type_label(wire: str) -> str:
    """Kafka's GroupType name for ListGroups' group_type ('classic' -> 'Classic'); 'Unknown' when not sent."""
    return _TYPE_LABELS.get(wire.lower(), wire or "Unknown")


def _parse_list(text: str, valid: tuple[str, ...], what: str) -> list[str]:
    by_lower = {v.lower(): v for v in valid}
    parsed = [by_lower.get(s.strip().lower()) for s in text.split(",")]
    if None in parsed:
        raise AdminError(f"Invalid {what} list '{text}'. Valid {what}s are: {', '.join(valid)}")
    return list(dict.fromkeys(p for p in parsed if p is not None))


def parse_states(text: str | None) -> list[str]:
    """`--state stable,empty` -> ['Stable', 'Empty'] (case-insensitive, as Kafka); [] for a bare --state."""
    return _parse_list(text, GROUP_STATES, "state") if text else []


def parse_types(text: str | None) -> list[str]:
    """`--type consumer` -> ['Consumer'] (case-insensitive, as Kafka); [] for a bare --type."""
    return _parse_list(text, GROUP_TYPES, "type") if text else []


def list_table(groups: list[ListedGroup], include_type: bool, include_state: bool) -> str:
    """`--list --type --state`: GROUP [TYPE] [STATE], the group column as wide as the longest id + 10 (at least
    25), the others 20, as kafka-consumer-groups.sh pads them."""
    width = max([15, *(len(g.group_id) for g in groups)]) + 10
    header = ["GROUP"] + (["TYPE"] if include_type else []) + (["STATE"] if include_state else [])
    rows = [header]
    for g in groups:
        row = [g.group_id]
        if include_type:
            row.append(type_label(g.group_type))
        if include_state:
            row.append(g.state or "Unknown")
        rows.append(row)
    return "\n".join(" ".join([r[0].ljust(width), *(c.ljust(20) for c in r[1:])]).rstrip() for r in rows)


def assignment_text(assignment: Assignment | None) -> str:
    """'t1:0,1;t2:0' (topics by name, partitions ascending), '-' when empty, as Kafka 4's --members --verbose."""
    if not assignment:
        return MISSING
    by_topic: dict[str, set[int]] = {}
    for topic, parts in assignment:
        by_topic.setdefault(topic, set()).update(parts)
    text = ";".join(f"{t}:{','.join(str(p) for p in sorted(ps))}" for t, ps in sorted(by_topic.items()) if ps)
    return text or MISSING


def _aligned(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(" ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def members_table(desc: GroupDescription, verbose: bool) -> str:
    """`--describe --members [--verbose]`: one row per member; verbose adds its epoch and current assignment and the
    group's target assignment epoch with the member's target ('-' for a classic group's epochs and target)."""
    with_instance = any(m.group_instance_id for m in desc.members)
    header = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + ["HOST", "CLIENT-ID"]
    header.append("#PARTITIONS")
    if verbose:
        header += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
    rows = [header]
    consumer = desc.group_type == "Consumer"
    for m in desc.members:
        row = [desc.group_id, m.member_id]
        if with_instance:
            row.append(m.group_instance_id or MISSING)
        row += [m.host, m.client_id, str(len(m.partitions()))]
        if verbose:
            row += [
                str(m.member_epoch) if consumer and m.member_epoch is not None else MISSING,
                assignment_text(m.assignment),
                str(desc.assignment_epoch) if consumer and desc.assignment_epoch is not None else MISSING,
                assignment_text(m.target_assignment) if consumer else MISSING,
            ]
        rows.append(row)
    return _aligned(rows)


def state_table(desc: GroupDescription, verbose: bool) -> str:
    """`--describe --state [--verbose]`: coordinator, assignment strategy, state, (epochs,) member count."""
    c = desc.coordinator
    coordinator = f"{c.host}:{c.port}  ({c.node_id})" if c is not None else MISSING
    header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
    row = [desc.group_id, coordinator, desc.protocol or MISSING, desc.state]
    if verbose:
        header += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
        row += [
            str(desc.group_epoch) if desc.group_epoch is not None else MISSING,
            str(desc.assignment_epoch) if desc.assignment_epoch is not None else MISSING,
        ]
    header.append("#MEMBERS")
    row.append(str(len(desc.members)))
    return _aligned([header, row])


def _assignment(wire: Any) -> Assignment:
    if wire is None:
        return []
    return [(tp.topic_name, sorted(tp.partitions)) for tp in wire.topic_partitions]


def consumer_group_description(g: Any, coordinator: BrokerNode | None = None) -> GroupDescription:
    """A ConsumerGroupDescribe response's DescribedGroup (error checked by the caller) as a GroupDescription."""
    members = [
        MemberDescription(
            m.member_id,
            m.instance_id,
            m.client_id,
            m.client_host,
            _assignment(m.assignment),
            member_epoch=m.member_epoch,
            target_assignment=_assignment(m.target_assignment),
        )
        for m in g.members
    ]
    return GroupDescription(
        g.group_id,
        g.group_state,
        "consumer",
        g.assignor_name,
        members,
        group_type="Consumer",
        group_epoch=g.group_epoch,
        assignment_epoch=g.assignment_epoch,
        coordinator=coordinator,
    )
