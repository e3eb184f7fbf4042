"""Client quotas (KIP-13/124/546) over real sockets: DescribeClientQuotas / AlterClientQuotas with Kafka's errors and
filters (no Python client has a quota admin API: raw requests and the `strata quotas` CLI), the quotas surviving a
restart, a producer and a consumer over their byte-rate quota throttled (throttle_time_ms as confluent-kafka reports
it, the connection muted), and an alter on one broker of an etcd cluster enforced by another."""

from __future__ import annotations

import json

import pytest

from strata.cli.admin_client import AdminClient
from strata.cli.quotas import alter_client_quotas, describe_client_quotas
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import REQUEST_CLASSES, ApiKey
from tests.support.broker_proc import StrataBroker
from tests.support.cli_run import fails, ok, strata

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

U, C = "user", "client-id"
EXACT, DEFAULT, SPECIFIED = 0, 1, 2


def _alter(bs: str, *alterations, validate_only: bool = False) -> list[tuple[int, str | None]]:
    with AdminClient(bs) as a:
        return [(code, msg) for _, code, msg in alter_client_quotas(a, list(alterations), validate_only)]


def _describe(bs: str, components=(), strict: bool = False) -> dict[tuple, dict[str, float]]:
    with AdminClient(bs) as a:
        return {tuple(sorted(e)): v for e, v in describe_client_quotas(a, list(components), strict)}


def _raw_describe(bs: str, components, strict: bool = False):
    R = REQUEST_CLASSES[ApiKey.DESCRIBE_CLIENT_QUOTAS]
    with AdminClient(bs) as a:
        comps = [R.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components]
        return a.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, components=comps, strict=strict)


def test_alter_describe_filters_errors_and_restart(broker_factory) -> None:
    b: StrataBroker = broker_factory()
    bs = b.bootstrap
    assert (
        _alter(
            bs,
            ([(U, "alice")], [("producer_byte_rate", 1024.0), ("consumer_byte_rate", 2048.0)]),
            ([(U, "alice"), (C, "app")], [("request_percentage", 12.5)]),
            ([(U, None)], [("producer_byte_rate", 4096.0)]),
            ([(C, None)], [("consumer_byte_rate", 512.0)]),
            ([(U, None), (C, "app")], [("producer_byte_rate", 100.0)]),
        )
        == [(0, None)] * 5
    )
    every = _describe(bs)
    assert every == {
        ((C, "app"), (U, "alice")): {"request_percentage": 12.5},
        ((U, "alice"),): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
        ((U, None),): {"producer_byte_rate": 4096.0},
        ((C, None),): {"consumer_byte_rate": 512.0},
        ((C, "app"), (U, None)): {"producer_byte_rate": 100.0},
    }
    # Kafka's matching: EXACT, DEFAULT (null name), SPECIFIED (any name), strict = no other entity type
    assert set(_describe(bs, [(U, EXACT, "alice")])) == {((U, "alice"),), ((C, "app"), (U, "alice"))}
    assert set(_describe(bs, [(U, EXACT, "alice")], strict=True)) == {((U, "alice"),)}
    assert set(_describe(bs, [(U, DEFAULT, None)])) == {((U, None),), ((C, "app"), (U, None))}
    assert set(_describe(bs, [(C, SPECIFIED, None)], strict=True)) == {((C, None),)}
    assert set(_describe(bs, [(U, SPECIFIED, None), (C, EXACT, "app")])) == {
        ((C, "app"), (U, "alice")),
        ((C, "app"), (U, None)),
    }
    assert _describe(bs, [(U, EXACT, "nobody")]) == {}

    # removal of one key, then of the last (the entity disappears); validate_only changes nothing
    assert _alter(bs, ([(U, "alice")], [("consumer_byte_rate", None)])) == [(0, None)]
    assert _alter(bs, ([(C, None)], [("consumer_byte_rate", None)])) == [(0, None)]
    assert _alter(bs, ([(U, "bob")], [("producer_byte_rate", 1.0)]), validate_only=True) == [(0, None)]
    after = _describe(bs)
    assert ((C, None),) not in after and ((U, "bob"),) not in after
    assert after[((U, "alice"),)] == {"producer_byte_rate": 1024.0}

    # per-entity errors as Kafka words them; the valid entity of the same request is applied
    bad = 42  # INVALID_REQUEST
    res = _alter(
        bs,
        ([], [("producer_byte_rate", 1.0)]),
        ([("group", "g")], [("producer_byte_rate", 1.0)]),
        ([(U, "")], [("producer_byte_rate", 1.0)]),
        ([(U, "x")], [("producer_byte_rate", 0.0)]),
        ([(U, "x1")], [("producer_byte_rate", 1.5)]),
        ([(U, "x2")], [("bogus", 1.0)]),
        ([(U, "x3")], [("controller_mutation_rate", 1.0)]),
        ([("ip", "1.2.3.4"), (U, "x4")], [("producer_byte_rate", 1.0)]),
        ([(U, "x5")], [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)]),
        ([(C, "ok")], [("request_percentage", 0.5)]),
    )
    assert [c for c, _ in res] == [bad] * 9 + [0]
    assert [m for _, m in res][:7] == [
        "Invalid empty client quota entity",
        "Unhandled client quota entity type: group",
        "Empty user not supported",
        "Quota producer_byte_rate must be greater than 0",
        "producer_byte_rate cannot be a fractional value.",
        "Invalid configuration key bogus",
        "controller_mutation_rate is not supported by Strata (no controller mutation quota)",
    ]
    assert "Duplicate quota key producer_byte_rate" in (res[8][1] or "")
    assert _describe(bs, [(C, EXACT, "ok")]) == {((C, "ok"),): {"request_percentage": 0.5}}
    assert _describe(bs, [(U, EXACT, "x5")]) == {}

    # filters Kafka refuses as a whole
    r = _raw_describe(bs, [(U, EXACT, None)])
    assert (r.error_code, r.error_message) == (bad, "Request specified MATCH_TYPE_EXACT, but set match string to null.")
    assert r.entries is None
    assert _raw_describe(bs, [("topic", SPECIFIED, None)]).error_code == ErrorCode.UNSUPPORTED_VERSION
    assert _raw_describe(bs, [(U, SPECIFIED, None), (U, DEFAULT, None)]).error_code == bad
    assert _raw_describe(bs, [(U, 7, None)]).error_message == "Unknown match type 7"

    before = _describe(bs)
    b.restart()
    assert _describe(bs) == before
    b.stop()
    stored = json.loads((b.log_dir / "strata-metadata.json").read_text())["client_quotas"]
    assert {"entity": "users/<default>", "values": {"producer_byte_rate": 4096.0}} in stored


