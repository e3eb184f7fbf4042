"""``strata transactions``: the transactional state of producers, like ``kafka-transactions.sh``: list, describe,
describe-producers, abort (a hanging transaction, by its start offset) and find-hanging, with its tables.

Speaks plain Kafka wire protocol (ListTransactions to every broker, DescribeTransactions to the id's coordinator,
DescribeProducers and WriteTxnMarkers to the partition's leader), as Kafka's admin client does.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from strata.protocol.errors import ErrorCode
from strata.protocol.registry import REQUEST_CLASSES, ApiKey

from .admin_client import AdminError, check_error, error_text
from .common import SubParsers, UsageError, add_action_command, run_action
from .groups import GroupAdmin

NAME = "transactions"
TRANSACTION_KEY_TYPE = 1  # FindCoordinator key type of a transactional id
DEBUG_HINT = ". Enable debug logging for additional detail."


@dataclass(frozen=True)
class ProducerState:
    """One active producer of a partition, as DescribeProducers answers (-1: unknown / no open transaction)."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_sequence: int
    last_timestamp: int
    txn_start_offset: int


@dataclass(frozen=True)
class TransactionDescription:
    coordinator_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int  # -1: no transaction open
    partitions: tuple[tuple[str, int], ...]


class TxnAdmin(GroupAdmin):
    """AdminClient plus the transaction admin APIs."""

    def list_transactions(self, producer_ids: Iterable[int] = ()) -> list[tuple[int, str, int, str]]:
        """(coordinator id, transactional id, producer id, state) of every transaction of the cluster: each broker
        lists what it coordinates, so every broker is asked."""
        rows = []
        for node in self.brokers():
            conn = self.peer(node.host, node.port)
            _, resp = conn.call(ApiKey.LIST_TRANSACTIONS, state_filters=[], producer_id_filters=list(producer_ids))
            check_error(resp.error_code, what=f"ListTransactions at broker {node.node_id}: ")
            rows += [
                (node.node_id, t.transactional_id, t.producer_id, t.transaction_state) for t in resp.transaction_states
            ]
        return rows

    def describe_transaction(self, tid: str) -> TransactionDescription:
        node_id, host, port = self.find_coordinator(tid, TRANSACTION_KEY_TYPE)
        _, resp = self.peer(host, port).call(ApiKey.DESCRIBE_TRANSACTIONS, transactional_ids=[tid])
        s = resp.transaction_states[0]
        check_error(s.error_code)
        parts = tuple((t.topic, p) for t in s.topics for p in t.partitions)
        return TransactionDescription(
            node_id,
            tid,
            s.producer_id,
            s.producer_epoch,
            s.transaction_state,
            s.transaction_timeout_ms,
            s.transaction_start_time_ms,
            parts,
        )

    def describe_producers(self, topic: str, partitions: list[int], broker_id: int | None = None) -> dict[int, Any]:
        """Per partition: its active producers (list of ProducerState), or the AdminError its broker answered.
        Asked of the partition's leader, or of `broker_id` (any replica keeps producer state)."""
        if broker_id is None:
            groups = self.by_leader(topic, partitions)
        else:
            node = next((n for n in self.brokers() if n.node_id == broker_id), None)
            if node is None:
                raise AdminError(f"broker {broker_id} is not in the cluster")
            groups = [(self.peer(node.host, node.port), partitions)]
        T = REQUEST_CLASSES[ApiKey.DESCRIBE_PRODUCERS].TopicRequest
        out: dict[int, Any] = {}
        for conn, ps in groups:
            _, resp = conn.call(ApiKey.DESCRIBE_PRODUCERS, topics=[T(name=topic, partition_indexes=ps)])
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code:
                        out[p.partition_index] = AdminError(error_text(p.error_code, p.error_message), p.error_code)
                        continue
                    out[p.partition_index] = [
                        ProducerState(
                            s.producer_id,
                            s.producer_epoch,
                            s.coordinator_epoch,
                            s.last_sequence,
                            s.last_timestamp,
                            s.current_txn_start_offset,
                        )
                        for s in p.active_producers
                    ]
        return out

    def abort_transaction(self, topic: str, partition: int, pid: int, epoch: int, coordinator_epoch: int) -> None:
        """Write an abort marker for the producer's open transaction on the partition, at its leader
        (WriteTxnMarkers, as Kafka's Admin.abortTransaction)."""
        M = REQUEST_CLASSES[ApiKey.WRITE_TXN_MARKERS].WritableTxnMarker
        marker = M(
            producer_id=pid,
            producer_epoch=epoch,
            transaction_result=False,
            topics=[M.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])],
            coordinator_epoch=coordinator_epoch,
        )
        [(conn, _)] = self.by_leader(topic, [partition])
        _, resp = conn.call(ApiKey.WRITE_TXN_MARKERS, 1, markers=[marker])
        for m in resp.markers:
            for t in m.topics:
                for p in t.partitions:
                    check_error(p.error_code)


