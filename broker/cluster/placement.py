"""Replica placement for new topics and new partitions: Kafka's AdminUtils.assignReplicasToBrokers rules.

* Brokers sorted by id; the first replica of partition p is broker `(p + start) % n` (a random start unless fixed),
  followers are shifted by a per-round offset so that partitions led by one broker spread their followers over all
  the others (the shift grows by one after every `n` partitions).
* Rack-aware (every broker has a rack): brokers are listed alternating racks (r1b1, r2b1, r3b1, r1b2, ...), and a
  follower is skipped while it would put a second replica in a rack when some rack has none yet, or a second replica
  on a broker when some broker has none yet. So with >= RF racks every partition spans RF racks.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from strata.protocol.errors import ErrorCode, KafkaApiError


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def rack_alternated(brokers: Mapping[int, str]) -> list[int]:
    """Broker ids ordered by alternating racks: one broker of each rack (racks sorted, brokers sorted in a rack)."""
    by_rack: dict[str, list[int]] = {}
    for b in sorted(brokers):
        by_rack.setdefault(brokers[b], []).append(b)
    racks = sorted(by_rack)
    out: list[int] = []
    i = 0
    while len(out) < len(brokers):
        rack_list = by_rack[racks[i % len(racks)]]
        k = i // len(racks)
        if k < len(rack_list):
            out.append(rack_list[k])
        i += 1
    return out


def assign_replicas(
    brokers: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int = -1,
    start_partition: int = 0,
    rng: random.Random | None = None,
) -> list[list[int]]:
    """Replica lists for partitions `start_partition .. start_partition + partitions - 1` (returned in order).

    `brokers` maps live broker id -> rack (None or "" = no rack). Rack-aware when every broker has a rack.
    `start_index` >= 0 fixes the first broker and the follower shift (Kafka's fixedStartIndex; partition addition
    passes the index of partition 0's first replica so new partitions continue the pattern)."""
    if partitions <= 0:
        return []
    if replication_factor <= 0:
        raise KafkaApiError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise KafkaApiError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.",
        )
    rng = rng or random.Random()
    racks = {b: r for b, r in brokers.items() if r}
    rack_aware = len(racks) == len(brokers) and len(set(racks.values())) > 1
    order = rack_alternated(racks) if rack_aware else sorted(brokers)
    n = len(order)
    start = start_index if start_index >= 0 else rng.randrange(n)
    shift = start_index if start_index >= 0 else rng.randrange(n)
    n_racks = len(set(racks.values())) if rack_aware else 1
    out: list[list[int]] = []
    pid = max(0, start_partition)
    for _ in range(partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start) % n
        replicas = [order[first]]
        if not rack_aware:
            replicas += [order[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        else:
            racks_used = {racks[order[first]]}
            used = {order[first]}
            k = 0
            for _ in range(replication_factor - 1):
                while True:
                    b = order[_replica_index(first, shift * n_racks, k, n)]
                    k += 1
                    if (racks[b] not in racks_used or len(racks_used) == n_racks) and (b not in used or len(used) == n):
                        replicas.append(b)
                        racks_used.add(racks[b])
                        used.add(b)
                        break
        out.append(replicas)
        pid += 1
    return out
