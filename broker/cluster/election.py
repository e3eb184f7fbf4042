"""Partition state transitions the controller (and the admin APIs) make: pure functions over a PartitionState and a
view of the brokers, in the spirit of Kafka's PartitionChangeBuilder.

Rules (Kafka's, KRaft flavour):
* a leader must be a live replica that is not in controlled shutdown; a clean leader is also in the ISR;
* dead (or restarted: new incarnation) brokers and brokers in controlled shutdown leave the ISR, except that the ISR
  never becomes empty: when its last member goes, the ISR keeps its members and the partition has no leader (-1)
  until one of them returns -- so no committed record is lost;
* with `unclean.leader.election.enable`, a partition without an eligible ISR member elects the first eligible
  replica and its ISR restarts as {that replica};
* every change bumps `partition_epoch`; a leader change bumps `leader_epoch` (PartitionState.with_changes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strata.protocol.errors import ErrorCode

from .model import PartitionState

NO_LEADER = -1


@dataclass(frozen=True)
class BrokerView:
    live: frozenset[int]  # registered (lease alive)
    shutting_down: frozenset[int] = field(default_factory=frozenset)
    fenced: frozenset[int] = field(default_factory=frozenset)  # restarted since last seen: its old state is gone

    def alive(self, b: int) -> bool:
        return b in self.live and b not in self.fenced

    def eligible(self, b: int) -> bool:
        """May be (or stay) leader / in the ISR."""
        return self.alive(b) and b not in self.shutting_down


def _clean_isr(state: PartitionState, view: BrokerView) -> list[int]:
    return [b for b in state.isr if view.eligible(b)]


def reconcile(state: PartitionState, view: BrokerView, unclean: bool = False) -> PartitionState | None:
    """The state after brokers died/restarted/started shutting down (None: nothing to change)."""
    isr = _clean_isr(state, view)
    leader = state.leader
    if not (leader >= 0 and leader in state.replicas and view.eligible(leader) and leader in isr):
        candidates = [b for b in state.replicas if b in isr]
        if candidates:
            leader = candidates[0]
        elif unclean and (anyone := [b for b in state.replicas if view.eligible(b)]):
            leader, isr = anyone[0], [anyone[0]]
        else:
            leader = NO_LEADER
    if not isr:
        isr = list(state.isr)  # never empty: keep the last in-sync members for a clean re-election
    if leader == state.leader and tuple(isr) == state.isr:
        return None
    return state.with_changes(leader=leader, isr=tuple(isr))


def preferred(state: PartitionState, view: BrokerView) -> tuple[ErrorCode, PartitionState | None]:
    """Preferred-leader election: the first replica becomes leader if it is eligible and in the ISR."""
    if not state.replicas:
        return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None
    pref = state.replicas[0]
    if state.leader == pref:
        return ErrorCode.ELECTION_NOT_NEEDED, None
    if not view.eligible(pref) or pref not in state.isr:
        return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None
    return ErrorCode.NONE, state.with_changes(leader=pref)


def unclean_election(state: PartitionState, view: BrokerView) -> tuple[ErrorCode, PartitionState | None]:
    """ElectLeaders type UNCLEAN: only for a partition without an eligible leader; prefers the ISR."""
    if state.leader >= 0 and view.eligible(state.leader):
        return ErrorCode.ELECTION_NOT_NEEDED, None
    new = reconcile(state, view, unclean=True)
    if new is None or new.leader < 0:
        return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, None
    return ErrorCode.NONE, new


# ---- reassignment (KIP-455): replicas = target + (original - target), adding/removing tracked in the state -----
def original_replicas(state: PartitionState) -> list[int]:
    return [r for r in state.replicas if r not in state.adding]


def target_replicas(state: PartitionState) -> list[int]:
    return [r for r in state.replicas if r not in state.removing]


def start_reassignment(state: PartitionState, target: list[int], view: BrokerView) -> PartitionState | None:
    """Begin moving the partition to `target` (replacing an ongoing reassignment). None if already there."""
    original = original_replicas(state)
    if list(target) == original and not state.adding and not state.removing:
        return None
    replicas = list(target) + [r for r in original if r not in target]
    adding = [r for r in target if r not in original]
    removing = [r for r in original if r not in target]
    isr = [b for b in state.isr if b in replicas] or list(state.isr)
    leader = state.leader
    if leader not in replicas:
        leader = _pick(list(target) + replicas, isr, view)
    return state.with_changes(
        replicas=tuple(replicas), adding=tuple(adding), removing=tuple(removing), isr=tuple(isr), leader=leader
    )


def cancel_reassignment(state: PartitionState, view: BrokerView) -> PartitionState | None:
    if not state.adding and not state.removing:
        return None
    original = original_replicas(state)
    isr = [b for b in state.isr if b in original] or list(state.isr)
    leader = state.leader
    if leader not in original or not view.eligible(leader):
        leader = _pick(original, isr, view)
    return state.with_changes(replicas=tuple(original), adding=(), removing=(), isr=tuple(isr), leader=leader)


def complete_reassignment(state: PartitionState, view: BrokerView) -> PartitionState | None:
    """Finish once every target replica is in the ISR: drop the removed replicas, elect from the target if the
    leader is leaving. None while waiting."""
    if not state.adding and not state.removing:
        return None
    target = target_replicas(state)
    if not all(r in state.isr for r in target):
        return None
    isr = [b for b in state.isr if b in target]
    leader = state.leader
    if leader not in target or not view.eligible(leader):
        leader = _pick(target, isr, view)
        if leader == NO_LEADER:
            return None
    return state.with_changes(replicas=tuple(target), adding=(), removing=(), isr=tuple(isr), leader=leader)


def _pick(candidates: list[int], isr: list[int], view: BrokerView) -> int:
    """First candidate in the ISR that may lead, else NO_LEADER."""
    return next((r for r in candidates if r in isr and view.eligible(r)), NO_LEADER)


def leadership_moved_off(broker: int, states: list[PartitionState]) -> bool:
    """Controlled shutdown is complete for `broker`: it leads nothing and is in no ISR it could leave."""
    for s in states:
        if s.leader == broker:
            return False
        if broker in s.isr and len(s.isr) > 1:
            return False
    return True


def imbalanced_brokers(states: list[PartitionState], percentage: int) -> set[int]:
    """Brokers whose share of partitions they prefer but do not lead exceeds `percentage` (Kafka's
    leader.imbalance.per.broker.percentage check)."""
    preferred_count: dict[int, int] = {}
    not_leading: dict[int, int] = {}
    for s in states:
        if not s.replicas:
            continue
        pref = s.replicas[0]
        preferred_count[pref] = preferred_count.get(pref, 0) + 1
        if s.leader != pref:
            not_leading[pref] = not_leading.get(pref, 0) + 1
    return {b for b, n in preferred_count.items() if n and not_leading.get(b, 0) * 100 / n > percentage}
