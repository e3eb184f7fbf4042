"""Connection scale (issue 22), against broker processes:

* 2,000 idle client connections, each answered once: the broker's memory grows by a few KiB per connection (no read
  buffer is kept between requests) and it keeps serving.
* `queued.max.request.bytes`: a request whose body has not arrived yet holds its bytes of the pool; at the limit no
  request body is read from any connection (a real producer's requests wait), and reading resumes once the bytes
  are given back.
* `connection.failed.authentication.delay.ms`: the answer to a failed SASL authentication, and the close, come that
  much later, while other connections are answered meanwhile.
"""

from __future__ import annotations

import re
import select
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from strata.protocol.registry import REQUEST_CLASSES, RESPONSE_CLASSES
from tests.support.broker_proc import StrataBroker, free_port
from tests.support.idle_conns import close_all, open_idle
from tests.support.kafka_wire import WireClient
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SASL_AUTHENTICATION_FAILED = 58
MIB = 1 << 20
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_alice="alice-secret";'
)


@pytest.fixture(scope="module")
def scale_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StrataBroker, int]]:
    """One broker for the module: a PLAINTEXT listener and a SASL_PLAINTEXT one (PLAIN), a 1 MiB request memory pool
    (the least Kafka allows with 1 MiB requests) and a 1 s failed-authentication delay. (broker, SASL port)"""
    sasl_port = free_port()
    broker = StrataBroker(tmp_path_factory.mktemp("connection_scale"), name="connection_scale")
    broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL://127.0.0.1:{sasl_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl.plain.sasl.jaas.config": JAAS,
            "connection.failed.authentication.delay.ms": "1000",
            "socket.request.max.bytes": str(MIB),
            "queued.max.request.bytes": str(MIB),
        }
    )
    broker.start()
    try:
        yield broker, sasl_port
    finally:
        broker.stop()


def rss_kib(pid: int) -> int:
    m = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.MULTILINE)
    assert m
    return int(m.group(1))


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else -1.0


def test_two_thousand_idle_connections_cost_a_few_kib_each(scale_broker):
    broker, _ = scale_broker
    assert broker.pid is not None
    with WireClient.connect(broker.bootstrap) as w:  # warm up: the first request's imports and caches
        w.metadata(None)
    before = rss_kib(broker.pid)
    socks = open_idle(broker.host, broker.port, 2000)
    try:
        wait_until(lambda: metric(broker.metrics_port, "strata_network_connections") >= 2000, timeout=20)
        per_conn = (rss_kib(broker.pid) - before) / 2000
        # measured ~6 KiB (objects of the connection; no read buffer): 10,000 fit in well under 500 MiB
        assert per_conn < 24, f"{per_conn:.1f} KiB per idle connection"
        with WireClient.connect(broker.bootstrap) as w:
            assert w.api_versions(3).error_code == 0
    finally:
        close_all(socks)
    wait_until(lambda: metric(broker.metrics_port, "strata_network_connections") <= 1, timeout=20)


def test_queued_max_request_bytes_stops_reading_request_bodies(scale_broker):
    broker, _ = scale_broker
    mib = MIB
    used = "strata_network_memory_pool_used_bytes"
    assert metric(broker.metrics_port, used) == 0
    # a request whose size is read but whose body trickles holds its bytes of the pool meanwhile: all of them
    slow = socket.create_connection((broker.host, broker.port))
    slow.sendall(struct.pack(">i", mib) + b"\0" * 100)
    wait_until(lambda: metric(broker.metrics_port, used) == mib, timeout=10)
    delivered: list[object] = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "log_level": 3, "socket.timeout.ms": 60000})
    try:
        p.produce("backpressure", b"v", on_delivery=lambda err, msg: delivered.append(err or msg.offset()))
        # the producer's requests (Metadata, then Produce) are not read while the pool has nothing left
        assert p.flush(1.5) == 1 and not delivered
        assert metric(broker.metrics_port, "strata_network_memory_pool_available_bytes") == 0
        slow.close()  # its bytes come back: the producer's requests are read and answered
        assert p.flush(30) == 0
        assert delivered == [0]
    finally:
        slow.close()
    wait_until(lambda: metric(broker.metrics_port, used) == 0, timeout=10)


def test_failed_authentication_is_answered_late_without_holding_others(scale_broker):
    broker, sasl_port = scale_broker
    with WireClient("127.0.0.1", sasl_port) as bad, WireClient("127.0.0.1", sasl_port) as other:
        assert bad.call(17, 1, mechanism="PLAIN").error_code == 0
        started = time.monotonic()
        corr = bad.send(REQUEST_CLASSES[36][2](auth_bytes=b"\0alice\0wrong"))
        # meanwhile another connection of the listener is served, and the bad one has no answer yet
        other.sasl_plain("alice", "alice-secret")
        assert other.api_versions(3).error_code == 0
        assert select.select([bad.sock], [], [], 0)[0] == [], "the failed authentication was answered at once"
        resp = bad.recv(RESPONSE_CLASSES[36], 2, corr)
        assert resp.error_code == SASL_AUTHENTICATION_FAILED
        assert time.monotonic() - started >= 0.95
        assert bad.wait_closed(10), "the connection stays open after a failed authentication"
    assert broker.is_running()
