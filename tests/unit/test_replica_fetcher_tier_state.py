"""Pure helpers of the follower tier state machine (broker/cluster/replica_fetcher_tier_state.py)."""

from __future__ import annotations

import pytest

from strata.broker.cluster.replica_fetcher_tier_state import (
    MAX_BACKOFF_S,
    AuxStateError,
    backoff_s,
    parse_epoch_checkpoint,
)
from strata.remote.rlm import epoch_checkpoint_bytes
from strata.storage.epoch_cache import EpochEntry


def test_parses_the_checkpoint_a_leader_ships_with_a_segment() -> None:
    data = epoch_checkpoint_bytes([(0, 0), (3, 120), (5, 400)])
    assert parse_epoch_checkpoint(data) == [EpochEntry(0, 0), EpochEntry(3, 120), EpochEntry(5, 400)]
    assert parse_epoch_checkpoint(epoch_checkpoint_bytes([])) == []


@pytest.mark.parametrize("data", [b"", b"1\n0\n", b"0\n2\n0 0\n"])
def test_rejects_a_malformed_checkpoint(data: bytes) -> None:
    with pytest.raises(AuxStateError):
        parse_epoch_checkpoint(data)


def test_backoff_doubles_up_to_the_cap() -> None:
    assert [backoff_s(0.1, n) for n in (1, 2, 3)] == pytest.approx([0.1, 0.2, 0.4])
    assert backoff_s(0.1, 50) == MAX_BACKOFF_S
