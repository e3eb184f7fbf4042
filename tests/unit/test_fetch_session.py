"""The fetch session cache's rules (Kafka's FetchSessionTest, in our words): epochs, the partitions an incremental
fetch answers, eviction (stale first, then privileged and larger sessions win), and the partition count it reports.
The wire side is in tests/integration/test_fetch_sessions.py."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from strata.broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    CachedPartition,
    FetchSessionCache,
    next_epoch,
)
from strata.broker.replica_manager import FetchResult
from strata.protocol.errors import ErrorCode


def want(*parts: tuple[str, int, int]) -> dict:
    out = {}
    for topic, p, offset in parts:
        cp = CachedPartition(topic, p, offset, 1024)
        out[cp.key] = cp
    return out


def ok(hw: int, records: bytes = b"", lso: int | None = None) -> FetchResult:
    return FetchResult(
        high_watermark=hw, last_stable_offset=hw if lso is None else lso, log_start_offset=0, records=records
    )


def full(cache: FetchSessionCache, parts: dict, follower: bool = False, version: int = 12) -> int:
    ctx = cache.new_context(version, 0, INITIAL_EPOCH, follower, parts, [])
    sid, err, selected = ctx.respond([ok(10)] * len(parts))
    assert err == ErrorCode.NONE and selected is None
    return sid


def test_next_epoch_wraps_to_one_and_final_stays_final():
    assert next_epoch(0) == 1
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_incremental_answers_only_what_changed_and_moves_fed_partitions_last():
    cache = FetchSessionCache(10, 120_000)
    sid = full(cache, want(("t", 0, 5), ("t", 1, 5), ("t", 2, 5)))
    assert sid and cache.num_partitions == 3

    ctx = cache.new_context(12, sid, 1, False, {}, [])
    assert [cp.partition for cp in ctx.partitions] == [0, 1, 2]
    # p0 unchanged, p1 has records, p2's HW moved
    assert ctx.respond([ok(10), ok(10, b"x" * 70), ok(11)]) == (sid, ErrorCode.NONE, [1, 2])

    # the partition that got data went to the end; an error is always answered, and again once it is gone
    ctx = cache.new_context(12, sid, 2, False, {}, [])
    assert [cp.partition for cp in ctx.partitions] == [0, 2, 1]
    assert ctx.respond([FetchResult(ErrorCode.NOT_LEADER_OR_FOLLOWER), ok(11), ok(10)])[2] == [0]
    ctx = cache.new_context(12, sid, 3, False, {}, [])
    assert ctx.respond([ok(10), ok(11), ok(10)])[2] == [0]
    # a moved LSO alone is answered too (READ_COMMITTED lag)
    ctx = cache.new_context(12, sid, 4, False, {}, [])
    assert ctx.respond([ok(10), ok(11, lso=9), ok(10)])[2] == [1]


def test_added_altered_and_forgotten_partitions():
    cache = FetchSessionCache(10, 120_000)
    sid = full(cache, want(("t", 0, 5), ("t", 1, 5)))
    ctx = cache.new_context(12, sid, 1, False, want(("t", 1, 9), ("u", 0, 0)), [("t", 0)])
    assert [(cp.topic, cp.partition, cp.fetch_offset) for cp in ctx.partitions] == [("t", 1, 9), ("u", 0, 0)]
    assert cache.num_partitions == 2
    # forgetting everything ends the session: the answer is sessionless
    ctx = cache.new_context(12, sid, 2, False, {}, [("t", 1), ("u", 0)])
    assert ctx.respond([])[0] == 0
    assert not cache.sessions and cache.num_partitions == 0


@pytest.mark.parametrize(
    ("session_id", "epoch", "version", "error"),
    [
        (12345, 1, 12, ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
        (None, 7, 12, ErrorCode.INVALID_FETCH_SESSION_EPOCH),
        (None, 1, 13, ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR),
    ],
)
def test_session_errors(session_id, epoch, version, error):
    cache = FetchSessionCache(10, 120_000)
    sid = full(cache, want(("t", 0, 5)))
    ctx = cache.new_context(version, session_id or sid, epoch, False, {}, [])
    assert ctx.error == error and not ctx.partitions


def test_a_duplicate_request_makes_the_slower_one_answer_invalid_epoch():
    cache = FetchSessionCache(10, 120_000)
    sid = full(cache, want(("t", 0, 5)))
    first = cache.new_context(12, sid, 1, False, {}, [])
    second = cache.new_context(12, sid, 2, False, {}, [])
    assert second.respond([ok(10)])[1] == ErrorCode.NONE
    assert first.respond([ok(10)]) == (sid, ErrorCode.INVALID_FETCH_SESSION_EPOCH, [])


def test_full_fetch_closes_the_named_session_and_final_epoch_creates_none():
    cache = FetchSessionCache(10, 120_000)
    sid = full(cache, want(("t", 0, 5)))
    ctx = cache.new_context(12, sid, FINAL_EPOCH, False, want(("t", 0, 5)), [])
    assert ctx.respond([ok(10)])[0] == 0
    assert not cache.sessions


def test_eviction_rules():
    cache = FetchSessionCache(1, 60_000)
    a = full(cache, want(("t", 0, 0)))
    # full, and the one session is neither stale nor old: no session for a consumer, even a larger one
    assert full(cache, want(("t", 0, 0), ("t", 1, 0))) == 0
    # a follower's session evicts a consumer's at once
    f = full(cache, want(("t", 0, 0)), follower=True)
    assert f and a not in cache.sessions
    # but a consumer cannot evict a young follower session
    assert full(cache, want(("t", 0, 0), ("t", 1, 0), ("t", 2, 0))) == 0
    # once old (not stale: it was used just now), a larger consumer session still loses to a privileged one ...
    s = cache.sessions[f]
    s.created -= 61
    assert full(cache, want(("t", 0, 0), ("t", 1, 0), ("t", 2, 0))) == 0
    # ... and once stale, anyone evicts it
    s.last_used = time.monotonic() - 61
    c = full(cache, want(("t", 0, 0)))
    assert c and list(cache.sessions) == [c]
    # among consumers, an old session loses to a larger one, not to one of the same size
    cache.sessions[c].created -= 61
    assert full(cache, want(("t", 5, 0))) == 0
    d = full(cache, want(("t", 0, 0), ("t", 1, 0)))
    assert d and list(cache.sessions) == [d] and cache.num_partitions == 2


def test_no_slots_means_no_sessions():
    cache = FetchSessionCache(0, 120_000)
    assert full(cache, want(("t", 0, 0))) == 0


def test_throttled_answers_are_not_counted():
    cache = FetchSessionCache(10, 120_000)
    ctx = cache.new_context(12, 0, INITIAL_EPOCH, False, want(("t", 0, 5)), [])
    sid = ctx.respond([ok(10)])[0]
    assert sid and ctx.throttled() == 0 and not cache.sessions  # an emptied full answer creates no session
    sid = full(cache, want(("t", 0, 5)))
    ctx = cache.new_context(12, sid, 1, False, {}, [])
    assert ctx.respond([ok(11)])[2] == [0]
    assert ctx.throttled() == sid
    # the client never saw HW 11: it is answered again
    ctx = cache.new_context(12, sid, 2, False, {}, [])
    assert ctx.respond([ok(11)])[2] == [0]


def test_follower_handler_against_the_cache_and_a_restarted_leader():
    """The follower's FetchSessionHandler with the leader's cache: full, then only changed partitions; a leader that
    lost its sessions (a restart: a new cache) answers FETCH_SESSION_ID_NOT_FOUND and the next fetch is full."""
    from strata.broker.cluster.fetch_session_handler import FetchSessionHandler

    tid = uuid.uuid4()

    def exchange(h: FetchSessionHandler, cache: FetchSessionCache, wanted: dict) -> tuple[dict, list, int, list]:
        data = h.build(wanted)
        parts: dict[Any, CachedPartition] = {
            (t, p): CachedPartition(t, p, off, mb, ep, lfe, ls)
            for (t, p), (off, ls, mb, ep, lfe) in data.to_send.items()
        }
        ctx = cache.new_context(17, data.session_id, data.epoch, True, parts, list[Any](data.to_forget))
        if ctx.error:
            h.handle_response(ctx.error, 0)
            return data.to_send, data.to_forget, ctx.error, []
        sid, err, selected = ctx.respond([ok(cp.fetch_offset + 1) for cp in ctx.partitions])
        h.handle_response(err, sid)
        return data.to_send, data.to_forget, err, selected if selected is not None else list(range(len(ctx.partitions)))

    leader = FetchSessionCache(10, 120_000)
    h = FetchSessionHandler()
    a, b = (tid, 0), (tid, 1)
    sent, forgot, err, answered = exchange(h, leader, {a: (5, 0, 1024, 3, 2), b: (7, 0, 1024, 3, 2)})
    assert (set(sent), forgot, err, answered) == ({a, b}, [], 0, [0, 1]) and h.epoch == 1
    assert leader.sessions[h.session_id].privileged
    # a's LEO moved: only a is sent; HW moved for a only (the fake answers HW = fetch offset + 1)
    sent, forgot, err, answered = exchange(h, leader, {a: (6, 0, 1024, 3, 2), b: (7, 0, 1024, 3, 2)})
    assert (set(sent), forgot, err, answered) == ({a}, [], 0, [0])
    # b is dropped from the fetch (backoff): forgotten
    sent, forgot, err, _ = exchange(h, leader, {a: (6, 0, 1024, 3, 2)})
    assert (sent, forgot, err) == ({}, [b], 0)
    # the leader restarted
    restarted = FetchSessionCache(10, 120_000)
    assert exchange(h, restarted, {a: (6, 0, 1024, 3, 2)})[2] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    sent, _, err, _ = exchange(h, restarted, {a: (6, 0, 1024, 3, 2)})
    assert (set(sent), err) == ({a}, 0) and h.session_id in restarted.sessions
    # a lost answer (connection closed): a full fetch that closes the session and opens another
    old = h.session_id
    h.build({a: (6, 0, 1024, 3, 2)})
    h.handle_error()
    exchange(h, restarted, {a: (6, 0, 1024, 3, 2)})
    assert old not in restarted.sessions and h.session_id in restarted.sessions
