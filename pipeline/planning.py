"""Driver-side planning: resolve starting/ending positions to offsets, cut offset ranges into Spark partitions, and
(for ``read.mode=direct``) map each range onto remote segments and the broker-served tail.

Offsets follow Kafka's conventions: a range is [start, end) with ``end`` exclusive; ``earliest`` is the log start
offset (which on a tiered topic lies in remote storage), ``latest`` the high watermark.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .client import TP, Cluster, DataLossError, PartitionOffsets, data_loss_message
from .options import EARLIEST, LATEST, OffsetSpec, OptionError, SourceOptions


@dataclass(frozen=True)
class Piece:
    """Offsets [start, end) of one partition read one way: from ``segment`` in remote storage, or (segment None)
    through the broker."""

    start: int
    end: int
    segment: Any = None  # strata.remote.metadata.RemoteLogSegmentMetadata
    # READ_COMMITTED remote pieces: the remote segments after ``segment`` (their ``.txnindex`` may hold the abort
    # of a transaction this piece reads) and the aborted transactions whose markers are in the leader's local log
    # (``AbortedTxn`` tuples, from a READ_COMMITTED Fetch at the local log start made while planning)
    following: tuple[Any, ...] = ()
    local_aborted: tuple[Any, ...] = ()


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int
    pieces: tuple[Piece, ...] = field(default=())

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)

    @property
    def tp(self) -> TP:
        return (self.topic, self.partition)

    def with_pieces(self, pieces: tuple[Piece, ...]) -> OffsetRange:
        return OffsetRange(self.topic, self.partition, self.start, self.end, pieces)

    def describe(self) -> str:
        remote = sum(p.end - p.start for p in self.pieces if p.segment is not None)
        return f"{self.topic}-{self.partition} [{self.start}, {self.end})" + (
            f" ({remote} offsets from remote storage)" if remote else ""
        )


# -- positions ---------------------------------------------------------------------------------------------------
def _by_timestamp(
    cluster: Cluster,
    spec: OffsetSpec,
    tps: list[TP],
    bounds: Mapping[TP, PartitionOffsets],
    *,
    starting: bool,
    strategy_latest: bool,
) -> dict[TP, int]:
    if spec.kind == "timestamp":
        wanted = {tp: int(spec.timestamp or 0) for tp in tps}
    else:
        wanted = {tp: spec.per_partition[tp] for tp in tps if tp in spec.per_partition}
    found = cluster.offsets_for_times(wanted)
    out: dict[TP, int] = {}
    for tp in tps:
        if tp not in wanted:
            out[tp] = bounds[tp].earliest if starting else bounds[tp].latest
            continue
        off = found.get(tp)
        if off is None:
            if starting and not strategy_latest:
                raise OptionError(
                    f"no offset of {tp[0]}-{tp[1]} has a timestamp at or after {wanted[tp]} (startingTimestamp / "
                    "startingOffsetsByTimestamp); set startingOffsetsByTimestampStrategy=latest to start at the end"
                )
            off = bounds[tp].latest
        out[tp] = off
    return out


def resolve_starts(
    cluster: Cluster, opts: SourceOptions, tps: list[TP], bounds: Mapping[TP, PartitionOffsets]
) -> dict[TP, int]:
    """Starting offset per partition. An explicit offset below the log start is data loss (error, or the log start
    with failOnDataLoss=false); one past the end is clamped to the end."""
    spec = opts.starting
    if spec.kind == "earliest":
        return {tp: bounds[tp].earliest for tp in tps}
    if spec.kind == "latest":
        return {tp: bounds[tp].latest for tp in tps}
    if spec.kind in ("timestamp", "timestamps"):
        return _by_timestamp(cluster, spec, tps, bounds, starting=True, strategy_latest=opts.starting_strategy_latest)
    out: dict[TP, int] = {}
    for tp in tps:
        b = bounds[tp]
        want = spec.per_partition.get(tp, EARLIEST)
        if want == EARLIEST:
            out[tp] = b.earliest
        elif want == LATEST:
            out[tp] = b.latest
        elif want < b.earliest:
            if opts.fail_on_data_loss:
                raise DataLossError(
                    data_loss_message(
                        f"startingOffsets asks for {tp[0]}-{tp[1]} from offset {want}, but the log starts at "
                        f"{b.earliest}"
                    )
                )
            out[tp] = b.earliest
        else:
            out[tp] = min(want, b.latest)
    return out


def resolve_ends(
    cluster: Cluster, opts: SourceOptions, tps: list[TP], bounds: Mapping[TP, PartitionOffsets]
) -> dict[TP, int]:
    spec = opts.ending
    if spec.kind == "latest":
        return {tp: bounds[tp].latest for tp in tps}
    if spec.kind in ("timestamp", "timestamps"):
        return _by_timestamp(cluster, spec, tps, bounds, starting=False, strategy_latest=True)
    out = {}
    for tp in tps:
        want = spec.per_partition.get(tp, LATEST)
        out[tp] = bounds[tp].latest if want == LATEST else min(want, bounds[tp].latest)
    return out


# -- splitting -------------------------------------------------------------------------------------------------
def split_ranges(ranges: list[OffsetRange], min_partitions: int | None, max_records: int | None) -> list[OffsetRange]:
    """Spark's rule: one Spark partition per topic partition, unless ``minPartitions`` asks for more partitions
    than there are ranges (big ranges get a share proportional to their size) or ``maxRecordsPerPartition`` caps
    the records per Spark partition; the larger of the two demands wins. Empty ranges are dropped."""
    ranges = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in ranges)
    by_min = min_partitions is not None and min_partitions > len(ranges)
    if not ranges or (not by_min and max_records is None):
        return ranges
    out: list[OffsetRange] = []
    for r in ranges:
        parts = 1
        if by_min:
            parts = max(parts, math.ceil(r.size * min_partitions / total))  # type: ignore[operator]
        if max_records is not None:
            parts = max(parts, math.ceil(r.size / max_records))
        parts = min(parts, r.size)
        for i in range(parts):
            s = r.start + r.size * i // parts
            e = r.start + r.size * (i + 1) // parts
            out.append(OffsetRange(r.topic, r.partition, s, e))
    return out


# -- direct mode -----------------------------------------------------------------------------------------------
def assign_pieces(r: OffsetRange, segments: list[Any], local_start: int | None = None) -> OffsetRange:
    """Cut ``r`` into pieces served by remote segments (COPY_SEGMENT_FINISHED, sorted by start offset) and pieces
    through the broker (the local tail, gaps, and offsets a segment cannot be trusted with).

    Remote storage may hold records of another leader-epoch lineage at the same offsets (an unclean election, both
    replicas losing an unflushed tail: KIP-405's divergence scenarios). The broker reads in its own lineage; here
    a segment is used only where the partition's leader itself reads remote storage, below its local log start
    (``local_start``, ListOffsets -4), and only where no other segment covers the same offsets: below the local
    start the lineage's copy of every offset is in remote storage, so a sole covering segment is it, and offsets
    with rival copies go through the broker. ``local_start`` None: no cap (tests)."""
    cap = r.end if local_start is None else max(r.start, min(r.end, local_start))
    points = {r.start, cap, r.end}
    for seg in segments:
        for x in (seg.start_offset, seg.end_offset + 1):
            if r.start < x < cap:
                points.add(x)
    pts = sorted(points)
    pieces: list[Piece] = []
    for a, b in itertools.pairwise(pts):  # distinct, sorted: a < b
        seg = None
        if b <= cap:
            covering = [s for s in segments if s.start_offset <= a and s.end_offset >= b - 1]
            seg = covering[0] if len(covering) == 1 else None
        if pieces and pieces[-1].segment is seg and pieces[-1].end == a:
            pieces[-1] = Piece(pieces[-1].start, b, seg)
        else:
            pieces.append(Piece(a, b, seg))
    return r.with_pieces(tuple(pieces))


def plan_ranges(
    cluster: Cluster,
    opts: SourceOptions,
    starts: Mapping[TP, int],
    ends: Mapping[TP, int],
) -> list[OffsetRange]:
    """Ranges [start, end) -> split per minPartitions/maxRecordsPerPartition -> pieces (direct mode)."""
    ranges = []
    for tp in sorted(ends):
        s, e = starts[tp], ends[tp]
        if s > e:
            raise DataLossError(
                data_loss_message(f"{tp[0]}-{tp[1]}: starting offset {s} is after the ending offset {e}")
            )
        ranges.append(OffsetRange(tp[0], tp[1], s, e))
    ranges = split_ranges(ranges, opts.min_partitions, opts.max_records_per_partition)
    if opts.read_mode != "direct" or not ranges:
        return [r.with_pieces((Piece(r.start, r.end, None),)) for r in ranges]
    ids = cluster.readable_topic_ids(sorted({r.topic for r in ranges}))  # refused without READ
    wanted = {r.tp: tid for r in ranges if (tid := ids.get(r.topic)) is not None}
    segments = cluster.remote_segments(wanted)
    local = cluster.local_log_starts(sorted({r.tp for r in ranges}))
    planned = [assign_pieces(r, segments.get(r.tp, []), local.get(r.tp, -1)) for r in ranges]
    if opts.isolation_level != "read_committed":
        return planned
    remote_tps = sorted({r.tp for r in planned if any(p.segment is not None for p in r.pieces)})
    local_aborted = cluster.local_aborted_txns({tp: local[tp] for tp in remote_tps})
    return [with_txn_sources(r, segments.get(r.tp, []), local_aborted.get(r.tp, [])) for r in planned]


def with_txn_sources(r: OffsetRange, segments: list[Any], local_aborted: list[Any]) -> OffsetRange:
    """READ_COMMITTED: give each remote piece what its executor needs to find the aborted transactions it reads,
    as Kafka's RemoteLogManager collects them: the ``.txnindex`` of its segment and of the later segments (until
    an entry's last stable offset reaches the piece's end), then the entries of the local log."""
    pieces = []
    for p in r.pieces:
        if p.segment is not None:
            # only segments copied with transaction index entries (KIP-1058's txn_idx_empty false): the others
            # hold no abort, and a long history would otherwise ship every later segment with every piece
            later = tuple(s for s in segments if s.start_offset > p.segment.end_offset and not s.txn_idx_empty)
            local = tuple(e for e in local_aborted if e.first_offset < p.end)
            p = Piece(p.start, p.end, p.segment, later, local)
        pieces.append(p)
    return r.with_pieces(tuple(pieces))


def plan_batch(opts: SourceOptions) -> list[OffsetRange]:
    """The whole batch plan of ``spark.read.format("strata")``."""
    with Cluster(opts) as cluster:
        parts = cluster.topic_partitions(opts.subscription)
        tps = [(t, p) for t in sorted(parts) for p in parts[t]]
        bounds = cluster.offsets(tps)
        starts = resolve_starts(cluster, opts, tps, bounds)
        ends = resolve_ends(cluster, opts, tps, bounds)
        for tp in tps:
            if starts[tp] > ends[tp]:
                raise OptionError(
                    f"{tp[0]}-{tp[1]}: the starting offset {starts[tp]} is after the ending offset "
                    f"{ends[tp]} (check startingOffsets/endingOffsets)"
                )
        return plan_ranges(cluster, opts, starts, ends)


__all__ = [
    "OffsetRange",
    "Piece",
    "assign_pieces",
    "plan_batch",
    "plan_ranges",
    "resolve_ends",
    "resolve_starts",
    "split_ranges",
    "with_txn_sources",
]
