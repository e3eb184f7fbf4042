"""On-disk formats: .index, .timeindex, checkpoints, leader-epoch-checkpoint, partition.metadata."""

from __future__ import annotations

import struct
import uuid

from strata.storage.checkpoints import OffsetCheckpointFile, atomic_write
from strata.storage.epoch_cache import LeaderEpochFileCache
from strata.storage.index import OffsetIndex, TimeIndex


def test_offset_index_binary_layout_and_lookup(tmp_path):
    p = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(p, 100, 1024)
    idx.append(105, 0x1234)
    idx.append(110, 0x10000)
    assert p.read_bytes() == bytes.fromhex("00000005 00001234 0000000a 00010000".replace(" ", ""))
    assert idx.lookup(99) == (100, 0)
    assert idx.lookup(105) == (105, 0x1234)
    assert idx.lookup(109) == (105, 0x1234)
    assert idx.lookup(1000) == (110, 0x10000)
    assert idx.floor_position(0x1233) == 0 and idx.floor_position(0x2000) == 0x1234
    idx.close()
    with open(p, "ab") as f:  # torn entry: dropped on load
        f.write(b"\x00\x00\x00")
    idx = OffsetIndex(p, 100, 1024)
    assert idx.entries == 2 and p.stat().st_size == 16
    idx.truncate_to(110)
    assert idx.entries == 1 and p.stat().st_size == 8
    idx.close()


def test_offset_index_full(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0, 16)
    idx.append(1, 10)
    idx.append(2, 20)
    assert idx.is_full
    idx.close()


def test_time_index_binary_layout_and_lookup(tmp_path):
    p = tmp_path / "00000000000000000100.timeindex"
    ti = TimeIndex(p, 100, 1200)
    ti.maybe_append(1_700_000_000_000, 104)
    ti.maybe_append(1_700_000_000_000, 105)  # not increasing: ignored
    ti.maybe_append(1_700_000_000_500, 110)
    assert p.read_bytes() == struct.pack(">qiqi", 1_700_000_000_000, 4, 1_700_000_000_500, 10)
    assert p.stat().st_size == 24
    assert ti.lookup(1) == (-1, 100)
    assert ti.lookup(1_700_000_000_499) == (1_700_000_000_000, 104)
    assert ti.last_entry == (1_700_000_000_500, 110)
    ti.truncate_to(105)
    assert ti.entries == 1
    ti.close()


def test_offset_checkpoint_format_round_trip(tmp_path):
    p = tmp_path / "recovery-point-offset-checkpoint"
    cp = OffsetCheckpointFile(p)
    cp.write({("orders", 1): 42, ("a-b-c", 0): 7})
    assert p.read_text() == "0\n2\na-b-c 0 7\norders 1 42\n"
    assert cp.read() == {("orders", 1): 42, ("a-b-c", 0): 7}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()
    assert OffsetCheckpointFile(tmp_path / "missing").read() == {}


def test_atomic_write_replaces(tmp_path):
    p = tmp_path / "f"
    atomic_write(p, b"one")
    atomic_write(p, b"two")
    assert p.read_bytes() == b"two" and list(tmp_path.iterdir()) == [p]


def test_leader_epoch_checkpoint_format_and_semantics(tmp_path):
    p = tmp_path / "leader-epoch-checkpoint"
    c = LeaderEpochFileCache(p)
    c.assign(0, 0)
    c.assign(0, 5)  # same epoch, later offset: no change
    c.assign(2, 10)
    c.assign(4, 30)
    assert p.read_text() == "0\n3\n0 0\n2 10\n4 30\n"
    assert c.epoch_for_offset(9) == 0 and c.epoch_for_offset(10) == 2 and c.epoch_for_offset(100) == 4
    assert c.end_offset_for(0, 50) == (0, 10)
    assert c.end_offset_for(1, 50) == (0, 10)
    assert c.end_offset_for(4, 50) == (4, 50)
    assert c.end_offset_for(5, 50) == (-1, -1)
    c.assign(3, 20)  # a new leader with a lower epoch can't exist; Kafka drops non-monotonic entries
    assert [tuple(e) for e in c.entries] == [(0, 0), (2, 10), (3, 20)]
    c.truncate_from_start(15)
    assert [tuple(e) for e in c.entries] == [(2, 15), (3, 20)]
    c.truncate_from_end(20)
    assert [tuple(e) for e in c.entries] == [(2, 15)]
    assert [tuple(e) for e in LeaderEpochFileCache.load(p).entries] == [(2, 15)]
    p.write_text("garbage")
    assert LeaderEpochFileCache.load(p).entries == []


def test_partition_metadata_format(tmp_path):
    from strata.storage.log_manager import read_partition_metadata, write_partition_metadata

    tid = uuid.UUID("6c3b9a7e-0000-4000-8000-0123456789ab")
    write_partition_metadata(tmp_path, tid)
    text = (tmp_path / "partition.metadata").read_text()
    assert text == "version: 0\ntopic_id: bDuafgAAQACAAAEjRWeJqw\n"
    assert read_partition_metadata(tmp_path) == tid
