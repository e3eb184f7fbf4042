"""Cluster metadata records: a broker's registration and a partition's replication state (Kafka's
BrokerRegistration and PartitionRegistration, reduced to what Strata uses)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    endpoints: dict[str, tuple[str, int]]  # listener name -> advertised (host, port)
    rack: str | None = None
    incarnation: str = ""  # changes on every broker start (Kafka's incarnation id)

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        return self.endpoints.get(listener) or next(iter(self.endpoints.values()), None)

    def to_json(self) -> dict:
        return {
            "id": self.broker_id,
            "rack": self.rack,
            "incarnation": self.incarnation,
            "endpoints": {k: [h, p] for k, (h, p) in self.endpoints.items()},
        }

    @classmethod
    def from_json(cls, d: dict) -> BrokerInfo:
        return cls(
            int(d["id"]),
            {k: (v[0], int(v[1])) for k, v in d.get("endpoints", {}).items()},
            d.get("rack"),
            d.get("incarnation", ""),
        )


@dataclass(frozen=True)
class PartitionState:
    """Replication state of one partition. Every change bumps `partition_epoch`; a leader change bumps
    `leader_epoch`. Writers compare-and-set on `partition_epoch` (Kafka's AlterPartition semantics)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    partition_epoch: int = 0
    adding: tuple[int, ...] = field(default_factory=tuple)
    removing: tuple[int, ...] = field(default_factory=tuple)

    def with_changes(self, **kw) -> PartitionState:
        """A successor state: partition_epoch + 1, leader_epoch + 1 when the leader changes."""
        new = replace(self, **kw)
        bump_leader = new.leader != self.leader
        return replace(
            new,
            partition_epoch=self.partition_epoch + 1,
            leader_epoch=self.leader_epoch + 1 if bump_leader else new.leader_epoch,
        )

    def to_json(self) -> dict:
        return {
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
            "replicas": list(self.replicas),
            "partition_epoch": self.partition_epoch,
            "adding": list(self.adding),
            "removing": list(self.removing),
        }

    @classmethod
    def from_json(cls, d: dict) -> PartitionState:
        return cls(
            int(d["leader"]),
            int(d["leader_epoch"]),
            tuple(d["isr"]),
            tuple(d["replicas"]),
            int(d.get("partition_epoch", 0)),
            tuple(d.get("adding", ())),
            tuple(d.get("removing", ())),
        )


class StaleStateError(Exception):
    """A compare-and-set on partition state lost: someone (the controller) changed it first."""
