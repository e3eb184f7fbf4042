"""Stored batches -> the committed records of an offset range, as a READ_COMMITTED consumer sees them.

Control batches (transaction markers) are skipped, and so are the batches of aborted transactions: given the
aborted transactions overlapping the range (from the `.txnindex`, local or remote), a producer's transactional
batches are dropped from its aborted transaction's first offset until its abort marker, as Kafka's consumer does.
The range's next offset moves past everything read, skipped or not, so the translator never reads it again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from strata.protocol.records import BatchHeader, BufferChain, iter_batches, iter_records
from strata.storage.txn_index import AbortedTxn

Header = tuple[str, "bytes | None"]


class TopicRecord(NamedTuple):
    """One record as the table sees it (a DLQ entry, a record a converter rejects)."""

    topic: str
    partition: int
    offset: int
    timestamp: int  # ms since the epoch
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: list[Header]


@dataclass
class RecordChunk:
    """The committed records of [start, next_offset) of one partition, column by column. `next_offset` is where
    the next read starts: past the last batch read, skipped batches (markers, aborted data) included."""

    topic: str
    partition: int
    start: int
    next_offset: int
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    timestamp_types: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[list[Header]] = field(default_factory=list)
    max_timestamp: int = -1

    def __len__(self) -> int:
        return len(self.offsets)

    def record(self, i: int) -> TopicRecord:
        return TopicRecord(
            self.topic,
            self.partition,
            self.offsets[i],
            self.timestamps[i],
            self.timestamp_types[i],
            self.keys[i],
            self.values[i],
            self.headers[i],
        )


def decode_committed(
    topic: str,
    partition: int,
    data: bytes | memoryview | BufferChain,
    start: int,
    upper: int,
    aborted: Iterable[AbortedTxn],
) -> RecordChunk:
    """The records of the whole batches of `data` that lie below `upper`, from offset `start`, minus control and
    aborted transactional batches. Stops at the first batch reaching `upper` (not below the LSO yet)."""
    buf = bytes(data) if isinstance(data, BufferChain) else data
    pending = sorted(aborted, key=lambda t: t.first_offset)
    ai = 0
    aborting: set[int] = set()
    out = RecordChunk(topic, partition, start, start)
    for pos, h in iter_batches(buf):
        if h.last_offset >= upper:
            break
        if h.next_offset <= start:
            continue
        while ai < len(pending) and pending[ai].first_offset <= h.last_offset:
            aborting.add(pending[ai].producer_id)
            ai += 1
        out.next_offset = h.next_offset
        if h.is_control:
            aborting.discard(h.producer_id)  # the marker ends the producer's transaction
            continue
        if h.is_transactional and h.producer_id in aborting:
            continue
        _append_batch(out, buf, pos, h, start)
    return out


def _append_batch(out: RecordChunk, buf: bytes | memoryview, pos: int, h: BatchHeader, start: int) -> None:
    ts_type = h.timestamp_type
    for r in iter_records(buf, pos):
        if r.offset < start:
            continue
        out.offsets.append(r.offset)
        out.timestamps.append(r.timestamp)
        out.timestamp_types.append(ts_type)
        out.keys.append(r.key)
        out.values.append(r.value)
        out.headers.append(r.headers)
        if r.timestamp > out.max_timestamp:
            out.max_timestamp = r.timestamp


__all__ = ["Header", "RecordChunk", "TopicRecord", "decode_committed"]
