"""KIP-227 incremental fetch sessions on the wire, against a broker process.

* Raw requests (by name, v12, and by topic id, v17): a full fetch creates a session; incremental fetches answer only
  partitions with records or a changed HW; altered and forgotten partitions; a parked incremental fetch wakes on a
  produce and answers only that partition; a wrong epoch gets INVALID_FETCH_SESSION_EPOCH, an unknown id
  FETCH_SESSION_ID_NOT_FOUND, a change between name and id versions FETCH_SESSION_TOPIC_ID_ERROR; epoch -1 closes.
* Real consumers through a proxy that decodes every Fetch (tests/support/fetch_log_proxy.py): kafka-python, the
  one of the three Python clients that uses sessions, gets incremental answers that omit unchanged partitions while
  its assignment grows and shrinks; confluent-kafka (librdkafka 2.16) and aiokafka 0.14 fetch sessionless (epoch -1)
  and get every partition.
* `max.incremental.fetch.session.cache.slots=1`: the second session waits for the first to go stale, a larger one
  evicts an older one, and two consumers still read everything.
* A broker restart under a consumer in a session: no record lost or duplicated; the old session id is unknown.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.protocol.consumer import FetchResponse

from strata.protocol.errors import ErrorCode
from tests.support import ck
from tests.support.broker_proc import StrataBroker
from tests.support.fetch_log_proxy import FetchLogProxy
from tests.support.kafka_wire import WireClient, build_batch
from tests.support.session_fetch import answered, fetch
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StrataBroker, FetchLogProxy]]:
    """One broker whose advertised address is a FetchLogProxy in front of it."""
    b = StrataBroker(tmp_path_factory.mktemp("fetch_sessions"), name="fetch_sessions")
    with FetchLogProxy(b.port) as proxy:
        b.overrides["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{proxy.port}"
        b.start()
        try:
            yield b, proxy
        finally:
            b.stop()


def produce(w: WireClient, topic: str, partition: int, *values: bytes) -> None:
    resp = w.produce(topic, partition, build_batch([(None, v, []) for v in values]))
    assert resp.responses[0].partition_responses[0].error_code == 0


@pytest.mark.parametrize("version", [12, 17])
def test_session_on_the_wire(proxied, version):
    broker, _ = proxied
    topic = f"raw-{version}"
    with WireClient.connect(broker.bootstrap) as w, WireClient.connect(broker.bootstrap) as other:
        assert w.create_topic(topic, partitions=3).topics[0].error_code == 0
        tkey: Any = topic
        if version >= 13:
            tkey = w.metadata([topic], version=12).topics[0].topic_id
        t0, t1, t2 = (tkey, 0), (tkey, 1), (tkey, 2)
        for p in range(3):
            produce(w, topic, p, b"first")

        # full fetch, epoch 0: a session, every partition answered
        r = fetch(w, version, (0, 0), {t0: 1, t1: 1, t2: 1})
        sid = r.session_id
        assert r.error_code == 0 and sid != 0
        assert answered(r, version) == {t0: (0, 1, 0), t1: (0, 1, 0), t2: (0, 1, 0)}
        # nothing changed: an incremental answer with no partition
        r = fetch(w, version, (sid, 1), {})
        assert (r.error_code, r.session_id, answered(r, version)) == (0, sid, {})
        # records on p1 only: only p1
        produce(other, topic, 1, b"second")
        r = fetch(w, version, (sid, 2), {})
        got = answered(r, version)
        assert list(got) == [t1] and got[t1][1] == 2 and got[t1][2] > 0
        # p1's offset altered, p0 forgotten; then records on p0 and p2 answer only p2
        assert answered(fetch(w, version, (sid, 3), {t1: 2}, forget=[t0]), version) == {}
        produce(other, topic, 0, b"third")
        produce(other, topic, 2, b"third")
        assert list(answered(fetch(w, version, (sid, 4), {}), version)) == [t2]
        # a parked incremental fetch wakes on a produce and answers that partition only
        corr = fetch(w, version, (sid, 5), {t2: 2}, max_wait_ms=30_000, send_only=True)
        started = time.monotonic()
        produce(other, topic, 1, b"fourth")
        r = w.recv(FetchResponse, version, corr)
        assert time.monotonic() - started < 20, "the produce did not wake the parked fetch"
        assert list(answered(r, version)) == [t1]
        # session errors: a wrong epoch, an unknown id; the session survives a wrong epoch
        r = fetch(w, version, (sid, 99), {})
        assert (r.error_code, r.session_id, r.responses) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, [])
        r = fetch(w, version, (sid ^ 0x5A5A5A, 1), {})
        assert (r.error_code, r.session_id) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0)
        if version < 13:  # the session uses names: a topic-id version may not continue it
            r = fetch(w, 13, (sid, 6), {})
            assert r.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
        r = fetch(w, version, (sid, 6), {t1: 3})
        assert (r.error_code, r.session_id) == (0, sid)
        # epoch -1: a sessionless full fetch that closes the session named
        r = fetch(w, version, (sid, -1), {t1: 0})
        assert (r.session_id, list(answered(r, version))) == (0, [t1])
        assert fetch(w, version, (sid, 7), {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        if version >= 13:  # an id no topic has: UNKNOWN_TOPIC_ID in the session's answers
            ghost = (uuid.uuid4(), 0)
            r = fetch(w, version, (0, 0), {t1: 3, ghost: 0})
            assert answered(r, version)[ghost][0] == ErrorCode.UNKNOWN_TOPIC_ID
            r = fetch(w, version, (r.session_id, 1), {})
            assert list(answered(r, version)) == [ghost]


def consume_kafka_python(c: KafkaConsumer, n: int, timeout: float = 30) -> list[tuple[int, int, bytes]]:
    got: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        for tp, msgs in c.poll(200).items():
            got += [(tp.partition, m.offset, m.value) for m in msgs]
    assert len(got) == n, f"consumed {len(got)} of {n}: {got}"
    return got


def test_kafka_python_incremental_fetches_omit_unchanged_partitions(proxied):
    broker, proxy = proxied
    bs = f"127.0.0.1:{proxy.port}"
    topic = "kp-sessions"
    with WireClient.connect(broker.bootstrap) as w:
        assert w.create_topic(topic, partitions=4).topics[0].error_code == 0
        for p in range(4):
            produce(w, topic, p, *(b"%d-%d" % (p, i) for i in range(5)))
        proxy.clear()
        c = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, fetch_max_wait_ms=100)
        try:
            tps = [TopicPartition(topic, p) for p in range(4)]
            c.assign(tps[:2])
            c.seek_to_beginning()
            first = consume_kafka_python(c, 10)
            c.assign(tps)  # partitions 2 and 3 join the session
            c.seek(tps[2], 0)
            c.seek(tps[3], 0)
            second = consume_kafka_python(c, 10)
            produce(w, topic, 2, b"late")
            third = consume_kafka_python(c, 1)
            c.assign([tps[1], tps[2]])  # 0 and 3 leave it
            produce(w, topic, 1, b"later")
            fourth = consume_kafka_python(c, 1)
        finally:
            c.close()
    values = sorted(v for _, _, v in first + second + third + fourth)
    assert values == sorted([b"%d-%d" % (p, i) for p in range(4) for i in range(5)] + [b"late", b"later"])
    assert third == [(2, 5, b"late")] and fourth == [(1, 5, b"later")]

    mine = proxy.fetches(lambda x: any(t == topic for t, _ in x.topics + x.forgotten) or x.incremental)
    created = [x for x in mine if x.epoch == 0 and x.response_session_id]
    assert created, "no full fetch created a session"
    incremental = [x for x in mine if x.incremental and x.error == 0]
    assert incremental, "kafka-python never sent an incremental fetch"
    assert any({p for _, p in x.named()} >= {2, 3} for x in incremental), "partitions 2 and 3 were not added"
    assert any({p for _, p in x.forgot()} == {0, 3} for x in incremental), "partitions 0 and 3 were not forgotten"
    # the answer that brought "late" carried partition 2 alone: the three unchanged partitions were left out
    late = [x for x in incremental if any(p == 2 and n for _, p, _, _, n in x.partitions)]
    assert any(x.answered_partitions() == {(topic, 2)} for x in late), [x.partitions for x in late]


def test_sessionless_clients_get_every_partition(proxied):
    """librdkafka and aiokafka send epoch -1 (no session): each fetch is answered in full, session id 0."""
    broker, proxy = proxied
    bs = f"127.0.0.1:{proxy.port}"
    topic = "sessionless"
    with WireClient.connect(broker.bootstrap) as w:
        assert w.create_topic(topic, partitions=3).topics[0].error_code == 0
        for p in range(3):
            produce(w, topic, p, *(b"%d-%d" % (p, i) for i in range(4)))
    expected = sorted(b"%d-%d" % (p, i) for p in range(3) for i in range(4))
    proxy.clear()
    assert sorted(_read_confluent(bs, topic, 3, len(expected))) == expected
    assert sorted(asyncio.run(_read_aiokafka(bs, topic, 3, len(expected)))) == expected
    full = proxy.fetches(lambda x: x.epoch == -1 and bool(x.topics))
    assert len({x.conn for x in full}) >= 2, "both clients fetch without a session"
    for x in full:
        assert x.response_session_id == 0
        assert x.answered_partitions() == x.named()


def _read_confluent(bs: str, topic: str, partitions: int, n: int) -> list[bytes]:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP

    c = Consumer({"bootstrap.servers": bs, "group.id": "sessionless", "enable.auto.commit": False, **ck.QUIET})
    try:
        c.assign([CTP(topic, p, 0) for p in range(partitions)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value() or b"")
        return got
    finally:
        c.close()


async def _read_aiokafka(bs: str, topic: str, partitions: int, n: int) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    c = AIOKafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, auto_offset_reset="earliest")
    await c.start()
    try:
        c.assign([ATP(topic, p) for p in range(partitions)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            for msgs in (await c.getmany(timeout_ms=200)).values():
                got += [m.value for m in msgs]
        return got
    finally:
        await c.stop()


def metric(broker: StrataBroker, name: str) -> float:
    import re
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=5).read().decode()
    m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def test_one_slot_eviction(broker_factory):
    broker = broker_factory(
        **{"max.incremental.fetch.session.cache.slots": 1, "min.incremental.fetch.session.eviction.ms": 500}
    )
    with WireClient.connect(broker.bootstrap) as a, WireClient.connect(broker.bootstrap) as b:
        for t in ("ev-a", "ev-b"):
            assert a.create_topic(t, partitions=2).topics[0].error_code == 0
        ra = fetch(a, 12, (0, 0), {("ev-a", 0): 0})
        assert ra.session_id != 0
        # the cache is full and the one session is neither stale nor old: no session, but a full answer
        rb = fetch(b, 12, (0, 0), {("ev-b", 0): 0})
        assert rb.session_id == 0 and list(answered(rb, 12)) == [("ev-b", 0)]
        # once a's session has been idle for the eviction time, a new one takes its place
        sid_b = wait_until(lambda: fetch(b, 12, (0, 0), {("ev-b", 0): 0}).session_id, timeout=15, interval=0.2)
        assert fetch(a, 12, (ra.session_id, 1), {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        # b stays in use; once it is old, a larger session evicts it, a same-sized one never does
        assert fetch(a, 12, (0, 0), {("ev-a", 0): 0}).session_id == 0
        epoch = [1]

        def larger_wins() -> int:
            r = fetch(b, 12, (sid_b, epoch[0]), {})  # keeps b's session fresh (not stale)
            assert r.error_code == 0, r
            epoch[0] += 1
            return fetch(a, 12, (0, 0), {("ev-a", 0): 0, ("ev-a", 1): 0}).session_id

        wait_until(larger_wins, timeout=15, interval=0.2)
        assert fetch(b, 12, (sid_b, epoch[0]), {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        assert metric(broker, "strata_fetch_session_cache_incremental_fetch_session_evictions_total") == 2
        assert metric(broker, "strata_fetch_session_cache_num_incremental_fetch_sessions") == 1
        assert metric(broker, "strata_fetch_session_cache_num_incremental_fetch_partitions_cached") == 2

        # two real consumers sharing the one slot both read everything
        for t in ("ev-a", "ev-b"):
            for p in range(2):
                produce(a, t, p, *(b"%s-%d-%d" % (t.encode(), p, i) for i in range(3)))
    consumers = [KafkaConsumer(bootstrap_servers=broker.bootstrap, fetch_max_wait_ms=100) for _ in range(2)]
    try:
        for c, t, parts in zip(consumers, ("ev-a", "ev-b"), ((0,), (0, 1))):
            c.assign([TopicPartition(t, p) for p in parts])
            c.seek_to_beginning()
        got_a = consume_kafka_python(consumers[0], 3)
        got_b = consume_kafka_python(consumers[1], 6)
    finally:
        for c in consumers:
            c.close()
    assert sorted(v for *_, v in got_a) == [b"ev-a-0-%d" % i for i in range(3)]
    assert sorted(v for *_, v in got_b) == sorted(b"ev-b-%d-%d" % (p, i) for p in range(2) for i in range(3))


def test_broker_restart_under_a_session(proxied):
    """Last in the module: it restarts the shared broker."""
    broker, proxy = proxied
    bs = f"127.0.0.1:{proxy.port}"
    topic = "restart-sessions"
    with WireClient.connect(broker.bootstrap) as w:
        assert w.create_topic(topic, partitions=2).topics[0].error_code == 0
        for p in range(2):
            produce(w, topic, p, *(b"a-%d-%d" % (p, i) for i in range(20)))
        raw = fetch(w, 12, (0, 0), {(topic, 0): 0})
        assert raw.session_id != 0
    c = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, fetch_max_wait_ms=100)
    try:
        c.assign([TopicPartition(topic, p) for p in range(2)])
        c.seek_to_beginning()
        before = consume_kafka_python(c, 40)
        # kafka-python fetches inside poll(): poll until it has fetched incrementally
        wait_until(lambda: c.poll(50) == {} and proxy.fetches(lambda x: x.incremental and x.error == 0), timeout=10)
        broker.restart()
        restarted = len(proxy.fetches())
        with WireClient.connect(broker.bootstrap) as w:
            # sessions died with the process
            r = fetch(w, 12, (raw.session_id, 1), {})
            assert r.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
            for p in range(2):
                produce(w, topic, p, *(b"b-%d-%d" % (p, i) for i in range(20)))
        after = consume_kafka_python(c, 40)
    finally:
        c.close()
    values = [v for *_, v in before + after]
    assert sorted(values) == sorted(b"%s-%d-%d" % (k, p, i) for k in (b"a", b"b") for p in range(2) for i in range(20))
    for p in range(2):
        offsets = [o for q, o, _ in before + after if q == p]
        assert offsets == list(range(40)), f"partition {p}: {offsets}"
    # the consumer got its answers after the restart from a new session
    later = proxy.fetches()[restarted:]
    assert any(x.epoch == 0 and x.response_session_id for x in later), [(x.epoch, x.error) for x in later]
