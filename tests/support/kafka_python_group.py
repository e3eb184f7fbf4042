"""A kafka-python group consumer whose first JoinGroup already sees its topic's partitions.

kafka-python 3.0.12 can lose a JoinGroup round: a join that metadata started (its snapshot of the subscribed topics'
partitions differs from the one the leader assigned with) is only awaited again while that difference lasts; when
`poll()` times out during the join and the leader's own assignment then makes the snapshots equal, the join's end is
never processed: the member stays without heartbeats or assignment until its session expires and never rejoins.
A new member's snapshot is empty until the first Metadata response after `subscribe()`, so a member that joins
before it (the test brokers run with `group.initial.rebalance.delay.ms=0`, Kafka's 3 s default hides the race)
assigns with an empty snapshot and rejoins at once. Waiting for that snapshot before the first poll removes the
rejoin. The snapshot is read from the client's coordinator (`_metadata_snapshot`): kafka-python has no public way
to ask; the consumer itself is used unchanged.
"""

from __future__ import annotations

import time
from typing import Any


def subscribed_consumer(topic: str, timeout_s: float = 30.0, **config: Any) -> Any:
    from kafka import KafkaConsumer

    c = KafkaConsumer(**config)
    c.subscribe([topic])
    deadline = time.monotonic() + timeout_s
    while not c._coordinator._metadata_snapshot.get(topic):
        if time.monotonic() > deadline:
            c.close()
            raise TimeoutError(f"no partitions of {topic} in the consumer's metadata within {timeout_s}s")
        if not c.partitions_for_topic(topic):  # asks the cluster when it does not know the topic yet
            time.sleep(0.05)  # being created: ask again (bounded by the deadline)
        else:
            c._client.cluster.request_update()
            time.sleep(0.05)  # the client's IO thread applies the update: wait for it (bounded by the deadline)
    return c
