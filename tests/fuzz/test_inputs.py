"""The fuzzer's inputs, without a broker: one seed gives one input sequence, and a bounded run covers every
advertised (api key, version) and every strategy; the bad batches are bad only in what their name says."""

from __future__ import annotations

import random
import struct
import uuid

import crc32c

from strata.protocol.registry import SUPPORTED_VERSIONS
from tests.fuzz import batches
from tests.fuzz.inputs import STRATEGIES, make_input
from tests.fuzz.values import FuzzContext

CTX = FuzzContext(topics={"fz-plain": (uuid.UUID(int=1), 3), "fz-compact": (uuid.UUID(int=2), 2)})
KW = {"bomb_bytes": 1 << 20, "max_items": 1000, "max_request_bytes": 100 << 20}


def test_inputs_are_a_function_of_seed_and_index() -> None:
    for i in range(200):
        assert make_input(11, i, CTX, **KW).data == make_input(11, i, CTX, **KW).data
    other_seed = [make_input(12, i, CTX, **KW).data for i in range(50)]
    assert [make_input(11, i, CTX, **KW).data for i in range(50)] != other_seed


def test_a_bounded_run_covers_every_api_version_and_strategy() -> None:
    pairs, strategies = set(), set()
    for i in range(6000):
        inp = make_input(1, i, CTX, **KW)
        strategies.add(inp.strategy)
        if inp.api_key >= 0:
            pairs.add((inp.api_key, inp.version))
    want = {(k, v) for k, (lo, hi) in SUPPORTED_VERSIONS.items() for v in range(max(lo, 3) if k == 0 else lo, hi + 1)}
    assert want - pairs == set()
    assert strategies == {name for name, _ in STRATEGIES}


def test_valid_inputs_are_framed_requests_of_their_api_and_version() -> None:
    for i in range(500):
        inp = make_input(3, i, CTX, **KW)
        if inp.strategy != "valid":
            continue
        (size,) = struct.unpack_from(">i", inp.data)
        assert size == len(inp.data) - 4
        assert struct.unpack_from(">hh", inp.data, 4) == (inp.api_key, inp.version)


def test_bad_batches_keep_a_valid_crc_unless_the_crc_is_the_point() -> None:
    rnd = random.Random(5)
    for _ in range(300):
        kind, batch = batches.bad_batch(rnd, 1 << 20)
        if kind in ("bad-crc", "truncated", "two-batches") or kind == "bad-magic" or len(batch) < 61:
            continue
        (length,) = struct.unpack_from(">i", batch, 8)
        end = min(len(batch), 12 + length) if kind != "length-lie" else len(batch)
        (crc,) = struct.unpack_from(">I", batch, 17)
        assert crc == crc32c.crc32c(batch[21:end] if kind != "length-lie" else batch[21:]), kind


def test_produce_acks_read_from_the_bytes() -> None:
    """The oracle's reading of acks from a Produce's bytes (a byte mutation may turn it into 0: no answer is right)."""
    from kafka.protocol.producer import ProduceRequest

    from tests.fuzz.runner import _produce_acks

    for version in (3, 8, 9, 10):
        for acks in (-1, 0, 1):
            req = ProduceRequest[version](transactional_id=None, acks=acks, timeout_ms=100, topic_data=[])
            req.with_header(correlation_id=1, client_id="fz")
            assert _produce_acks(bytes(req.encode(header=True, framed=True))) == acks, (version, acks)
    assert _produce_acks(b"\x00\x00\x00\x04\x00\x03\x00") is None  # not a Produce
