"""Transaction marker control batches (Kafka's EndTransactionMarker / ControlRecordType): what a transaction
coordinator's WriteTxnMarkers makes a partition leader append to end a transaction.

A marker batch is transactional and control (attributes 0x30), carries the producer id and epoch of the
transaction, no sequence, and one record: key = version int16 (0) + type int16 (0 ABORT, 1 COMMIT), value =
version int16 (0) + coordinatorEpoch int32.
"""

from __future__ import annotations

import struct

from .records import CONTROL_MASK, build_batch, compute_crc

CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
_ATTRIBUTES_POS = 21
_CRC_POS = 17


def end_txn_marker_key(commit: bool) -> bytes:
    return _KEY.pack(0, CONTROL_TYPE_COMMIT if commit else CONTROL_TYPE_ABORT)


def end_txn_marker_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(0, coordinator_epoch)


def build_end_txn_marker(
    producer_id: int,
    producer_epoch: int,
    *,
    commit: bool,
    coordinator_epoch: int,
    base_offset: int = 0,
    timestamp: int | None = None,
) -> bytes:
    """One control batch ending `producer_id`'s transaction (Kafka's MemoryRecords.withEndTransactionMarker)."""
    b = bytearray(
        build_batch(
            [(end_txn_marker_key(commit), end_txn_marker_value(coordinator_epoch))],
            base_offset,
            timestamp=timestamp,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            is_transactional=True,
        )
    )
    attrs = int.from_bytes(b[_ATTRIBUTES_POS : _ATTRIBUTES_POS + 2], "big") | CONTROL_MASK
    b[_ATTRIBUTES_POS : _ATTRIBUTES_POS + 2] = attrs.to_bytes(2, "big")
    b[_CRC_POS : _CRC_POS + 4] = compute_crc(b, 0, len(b)).to_bytes(4, "big")
    return bytes(b)


__all__ = [
    "CONTROL_TYPE_ABORT",
    "CONTROL_TYPE_COMMIT",
    "build_end_txn_marker",
    "end_txn_marker_key",
    "end_txn_marker_value",
]