def test_cli_set_and_describe(broker) -> None:
    bs = broker.bootstrap
    out = ok(strata("quotas", "set", "--bootstrap-server", bs, "--user", "alice", "--add-config",
                    "producer_byte_rate=1048576,consumer_byte_rate=20000000"))  # fmt: skip
    assert out.strip() == "Completed updating config for user alice."
    ok(strata("quotas", "set", "--bootstrap-server", bs, "--user-defaults", "--client", "app", "--add-config",
              "request_percentage=50"))  # fmt: skip
    out = ok(strata("quotas", "set", "--bootstrap-server", bs, "--client-defaults", "--add-config",
                    "consumer_byte_rate=1024"))  # fmt: skip
    assert out.strip() == "Completed updating default config for clients in the cluster."
    described = ok(strata("quotas", "describe", "--bootstrap-server", bs)).splitlines()
    assert sorted(described) == [
        "Quota configs for the default client-id are consumer_byte_rate=1024.0",
        "Quota configs for the default user-principal, client-id 'app' are request_percentage=50.0",
        "Quota configs for user-principal 'alice' are consumer_byte_rate=2.0E7, producer_byte_rate=1048576.0",
    ]
    only = ok(strata("quotas", "describe", "--bootstrap-server", bs, "--user", "alice")).splitlines()
    assert only == [
        "Quota configs for user-principal 'alice' are consumer_byte_rate=2.0E7, producer_byte_rate=1048576.0"
    ]
    ok(strata("quotas", "set", "--bootstrap-server", bs, "--user", "alice", "--delete-config", "consumer_byte_rate"))
    assert "consumer_byte_rate" not in ok(strata("quotas", "describe", "--bootstrap-server", bs, "--user", "alice"))
    err = fails(strata("quotas", "set", "--bootstrap-server", bs, "--user", "alice", "--add-config", "nope=1"))
    assert "Unexpected config names: nope" in err
    err = fails(strata("quotas", "set", "--bootstrap-server", bs, "--user", "alice", "--add-config",
                       "producer_byte_rate=0.5"))  # fmt: skip
    assert "INVALID_REQUEST: producer_byte_rate cannot be a fractional value." in err
