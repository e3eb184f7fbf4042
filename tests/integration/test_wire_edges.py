"""Broker behaviours a client relies on that the client suites do not reach (raw wire, tests/support/kafka_wire.py):

* acks=0: no response at all, the records are stored.
* A batch larger than the topic's max.message.bytes gets MESSAGE_TOO_LARGE (10); a CRC-valid batch whose
  lastOffsetDelta disagrees with its record count gets INVALID_RECORD (87); the broker goes on serving.
* A Fetch waiting for min.bytes is answered when records are appended, not at max.wait.ms.
* connections.max.idle.ms closes idle connections.
* DescribeCluster on one broker names it as the only broker and the controller.
* SIGINT shuts down cleanly like SIGTERM (exit 0, the clean-shutdown marker in the log dir).
* log.format=json writes one JSON object per log line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import threading
import time
import urllib.request
from typing import Any

from crc32c import crc32c

from strata.protocol.records import ATTRIBUTES_OFFSET, build_batch, iter_batches
from strata.protocol.registry import REQUEST_CLASSES, RESPONSE_CLASSES, ApiKey
from strata.storage.log_manager import CLEAN_SHUTDOWN_FILE
from tests.support.kafka_wire import WireClient
from tests.support.waiting import wait_until


def produce_error(resp) -> int:
    return resp.responses[0].partition_responses[0].error_code


def parked_fetches(broker) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=5).read().decode()
    m = re.search(r'^strata_purgatory_size\{purgatory="Fetch"\} ([0-9.e+-]+)$', text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def records_at(bootstrap: str, topic: str, offset: int) -> list[int]:
    with WireClient.connect(bootstrap) as w:
        data = w.fetch(topic, 0, offset, version=11).responses[0].partitions[0].records or b""
    return [h.base_offset for _, h in iter_batches(data)]


def test_acks_zero_gets_no_response_and_is_stored(broker) -> None:
    bs = broker.bootstrap
    with WireClient.connect(bs) as w:
        w.create_topic("acks0")
        P = REQUEST_CLASSES[ApiKey.PRODUCE]
        w.send(
            P[7](
                transactional_id=None,
                acks=0,
                timeout_ms=1000,
                topic_data=[
                    P.TopicProduceData(
                        name="acks0",
                        partition_data=[
                            P.TopicProduceData.PartitionProduceData(
                                index=0, records=build_batch([b"fire", b"and", b"forget"])
                            )
                        ],
                    )
                ],
            )
        )
        # the next request's answer is the first thing on the wire: acks=0 got none
        md = w.metadata(["acks0"])
        assert md.topics[0].error_code == 0
    wait_until(lambda: records_at(bs, "acks0", 0) == [0], timeout=10, message="acks=0 batch stored")


def test_oversized_and_malformed_batches_are_refused_with_their_error(broker) -> None:
    bs = broker.bootstrap
    with WireClient.connect(bs) as w:
        w.create_topic("limits", configs={"max.message.bytes": "2000"})
        assert produce_error(w.produce("limits", 0, build_batch([os.urandom(4000)]))) == 10  # MESSAGE_TOO_LARGE
        bad = bytearray(build_batch([b"a", b"b", b"c"]))
        struct.pack_into(">i", bad, 23, 7)  # lastOffsetDelta 7 for 3 records ...
        struct.pack_into(">I", bad, 17, crc32c(bytes(bad[ATTRIBUTES_OFFSET:])))  # ... with a valid CRC
        assert produce_error(w.produce("limits", 0, bytes(bad))) == 87  # INVALID_RECORD
        assert produce_error(w.produce("limits", 0, build_batch([b"fits"]))) == 0
    assert records_at(bs, "limits", 0) == [0]


def test_fetch_waiting_for_min_bytes_is_answered_by_an_append(broker) -> None:
    bs = broker.bootstrap
    with WireClient.connect(bs) as w:
        w.create_topic("wake")
    got: dict[str, Any] = {}  # the seconds waited (float) and the records (the untyped response's field)

    def long_poll() -> None:
        with WireClient.connect(bs, timeout=60) as c:
            t = time.monotonic()
            resp = c.fetch("wake", 0, 0, version=11, max_wait_ms=30000)
            got["seconds"] = time.monotonic() - t
            got["records"] = resp.responses[0].partitions[0].records

    poller = threading.Thread(target=long_poll)
    poller.start()
    wait_until(lambda: parked_fetches(broker) >= 1, timeout=10, message="the fetch is parked in the purgatory")
    with WireClient.connect(bs) as w:
        assert produce_error(w.produce("wake", 0, build_batch([b"wake up"]))) == 0
    poller.join(35)
    assert got["records"], got
    assert got["seconds"] < 15, got  # far below the 30 s max wait: the append answered it


def test_idle_connections_are_closed(broker_factory) -> None:
    b = broker_factory(**{"connections.max.idle.ms": 500})
    with WireClient.connect(b.bootstrap) as w:
        assert w.api_versions(0).error_code == 0
        assert w.wait_closed(timeout=10)


def test_describe_cluster_on_one_broker(broker) -> None:
    D, R = REQUEST_CLASSES[ApiKey.DESCRIBE_CLUSTER], RESPONSE_CLASSES[ApiKey.DESCRIBE_CLUSTER]
    with WireClient.connect(broker.bootstrap) as w:
        resp = w.recv(R, 1, w.send(D[1](include_cluster_authorized_operations=False, endpoint_type=1)))
    assert resp.error_code == 0 and resp.cluster_id
    assert [(b.broker_id, b.host, b.port) for b in resp.brokers] == [(0, broker.host, broker.port)]
    assert resp.controller_id == 0


def test_sigint_shuts_down_cleanly(broker) -> None:
    with WireClient.connect(broker.bootstrap) as w:
        w.create_topic("sigint")
        assert produce_error(w.produce("sigint", 0, build_batch([b"kept"]))) == 0
    os.kill(broker.proc.pid, signal.SIGINT)
    assert broker.proc.wait(timeout=30) == 0
    assert (broker.log_dir / CLEAN_SHUTDOWN_FILE).exists()
    broker.start()
    assert records_at(broker.bootstrap, "sigint", 0) == [0]


def test_json_log_format(broker_factory) -> None:
    b = broker_factory(**{"log.format": "json"})
    b.stop()
    lines = [ln for ln in b.output_path.read_text().splitlines() if ln.strip() and not ln.startswith("=====")]
    events = [json.loads(ln) for ln in lines]  # every line is one JSON object
    assert any(e.get("event") == "started" for e in events), lines[:5]
