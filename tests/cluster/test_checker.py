"""The queue checker itself: it must flag each kind of anomaly it claims to detect, and pass a clean history."""

from __future__ import annotations

from tests.cluster.checker import History, Read, check, decode_value, encode_value


def _history(n: int = 6, partitions: int = 2) -> tuple[History, list[Read]]:
    h = History()
    reads = []
    next_offset = [0] * partitions
    for seq in range(n):
        v = encode_value("p0", seq)
        part = seq % partitions
        h.send(v, part)
        h.ack(v, part, next_offset[part])
        reads.append(Read(part, next_offset[part], v))
        next_offset[part] += 1
    reads.sort(key=lambda r: (r.partition, r.offset))
    return h, reads


def test_values_round_trip() -> None:
    assert decode_value(encode_value("w-1", 42, pad=10)) == ("w-1", 42)
    assert decode_value(b"garbage") is None


def test_clean_history_passes() -> None:
    h, reads = _history()
    v = check(h, reads)
    assert v.ok, v.report()
    assert v.counts() == {
        "sent": 6,
        "acked": 6,
        "failed": 0,
        "unknown": 0,
        "read": 6,
        "recovered": 0,
        "lost": 0,
        "misplaced": 0,
        "duplicated": 0,
        "reordered": 0,
        "unexpected": 0,
        "acked_without_offset": 0,
    }


def test_lost_record_is_flagged() -> None:
    h, reads = _history()
    v = check(h, reads[1:])
    assert not v.ok and v.lost == [reads[0].value]


def test_duplicate_is_flagged_for_idempotent_producers_only() -> None:
    h, reads = _history()
    dup = Read(reads[2].partition, 99, reads[2].value)
    v = check(h, reads + [dup])
    assert not v.ok and v.duplicated == {reads[2].value: 2}
    assert check(h, reads + [dup], idempotent=False).ok


def test_reordering_within_a_partition_is_flagged() -> None:
    h, reads = _history()
    p0 = [r for r in reads if r.partition == 0]
    # the broker stored seq 2 before seq 0: offsets swapped
    swapped = [Read(0, p0[0].offset, p0[1].value), Read(0, p0[1].offset, p0[0].value)] + p0[2:]
    v = check(h, swapped + [r for r in reads if r.partition == 1])
    assert not v.ok and v.reordered and v.misplaced
    # offsets going backwards in what the consumer returned
    v = check(h, [p0[1], p0[0]] + p0[2:])
    assert any("offset" in s for s in v.reordered)


def test_misplaced_ack_is_flagged() -> None:
    h, reads = _history()
    moved = [Read(r.partition, r.offset + 10, r.value) if r is reads[-1] else r for r in reads]
    v = check(h, moved)
    assert not v.ok and v.misplaced and v.misplaced[0][0] == reads[-1].value


def test_unacknowledged_reads_are_recovered_not_errors() -> None:
    h, reads = _history()
    extra = encode_value("p0", 100)
    h.send(extra, 0)
    h.fail(extra, "REQUEST_TIMED_OUT")
    v = check(h, reads + [Read(0, 50, extra)])
    assert v.ok, v.report()
    assert v.recovered == 1 and v.failed == 1
    v = check(h, reads + [Read(0, 51, b"stranger:000000001")])
    assert not v.ok and len(v.unexpected) == 1


def test_ack_without_offset_is_counted_and_checked_by_partition() -> None:
    h, reads = _history()
    v0 = reads[0].value
    assert v0 is not None
    h.ack(v0, reads[0].partition, None)
    v = check(h, reads)
    assert v.ok and v.acked_without_offset == [v0]
    h.ack(v0, 1 - reads[0].partition, None)  # acknowledged for the other partition: misplaced
    assert not check(h, reads).ok
    assert not check(h, reads[1:]).ok  # and it must be read
