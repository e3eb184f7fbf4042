"""`strata groups reset-offsets` (by datetime, shift-by, duration, to-current, --all-topics) and `strata groups
delete-offsets` (kafka-consumer-groups.sh --reset-offsets / --delete-offsets) against a live broker: the plan
printed, and what is committed afterwards as another client (confluent-kafka) reads it."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support import ck
from tests.support.cli_run import fails, ok, strata
from tests.support.records import Rec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOPIC = "go-a"
N = 10


@pytest.fixture(scope="module")
def base_ts(module_broker) -> int:
    """Two partitions of N records each, record i stamped base + i minutes, base one hour ago."""
    base = int(time.time() * 1000) - 3_600_000
    ck.create_topic(module_broker.bootstrap, TOPIC, 2)
    ck.produce_all(
        module_broker.bootstrap,
        TOPIC,
        [Rec(p, None, b"v%d" % i, (), base + i * 60_000) for p in (0, 1) for i in range(N)],
    )
    return base


def groups(b, *args: str):
    return strata("groups", "--bootstrap-server", b.bootstrap, *args)


def reset(b, group: str, *args: str):
    return groups(b, "reset-offsets", "--group", group, *args)


def committed(b, group: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, **ck.QUIET})
    try:
        got = c.committed([TopicPartition(TOPIC, p) for p in (0, 1)], timeout=30)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def plan(out: str) -> dict[int, int]:
    rows = [line.split() for line in out.splitlines() if line.startswith("g-")]
    return {int(r[2]): int(r[3]) for r in rows}


def test_reset_by_shift_datetime_duration_and_current(module_broker, base_ts):
    b = module_broker
    g = "g-reset"
    ok(reset(b, g, "--topic", TOPIC, "--to-offset", "3", "--execute"))
    assert committed(b, g) == {0: 3, 1: 3}

    out = ok(reset(b, g, "--topic", f"{TOPIC}:0", "--shift-by", "4"))  # dry run: printed, not committed
    assert plan(out) == {0: 7} and "dry run" in out and committed(b, g) == {0: 3, 1: 3}
    ok(reset(b, g, "--topic", f"{TOPIC}:0", "--shift-by", "4", "--execute"))
    assert committed(b, g) == {0: 7, 1: 3}

    r = reset(b, g, "--topic", TOPIC, "--shift-by", "-5", "--execute")  # 7-5=2, 3-5 clamped to the log start
    assert plan(ok(r)) == {0: 2, 1: 0}
    assert (
        "New offset (-2) is lower than earliest offset for topic partition go-a-1. Value will be set to 0" in r.stderr
    )

    at = datetime.fromtimestamp((base_ts + 2 * 60_000 + 30_000) / 1000, UTC).isoformat(timespec="milliseconds")
    ok(reset(b, g, "--topic", TOPIC, "--to-datetime", at.replace("+00:00", "Z"), "--execute"))
    assert committed(b, g) == {0: 3, 1: 3}  # first record at or after minute 2.5: minute 3

    ok(reset(b, g, "--topic", TOPIC, "--by-duration", "PT55M30S", "--execute"))
    assert committed(b, g) == {0: 5, 1: 5}  # an hour ago + 4.5 min (- the seconds this test took): record 5

    ok(reset(b, g, "--topic", TOPIC, "--to-datetime", str(int(time.time() * 1000)), "--execute"))
    assert committed(b, g) == {0: N, 1: N}  # nothing that late: the log end

    assert plan(ok(reset(b, g, "--topic", TOPIC, "--to-current"))) == {0: N, 1: N}


def test_reset_all_topics_and_errors(module_broker, base_ts):
    b = module_broker
    g = "g-all"
    ok(reset(b, g, "--topic", f"{TOPIC}:1", "--to-offset", "2", "--execute"))
    out = ok(reset(b, g, "--all-topics", "--to-latest", "--execute"))
    assert plan(out) == {1: N}  # only what the group has committed
    assert committed(b, g) == {1: N}

    err = fails(reset(b, "g-none", "--topic", TOPIC, "--shift-by", "1"), 1)
    assert err.endswith("Cannot shift offset for partition go-a-0 since there is no current committed offset")
    assert "Error parsing duration 'an hour'" in fails(reset(b, g, "--topic", TOPIC, "--by-duration", "an hour"), 1)
    assert "Error parsing timestamp" in fails(reset(b, g, "--topic", TOPIC, "--to-datetime", "noon"), 1)


def test_delete_offsets(module_broker, base_ts):
    b = module_broker
    g = "g-del"
    ok(reset(b, g, "--topic", TOPIC, "--to-offset", "4", "--execute"))
    out = ok(groups(b, "delete-offsets", "--group", g, "--topic", f"{TOPIC}:0"))
    lines = out.splitlines()
    assert lines[0] == f"Request succeed for deleting offsets with topic {TOPIC}:0 group {g}"
    assert [line.split() for line in lines[2:]] == [["TOPIC", "PARTITION", "STATUS"], [TOPIC, "0", "Successful"]]
    assert committed(b, g) == {1: 4}
    ok(groups(b, "delete-offsets", "--group", g, "--topic", TOPIC))
    assert committed(b, g) == {}
    err = fails(groups(b, "delete-offsets", "--group", "g-never", "--topic", TOPIC), 1)
    assert err == "strata groups: error: 'g-never' does not exist."