def pretty_table(headers: list[str], rows: list[list[str]]) -> str:
    """kafka-transactions.sh's table: every cell padded to its column's width and followed by a tab."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    return "\n".join("".join(c.ljust(w) + "\t" for c, w in zip(r, widths)) for r in [headers, *rows])


def _tp(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def _fail(message: str, e: AdminError) -> AdminError:
    return AdminError(f"{message}: {e}{DEBUG_HINT}", e.code)


# =============================================================================================================
def _list(a: TxnAdmin, args: argparse.Namespace) -> int:
    try:
        listed = a.list_transactions()
    except AdminError as e:
        raise _fail("Failed to list transactions", e) from None
    rows = [[tid, str(node), str(pid), state] for node, tid, pid, state in listed]
    print(pretty_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows))
    return 0


def _describe(a: TxnAdmin, args: argparse.Namespace) -> int:
    tid = args.transactional_id
    try:
        d = a.describe_transaction(tid)
    except AdminError as e:
        raise _fail(f"Failed to describe transaction state of transactional-id `{tid}`", e) from None
    start = duration = "None"
    if d.start_time_ms >= 0:
        start, duration = str(d.start_time_ms), str(int(time.time() * 1000) - d.start_time_ms)
    row = [str(d.coordinator_id), tid, str(d.producer_id), str(d.producer_epoch), d.state, str(d.timeout_ms)]
    row += [start, duration, ",".join(_tp(t, p) for t, p in d.partitions)]
    headers = ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState"]
    headers += ["TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"]
    print(pretty_table(headers, [row]))
    return 0


def _producers_of(a: TxnAdmin, topic: str, partition: int, broker_id: int | None = None) -> list[ProducerState]:
    result = a.describe_producers(topic, [partition], broker_id)[partition]
    if isinstance(result, AdminError):
        raise result
    states: list[ProducerState] = result
    return states


def _describe_producers(a: TxnAdmin, args: argparse.Namespace) -> int:
    try:
        states = _producers_of(a, args.topic, args.partition, args.broker_id)
    except AdminError as e:
        where = "leader" if args.broker_id is None else f"broker {args.broker_id}"
        raise _fail(
            f"Failed to describe producers for partition {_tp(args.topic, args.partition)} on {where}", e
        ) from None
    rows = [
        [str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch), str(s.last_sequence)]
        + [str(s.last_timestamp), str(s.txn_start_offset) if s.txn_start_offset >= 0 else "None"]
        for s in states
    ]
    headers = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp"]
    print(pretty_table(headers + ["CurrentTransactionStartOffset"], rows))
    return 0


def _abort(a: TxnAdmin, args: argparse.Namespace) -> int:
    tp = _tp(args.topic, args.partition)
    if args.start_offset is None and args.producer_id is None:
        raise UsageError(
            "The transaction to abort must be identified either with --start-offset (for brokers on 3.0 or above) "
            "or with --producer-id, --producer-epoch, and --coordinator-epoch (for older brokers)"
        )
    if args.start_offset is None:
        for opt in ("producer_epoch", "coordinator_epoch"):
            if getattr(args, opt) is None:
                raise UsageError(f"Missing required argument --{opt.replace('_', '-')}")
        # -1 (a transaction hanging before its first marker): 0 is at or below every coordinator epoch
        pid, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, max(args.coordinator_epoch, 0)
    else:
        try:
            states = _producers_of(a, args.topic, args.partition)
        except AdminError as e:
            raise _fail(f"Failed to validate producer state for partition {tp}", e) from None
        found = next((s for s in states if s.txn_start_offset == args.start_offset), None)
        if found is None:
            raise AdminError(
                f"Could not find any open transactions starting at offset {args.start_offset} on partition {tp}"
            )
        pid, epoch, coordinator_epoch = found.producer_id, found.producer_epoch, max(found.coordinator_epoch, 0)
    try:
        a.abort_transaction(args.topic, args.partition, pid, epoch, coordinator_epoch)
    except AdminError as e:
        spec = (
            f"AbortTransactionSpec(topicPartition={tp}, producerId={pid}, producerEpoch={epoch}, "
            f"coordinatorEpoch={coordinator_epoch})"
        )
        raise _fail(f"Failed to abort transaction {spec}", e) from None
    return 0


def _find_hanging(a: TxnAdmin, args: argparse.Namespace) -> int:
    """Open transactions older than --max-transaction-timeout whose producer's coordinator no longer lists the
    partition in its transaction (so no marker will come): Kafka's FindHangingTransactionsCommand."""
    if args.topic is None and args.broker_id is None:
        raise UsageError(
            "The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search"
        )
    if args.partition is not None and args.topic is None:
        raise UsageError("The --partition argument requires --topic to be provided")
    max_ms = args.max_transaction_timeout * 60_000
    topics = [args.topic] if args.topic is not None else a.list_topics()
    candidates: list[tuple[str, int, ProducerState]] = []
    now = int(time.time() * 1000)
    for d in a.describe_topics(topics):
        parts = [
            p.partition
            for p in d.partitions
            if (args.partition is None or p.partition == args.partition)
            and (args.broker_id is None or args.broker_id in p.replicas)
        ]
        if not parts:
            continue
        for p, result in sorted(a.describe_producers(d.name, parts, args.broker_id).items()):
            if isinstance(result, AdminError):
                raise _fail(f"Failed to describe producers for partition {_tp(d.name, p)}", result)
            candidates += [
                (d.name, p, s) for s in result if s.txn_start_offset >= 0 and now - s.last_timestamp > max_ms
            ]
    hanging = candidates
    if candidates:
        tids = {pid: tid for _, tid, pid, _ in a.list_transactions({s.producer_id for _, _, s in candidates})}
        described: dict[str, TransactionDescription | None] = {}
        for tid in set(tids.values()):
            try:
                described[tid] = a.describe_transaction(tid)
            except AdminError as e:
                if e.code != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                    raise _fail(f"Failed to describe {len(set(tids.values()))} transactions", e) from None
                described[tid] = None
        hanging = []
        for topic, p, s in candidates:
            desc = described.get(tids.get(s.producer_id, ""))
            if desc is None or (topic, p) not in desc.partitions:
                hanging.append((topic, p, s))
    rows = [
        [topic, str(p), str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch), str(s.txn_start_offset)]
        + [str(s.last_timestamp), str((now - s.last_timestamp) // 60_000)]
        for topic, p, s in hanging
    ]
    headers = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset"]
    print(pretty_table(headers + ["LastTimestamp", "Duration(min)"], rows))
    return 0


def run(args: argparse.Namespace) -> int:
    return run_action("strata transactions", TxnAdmin, args)


def register(sub: SubParsers) -> None:
    action = add_action_command(
        sub, NAME, "list, describe and abort transactions, find hanging ones (kafka-transactions.sh)", run
    )
    action("list", _list, "list transactions")
    d = action("describe", _describe, "describe the state of an active transactional-id")
    d.add_argument("--transactional-id", required=True, help="transactional id")
    dp = action("describe-producers", _describe_producers, "describe the states of active producers for a partition")
    dp.add_argument("--broker-id", type=int, help="describe the producer state on this replica (default: the leader)")
    dp.add_argument("--topic", required=True, help="topic name")
    dp.add_argument("--partition", type=int, required=True, help="partition number")
    ab = action("abort", _abort, "abort a hanging transaction (requires administrative privileges)")
    ab.add_argument("--topic", required=True, help="topic name")
    ab.add_argument("--partition", type=int, required=True, help="partition number")
    ab.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    ab.add_argument("--producer-id", type=int, help="producer id (brokers older than 3.0)")
    ab.add_argument("--producer-epoch", type=int, help="producer epoch (brokers older than 3.0)")
    ab.add_argument("--coordinator-epoch", type=int, help="coordinator epoch (brokers older than 3.0)")
    fh = action("find-hanging", _find_hanging, "find hanging transactions")
    fh.add_argument("--broker-id", type=int, help="broker id to search for hanging transactions")
    fh.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=15,
        help="maximum transaction timeout in minutes to limit the scope of the search (default 15)",
    )
    fh.add_argument("--topic", help="topic name to limit search to")
    fh.add_argument("--partition", type=int, help="partition number")
