"""Regression tests for what the protocol fuzzer (tests/fuzz) found outside the decode, record-validation and
large-request areas. Each test is a request the fuzzer sent, over a real socket to a real broker process."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.consumer import JoinGroupRequest, SyncGroupRequest

from strata.protocol import consumer_protocol as cp
from strata.protocol.registry import REQUEST_CLASSES
from tests.support import ck
from tests.support.kafka_wire import WireClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NONE, INVALID_REQUEST, MEMBER_ID_REQUIRED = 0, 42, 79
FIND_COORDINATOR, INCREMENTAL_ALTER_CONFIGS = 10, 44
SUB = cp.encode_subscription(["fz"])


def join(c: WireClient, group: str, member_id: str, protocols: list[str], version: int = 5) -> Any:
    P = JoinGroupRequest.JoinGroupRequestProtocol
    return c.request(
        JoinGroupRequest[version](
            group_id=group,
            session_timeout_ms=10000,
            rebalance_timeout_ms=5000,
            member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[P(name=n, metadata=SUB) for n in protocols],
        )
    )


@pytest.mark.parametrize("protocols", [["range", "range"], ["range", "range", "roundrobin"]])
def test_join_group_listing_one_protocol_twice_completes_the_rebalance(module_broker, protocols: list[str]) -> None:
    """A member listing "range" twice (fuzz seed 7, inputs 6423 and 1634) supports "range": the rebalance elects it.
    The group counted a protocol once per entry, so "range" was not supported by every member: alone, the rebalance
    failed with `ValueError: member ... supports none of []`; beside "roundrobin", the member's second choice won."""
    group = f"fuzz-dup-protocols-{len(protocols)}"
    with WireClient(module_broker.host, module_broker.port, timeout=30) as c:
        # what every client does first; it also creates __consumer_offsets
        assert c.request(REQUEST_CLASSES[FIND_COORDINATOR][0](key=group)).error_code == NONE
        first = join(c, group, "", protocols)
        assert first.error_code == MEMBER_ID_REQUIRED, first
        resp = join(c, group, first.member_id, protocols)
        assert resp.error_code == NONE, resp
        assert resp.protocol_name == "range" and resp.leader == resp.member_id == first.member_id, resp
        A = SyncGroupRequest.SyncGroupRequestAssignment
        sync = c.request(
            SyncGroupRequest[3](
                group_id=group,
                generation_id=resp.generation_id,
                member_id=resp.member_id,
                group_instance_id=None,
                assignments=[A(member_id=resp.member_id, assignment=b"")],
            )
        )
        assert sync.error_code == NONE, sync
    out = module_broker.output()
    assert "supports none of" not in out and "Traceback" not in out, module_broker.tail(40)


def test_incremental_alter_configs_with_100k_copies_of_one_config_answers_invalid_request(module_broker) -> None:
    """IncrementalAlterConfigs v0 naming one config 100,000 times in one resource (fuzz seed 7 index 13733, seed 2
    index 7635) is refused as Kafka refuses it ("Error due to duplicate config keys"). The duplicate check counted
    each name with list.count (quadratic): the broker stopped answering every client for hours."""
    ck.create_topic(module_broker.bootstrap, "fuzz-configs", 1)
    Req = REQUEST_CLASSES[INCREMENTAL_ALTER_CONFIGS]
    R = Req.AlterConfigsResource
    cfg = R.AlterableConfig(name="retention.ms", config_operation=0, value="1000")
    req = Req[0](
        resources=[R(resource_type=2, resource_name="fuzz-configs", configs=[cfg] * 100_000)], validate_only=False
    )
    with WireClient(module_broker.host, module_broker.port, timeout=60) as c:
        resp = c.request(req)
    [res] = resp.responses
    assert res.error_code == INVALID_REQUEST and "duplicate config keys" in res.error_message, res
    with WireClient(module_broker.host, module_broker.port, timeout=30) as c:
        assert c.api_versions(0).error_code == NONE


def test_create_partitions_with_10000_unknown_broker_ids_is_answered(module_broker) -> None:
    """Fuzz seed 6, input 106202: an assignment of 10,000 broker ids made the refusal's message longer than a v0
    response's int16-length string, so encoding the answer raised and the connection closed with a traceback."""
    ck.create_topic(module_broker.bootstrap, "fz-grow", 1)
    CP = REQUEST_CLASSES[37]  # CreatePartitions
    T = CP.CreatePartitionsTopic
    A = T.CreatePartitionsAssignment
    req = CP[0](
        topics=[T(name="fz-grow", count=2, assignments=[A(broker_ids=list(range(1000, 11000)))])],
        timeout_ms=10000,
        validate_only=False,
    )
    mark = len(module_broker.output())
    with WireClient(module_broker.host, module_broker.port, timeout=30) as c:
        [res] = c.request(req).results
    assert res.error_code == 39, res  # INVALID_REPLICA_ASSIGNMENT
    assert res.error_message.startswith("Unknown broker ids in assignment [1000, 1001,")
    assert "(10000 ids)" in res.error_message and len(res.error_message) < 200
    assert "Traceback" not in module_broker.output()[mark:]
