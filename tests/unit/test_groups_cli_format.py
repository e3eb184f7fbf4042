"""`strata groups` tables from decoded responses, as kafka-consumer-groups.sh prints them: `list --type --state`
and, for a KIP-848 consumer group (ConsumerGroupDescribe), `describe --members --verbose` with member epochs and
current vs target assignments, and `describe --state --verbose` with the group and target assignment epochs."""

from __future__ import annotations

import re
import uuid
from types import SimpleNamespace as NS

import pytest

from strata.cli.admin_client import AdminError, BrokerNode
from strata.cli.group_describe import (
    GroupDescription,
    ListedGroup,
    MemberDescription,
    list_table,
    members_table,
    parse_states,
    parse_types,
    state_table,
)
from strata.cli.group_describe import assignment_text as text
from strata.cli.group_describe import consumer_group_description as decode


def tps(**topics: list[int]) -> NS:
    return NS(topic_partitions=[NS(topic_id=uuid.uuid4(), topic_name=t, partitions=ps) for t, ps in topics.items()])


def member(member_id: str, epoch: int, host: str, current: NS, target: NS) -> NS:
    return NS(
        member_id=member_id,
        instance_id=None,
        rack_id=None,
        member_epoch=epoch,
        client_id=f"c-{member_id.lower()}",
        client_host=host,
        subscribed_topic_names=["orders", "audit"],
        subscribed_topic_regex=None,
        assignment=current,
        target_assignment=target,
    )


def described_group() -> NS:
    """A ConsumerGroupDescribe DescribedGroup as the codec decodes it (Kafka's JSON field names in snake case):
    member A is reconciling (owns orders 0-2, its target is 0-1), member B waits for partition 2."""
    return NS(
        error_code=0,
        error_message=None,
        group_id="g1",
        group_state="Reconciling",
        group_epoch=7,
        assignment_epoch=7,
        assignor_name="uniform",
        members=[
            member("A", 6, "/10.0.0.1", tps(orders=[2, 0, 1], audit=[0]), tps(orders=[0, 1], audit=[0])),
            member("B", 7, "/10.0.0.2", tps(), tps(orders=[2])),
        ],
        authorized_operations=-(2**31),
    )


VERBOSE = ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]  # Kafka 4's --verbose columns


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


def test_members_verbose_of_a_consumer_group():
    desc = decode(described_group(), BrokerNode(2, "b2", 9092, None))
    assert rows(members_table(desc, verbose=True)) == [
        ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", *VERBOSE],
        ["g1", "A", "/10.0.0.1", "c-a", "4", "6", "audit:0;orders:0,1,2", "7", "audit:0;orders:0,1"],
        ["g1", "B", "/10.0.0.2", "c-b", "0", "7", "-", "7", "orders:2"],
    ]
    assert rows(members_table(desc, verbose=False)) == [
        ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
        ["g1", "A", "/10.0.0.1", "c-a", "4"],
        ["g1", "B", "/10.0.0.2", "c-b", "0"],
    ]


def test_state_verbose_of_a_consumer_group():
    desc = decode(described_group(), BrokerNode(2, "b2", 9092, None))
    text = state_table(desc, verbose=True)
    header, row = text.splitlines()
    assert header.split() == [
        "GROUP",
        "COORDINATOR",
        "(ID)",
        "ASSIGNMENT-STRATEGY",
        "STATE",
        "GROUP-EPOCH",
        "TARGET-ASSIGNMENT-EPOCH",
        "#MEMBERS",
    ]
    assert row.split() == ["g1", "b2:9092", "(2)", "uniform", "Reconciling", "7", "7", "2"]
    assert "GROUP-EPOCH" not in state_table(desc, verbose=False)


def test_members_verbose_of_a_classic_group_has_no_epochs():
    desc = GroupDescription(
        "old",
        "Stable",
        "consumer",
        "range",
        [MemberDescription("m-1", "static-1", "cid", "/h", [("t", [1, 0])])],
    )
    assert rows(members_table(desc, verbose=True)) == [
        ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", *VERBOSE],
        ["old", "m-1", "static-1", "/h", "cid", "2", "-", "t:0,1", "-", "-"],
    ]


def test_list_table_as_kafka_pads_it():
    groups = [
        ListedGroup("short", "consumer", "Stable", "classic"),
        ListedGroup("g" * 30, "consumer", "Empty", "consumer"),
    ]
    lines = list_table(groups, include_type=True, include_state=True).splitlines()
    assert lines[0] == "GROUP".ljust(40) + " " + "TYPE".ljust(20) + " STATE"
    assert lines[1] == "short".ljust(40) + " " + "Classic".ljust(20) + " Stable"
    assert lines[2].split() == ["g" * 30, "Consumer", "Empty"]
    only_type = list_table(groups[:1], include_type=True, include_state=False).splitlines()
    assert only_type == ["GROUP".ljust(25) + " TYPE", "short".ljust(25) + " Classic"]


def test_state_and_type_lists_parse_case_insensitively():
    assert parse_states("stable, EMPTY") == ["Stable", "Empty"]
    assert parse_states("") == [] and parse_states(None) == []
    assert parse_types("CONSUMER,classic") == ["Consumer", "Classic"]
    with pytest.raises(AdminError, match=re.escape("Invalid type list 'share'. Valid types are: Classic, Consumer")):
        parse_types("share")
    with pytest.raises(AdminError, match="Invalid state list 'stabel'"):
        parse_states("stabel")


def test_text():
    assert text([]) == "-"
    assert text(None) == "-"
    assert text([("b", [10, 2]), ("a", [0])]) == "a:0;b:2,10"
