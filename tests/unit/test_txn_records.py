"""`__transaction_state` records in Kafka's TransactionLogKey/TransactionLogValue layouts, and the transaction
state machine's allowed transitions (Kafka's TransactionState.validPreviousStates)."""

from __future__ import annotations

import struct

import pytest

from strata.broker.txn.metadata import TransactionMetadata, TxnState
from strata.broker.txn.records import (
    TxnLogValue,
    TxnRecordFormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from strata.protocol.wire import write_uvarint


def test_key_is_version_0_and_a_string():
    assert encode_key("tx-é") == struct.pack(">hh", 0, 5) + "tx-é".encode()
    assert decode_key(encode_key("tx-é")) == "tx-é"
    assert decode_key(struct.pack(">hh", 1, 1) + b"x") is None  # unknown key version: skipped


def test_value_v1_layout():
    """What Strata writes: version 1 (flexible), PreviousProducerId tagged only when set."""
    v = TxnLogValue(7, 3, 60000, int(TxnState.ONGOING), {"b": [2, 0], "a": [1]}, 1000, 900, previous_producer_id=5)
    expected = bytearray(struct.pack(">hqhib", 1, 7, 3, 60000, 1) + bytes([3]))  # two topics
    expected += bytes([2]) + b"a" + bytes([2]) + struct.pack(">i", 1) + bytes([0])
    expected += bytes([2]) + b"b" + bytes([3]) + struct.pack(">ii", 0, 2) + bytes([0])
    expected += struct.pack(">qq", 1000, 900) + bytes([1, 0, 8]) + struct.pack(">q", 5)
    assert encode_value(v) == bytes(expected)
    back = decode_value(bytes(expected))
    assert (back.producer_id, back.producer_epoch, back.timeout_ms, back.status) == (7, 3, 60000, 1)
    assert back.partitions == {"a": [1], "b": [0, 2]} and (back.last_update_ms, back.start_ms) == (1000, 900)
    assert (back.previous_producer_id, back.next_producer_id) == (5, -1)
    no_tags = TxnLogValue(7, 3, 60000, 1, {"a": [1]}, 1000, 900)
    assert encode_value(no_tags).endswith(struct.pack(">qq", 1000, 900) + bytes([0]))


def test_value_v0_is_read():
    """Version 0 (classic encodings), what Kafka writes below transaction.version 1."""
    v0 = struct.pack(">hqhib", 0, 7, 3, 60000, 2) + struct.pack(">i", 1)
    v0 += struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 4) + struct.pack(">qq", 1000, 900)
    back = decode_value(v0)
    assert (back.producer_id, back.status, back.partitions, back.start_ms) == (7, 2, {"a": [0, 4]}, 900)


def test_empty_state_has_a_null_partition_list():
    v = TxnLogValue(7, 0, 60000, int(TxnState.EMPTY), None, 1, -1)
    assert encode_value(v)[17] == 0  # compact null
    assert decode_value(encode_value(v)).partitions is None
    v0 = struct.pack(">hqhib", 0, 7, 0, 60000, 0) + struct.pack(">iqq", -1, 1, -1)
    assert decode_value(v0).partitions is None


def test_value_v1_flexible_with_tagged_fields():
    """Kafka's own version 1 values (here with NextProducerId, which only transaction.version 2 sets) load too."""
    out = bytearray(struct.pack(">hqhib", 1, 9, 4, 30000, int(TxnState.PREPARE_COMMIT)))
    write_uvarint(out, 2)  # one topic (compact array: n + 1)
    write_uvarint(out, 2)
    out += b"t"
    write_uvarint(out, 3)  # two partitions
    out += struct.pack(">ii", 0, 5)
    write_uvarint(out, 0)  # the topic's tagged fields
    out += struct.pack(">qq", 2000, 1500)
    write_uvarint(out, 2)  # two tagged fields
    for tag, value in ((0, 8), (1, 10)):
        write_uvarint(out, tag)
        write_uvarint(out, 8)
        out += struct.pack(">q", value)
    v = decode_value(bytes(out))
    assert (v.producer_id, v.producer_epoch, v.status, v.partitions) == (9, 4, 2, {"t": [0, 5]})
    assert (v.previous_producer_id, v.next_producer_id, v.start_ms) == (8, 10, 1500)


@pytest.mark.parametrize("bad", [b"", struct.pack(">h", 7) + b"\0" * 40, struct.pack(">hq", 0, 1)])
def test_unreadable_values_raise_the_format_error(bad):
    with pytest.raises(TxnRecordFormatError):
        decode_value(bad)


def test_transitions_follow_kafka():
    md = TransactionMetadata("t", 1, -1, 0, -1, 60000, TxnState.EMPTY)
    snap = md.prepare(TxnState.ONGOING, 10, partitions=frozenset({("a", 0)}), start_ms=10)
    with pytest.raises(ValueError):  # one change at a time
        md.prepare(TxnState.PREPARE_COMMIT, 11)
    md.apply(snap)
    assert (md.state, md.partitions, md.pending) == (TxnState.ONGOING, {("a", 0)}, None)
    with pytest.raises(ValueError):  # Ongoing cannot complete without a prepare
        md.prepare(TxnState.COMPLETE_COMMIT, 12)
    md.apply(md.prepare(TxnState.PREPARE_ABORT, 12))
    md.apply(md.prepare(TxnState.COMPLETE_ABORT, 13))
    value = md.snapshot().to_value()
    assert (value.status, value.partitions, value.last_update_ms) == (int(TxnState.COMPLETE_ABORT), {"a": [0]}, 13)
    assert TransactionMetadata.from_value("t", decode_value(encode_value(value))).state == TxnState.COMPLETE_ABORT
    assert [TxnState.from_name(n) for n in ("Ongoing", "PrepareEpochFence", "bogus")] == [
        TxnState.ONGOING,
        TxnState.PREPARE_EPOCH_FENCE,
        None,
    ]
