"""Records of the `__transaction_state` topic in Apache Kafka's formats (transaction-coordinator's
TransactionLogKey / TransactionLogValue message schemas).

* TransactionLogKey (version 0): transactionalId string.
* TransactionLogValue: producerId int64, producerEpoch int16, transactionTimeoutMs int32, transactionStatus int8,
  transactionPartitions nullable [topic string, partitionIds [int32]], transactionLastUpdateTimestampMs int64,
  transactionStartTimestampMs int64. Version 0 is classic; version 1 (flexible: compact strings and arrays, written
  by Kafka from transaction.version 1) adds tagged fields PreviousProducerId (0), NextProducerId (1),
  ClientTransactionVersion (2).

Strata writes value version 1, as Kafka does at transaction.version 1, and reads both. An Empty transaction has a
null partition list. A null value is a tombstone (an expired transactional id).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from strata.protocol.wire import (
    ByteReader,
    WireFormatError,
    write_compact_string,
    write_string,
    write_tagged_fields,
    write_uvarint,
)

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 1

_HEAD = struct.Struct(">hqhib")  # version, producerId, producerEpoch, timeoutMs, status
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class TxnRecordFormatError(WireFormatError):
    """A `__transaction_state` key or value that does not decode."""


@dataclass(slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: dict[str, list[int]] | None
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1


def encode_key(transactional_id: str) -> bytes:
    out = bytearray(_I16.pack(KEY_VERSION))
    write_string(out, transactional_id)
    return bytes(out)


def encode_value(v: TxnLogValue) -> bytes:
    """Version 1 (flexible), what Kafka writes at transaction.version 1: compact strings and arrays, tagged fields
    written only when they differ from their defaults."""
    out = bytearray(_HEAD.pack(VALUE_VERSION, v.producer_id, v.producer_epoch, v.timeout_ms, v.status))
    if v.partitions is None:
        write_uvarint(out, 0)
    else:
        write_uvarint(out, len(v.partitions) + 1)
        for topic, parts in sorted(v.partitions.items()):
            write_compact_string(out, topic)
            write_uvarint(out, len(parts) + 1)
            for p in sorted(parts):
                out += _I32.pack(p)
            write_uvarint(out, 0)  # the topic's tagged fields
    out += _I64.pack(v.last_update_ms) + _I64.pack(v.start_ms)
    tags = [
        (tag, _I64.pack(value)) for tag, value in ((0, v.previous_producer_id), (1, v.next_producer_id)) if value != -1
    ]
    write_tagged_fields(out, tags)
    return bytes(out)


class _Reader(ByteReader):
    __slots__ = ("flexible",)
    error = TxnRecordFormatError

    def __init__(self, buf: bytes, flexible: bool = False) -> None:
        super().__init__(buf, 0)
        self.flexible = flexible

    def length(self) -> int:
        return self.uvarint() - 1 if self.flexible else self.int32()

    def str_(self) -> str:
        return self.compact_string() if self.flexible else self.string()

    def tags(self) -> dict[int, bytes]:
        out: dict[int, bytes] = {}
        if self.flexible:
            for _ in range(self.uvarint()):
                tag = self.uvarint()
                out[tag] = bytes(self.take(self.uvarint()))
        return out


def decode_key(key: bytes) -> str | None:
    """The transactional id of a key; None for a key version this coordinator does not know (skipped)."""
    r = _Reader(bytes(key))
    if r.int16() != KEY_VERSION:
        return None
    return r.string()


def decode_value(value: bytes) -> TxnLogValue:
    version = _I16.unpack_from(value, 0)[0] if len(value) >= 2 else -1
    if version not in (0, 1):
        raise TxnRecordFormatError(f"unknown transaction log value version {version}")
    r = _Reader(bytes(value), flexible=version >= 1)
    r.int16()
    pid, epoch, timeout, status = r.int64(), r.int16(), r.int32(), r.int8()
    n = r.length()
    partitions: dict[str, list[int]] | None = None
    if n >= 0:
        partitions = {}
        for _ in range(n):
            topic = r.str_()
            partitions[topic] = [r.int32() for _ in range(r.length())]
            r.tags()
    last_update, start = r.int64(), r.int64()
    tags = r.tags()
    prev = _I64.unpack(tags[0])[0] if len(tags.get(0, b"")) == 8 else -1
    nxt = _I64.unpack(tags[1])[0] if len(tags.get(1, b"")) == 8 else -1
    return TxnLogValue(pid, epoch, timeout, status, partitions, last_update, start, prev, nxt)


__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "TxnLogValue",
    "TxnRecordFormatError",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]
