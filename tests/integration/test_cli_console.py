"""`strata console-producer` and `strata console-consumer` (kafka-console-producer/-consumer.sh) run as a user runs
them against a live broker: keys, headers and null markers read from stdin and checked with another client
(confluent-kafka); Kafka's output formats (print.key/timestamp/headers/partition/offset); where consumption starts
(beginning, offset, timestamp, group position); --max-messages, --timeout-ms; refused options; piping into head."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import ck
from tests.support.broker_proc import REPO_ROOT
from tests.support.cli_run import fails, ok, strata
from tests.support.records import Rec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def produce(b, topic: str, lines: str, *props: str) -> subprocess.CompletedProcess[str]:
    args = ["console-producer", "--bootstrap-server", b.bootstrap, "--topic", topic, "--request-timeout-ms", "30000"]
    for p in props:
        args += ["--property", p]
    return strata(*args, stdin=lines)


def consume(b, *args: str) -> subprocess.CompletedProcess[str]:
    return strata("console-consumer", "--bootstrap-server", b.bootstrap, *args)


def test_producer_parses_keys_headers_and_null_markers(module_broker):
    b = module_broker
    ck.create_topic(b.bootstrap, "con-kh", 1)
    lines = "h1:a,h2:b\tk1\tv1\nNULL\tk2\tNULL\nh3:\tNULL\tv3\n"
    ok(produce(b, "con-kh", lines, "parse.key=true", "parse.headers=true", "null.marker=NULL"))
    got = ck.read_partition(b.bootstrap, "con-kh", 0, 0, 3)
    assert [(r.headers, r.key, r.value) for r in got] == [
        ((("h1", b"a"), ("h2", b"b")), b"k1", b"v1"),
        ((), b"k2", None),
        ((("h3", b""),), None, b"v3"),
    ]


def test_producer_refuses_a_line_without_its_separator(module_broker):
    b = module_broker
    ck.create_topic(b.bootstrap, "con-bad", 1)
    err = fails(produce(b, "con-bad", "no-separator-here\n", "parse.key=true"), 1)
    assert err == "strata console-producer: error: No key separator found on line number 1: 'no-separator-here'"
    err = fails(produce(b, "con-bad", "x\n", "null.marker=\t"), 2)  # null.marker equal to key.separator
    assert err.endswith("null.marker and key.separator may not be equal")
    err = fails(
        strata(
            "console-producer",
            "--bootstrap-server",
            b.bootstrap,
            "--topic",
            "con-bad",
            "--producer-property",
            "linger.mss=5",
        ),
        2,
    )
    assert "unknown or unsupported client property 'linger.mss'" in err


def test_consumer_formats_like_kafka(module_broker):
    b = module_broker
    ck.create_topic(b.bootstrap, "con-fmt", 1)
    ts = 1_700_000_000_000
    ck.produce_all(
        b.bootstrap,
        "con-fmt",
        [
            Rec(0, b"k0", b"v0", (("a", b"1"), ("b", b"2")), ts),
            Rec(0, None, b"v1", (), ts + 1),
            Rec(0, b"k2", None, (("c", None),), ts + 2),
        ],
    )
    out = ok(
        consume(
            b,
            "--topic",
            "con-fmt",
            "--from-beginning",
            "--max-messages",
            "3",
            "--property",
            "print.timestamp=true",
            "--property",
            "print.partition=true",
            "--property",
            "print.offset=true",
            "--property",
            "print.headers=true",
            "--property",
            "print.key=true",
        )
    )
    assert out.splitlines() == [
        f"CreateTime:{ts}\tPartition:0\tOffset:0\ta:1,b:2\tk0\tv0",
        f"CreateTime:{ts + 1}\tPartition:0\tOffset:1\tNO_HEADERS\tnull\tv1",
        f"CreateTime:{ts + 2}\tPartition:0\tOffset:2\tc:null\tk2\tnull",
    ]
    out = ok(
        consume(
            b,
            "--topic",
            "con-fmt",
            "--from-beginning",
            "--max-messages",
            "2",
            "--property",
            "print.key=true",
            "--property",
            "print.value=false",
            "--property",
            "key.separator=|",
            "--property",
            "null.literal=-",
        )
    )
    assert out == "k0\n-\n"


def test_consumer_start_positions_and_exits(module_broker):
    b = module_broker
    ck.create_topic(b.bootstrap, "con-pos", 2)
    base = 1_700_000_100_000
    ck.produce_all(
        b.bootstrap,
        "con-pos",
        [Rec(p, None, f"p{p}-{i}".encode(), (), base + i * 1000) for p in (0, 1) for i in range(5)],
    )

    r = consume(b, "--topic", "con-pos", "--partition", "1", "--offset", "3", "--timeout-ms", "3000")
    assert ok(r).split() == ["p1-3", "p1-4"]
    assert r.stderr.strip().endswith("Processed a total of 2 messages")

    r = consume(b, "--topic", "con-pos", "--from-timestamp", str(base + 3500), "--timeout-ms", "3000")
    assert sorted(ok(r).split()) == ["p0-4", "p1-4"]

    r = consume(b, "--include", "con-p.s", "--from-beginning", "--max-messages", "10")  # a regex over topics
    assert sorted(ok(r).split()) == sorted(f"p{p}-{i}" for p in (0, 1) for i in range(5))

    # latest (the default): nothing to print, --timeout-ms ends the run
    r = consume(b, "--topic", "con-pos", "--timeout-ms", "1500")
    assert ok(r) == "" and "Processed a total of 0 messages" in r.stderr

    # a group resumes where its last run stopped, and `groups describe` sees what it committed
    first = ok(consume(b, "--topic", "con-pos", "--group", "con-g", "--from-beginning", "--max-messages", "4"))
    rest = ok(consume(b, "--topic", "con-pos", "--group", "con-g", "--timeout-ms", "4000"))
    assert sorted(first.split() + rest.split()) == sorted(f"p{p}-{i}" for p in (0, 1) for i in range(5))
    assert len(first.split()) == 4
    desc = ok(strata("groups", "--bootstrap-server", b.bootstrap, "describe", "--group", "con-g"))
    rows = [line.split() for line in desc.splitlines() if line.startswith("con-g ")]
    assert sorted((r[2], r[3]) for r in rows) == [("0", "5"), ("1", "5")]


def test_consumer_refuses_bad_options(module_broker):
    b = module_broker
    assert fails(consume(b, "--topic", "t", "--offset", "3"), 2).endswith(
        "The partition is required when offset is specified."
    )
    assert fails(consume(b, "--partition", "0"), 2).endswith("Exactly one of --include/--topic is required.")
    assert "offset value 'x'" in fails(consume(b, "--topic", "t", "--partition", "0", "--offset", "x"), 2)
    assert "Error parsing timestamp 'yesterday'" in fails(consume(b, "--topic", "t", "--from-timestamp", "yesterday"))
    assert "topic 'con-missing' does not exist" in fails(consume(b, "--topic", "con-missing", "--timeout-ms", "500"))


def test_consumer_piped_into_head_stops_quietly(module_broker):
    b = module_broker
    ck.create_topic(b.bootstrap, "con-pipe", 1)
    ck.produce_all(b.bootstrap, "con-pipe", [Rec(0, None, b"x" * 200) for _ in range(3000)])
    cmd = (
        f"{sys.executable} -m strata console-consumer --bootstrap-server {b.bootstrap} --topic con-pipe "
        "--from-beginning --timeout-ms 5000 | head -n 2"
    )
    r = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], cwd=REPO_ROOT, capture_output=True, text=True, timeout=90, check=False
    )
    assert r.stdout.splitlines() == ["x" * 200] * 2
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr
    assert r.returncode == 141  # SIGPIPE's status, as `cat` would end
