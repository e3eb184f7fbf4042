"""Client quota resolution in Kafka's precedence order, sensor sharing per quota entity, Kafka's sampled rate and
throttle time (on explicit clocks), the store keys, and the AlterClientQuotas / DescribeClientQuotas rules."""

from __future__ import annotations

import pytest

from strata.broker.security.client_quotas import (
    CLIENT_ID,
    DEFAULT,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    ClientQuotaManager,
    QuotaEntity,
    QuotaRequestError,
    SampledRate,
    check_quota_value,
    entity_from_wire,
    parse_filter,
)


def manager(**entities: float) -> ClientQuotaManager:
    names = {
        "u_c": QuotaEntity("alice", "app"),
        "u_dc": QuotaEntity("alice", DEFAULT),
        "u": QuotaEntity("alice", ""),
        "du_c": QuotaEntity(DEFAULT, "app"),
        "du_dc": QuotaEntity(DEFAULT, DEFAULT),
        "du": QuotaEntity(DEFAULT, ""),
        "c": QuotaEntity("", "app"),
        "dc": QuotaEntity("", DEFAULT),
    }
    m = ClientQuotaManager(PRODUCER_BYTE_RATE)
    m.update_configs({names[k]: {PRODUCER_BYTE_RATE: v} for k, v in entities.items()})
    return m


def test_precedence_most_specific_first() -> None:
    order = ["u_c", "u_dc", "u", "du_c", "du_dc", "du", "c", "dc"]
    for i, name in enumerate(order):
        m = manager(**{k: float(100 + j) for j, k in enumerate(order[i:])})
        found = m.quota("alice", "app")
        assert found is not None and found[0] == 100.0, name
    assert manager().quota("alice", "app") is None
    assert manager(u=5).quota("bob", "app") is None  # another user's quota does not apply


def test_sensor_keys_follow_the_entity() -> None:
    assert manager(u=1).quota("alice", "x") == (1.0, ("alice", ""))  # a user quota: all its clients share
    assert manager(u_c=1).quota("alice", "app") == (1.0, ("alice", "app"))
    assert manager(du=1).quota("bob", "x") == (1.0, ("bob", ""))  # the default user quota: per user
    assert manager(dc=1).quota("alice", "y") == (1.0, ("", "y"))


def test_throttle_time_is_kafkas_excess_over_the_quota() -> None:
    m = manager(u=1000)  # 11 windows of 1 s; the rate divides by at least one window
    t0 = 100.0
    assert m.record_and_throttle_ms("alice", "a", 1000, now=t0) == 0  # one window's worth: within quota
    # 5,000 bytes within 0.5 s, over a span of 1.5 s (Kafka adds the missing whole window to the elapsed time):
    # (5000 / 1.5 - 1000) / 1000 * 1.5 s = 3.5 s
    assert m.record_and_throttle_ms("alice", "b", 4000, now=t0 + 0.5) == 3500
    # the other client of the same user shares the sensor; another user is unaffected
    assert m.throttle_ms("alice", "c", now=t0 + 0.5) == 3500
    assert m.record_and_throttle_ms("bob", "c", 10**6, now=t0 + 0.5) == 0
    # waiting out the throttle time brings the rate back to the quota: 5,000 B over 5 s
    assert m.throttle_ms("alice", "a", now=t0 + 4.9) > 0
    assert m.throttle_ms("alice", "a", now=t0 + 5.0) == 0


def test_kafkas_floor_of_n_minus_one_windows() -> None:
    r = SampledRate(11, 1.0)  # Kafka's Rate: at least 10 windows
    r.record(100, 0.0)
    assert r.window_span(0.0) == 10.0
    r.record(100, 10.5)
    assert r.window_span(10.5) == 10.5  # the first sample is kept (its last event is < 11 windows old)
    assert r.measure(10.5) == 200 / 10.5
    assert r.measure(11.0) == 100 / 10.5  # now it has expired: only the second counts, from its start
    assert r.measure(30.0) == 0.0  # nothing recorded for 11 windows: every sample expired
    assert SampledRate(11, 1.0, floor_windows=1).window_span(0.0) == 1.0


def _achieved(m: ClientQuotaManager, size: int, duration: float) -> list[tuple[float, int]]:
    """A client that sends `size` bytes as soon as its throttle ends, on a simulated clock: (time, bytes) sent."""
    now, sent = 0.0, []
    while now < duration:
        sent.append((now, size))
        now += 0.002 + m.record_and_throttle_ms("alice", "a", size, now=now) / 1000
    return sent


