"""The RLM's copier, expiration and reader pools are separate thread pools (remote/executors.py): an RSM's blocking
work runs on the pool of the RLM path that asks for it, the loads a read spawns included."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path

from strata.remote.executors import COPY, EXPIRATION, POOL, READ, RemoteExecutors
from strata.remote.local_tiered import LocalTieredStorage
from strata.remote.metadata import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition


def test_rsm_work_runs_on_the_pool_of_the_calling_path(tmp_path: Path, monkeypatch) -> None:
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(b"x" * 100)
    for n in ("i.index", "t.timeindex", "p.snapshot"):
        (tmp_path / n).write_bytes(b"")
    rsm = LocalTieredStorage(tmp_path / "remote")
    ex = RemoteExecutors.create(2, 1, 3)
    rsm.use_executors(ex)
    seen: dict[str, str] = {}
    for name in ("_copy_sync", "_read_range", "_delete_sync"):
        original = getattr(rsm, name)

        def spy(*args, _name=name, _original=original):
            seen[_name] = threading.current_thread().name
            return _original(*args)

        monkeypatch.setattr(rsm, name, spy)
    meta = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TopicIdPartition(uuid.uuid4(), "t", 0), uuid.uuid4()), 0, 9, 0, 0, 0, 100, {0: 0}
    )
    data = LogSegmentData(seg, tmp_path / "i.index", tmp_path / "t.timeindex", None, tmp_path / "p.snapshot", b"")

    async def as_path(pool: str, coro_fn):
        async def body():
            POOL.set(pool)
            return await coro_fn()

        return await asyncio.create_task(body())

    async def body() -> bytes:
        await as_path(COPY, lambda: rsm.copy_log_segment_data(meta, data))
        got = await as_path(READ, lambda: rsm.fetch_log_segment(meta, 0, 9))
        await as_path(EXPIRATION, lambda: rsm.delete_log_segment_data(meta))
        return got

    try:
        assert asyncio.run(body()) == b"x" * 10
    finally:
        ex.shutdown()
    assert seen["_copy_sync"].startswith("remote-log-copier")
    assert seen["_read_range"].startswith("remote-log-reader")
    assert seen["_delete_sync"].startswith("remote-log-expiration")
