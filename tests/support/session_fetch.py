"""Hand-made Fetch requests in a KIP-227 session (session id, epoch, partitions named and forgotten) and what their
answers carry, for tests that check sessions on the wire."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import FetchRequest

from .kafka_wire import WireClient


def fetch(
    w: WireClient,
    version: int,
    session: tuple[int, int],
    parts: dict[tuple[Any, int], int],
    forget: list[tuple[Any, int]] | None = None,
    max_wait_ms: int = 0,
    send_only: bool = False,
) -> Any:
    """A consumer's Fetch of `parts` ((topic name, or id from v13, partition) -> fetch offset) in `session` (id,
    epoch), forgetting `forget`; with `send_only`, its correlation id (the answer is read later)."""
    T = FetchRequest.FetchTopic
    key = "topic_id" if version >= 13 else "topic"
    topics: dict[Any, list] = {}
    for (t, p), offset in parts.items():
        topics.setdefault(t, []).append(T.FetchPartition(partition=p, fetch_offset=offset, partition_max_bytes=1 << 20))
    forgotten: dict[Any, list[int]] = {}
    for t, p in forget or ():
        forgotten.setdefault(t, []).append(p)
    F = FetchRequest.ForgottenTopic
    req = FetchRequest[version](
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=session[0],
        session_epoch=session[1],
        topics=[T(**{key: t}, partitions=ps) for t, ps in topics.items()],
        forgotten_topics_data=[F(**{key: t}, partitions=ps) for t, ps in forgotten.items()],
        rack_id="",
    )
    if send_only:
        return w.send(req)
    return w.request(req)


def answered(resp: Any, version: int) -> dict[tuple[Any, int], tuple[int, int, int]]:
    """(topic, partition) -> (error, high watermark, record bytes)"""
    key = "topic_id" if version >= 13 else "topic"
    return {
        (getattr(t, key), p.partition_index): (p.error_code, p.high_watermark, len(p.records or b""))
        for t in resp.responses
        for p in t.partitions
    }
