"""Client quota resolution in Kafka's precedence order, sensor sharing per quota entity, and the throttle time."""

from __future__ import annotations

from strata.broker.security.client_quotas import (
    DEFAULT,
    PRODUCER_BYTE_RATE,
    ClientQuotaManager,
    QuotaEntity,
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


def test_throttle_time_is_the_excess_over_the_quota() -> None:
    m = manager(u=1000)
    assert m.record_and_throttle_ms("alice", "a", 500) == 0
    # 5,000 bytes within the first second: (5000/1000 - elapsed) s, elapsed being at most a second or so here
    t = m.record_and_throttle_ms("alice", "b", 4500)
    assert 3000 <= t <= 4000, t
    # the other client of the same user shares the sensor; another user is unaffected
    assert m.record_and_throttle_ms("alice", "c", 1) >= 3000
    assert m.record_and_throttle_ms("bob", "c", 10**6) == 0


def test_new_configs_replace_the_old_at_once() -> None:
    m = manager(u=10)
    assert m.record_and_throttle_ms("alice", "a", 1000) > 0
    m.update_configs({QuotaEntity("alice", ""): {PRODUCER_BYTE_RATE: 10**9}})
    assert m.record_and_throttle_ms("alice", "a", 1000) == 0
    m.update_configs({QuotaEntity("alice", ""): {"consumer_byte_rate": 1}})  # another quota type: unlimited here
    assert m.quota("alice", "a") is None
