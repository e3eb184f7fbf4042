"""Static membership (KIP-345) with a real client, confluent-kafka's `group.instance.id`: a static member that closes
(no LeaveGroup, as static members do) and comes back within its session timeout takes its place again without a
rebalance, so the other member keeps its partitions and is never revoked."""

from __future__ import annotations

import threading

from strata.cli.groups import GroupAdmin
from tests.support import ck
from tests.support.waiting import wait_until

GROUP, TOPIC = "statics", "static-topic"


def describe(bs: str):
    with GroupAdmin(bs, timeout=10) as a:
        return a.describe_group(GROUP)


class Member(threading.Thread):
    """Polls in its own thread (rebalance callbacks run inside poll) and records its revocations."""

    def __init__(self, bs: str, instance: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": bs,
                "group.id": GROUP,
                "group.instance.id": instance,
                "session.timeout.ms": 30000,
                "heartbeat.interval.ms": 500,
                "auto.offset.reset": "earliest",
                "log_level": 3,
            }
        )
        self.revoked: list[list[int]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        self.consumer.subscribe([TOPIC], on_revoke=lambda c, ps: self.revoked.append([p.partition for p in ps]))
        while not self.halt.is_set():
            self.consumer.poll(0.1)

    def close(self) -> None:
        self.halt.set()
        self.join(10)
        self.consumer.close()


def test_static_member_rejoins_without_a_rebalance(broker) -> None:
    bs = broker.bootstrap
    ck.create_topic(bs, TOPIC, 2)
    a, b = Member(bs, "static-a"), Member(bs, "static-b")
    a.start()
    b.start()
    try:

        def stable():
            d = describe(bs)
            return d if d.state == "Stable" and sorted(len(m.partitions()) for m in d.members) == [1, 1] else None

        before = wait_until(stable, timeout=30, message="two static members, one partition each")
        assert {m.group_instance_id for m in before.members} == {"static-a", "static-b"}
        b_before = next(m for m in before.members if m.group_instance_id == "static-b")
        revoked_b = list(b.revoked)
        a.close()  # static: no LeaveGroup; the member stays until its session ends
        assert len(describe(bs).members) == 2
        a2 = Member(bs, "static-a")
        a2.start()
        try:
            after = wait_until(
                lambda: (
                    (
                        (d := describe(bs)).state == "Stable"
                        and any(m.group_instance_id == "static-a" and m.partitions() for m in d.members)
                        and d
                    )
                    or None
                ),
                timeout=30,
                message="static-a back in the group",
            )
            assert after is not None
            a_after = next(m for m in after.members if m.group_instance_id == "static-a")
            b_after = next(m for m in after.members if m.group_instance_id == "static-b")
            assert len(after.members) == 2
            assert b_after.member_id == b_before.member_id and b_after.partitions() == b_before.partitions()
            assert (
                a_after.partitions()
                == next(m for m in before.members if m.group_instance_id == "static-a").partitions()
            )
            assert b.revoked == revoked_b, "the other member was revoked: a rebalance happened"
        finally:
            a2.close()
    finally:
        b.close()
