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

from strata.protocol.records import LOG_APPEND_TIME, BatchHeader, BufferChain, iter_batches
from strata.protocol.wire import WireFormatError, read_varint, read_varlong
from strata.storage.record_codec import CorruptBatchError, batch_payload
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
    """The records of one batch into the chunk's columns. A tight loop over the (inflated, bounded) record section
    with one- and two-byte varints read inline: the translator's CPU goes here."""
    try:
        payload = batch_payload(buf[pos : pos + h.size], h)
        _decode_records(out, payload, h, start)
    except (IndexError, WireFormatError) as e:
        raise CorruptBatchError(f"batch at offset {h.base_offset} does not decode: {e}") from None


def _decode_records(out: RecordChunk, p: bytes, h: BatchHeader, start: int) -> None:
    base_offset, base_ts = h.base_offset, h.base_timestamp
    lat = h.timestamp_type == LOG_APPEND_TIME
    ts_type = h.timestamp_type
    offsets, timestamps, types = out.offsets, out.timestamps, out.timestamp_types
    keys, values, headers = out.keys, out.values, out.headers
    max_ts = out.max_timestamp
    i = 0
    for _ in range(h.records_count):
        b = p[i]
        if b < 0x80:
            length, i = (b >> 1) ^ -(b & 1), i + 1
        elif p[i + 1] < 0x80:
            u = (b & 0x7F) | (p[i + 1] << 7)
            length, i = (u >> 1) ^ -(u & 1), i + 2
        else:
            length, i = read_varint(p, i)
        end = i + length
        j = i + 1  # attributes (unused)
        b = p[j]
        if b < 0x80:
            ts_delta, j = (b >> 1) ^ -(b & 1), j + 1
        elif p[j + 1] < 0x80:
            u = (b & 0x7F) | (p[j + 1] << 7)
            ts_delta, j = (u >> 1) ^ -(u & 1), j + 2
        else:
            ts_delta, j = read_varlong(p, j)
        b = p[j]
        if b < 0x80:
            off_delta, j = (b >> 1) ^ -(b & 1), j + 1
        elif p[j + 1] < 0x80:
            u = (b & 0x7F) | (p[j + 1] << 7)
            off_delta, j = (u >> 1) ^ -(u & 1), j + 2
        else:
            off_delta, j = read_varint(p, j)
        b = p[j]
        if b < 0x80:
            kl, j = (b >> 1) ^ -(b & 1), j + 1
        elif p[j + 1] < 0x80:
            u = (b & 0x7F) | (p[j + 1] << 7)
            kl, j = (u >> 1) ^ -(u & 1), j + 2
        else:
            kl, j = read_varint(p, j)
        if kl < 0:
            key = None
        else:
            key = p[j : j + kl]
            j += kl
        b = p[j]
        if b < 0x80:
            vl, j = (b >> 1) ^ -(b & 1), j + 1
        elif p[j + 1] < 0x80:
            u = (b & 0x7F) | (p[j + 1] << 7)
            vl, j = (u >> 1) ^ -(u & 1), j + 2
        else:
            vl, j = read_varint(p, j)
        if vl < 0:
            value = None
        else:
            value = p[j : j + vl]
            j += vl
        b = p[j]
        if b < 0x80:
            hc, j = (b >> 1) ^ -(b & 1), j + 1
        elif p[j + 1] < 0x80:
            u = (b & 0x7F) | (p[j + 1] << 7)
            hc, j = (u >> 1) ^ -(u & 1), j + 2
        else:
            hc, j = read_varint(p, j)
        hs: list[Header] = []
        for _h in range(hc):
            hk, j = read_varint(p, j)
            name = p[j : j + hk].decode("utf-8", "replace")
            hv, j = read_varint(p, j + hk)
            if hv < 0:
                hs.append((name, None))
            else:
                hs.append((name, p[j : j + hv]))
                j += hv
        if j != end or end > len(p):
            raise WireFormatError(f"record at position {i} does not end where its length says")
        i = end
        offset = base_offset + off_delta
        if offset < start:
            continue
        ts = h.max_timestamp if lat else base_ts + ts_delta
        offsets.append(offset)
        timestamps.append(ts)
        types.append(ts_type)
        keys.append(key)
        values.append(value)
        headers.append(hs)
        if ts > max_ts:
            max_ts = ts
    out.max_timestamp = max_ts


__all__ = ["CorruptBatchError", "Header", "RecordChunk", "TopicRecord", "decode_committed"]
