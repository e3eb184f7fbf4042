"""strata.remote.metadata and strata.remote.rsm: data classes, state machine, naming, ranges, loading by class name,
and LocalTieredStorage basics (the full contract runs in tests/integration/test_rsm_contract.py)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from strata.remote.local_tiered import LocalTieredStorage
from strata.remote.metadata import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    decode_custom_metadata,
    encode_custom_metadata,
    is_valid_segment_transition,
)
from strata.remote.rsm import (
    IndexType,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    create_remote_storage_manager,
    load_rsm_class,
    partition_dir_name,
    resolve_range,
    segment_file_name,
    strip_rsm_prefix,
)
from strata.remote.s3 import S3RemoteStorageManager
from tests.support.s3_servers import write_segment

TIP = TopicIdPartition(uuid.UUID("c0ffee00-0000-4000-8000-000000000001"), "orders", 7)


def md(start=100, end=199, **kw):
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TIP, kw.pop("sid", uuid.UUID(int=1))),
        start,
        end,
        1234,
        broker_id=1,
        event_timestamp_ms=5,
        segment_size_in_bytes=4096,
        segment_leader_epochs=kw.pop("epochs", {3: 150, 2: 100}),
        **kw,
    )


def test_metadata_validation_and_update():
    m = md()
    assert list(m.segment_leader_epochs) == [2, 3]  # sorted by epoch
    assert m.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED
    with pytest.raises(ValueError):
        md(start=10, end=9)
    with pytest.raises(ValueError):
        md(epochs={})
    up = RemoteLogSegmentMetadataUpdate(
        m.remote_log_segment_id, 99, {"remote_size": 10}, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 2
    )
    m2 = m.create_with_update(up)
    assert (m2.state, m2.event_timestamp_ms, m2.broker_id, m2.custom_metadata) == (
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        99,
        2,
        {"remote_size": 10},
    )
    assert m.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED  # immutable
    assert hash(m2) == hash(m) and m2 != m
    other = RemoteLogSegmentMetadataUpdate(
        RemoteLogSegmentId(TIP, uuid.uuid4()), 1, None, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, 1
    )
    with pytest.raises(ValueError):
        m.create_with_update(other)
    with pytest.raises(ValueError):
        RemoteLogSegmentMetadataUpdate(m.remote_log_segment_id, 1, None, RemoteLogSegmentState.COPY_SEGMENT_STARTED, 1)


def test_state_machine_and_ids():
    S = RemoteLogSegmentState
    assert [s.value for s in S] == [0, 1, 2, 3]
    assert is_valid_segment_transition(None, S.COPY_SEGMENT_STARTED)
    assert not is_valid_segment_transition(None, S.COPY_SEGMENT_FINISHED)
    assert is_valid_segment_transition(S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED)  # failed copy
    assert is_valid_segment_transition(S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED)
    assert not is_valid_segment_transition(S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_STARTED)
    assert not is_valid_segment_transition(S.DELETE_SEGMENT_FINISHED, S.COPY_SEGMENT_FINISHED)
    assert not is_valid_segment_transition(S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED)


def test_custom_metadata_codec():
    raw = encode_custom_metadata({"remote_size": 123, "object_key": "a/b"})
    assert raw == b'{"object_key":"a/b","remote_size":123}'
    assert decode_custom_metadata(raw) == {"remote_size": 123, "object_key": "a/b"}
    assert encode_custom_metadata(None) is None and decode_custom_metadata(None) is None


def test_kafka_names():
    m = md()
    assert partition_dir_name(TIP) == "orders-7-wP_uAAAAQACAAAAAAAAAAQ"
    assert segment_file_name(m, ".log") == "00000000000000000100-AAAAAAAAAAAAAAAAAAAAAQ.log"
    assert [t.suffix for t in IndexType] == [
        ".index",
        ".timeindex",
        ".snapshot",
        ".txnindex",
        ".leader_epoch_checkpoint",
    ]


@pytest.mark.parametrize(
    "start,end,size,expected",
    [
        (0, None, 10, (0, 10)),
        (0, 0, 10, (0, 1)),
        (9, 9, 10, (9, 10)),
        (3, 100, 10, (3, 10)),
        (10, None, 10, (10, 10)),
        (12, 20, 10, (12, 12)),
        (0, None, 0, (0, 0)),
    ],
)
def test_resolve_range(start, end, size, expected):
    assert resolve_range(start, end, size) == expected


def test_resolve_range_rejects_bad_arguments():
    with pytest.raises(ValueError):
        resolve_range(-1, None, 10)
    with pytest.raises(ValueError):
        resolve_range(5, 4, 10)


def test_errors_carry_retriability():
    assert RemoteStorageError("x").retriable is True
    assert RemoteStorageError("x", retriable=False).retriable is False
    assert RemoteResourceNotFoundError("x").retriable is False
    assert issubclass(RemoteResourceNotFoundError, RemoteStorageError)


def test_load_by_class_name(tmp_path):
    assert load_rsm_class("local") is LocalTieredStorage
    assert load_rsm_class("org.apache.kafka.server.log.remote.storage.LocalTieredStorage") is LocalTieredStorage
    assert load_rsm_class("S3") is S3RemoteStorageManager
    assert load_rsm_class("strata.remote.local_tiered.LocalTieredStorage") is LocalTieredStorage
    with pytest.raises(ValueError):
        load_rsm_class("strata.remote.metadata:TopicIdPartition")
    rsm = create_remote_storage_manager("local", {"remote.log.storage.system.enable": "true"}, default_dir=tmp_path)
    assert rsm.root == tmp_path / "kafka-tiered-storage" and rsm.root.is_dir()
    rsm = create_remote_storage_manager("local", {"rsm.config.dir": str(tmp_path / "x")})
    assert rsm.root == tmp_path / "x" / "kafka-tiered-storage"
    s3 = create_remote_storage_manager("s3", {"rsm.config.s3.bucket.name": "b", "rsm.config.chunk.size": "1024"})
    assert s3.config.bucket == "b" and s3.config.chunk_size == 1024
    assert strip_rsm_prefix({"a": 1}) == {"a": 1}
    with pytest.raises(ValueError):
        create_remote_storage_manager("local", {})


def test_local_tiered_layout_copy_fetch_delete(tmp_path):
    seg = write_segment(tmp_path / "log", 5000, batches=20, aborted_txns=[(1, 5001, 5002, 5003)])
    m = seg.metadata(TIP)
    rsm = LocalTieredStorage(tmp_path / "remote")

    async def body():
        await rsm.copy_log_segment_data(m, seg.segment_data())
        assert await rsm.fetch_log_segment(m, 10, 19) == seg.log_bytes()[10:20]
        assert await rsm.fetch_index(m, IndexType.TRANSACTION) == seg.txn_index.read_bytes()
        await rsm.delete_log_segment_data(m)
        with pytest.raises(RemoteResourceNotFoundError):
            await rsm.fetch_log_segment(m, 0)

    prefix = f"orders-7-wP_uAAAAQACAAAAAAAAAAQ/00000000000000005000-{m.remote_log_segment_id.id_str}"
    asyncio.run(rsm.copy_log_segment_data(m, seg.segment_data()))
    assert rsm.list_files() == sorted(
        prefix + s for s in (".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".leader_epoch_checkpoint")
    )
    asyncio.run(body())
    assert rsm.list_files() == []


def test_local_tiered_failed_copy_leaves_nothing(tmp_path):
    seg = write_segment(tmp_path / "log", 0, batches=3)
    m = seg.metadata(TIP)
    rsm = LocalTieredStorage(tmp_path / "remote")
    seg.log.unlink()  # the segment vanished (e.g. deleted locally) before the copy
    with pytest.raises(RemoteStorageError) as ei:
        asyncio.run(rsm.copy_log_segment_data(m, seg.segment_data()))
    assert not isinstance(ei.value, RemoteResourceNotFoundError) and ei.value.retriable is False
    assert rsm.list_files() == []


def test_log_segment_data_normalises():
    d = LogSegmentData("a.log", "a.index", "a.timeindex", None, "a.snapshot", bytearray(b"0\n0\n"))
    assert d.log_segment.name == "a.log" and d.transaction_index is None and d.leader_epoch_index == b"0\n0\n"
