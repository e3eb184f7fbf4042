"""LeaderEpochFileCache operations a follower uses to restore the leader's lineage from a remote segment's
checkpoint: decode_checkpoint and assign_entries."""

from __future__ import annotations

import pytest

from strata.storage.checkpoints import CheckpointFormatError
from strata.storage.epoch_cache import EpochEntry, LeaderEpochFileCache, decode_checkpoint


def test_decode_checkpoint_reads_the_file_format() -> None:
    assert decode_checkpoint(b"0\n3\n0 0\n3 120\n5 400\n") == [EpochEntry(0, 0), EpochEntry(3, 120), EpochEntry(5, 400)]
    assert decode_checkpoint(b"0\n0\n") == []


@pytest.mark.parametrize(
    "data", [b"", b"1\n0\n", b"0\n2\n0 0\n", b"0\nx\n", b"0\n1\n0 0 0\n", b"0\n1\na b\n", b"\xff\xfe"]
)
def test_decode_checkpoint_rejects_malformed_data(data: bytes) -> None:
    with pytest.raises(CheckpointFormatError):
        decode_checkpoint(data)


def test_assign_entries_keeps_the_order_invariants_and_writes_the_file_once(tmp_path, monkeypatch) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(path)
    writes: list[list[EpochEntry]] = []
    real_flush = cache.flush

    def counting_flush() -> None:
        writes.append(cache.entries)
        real_flush()

    monkeypatch.setattr(cache, "flush", counting_flush)
    # as single assigns: (2, 5) is superseded by (3, 5); (4, 12) repeats epoch 4 at a later offset
    cache.assign_entries([EpochEntry(0, 0), EpochEntry(2, 5), EpochEntry(3, 5), EpochEntry(4, 9), EpochEntry(4, 12)])
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(3, 5), EpochEntry(4, 9)]
    assert writes == [cache.entries]
    assert path.read_text() == "0\n3\n0 0\n3 5\n4 9\n"
    assert LeaderEpochFileCache.load(path).entries == cache.entries


def test_assign_entries_after_clear_restores_a_lineage(tmp_path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(path)
    cache.assign(7, 1000)
    cache.clear_and_flush()
    assert path.read_text() == "0\n0\n"
    cache.assign_entries(decode_checkpoint(b"0\n2\n1 0\n2 50\n"))
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(2, 50)]
    assert cache.epoch_for_offset(49) == 1 and cache.end_offset_for(1, 80) == (1, 50)
    assert path.read_text() == "0\n2\n1 0\n2 50\n"
