"""Consumer-group administration over the Kafka protocol, and the `strata groups` command (like
kafka-consumer-groups.sh): list (type, state), describe (offsets, lag, members, state), delete, reset-offsets.
Classic groups and KIP-848 consumer groups (ConsumerGroupDescribe: member epochs, current and target assignments).

Speaks plain Kafka wire protocol through strata.cli.admin_client.AdminClient, so it works against any
Kafka-compatible broker; group requests go to the group's coordinator (FindCoordinator).
"""

from __future__ import annotations

import argparse
from typing import Any

from strata.protocol.consumer_protocol import PROTOCOL_TYPE, ConsumerProtocolError, assigned_partitions
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import REQUEST_CLASSES, ApiKey

from . import group_offsets
from .admin_client import LATEST, AdminClient, AdminError, BrokerNode, check_error, error_text
from .common import SubParsers, add_action_command, error, table
from .group_describe import (
    CONSUMER_GROUP_DESCRIBE,
    GroupDescription,
    ListedGroup,
    MemberDescription,
    consumer_group_description,
    list_table,
    members_table,
    parse_states,
    parse_types,
    state_table,
)

NAME = "groups"


class GroupAdmin(AdminClient):
    """AdminClient plus the group APIs. Requests for a group go to its coordinator."""

    # -- plumbing --------------------------------------------------------------------------------------------
    def find_coordinator(self, key: str, key_type: int = 0) -> tuple[int, str, int]:
        """(node id, host, port) of the coordinator of a group (key type 0) or a transactional id (1)."""
        what = f"FindCoordinator for {'group' if key_type == 0 else 'transactional id'} {key!r}: "
        v = self.api_version(ApiKey.FIND_COORDINATOR)
        if v >= 4:
            resp = self.request(ApiKey.FIND_COORDINATOR, v, key_type=key_type, coordinator_keys=[key])
            c = resp.coordinators[0]
            check_error(c.error_code, c.error_message, what)
            return c.node_id, c.host, c.port
        fields: dict[str, Any] = {"key": key}
        if v >= 1:
            fields["key_type"] = key_type
        elif key_type:
            raise AdminError("the broker cannot find transaction coordinators (FindCoordinator v0)")
        resp = self.request(ApiKey.FIND_COORDINATOR, v, **fields)
        check_error(resp.error_code, getattr(resp, "error_message", None), what)
        return resp.node_id, resp.host, resp.port

    def _coordinator(self, group: str) -> AdminClient:
        _, host, port = self.find_coordinator(group)
        return self.peer(host, port)

    # -- groups ----------------------------------------------------------------------------------------------
    def list_groups(self, states: list[str] | None = None, types: list[str] | None = None) -> list[ListedGroup]:
        """Every group of the cluster: ListGroups answers only the groups its broker coordinates, so it goes to
        every broker and the answers are merged, as Kafka's admin client does. `types`: 'Classic', 'Consumer'."""
        merged: dict[str, ListedGroup] = {}
        conns: list[AdminClient] = [self.peer(n.host, n.port) for n in self.brokers()] or [self]
        for conn in conns:
            for g in _list_groups_at(conn, states, types):
                merged[g.group_id] = g
        return [merged[g] for g in sorted(merged)]

    def describe_group(self, group: str) -> GroupDescription:
        """A consumer group through ConsumerGroupDescribe when the coordinator has it; a classic group (which
        ConsumerGroupDescribe answers GROUP_ID_NOT_FOUND) or an older broker through DescribeGroups, as Kafka's
        admin client falls back."""
        node_id, host, port = self.find_coordinator(group)
        c = self.peer(host, port)
        coordinator = BrokerNode(node_id, host, port, None)
        if CONSUMER_GROUP_DESCRIBE in REQUEST_CLASSES and CONSUMER_GROUP_DESCRIBE in c.versions:
            v = c.api_version(CONSUMER_GROUP_DESCRIBE)
            resp = c.request(CONSUMER_GROUP_DESCRIBE, v, group_ids=[group], include_authorized_operations=False)
            g = resp.groups[0]
            if g.error_code != ErrorCode.GROUP_ID_NOT_FOUND:
                check_error(g.error_code, g.error_message, f"ConsumerGroupDescribe {group!r}: ")
                return consumer_group_description(g, coordinator)
        v = c.api_version(ApiKey.DESCRIBE_GROUPS)
        fields: dict[str, Any] = {"groups": [group]}
        if v >= 3:
            fields["include_authorized_operations"] = False
        resp = c.request(ApiKey.DESCRIBE_GROUPS, v, **fields)
        g = resp.groups[0]
        if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            return GroupDescription(group, "Dead", "", "", coordinator=coordinator)
        check_error(g.error_code, getattr(g, "error_message", None), f"DescribeGroups {group!r}: ")
        members = []
        for m in g.members:
            assignment: list[tuple[str, list[int]]] = []
            if g.protocol_type == PROTOCOL_TYPE and m.member_assignment:
                try:
                    assignment = assigned_partitions(bytes(m.member_assignment))
                except ConsumerProtocolError:
                    assignment = []
            members.append(
                MemberDescription(
                    m.member_id, getattr(m, "group_instance_id", None), m.client_id, m.client_host, assignment
                )
            )
        return GroupDescription(
            g.group_id, g.group_state, g.protocol_type, g.protocol_data, members, coordinator=coordinator
        )

    def fetch_offsets(self, group: str, topics: dict[str, list[int]] | None = None) -> dict[tuple[str, int], int]:
        """Committed offsets (topics=None: every partition the group has committed). -1 = none."""
        c = self._coordinator(group)
        v = c.api_version(ApiKey.OFFSET_FETCH, 8)
        cls = REQUEST_CLASSES[ApiKey.OFFSET_FETCH]
        out: dict[tuple[str, int], int] = {}
        if v >= 8:
            G = cls.OffsetFetchRequestGroup
            req_topics = (
                None
                if topics is None
                else [G.OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in topics.items()]
            )
            resp = c.request(
                ApiKey.OFFSET_FETCH, v, groups=[G(group_id=group, topics=req_topics)], require_stable=False
            )
            g = resp.groups[0]
            check_error(g.error_code, what=f"OffsetFetch {group!r}: ")
            for t in g.topics:
                for p in t.partitions:
                    check_error(p.error_code, what=f"OffsetFetch {group!r} {t.name}-{p.partition_index}: ")
                    out[(t.name, p.partition_index)] = p.committed_offset
            return out
        T = cls.OffsetFetchRequestTopic
        if topics is None and v < 2:
            raise AdminError("the broker cannot list all committed offsets (OffsetFetch < v2)")
        req_topics = None if topics is None else [T(name=t, partition_indexes=ps) for t, ps in topics.items()]
        fields: dict[str, Any] = {"group_id": group, "topics": req_topics}
        if v >= 7:
            fields["require_stable"] = False
        resp = c.request(ApiKey.OFFSET_FETCH, v, **fields)
        check_error(getattr(resp, "error_code", 0) or 0, what=f"OffsetFetch {group!r}: ")
        for t in resp.topics:
            for p in t.partitions:
                check_error(p.error_code, what=f"OffsetFetch {group!r} {t.name}-{p.partition_index}: ")
                out[(t.name, p.partition_index)] = p.committed_offset
        return out

    def commit_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        """Commit as an admin (generation -1, no member): Kafka accepts this only while the group is empty."""
        c = self._coordinator(group)
        v = c.api_version(ApiKey.OFFSET_COMMIT, 9)
        cls = REQUEST_CLASSES[ApiKey.OFFSET_COMMIT]
        T = cls.OffsetCommitRequestTopic
        by_topic: dict[str, list] = {}
        for (t, p), off in sorted(offsets.items()):
            by_topic.setdefault(t, []).append(
                T.OffsetCommitRequestPartition(
                    partition_index=p, committed_offset=off, committed_leader_epoch=-1, committed_metadata=""
                )
            )
        fields: dict[str, Any] = {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [T(name=t, partitions=ps) for t, ps in by_topic.items()],
        }
        if v >= 7:
            fields["group_instance_id"] = None
        if 2 <= v <= 4:
            fields["retention_time_ms"] = -1
        resp = c.request(ApiKey.OFFSET_COMMIT, v, **fields)
        for t in resp.topics:
            for p in t.partitions:
                check_error(p.error_code, what=f"OffsetCommit {group!r} {t.name}-{p.partition_index}: ")

    def delete_groups(self, groups: list[str]) -> dict[str, int]:
        """Error code per group (0 = deleted)."""
        out: dict[str, int] = {}
        for g in groups:
            c = self._coordinator(g)
            v = c.api_version(ApiKey.DELETE_GROUPS)
            resp = c.request(ApiKey.DELETE_GROUPS, v, groups_names=[g])
            for r in resp.results:
                out[r.group_id] = r.error_code
        return out

    def delete_offsets(self, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
        c = self._coordinator(group)
        v = c.api_version(ApiKey.OFFSET_DELETE)
        cls = REQUEST_CLASSES[ApiKey.OFFSET_DELETE]
        T = cls.OffsetDeleteRequestTopic
        resp = c.request(
            ApiKey.OFFSET_DELETE,
            v,
            group_id=group,
            topics=[T(name=topic, partitions=[T.OffsetDeleteRequestPartition(partition_index=p) for p in partitions])],
        )
        check_error(resp.error_code, what=f"OffsetDelete {group!r}: ")
        return {p.partition_index: p.error_code for t in resp.topics for p in t.partitions}


def _list_groups_at(conn: AdminClient, states: list[str] | None, types: list[str] | None) -> list[ListedGroup]:
    v = conn.api_version(ApiKey.LIST_GROUPS)
    fields: dict[str, Any] = {}
    if v >= 4:
        fields["states_filter"] = list(states or [])
    elif states:
        raise AdminError("the broker cannot filter groups by state (ListGroups < v4)")
    if v >= 5:
        fields["types_filter"] = [t.lower() for t in types or []]
    elif types:
        raise AdminError("the broker cannot filter groups by type (ListGroups < v5)")
    resp = conn.request(ApiKey.LIST_GROUPS, v, **fields)
    check_error(resp.error_code, what=f"ListGroups at {conn.host}:{conn.port}: ")
    return [
        ListedGroup(
            g.group_id, g.protocol_type, getattr(g, "group_state", "") or "", getattr(g, "group_type", "") or ""
        )
        for g in resp.groups
    ]


# =============================================================================================================
# `strata groups`
def _groups_list(a: GroupAdmin, args: argparse.Namespace) -> int:
    include_state, include_type = args.state is not None, args.type is not None
    groups = a.list_groups(parse_states(args.state) or None, parse_types(args.type) or None)
    if include_state or include_type:
        print(list_table(groups, include_type, include_state))
    else:
        for g in groups:
            print(g.group_id)
    return 0


def _groups_describe(a: GroupAdmin, args: argparse.Namespace) -> int:
    group = args.group
    desc = a.describe_group(group)
    views = [v for v in ("members", "state", "offsets") if getattr(args, v)]
    if len(views) > 1:
        raise AdminError("describe takes at most one of these options: --members, --state, --offsets")
    if views and views[0] != "offsets":
        if desc.state == "Dead":
            raise AdminError(f"Consumer group '{group}' does not exist.")
        if views[0] == "state":
            print()
            print(state_table(desc, args.verbose))
        elif desc.members:
            print()
            print(members_table(desc, args.verbose))
        else:
            print(f"\nConsumer group '{group}' has no active members.")
        return 0
    committed = a.fetch_offsets(group)
    if desc.state == "Dead" and not committed:
        raise AdminError(f"Consumer group '{group}' does not exist.")
    owner: dict[tuple[str, int], MemberDescription] = {}
    for m in desc.members:
        for tp in m.partitions():
            owner[tp] = m
    partitions = sorted(set(committed) | set(owner))
    ends: dict[tuple[str, int], int] = {}
    for topic in sorted({t for t, _ in partitions}):
        ps = [p for t, p in partitions if t == topic]
        try:
            for p, off in a.list_offsets(topic, ps, LATEST).items():
                ends[(topic, p)] = off
        except AdminError:
            pass
    if not desc.members:
        print(f"\nConsumer group '{group}' has no active members.")
    rows = [
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    ]
    for tp in partitions:
        cur = committed.get(tp, -1)
        end = ends.get(tp)
        lag = str(end - cur) if end is not None and cur >= 0 else "-"
        holder = owner.get(tp)
        rows.append(
            [
                group,
                tp[0],
                str(tp[1]),
                str(cur) if cur >= 0 else "-",
                str(end) if end is not None else "-",
                lag,
                holder.member_id if holder else "-",
                holder.host if holder else "-",
                holder.client_id if holder else "-",
            ]
        )
    for m in desc.members:  # members without partitions still show up, as in kafka-consumer-groups.sh
        if not m.partitions():
            rows.append([group, "-", "-", "-", "-", "-", m.member_id, m.host, m.client_id])
    print()
    print(table(rows))
    if desc.group_type == "Consumer" and desc.members and not views:  # KIP-848: epochs, current vs target
        print()
        print(members_table(desc, verbose=True))
    print(f"\nState: {desc.state}  Members: {len(desc.members)}")
    return 0


def _groups_delete(a: GroupAdmin, args: argparse.Namespace) -> int:
    results = a.delete_groups(args.group)
    failed = {g: c for g, c in results.items() if c}
    ok = [g for g, c in results.items() if not c]
    if ok:
        print("Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in ok) + ") was successful.")
    if failed:
        raise AdminError(
            "Deletion of some consumer groups failed: "
            + "; ".join(f"group '{g}' could not be deleted due to: {error_text(c)}" for g, c in failed.items())
        )
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        with GroupAdmin(args.bootstrap_server, timeout=args.timeout) as a:
            result: int = args.action_func(a, args)
            return result
    except AdminError as e:
        error("strata groups", str(e))
        return 1


def register(sub: SubParsers) -> None:
    action = add_action_command(sub, NAME, "list, describe, delete consumer groups, reset or delete their offsets", run)
    ls = action("list", _groups_list, "group ids (with --type/--state: a GROUP [TYPE] [STATE] table)")
    ls.add_argument(
        "--state",
        nargs="?",
        const="",
        metavar="STATES",
        help="show each group's state; with a value, only groups in these states (comma-separated: Stable,Empty)",
    )
    ls.add_argument(
        "--type",
        nargs="?",
        const="",
        metavar="TYPES",
        help="show each group's type; with a value, only groups of these types (classic, consumer)",
    )
    d = action("describe", _groups_describe, "offsets, log end offsets, lag and members")
    d.add_argument("--group", required=True)
    d.add_argument("--offsets", action="store_true", help="offsets and lag per partition (the default view)")
    d.add_argument("--members", action="store_true", help="one row per member with its partition count")
    d.add_argument("--state", action="store_true", help="coordinator, assignment strategy, state, member count")
    d.add_argument(
        "--verbose",
        action="store_true",
        help="with --members: member epochs, current and target assignments; with --state: group and target epochs",
    )
    x = action("delete", _groups_delete, "delete empty groups and their offsets")
    x.add_argument("--group", required=True, action="append", help="repeatable")
    group_offsets.register_actions(action)
