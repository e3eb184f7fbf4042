"""Deterministic test records and byte-for-byte comparison of what a client read back."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

Header = tuple[str, bytes | None]  # Kafka record headers may have a null value


@dataclass(frozen=True)
class Rec:
    """One record as produced (offset unknown: -1) or as read back."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    timestamp: int | None = None
    offset: int = -1


def gen_records(
    n: int,
    partitions: int,
    seed: int,
    *,
    text: bool = False,
    ts_base: int | None = None,
    headers: bool = True,
    tag: str = "",
) -> list[Rec]:
    """``n`` records spread round-robin over ``partitions``, each with a key, a value and 0-3 headers.

    ``text=True`` keeps keys/values/headers printable ASCII without newlines or the ``\\t`` key delimiter (kcat's
    line input). Otherwise they contain arbitrary bytes, including NULs and non-UTF-8. ``ts_base`` gives record i
    the timestamp ``ts_base + i`` (strictly increasing per partition).
    """
    rnd = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/{}[]=+ "
    out: list[Rec] = []
    for i in range(n):
        if text:
            key = f"{tag}key-{i:05d}-{rnd.randrange(1 << 30):x}".encode()
            vlen = rnd.choice((1, 8, 40, 100, 300, 1000))
            value = f"{tag}v{i}:".encode() + "".join(rnd.choice(alphabet) for _ in range(vlen)).encode()
        else:
            key = f"{tag}k{i}".encode() + rnd.randbytes(rnd.choice((1, 4, 16)))
            vlen = rnd.choice((1, 8, 40, 100, 300, 1000, 3000))
            # mix compressible and random content so every codec has something to do
            value = (bytes([i % 256]) * (vlen // 2)) + rnd.randbytes(vlen - vlen // 2) + b"\x00\xff"
        hdrs: tuple[Header, ...] = ()
        if headers:
            nh = rnd.randrange(1, 4)
            if text:
                hdrs = tuple((f"h{j}", f"{tag}hv{i}-{j}".encode()) for j in range(nh))
            else:
                hdrs = tuple((f"h{j}-\u00e9", rnd.randbytes(rnd.randrange(0, 20)) + b"\x00") for j in range(nh))
        ts = None if ts_base is None else ts_base + i
        out.append(Rec(partition=i % partitions, key=key, value=value, headers=hdrs, timestamp=ts))
    return out


def past_ts_base(n: int) -> int:
    """A timestamp base so that ``base + n`` ms is still safely in the past (brokers reject far-future times)."""
    return int(time.time() * 1000) - 10 * 60 * 1000 - n


def by_partition(records: Iterable[Rec]) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = {}
    for r in records:
        out.setdefault(r.partition, []).append(r)
    return out


def norm_headers(h: Iterable[tuple[str, bytes | str | None]] | None) -> tuple[Header, ...]:
    if not h:
        return ()
    res = []
    for k, v in h:
        if isinstance(v, str):
            v = v.encode()
        res.append((k, v))
    return tuple(res)


def assert_partition_matches(
    expected: Sequence[Rec], got: Sequence[Rec], partition: int, first_offset: int = 0, check_timestamps: bool = True
) -> None:
    """``got`` (read from ``first_offset``) equals ``expected`` byte for byte, in order, at consecutive offsets."""
    assert len(got) == len(expected), f"partition {partition}: read {len(got)} records, expected {len(expected)}"
    for i, (e, g) in enumerate(zip(expected, got)):
        where = f"partition {partition} record #{i}"
        assert g.partition == partition, f"{where}: came from partition {g.partition}"
        assert g.offset == first_offset + i, f"{where}: offset {g.offset}, expected {first_offset + i}"
        assert g.key == e.key, f"{where} offset {g.offset}: key {g.key!r:.80} != {e.key!r:.80}"
        assert g.value == e.value, (
            f"{where} offset {g.offset}: value differs ({len(g.value or b'')} vs {len(e.value or b'')} bytes)"
        )
        assert g.headers == e.headers, f"{where} offset {g.offset}: headers {g.headers!r} != {e.headers!r}"
        if check_timestamps and e.timestamp is not None:
            assert g.timestamp == e.timestamp, f"{where}: timestamp {g.timestamp} != {e.timestamp}"


def expected_offset_for_time(records: Sequence[Rec], target: int) -> int:
    """Kafka's ListOffsets-by-timestamp answer: the first offset whose timestamp is >= target (-1: none)."""
    for r in records:
        assert r.timestamp is not None
        if r.timestamp >= target:
            return r.offset
    return -1


def _timestamp(r: Rec) -> int:
    assert r.timestamp is not None, f"partition {r.partition} offset {r.offset}: record read back has no timestamp"
    return r.timestamp


@dataclass
class Collected:
    """Records read back, grouped per partition, in arrival order."""

    parts: dict[int, list[Rec]] = field(default_factory=dict)

    def add(self, r: Rec) -> None:
        self.parts.setdefault(r.partition, []).append(r)

    def count(self) -> int:
        return sum(len(v) for v in self.parts.values())


def check_roundtrip(
    expected: Sequence[Rec],
    read: Callable[[int, int, int], list[Rec]],
    lookup_time: Callable[[dict[int, int]], dict[int, int]] | None,
    check_timestamps: bool = True,
) -> dict[int, list[Rec]]:
    """Read every partition back from offset 0 and from a timestamp, and compare byte for byte.

    ``read(partition, start_offset, count)`` returns ``count`` records of one partition from ``start_offset``.
    ``lookup_time({partition: ts})`` returns ``{partition: offset}`` (ListOffsets by timestamp; -1 for "none").
    Returns what was read from offset 0, per partition.
    """
    exp = by_partition(expected)
    got_all: dict[int, list[Rec]] = {}
    for p, recs in sorted(exp.items()):
        got = read(p, 0, len(recs))
        assert_partition_matches(recs, got, p, 0, check_timestamps=check_timestamps)
        got_all[p] = got
    if lookup_time is None:
        return got_all
    # a target between records (60% into each partition), and one after the newest record
    targets: dict[int, int] = {}
    expect_off: dict[int, int] = {}
    for p, got in got_all.items():
        k = len(got) * 3 // 5
        ts = got[k].timestamp
        assert ts is not None, f"partition {p}: record read back at offset {got[k].offset} has no timestamp"
        targets[p] = ts
        expect_off[p] = expected_offset_for_time(got, ts)
    found = lookup_time(dict(targets))
    assert found == expect_off, f"offsets for times {targets}: got {found}, expected {expect_off}"
    for p, off in found.items():
        tail = read(p, off, len(exp[p]) - off)
        assert_partition_matches(exp[p][off:], tail, p, off, check_timestamps=check_timestamps)
    after = {p: max(_timestamp(r) for r in got) + 1 for p, got in got_all.items()}
    found = lookup_time(after)
    assert found == {p: -1 for p in after}, f"offsets for times after the newest record {after}: got {found}"
    return got_all
