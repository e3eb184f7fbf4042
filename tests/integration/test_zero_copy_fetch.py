"""Zero-copy Fetch (sendfile) against the copy path, on one broker with a PLAINTEXT listener (sendfile) and an SSL
listener (the copy path: TLS encrypts in user space), with LocalTieredStorage for partitions read from remote
storage.

* Every advertised Fetch version gets byte-identical responses from both listeners for a request mixing a large
  local partition (sent with sendfile), a small one (read, below the threshold), an empty one, a partition read
  from remote storage (copied from the remote read's buffers) and the local tail of a tiered partition; the
  sendfile byte counter shows which path each listener took.
* A client that stops reading in the middle of a 24 MiB zero-copy response does not stall other connections, and
  gets its whole, exact response when it reads again.
* A topic deleted while a large response of its records is being sent: the response still carries the bytes the
  log held when the Fetch was answered (the region's descriptor keeps the unlinked file).
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse

from strata.protocol.registry import SUPPORTED_VERSIONS, ApiKey
from tests.support.broker_proc import StrataBroker, free_port
from tests.support.certs import Pki, make_pki
from tests.support.kafka_wire import WireClient, build_batch, recv_exact, slow_reader_socket
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LO, HI = SUPPORTED_VERSIONS[ApiKey.FETCH]
BATCH_RECORDS, VALUE = 100, 1000  # ~100 KiB batches: one is above the 64 KiB zero-copy threshold
MIB_BATCH_RECORDS = 1000  # ~1 MB batches for the large responses


class Broker:
    def __init__(self, broker: StrataBroker, ssl_port: int, pki: Pki) -> None:
        self.broker, self.ssl_port, self.pki = broker, ssl_port, pki

    def plain(self, timeout: float = 30.0) -> WireClient:
        return WireClient.connect(self.broker.bootstrap, timeout=timeout)

    def tls(self, timeout: float = 30.0) -> WireClient:
        c = WireClient("127.0.0.1", self.ssl_port, timeout=timeout)
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_pem))
        c.sock = ctx.wrap_socket(c.sock, server_hostname="127.0.0.1")
        return c

    def sendfile_bytes(self) -> float:
        url = f"http://127.0.0.1:{self.broker.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        for line in text.splitlines():
            if line.startswith("strata_network_sendfile_bytes_total "):
                return float(line.split()[1])
        raise AssertionError("no strata_network_sendfile_bytes_total metric")


@pytest.fixture(scope="module")
def zc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    tmp = tmp_path_factory.mktemp("zero-copy")
    pki = make_pki(tmp / "pki")
    b = StrataBroker(tmp / "broker")
    ssl_port = free_port()
    b.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SSL://127.0.0.1:{ssl_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
            "inter.broker.listener.name": "PLAINTEXT",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.dir / "broker.pem"),
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "local",
            "remote.log.manager.task.interval.ms": "200",
            "remote.log.metadata.topic.num.partitions": "1",
            "remote.fetch.max.wait.ms": "20000",  # remote reads always finish: both listeners get the same data
            "log.retention.check.interval.ms": "200",
            "log.segment.delete.delay.ms": "0",
        }
    )
    b.start()
    try:
        yield Broker(b, ssl_port, pki)
    finally:
        b.stop()


def _batch(n: int, value: bytes) -> bytes:
    return build_batch([(None, value, []) for _ in range(n)])


def _produce(c: WireClient, topic: str, partition: int, batches: list[bytes]) -> None:
    for batch in batches:
        r = c.produce(topic, partition, batch, version=7, acks=1)
        assert r.responses[0].partition_responses[0].error_code == 0, r


def _create(c: WireClient, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    r = c.create_topic(topic, partitions, configs=configs)
    assert r.topics[0].error_code == 0, r
    wait_until(lambda: all(p.leader_id >= 0 for p in c.metadata([topic]).topics[0].partitions), 30, message="leaders")


def _fetch_request(version: int, topics: list[tuple[str, Any, dict[int, int]]], pmax: int, isolation: int) -> Any:
    T = FetchRequest.FetchTopic
    kw: dict[str, Any] = {}
    if version >= 15:
        kw["replica_state"] = FetchRequest.ReplicaState(replica_id=-1, replica_epoch=-1)
    else:
        kw["replica_id"] = -1
    req_topics = []
    for name, tid, offsets in topics:
        parts = [
            T.FetchPartition(
                partition=p,
                current_leader_epoch=-1,
                fetch_offset=o,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=pmax,
            )
            for p, o in offsets.items()
        ]
        req_topics.append(T(partitions=parts, **({"topic_id": tid} if version >= 13 else {"topic": name})))
    return FetchRequest[version](
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=64 << 20,
        isolation_level=isolation,
        session_id=0,
        session_epoch=-1,
        topics=req_topics,
        forgotten_topics_data=[],
        rack_id="",
        **kw,
    )


def _raw(c: WireClient, req: Any, correlation_id: int) -> bytes:
    req.with_header(correlation_id=correlation_id, client_id="zero-copy-test")
    c.send_raw(bytes(req.encode(header=True, framed=True)))
    return c.recv_frame()


def test_every_fetch_version_is_byte_identical_to_the_copy_path(zc: Broker) -> None:
    local, tiered = f"zc-local-{uuid.uuid4().hex[:6]}", f"zc-tiered-{uuid.uuid4().hex[:6]}"
    big = _batch(BATCH_RECORDS, b"L" * VALUE)
    with zc.plain() as c:
        _create(c, local, 3)
        _produce(c, local, 0, [big] * 12)  # ~1.2 MiB: sent with sendfile
        _produce(c, local, 1, [_batch(2, b"s" * 500)])  # ~1 KiB: read
        # partition 2 stays empty
        _create(
            c,
            tiered,
            2,
            {"remote.storage.enable": "true", "segment.bytes": str(3 * len(big)), "local.retention.bytes": "1"},
        )
        for p in (0, 1):
            _produce(c, tiered, p, [_batch(BATCH_RECORDS, bytes([65 + p]) * VALUE)] * 7)
        # the closed segments are tiered and deleted locally: offset 0 is remote, the active segment local
        for p in (0, 1):

            def tiered_up_to_active_segment(p: int = p) -> bool:
                return c.list_offsets(tiered, p, -4, version=8).topics[0].partitions[0].offset == 600

            wait_until(tiered_up_to_active_segment, 60, message=f"{tiered}-{p} tiered up to its active segment")
        ids = {t.name: t.topic_id for t in c.metadata([local, tiered], version=12).topics}
    topics = [(local, ids[local], {0: 0, 1: 0, 2: 0}), (tiered, ids[tiered], {0: 0, 1: 600})]
    with zc.plain() as plain, zc.tls() as tls:
        for v in range(LO, HI + 1):
            isolation = v % 2  # READ_COMMITTED answers aborted_transactions (an empty list) and reads below the LSO
            before = zc.sendfile_bytes()
            a = _raw(plain, _fetch_request(v, topics, 4 << 20, isolation), 1000 + v)
            resp = FetchResponse.decode(a, version=v, header=True)
            key = (lambda n: n) if v < 13 else (lambda n: str(ids[n]))
            sizes = {
                (t.topic if v < 13 else str(t.topic_id), p.partition_index): len(p.records or b"")
                for t in resp.responses
                for p in t.partitions
            }
            errors = [p.error_code for t in resp.responses for p in t.partitions]
            assert errors == [0] * 5, f"v{v}: {errors}"
            assert sizes[(key(local), 0)] == 12 * len(big) and 0 < sizes[(key(local), 1)] < 4096
            assert sizes[(key(local), 2)] == 0 and sizes[(key(tiered), 0)] > 0 and sizes[(key(tiered), 1)] > 0
            zero_copy = sizes[(key(local), 0)] + sizes[(key(tiered), 1)]  # the large local reads

            # the counter moves right after the last byte is handed to the socket (the scrape may come first)
            def counted(before: float = before, zero_copy: int = zero_copy) -> bool:
                return zc.sendfile_bytes() - before == zero_copy

            wait_until(counted, 10, message=f"v{v}: the large local partitions were not sent with sendfile")
            mid = zc.sendfile_bytes()
            b = _raw(tls, _fetch_request(v, topics, 4 << 20, isolation), 1000 + v)
            assert zc.sendfile_bytes() == mid, f"v{v}: the TLS listener used sendfile"
            assert a == b, f"Fetch v{v}: the sendfile response differs from the copy path's"


def _big_topic(zc: Broker, mib: int) -> tuple[str, bytes]:
    """A one-partition topic of `mib` ~1 MB batches in one segment, and the copy path's (TLS) answer to
    `_whole_partition` on it."""
    topic = f"zc-big-{uuid.uuid4().hex[:6]}"
    batches = [_batch(MIB_BATCH_RECORDS, bytes([i % 251]) * VALUE) for i in range(mib)]
    with zc.plain() as c:
        _create(c, topic, 1)
        _produce(c, topic, 0, batches)
    with zc.tls() as t:
        copied = _raw(t, _whole_partition(topic), 7)
    assert len(_records(copied)) == sum(map(len, batches))
    return topic, copied


def _whole_partition(topic: str) -> Any:
    return _fetch_request(11, [(topic, None, {0: 0})], 64 << 20, 0)


def _stalled_fetch(zc: Broker, topic: str) -> tuple[socket.socket, int]:
    """A connection that asks for the whole partition and reads only the frame size."""
    s = slow_reader_socket("127.0.0.1", zc.broker.port)
    req = _whole_partition(topic)
    req.with_header(correlation_id=7, client_id="stalled-reader")
    s.sendall(bytes(req.encode(header=True, framed=True)))
    (size,) = struct.unpack(">i", recv_exact(s, 4))
    return s, size


def _records(frame: bytes) -> bytes:
    resp = FetchResponse.decode(frame, version=11, header=True)
    p = resp.responses[0].partitions[0]
    assert p.error_code == 0, p
    return bytes(p.records)


def test_a_stalled_reader_does_not_stall_other_connections(zc: Broker) -> None:
    topic, copied = _big_topic(zc, 24)
    before = zc.sendfile_bytes()
    stalled, size = _stalled_fetch(zc, topic)
    try:
        with zc.plain(timeout=10) as other:
            t0 = time.monotonic()
            for _ in range(20):
                got = other.fetch(topic, 0, 0, version=11, max_bytes=64 << 10)
                assert got.responses[0].partitions[0].error_code == 0
                assert other.metadata([topic]).topics[0].error_code == 0
            elapsed = time.monotonic() - t0
        assert elapsed < 10, f"other connections waited {elapsed:.1f}s behind a stalled reader"
        frame = recv_exact(stalled, size)
    finally:
        stalled.close()
    assert frame == copied, "the resumed response differs from the copy path's"
    n = len(_records(frame))
    wait_until(lambda: zc.sendfile_bytes() - before >= n, 10, message="the large response was not sent with sendfile")


def test_a_topic_deleted_while_its_records_are_sent(zc: Broker) -> None:
    topic, copied = _big_topic(zc, 16)
    stalled, size = _stalled_fetch(zc, topic)
    try:
        with zc.plain() as c:
            r = c.call(20, 4, topic_names=[topic], timeout_ms=30000)
            assert r.responses[0].error_code == 0, r
        wait_until(lambda: not any(Path(zc.broker.log_dir).glob(f"{topic}-0*")), 30, message="partition removed")
        frame = recv_exact(stalled, size)
    finally:
        stalled.close()
    assert frame == copied, "the response of a deleted segment must carry the bytes it had"


def test_the_switch_turns_sendfile_off(tmp_path: Path) -> None:
    """fetch.zero.copy.enable=false: plaintext listeners read the records too (nothing leaves by sendfile)."""
    b = StrataBroker(tmp_path / "broker", {"fetch.zero.copy.enable": "false"})
    b.start()
    try:
        off = Broker(b, 0, None)  # type: ignore[arg-type]  # no TLS listener here
        topic = f"zc-off-{uuid.uuid4().hex[:6]}"
        with off.plain() as c:
            _create(c, topic, 1)
            _produce(c, topic, 0, [_batch(MIB_BATCH_RECORDS, b"o" * VALUE)] * 2)
            frame = _raw(c, _whole_partition(topic), 9)
        assert len(_records(frame)) > 2_000_000
        assert off.sendfile_bytes() == 0
    finally:
        b.stop()
