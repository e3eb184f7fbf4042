"""The controller: one broker at a time (lease election in etcd) turns broker liveness into partition state.

Each pass (on every image change, and at least every second) it:
* elects leaders for partitions whose leader died, restarted (new incarnation) or is in controlled shutdown, from
  the ISR (unclean only with `unclean.leader.election.enable`, topic override first), and drops such brokers from
  ISRs (never emptying one: see election.py);
* completes reassignments whose target replicas are all in the ISR (and rewrites the topic's assignment);
* marks `shutdown/<id>` done once the broker leads nothing and sits in no ISR it could leave;
* every `leader.imbalance.check.interval.seconds` elects preferred leaders for brokers over
  `leader.imbalance.per.broker.percentage` (`auto.leader.rebalance.enable`).
Every write is a transaction fenced by `controller_epoch`.

The admin helpers at the bottom (ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments) run on the
controller (other brokers forward those requests to it, forwarding.py) and work on any MetadataStore: they
compare-and-set partition states; the controller's passes finish what they start.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import structlog

from strata.protocol.errors import ErrorCode

from .election import (
    BrokerView,
    cancel_reassignment,
    complete_reassignment,
    imbalanced_brokers,
    leadership_moved_off,
    preferred,
    reconcile,
    start_reassignment,
    unclean_election,
)
from .model import PartitionState, StaleStateError

if TYPE_CHECKING:
    from strata.config import BrokerConfig

    from ..metadata_store import MetadataStore
    from .etcd_store import EtcdMetadataStore

log = structlog.get_logger("strata.controller")

BATCH = 100  # partition updates per transaction (etcd's default --max-txn-ops is 128: 100 compares + the epoch)
PASS_INTERVAL_S = 1.0


def squash(orig: PartitionState, final: PartitionState) -> PartitionState:
    """Several rule applications in one write: partition_epoch + 1, leader_epoch + 1 iff the leader changed."""
    return replace(
        final,
        partition_epoch=orig.partition_epoch + 1,
        leader_epoch=orig.leader_epoch + (1 if final.leader != orig.leader else 0),
    )


def unclean_enabled(config: BrokerConfig, topic_configs: dict[str, str] | None) -> bool:
    """The topic's unclean.leader.election.enable, else the broker's (as the topic's typed LogConfig resolves it)."""
    return bool(config.log_config(topic_configs)["unclean.leader.election.enable"])


class Controller:
    def __init__(self, store: EtcdMetadataStore, config: BrokerConfig) -> None:
        self.store = store
        self.config = config
        self.broker_id = store.broker_id
        self.epoch: int | None = None
        self._wake = asyncio.Event()
        self._incarnations: dict[int, str] = {}
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._next_rebalance = 0.0
        self.passes = 0
        self.role_listeners: list[Callable[[], None]] = []  # called when this broker gains or loses the role
        store.add_listener(self._on_change)

    # ---- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="controller")

    async def stop(self) -> None:
        """Stop the loop (bounded) and resign, so another broker takes over without waiting for the lease."""
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()  # the flag also ends the loop: asyncio.wait_for can swallow a cancellation
            await asyncio.wait([self._task], timeout=5.0)
            self._task = None
        if self.epoch is not None and self.active:
            try:
                await self.store.resign_controller(self.epoch)
            except Exception as e:  # noqa: BLE001 - stopping anyway: the controller key goes with the lease
                log.warning("could not resign as controller", error=repr(e))
        self.epoch = None

    def _on_change(self, kind: str, key: object) -> None:
        self._wake.set()

    @property
    def active(self) -> bool:
        c = self.store.image.controller
        return self.epoch is not None and c is not None and c.broker_id == self.broker_id and c.epoch == self.epoch

    async def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            try:
                if not self.active:
                    if self.epoch is not None:
                        log.warning("no longer the controller", epoch=self.epoch)
                        self.epoch = None
                        self._role_changed()
                    if self.store.image.controller is None and self.store.lease_id:
                        await self._try_elect()
                if self.active:
                    await self.run_pass()
            except asyncio.CancelledError:
                raise
            except StaleStateError as e:
                log.info("controller write lost a race; retrying", reason=str(e))
                continue
            except Exception:
                log.exception("controller pass failed")
                await asyncio.sleep(0.5)
            try:
                await asyncio.wait_for(self._wake.wait(), PASS_INTERVAL_S)
            except TimeoutError:
                pass

    async def _try_elect(self) -> None:
        epoch = await self.store.try_become_controller()
        if epoch is None:
            return
        self.epoch = epoch
        # Incarnations known now are the baseline: a later change means the broker restarted.
        self._incarnations = {b: info.incarnation for b, info in self.store.image.brokers.items()}
        interval = self.config["leader.imbalance.check.interval.seconds"]
        self._next_rebalance = time.monotonic() + interval
        log.info("became the controller", broker_id=self.broker_id, epoch=epoch)
        self._role_changed()

    def _role_changed(self) -> None:
        for fn in self.role_listeners:
            fn()

    # ---- one pass -------------------------------------------------------------------------------------------------
    def view(self) -> BrokerView:
        img = self.store.image
        live = frozenset(img.brokers)
        fenced = frozenset(
            b for b, inc in self._incarnations.items() if b in img.brokers and img.brokers[b].incarnation != inc
        )
        return BrokerView(live, frozenset(b for b in img.shutdown if b in live), fenced)

    async def run_pass(self) -> None:
        self.passes += 1
        img = self.store.image
        view = self.view()
        epoch = self.epoch
        assert epoch is not None
        updates: list[tuple[str, int, PartitionState]] = []
        completions: list[tuple[str, int, PartitionState]] = []
        unclean: dict[str, bool] = {}  # per topic, not per partition: a LogConfig costs ~50 us to build
        for (topic, p), state in sorted(img.partitions.items()):
            info = img.topics.get(topic)
            if info is None:
                continue
            if topic not in unclean:
                unclean[topic] = unclean_enabled(self.config, info.configs)
            cur = reconcile(state, view, unclean[topic]) or state
            done = complete_reassignment(cur, view)
            if done is not None:
                completions.append((topic, p, squash(state, done)))
            elif cur is not state:
                updates.append((topic, p, squash(state, cur)))
        if self.config["auto.leader.rebalance.enable"] and time.monotonic() >= self._next_rebalance:
            self._next_rebalance = time.monotonic() + self.config["leader.imbalance.check.interval.seconds"]
            updates += self._preferred_elections(view, {(t, p) for t, p, _ in updates + completions})
        for i in range(0, len(updates), BATCH):
            batch = updates[i : i + BATCH]
            await self.store.write_partitions(batch, controller_epoch=epoch)
            for t, p, s in batch:
                log.info(
                    "partition state changed",
                    topic=t,
                    partition=p,
                    leader=s.leader,
                    leader_epoch=s.leader_epoch,
                    isr=list(s.isr),
                    partition_epoch=s.partition_epoch,
                )
        for t, p, s in completions:
            info = img.topics[t]
            assignments = [list(a) for a in info.assignments]
            if p < len(assignments):
                assignments[p] = list(s.replicas)
            new_info = replace(info, assignments=assignments, configs=dict(info.configs))
            await self.store.write_partitions([(t, p, s)], [new_info], controller_epoch=epoch)
            log.info("reassignment completed", topic=t, partition=p, replicas=list(s.replicas), leader=s.leader)
        # Restarted brokers have now been treated as failed once; from here on they are ordinary live brokers.
        self._incarnations = {b: info.incarnation for b, info in img.brokers.items()}
        await self._finish_shutdowns(epoch)

    def _preferred_elections(self, view: BrokerView, skip: set) -> list[tuple[str, int, PartitionState]]:
        img = self.store.image
        states = list(img.partitions.values())
        brokers = imbalanced_brokers(states, self.config["leader.imbalance.per.broker.percentage"])
        out = []
        for (t, p), s in sorted(img.partitions.items()):
            if (t, p) in skip or not s.replicas or s.replicas[0] not in brokers or s.adding or s.removing:
                continue
            err, new = preferred(s, view)
            if err == ErrorCode.NONE and new is not None:
                out.append((t, p, new))
        if out:
            log.info("preferred leader elections", partitions=len(out), brokers=sorted(brokers))
        return out

    async def _finish_shutdowns(self, epoch: int) -> None:
        img = self.store.image
        for b, d in list(img.shutdown.items()):
            if d.get("done") or b not in img.brokers:
                continue
            if leadership_moved_off(b, list(img.partitions.values())):
                await self.store.mark_shutdown_done(b, epoch)
                log.info("controlled shutdown: leadership moved off", broker_id=b)


# ---- admin operations (any broker, any store) -------------------------------------------------------------------
def broker_view(store: MetadataStore) -> BrokerView:
    return BrokerView(frozenset(store.brokers()), frozenset(store.shutting_down()))


async def _cas(store: MetadataStore, topic: str, p: int, compute, attempts: int = 5) -> tuple[ErrorCode, str | None]:
    """Apply `compute(state, view) -> (error, new state | None)` with compare-and-set, re-reading on conflicts.
    With an error, `compute` may give the error message in place of the state."""
    for _ in range(attempts):
        state = store.partition_state(topic, p)
        if state is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
        err, new = compute(state, broker_view(store))
        if err != ErrorCode.NONE or new is None:
            return err, new if isinstance(new, str) else None
        try:
            await store.alter_partition(topic, p, squash(state, new))
            return ErrorCode.NONE, None
        except StaleStateError:
            await asyncio.sleep(0.05)
    return ErrorCode.UNKNOWN_SERVER_ERROR, "The partition state kept changing."


ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1


async def elect_leaders(
    store: MetadataStore, election_type: int, partitions: list[tuple[str, int]] | None
) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
    """ElectLeaders: `partitions` None means every partition (then only elections that did something or failed
    for another reason than ELECTION_NOT_NEEDED are reported, as Kafka does)."""
    if election_type not in (ELECTION_PREFERRED, ELECTION_UNCLEAN):
        raise ValueError(election_type)
    fn = preferred if election_type == ELECTION_PREFERRED else unclean_election
    wanted = partitions
    if wanted is None:
        wanted = [(t, p) for t, info in store.topics().items() for p in range(info.partitions)]
    out: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
    for t, p in wanted:
        info = store.topic(t)
        if info is None or not 0 <= p < info.partitions:
            out[(t, p)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            continue
        err, msg = await _cas(store, t, p, fn)
        if err != ErrorCode.NONE and msg is None:
            msg = _ELECTION_MESSAGES.get(err)
        out[(t, p)] = (err, msg)
    if partitions is None:
        out = {k: v for k, v in out.items() if v[0] != ErrorCode.ELECTION_NOT_NEEDED}
    return out


_ELECTION_MESSAGES = {
    ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "Failed to elect leader for partition: the preferred replica is not "
    "live or not in the ISR.",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Failed to elect leader for partition: no live replica.",
}


async def alter_reassignment(
    store: MetadataStore, topic: str, p: int, target: list[int] | None, allow_replication_factor_change: bool = True
) -> tuple[ErrorCode, str | None]:
    """Start (target) or cancel (None) the reassignment of one partition; the controller completes it.
    KIP-860: without `allow_replication_factor_change` a target of another size than the partition's replica set
    (before any reassignment in progress) is refused."""
    info = store.topic(topic)
    if info is None or not 0 <= p < info.partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
    if target is not None:
        if not target:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The replica list is empty."
        if len(set(target)) != len(target):
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The replica list {target} contains duplicates."
        unknown = [b for b in target if b not in store.brokers()]
        if unknown:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, (
                f"The manual partition assignment includes broker {unknown[0]}, but no such broker is registered."
            )

        def compute(state, view):
            current = len([r for r in state.replicas if r not in state.adding])
            if not allow_replication_factor_change and len(target) != current:
                return ErrorCode.INVALID_REPLICATION_FACTOR, (
                    f"The replication factor is changed from {current} to {len(target)} but "
                    "allowReplicationFactorChange is false."
                )
            new = start_reassignment(state, list(target), view)
            return ErrorCode.NONE, new
    else:

        def compute(state, view):
            new = cancel_reassignment(state, view)
            if new is None:
                return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No reassignment is in progress for this partition."
            return ErrorCode.NONE, new

    return await _cas(store, topic, p, compute)


def list_reassignments(
    store: MetadataStore, wanted: list[tuple[str, list[int]]] | None
) -> dict[str, list[tuple[int, PartitionState]]]:
    """Ongoing reassignments: topic -> [(partition, state)], only partitions with adding/removing replicas."""
    if wanted is None:
        wanted = [(t, list(range(info.partitions))) for t, info in sorted(store.topics().items())]
    out: dict[str, list[tuple[int, PartitionState]]] = {}
    for t, parts in wanted:
        for p in parts:
            s = store.partition_state(t, p)
            if s is not None and (s.adding or s.removing):
                out.setdefault(t, []).append((p, s))
    return out