def test_steady_rate_stays_at_the_quota_without_bursts() -> None:
    """Over any 20 s the client gets the quota within a few %: no burst of ten windows' worth at the start, none
    every ~11 s after it (what Kafka's floor of N - 1 windows produces)."""
    quota = 4 << 20
    sent = _achieved(manager(u=quota), 1 << 20, 120.0)
    for start in range(0, 100, 3):
        got = sum(n for t, n in sent if start <= t < start + 20) / 20
        assert abs(got / quota - 1) < 0.05, (start, got / quota)


def test_unrecord_and_max_value_in_window() -> None:
    m = manager(u=1000)
    assert m.record_and_throttle_ms("alice", "a", 20000, now=1.0) > 0
    m.unrecord("alice", "a", 20000, now=1.0)
    assert m.throttle_ms("alice", "a", now=1.0) == 0
    assert m.max_value_in_window("alice", "a") == 1000  # one window's worth
    assert manager().max_value_in_window("alice", "a") is None


def test_request_quota_throttle_is_bounded() -> None:
    m = ClientQuotaManager(REQUEST_PERCENTAGE, max_throttle_ms=1000)
    m.update_configs({QuotaEntity("", DEFAULT): {REQUEST_PERCENTAGE: 1.0}})
    assert m.record_and_throttle_ms("u", "c", 50.0, now=0.0) == 1000  # 50 %-seconds in 1 s: 50 % > 1 %


def test_new_configs_replace_the_old_at_once() -> None:
    m = manager(u=10)
    assert m.record_and_throttle_ms("alice", "a", 1000, now=0.0) > 0
    m.update_configs({QuotaEntity("alice", ""): {PRODUCER_BYTE_RATE: 10**9}})
    assert m.record_and_throttle_ms("alice", "a", 1000, now=0.0) == 0
    m.update_configs({QuotaEntity("alice", ""): {"consumer_byte_rate": 1}})  # another quota type: unlimited here
    assert m.quota("alice", "a") is None
    assert not m.enabled


def test_store_keys_sanitize_names() -> None:
    for e in (
        QuotaEntity("alice", ""),
        QuotaEntity(DEFAULT, "app/1"),
        QuotaEntity("<default>", DEFAULT),
        QuotaEntity("", "a b%"),
    ):
        assert QuotaEntity.from_store_key(e.store_key()) == e
    assert QuotaEntity("<default>", "").store_key() == "users/%3Cdefault%3E"
    assert QuotaEntity(DEFAULT, "").store_key() == "users/<default>"


def test_alter_validation_as_kafka() -> None:
    assert entity_from_wire([(USER, "a"), (CLIENT_ID, None)]) == QuotaEntity("a", DEFAULT)
    assert entity_from_wire([(USER, "a"), (USER, "b")]) == QuotaEntity("b", "")  # a map: the last name wins
    for comps, msg in (
        ([], "Invalid empty client quota entity"),
        ([("x", "a")], "Unhandled client quota entity type: x"),
        ([(CLIENT_ID, "")], "Empty client-id not supported"),
    ):
        with pytest.raises(QuotaRequestError, match=msg):
            entity_from_wire(comps)
    check_quota_value("request_percentage", 0.5)
    check_quota_value("producer_byte_rate", 2.0**62)
    for key, value, msg in (
        ("producer_byte_rate", -1.0, "must be greater than 0"),
        ("consumer_byte_rate", 1.25, "cannot be a fractional value"),
        ("consumer_byte_rate", 2.0**64, "too large for a LONG"),
        ("request_percentage", float("nan"), "must be greater than 0"),
        ("x", 1.0, "Invalid configuration key x"),
    ):
        with pytest.raises(QuotaRequestError, match=msg):
            check_quota_value(key, value)


def test_describe_filters_as_kafka() -> None:
    alice_app = QuotaEntity("alice", "app")
    f = parse_filter([(USER, MATCH_EXACT, "alice")], strict=False)
    assert f.matches(alice_app) and f.matches(QuotaEntity("alice", "")) and not f.matches(QuotaEntity("bob", ""))
    assert not parse_filter([(USER, MATCH_EXACT, "alice")], strict=True).matches(alice_app)
    assert parse_filter([(CLIENT_ID, MATCH_DEFAULT, None)], False).matches(QuotaEntity(DEFAULT, DEFAULT))
    assert not parse_filter([(CLIENT_ID, MATCH_SPECIFIED, None)], False).matches(QuotaEntity("a", ""))
    assert parse_filter([], strict=False).matches(alice_app)
    assert not parse_filter([], strict=True).matches(alice_app)
    with pytest.raises(QuotaRequestError) as e:
        parse_filter([("ip", MATCH_SPECIFIED, None), (USER, MATCH_SPECIFIED, None)], False)
    assert e.value.code == 42
    with pytest.raises(QuotaRequestError) as e:
        parse_filter([("group", MATCH_SPECIFIED, None)], False)
    assert e.value.code == 35
