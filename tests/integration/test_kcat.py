"""kcat 1.7.1 (Debian, static librdkafka 2.0.2: the old librdkafka that chokes on default-valued tagged fields).

kcat has no admin API, so confluent-kafka's AdminClient creates the topics. For each codec (none, gzip, snappy,
lz4, zstd) kcat produces 10,000 keyed text records (``-K '\\t'``) to the two partitions of a topic, one kcat run
per partition with that run's headers (``-H``: kcat applies the same headers to every record of a run). kcat then
reads each partition back (``-C -p N -o 0 -e -J``: a simple consumer, no group) and from a timestamp
(``-Q -t topic:p:ts`` and ``-o s@ts``); keys, values, headers, order and offsets must match.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import replace

import pytest

from tests.support import ck
from tests.support.kafka_wire import LIBRDKAFKA_LZ4_HINT, assert_stored_codec
from tests.support.records import Rec, by_partition, check_roundtrip, gen_records

KCAT = "/usr/bin/kcat"
N = 10_000
PARTITIONS = 2
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def kcat(*args: str, stdin: bytes | None = None, timeout: float = 60.0) -> str:
    proc = subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=timeout, check=False)
    assert proc.returncode == 0, (
        f"kcat {' '.join(args)} exited {proc.returncode}\nstderr: {proc.stderr.decode(errors='replace')[-3000:]}"
    )
    return proc.stdout.decode()


def run_headers(codec: str, partition: int) -> tuple[tuple[str, bytes], ...]:
    return (
        ("codec", codec.encode()),
        ("part", f"p{partition}".encode()),
        ("blob", f"{codec}-{partition}-".encode() * 7),
    )


def kcat_read(bs: str, topic: str, partition: int, start: str, count: int) -> list[Rec]:
    args = ["-C", "-b", bs, "-t", topic, "-p", str(partition), "-o", start, "-e", "-J", "-q"]
    if count:
        args += ["-c", str(count)]
    out = kcat(*args) if count else ""
    recs = []
    for line in out.splitlines():
        m = json.loads(line)
        hdrs = _headers(m.get("headers"))
        recs.append(
            Rec(
                partition=m["partition"],
                key=_b(m["key"]),
                value=_b(m["payload"]),
                headers=hdrs,
                timestamp=m["ts"],
                offset=m["offset"],
            )
        )
    return recs


def _b(s: str | None) -> bytes | None:
    return None if s is None else s.encode()


def _headers(h: object) -> tuple[tuple[str, bytes], ...]:
    # kcat 1.7 prints headers as a flat JSON array ["k1","v1","k2","v2"] (its usage text says an object)
    if not h:
        return ()
    if isinstance(h, dict):
        return tuple((k, v.encode()) for k, v in h.items())
    assert isinstance(h, list) and len(h) % 2 == 0, h
    return tuple((h[i], h[i + 1].encode()) for i in range(0, len(h), 2))


_QUERY = re.compile(r"^(?P<topic>\S+) \[(?P<p>\d+)\] offset (?P<off>-?\d+)", re.MULTILINE)


def kcat_offsets_for_times(bs: str, topic: str, targets: dict[int, int]) -> dict[int, int]:
    args = ["-Q", "-b", bs]
    for p, ts in targets.items():
        args += ["-t", f"{topic}:{p}:{ts}"]
    out = kcat(*args)
    found = {int(m["p"]): int(m["off"]) for m in _QUERY.finditer(out) if m["topic"] == topic}
    assert set(found) == set(targets), f"kcat -Q output not understood: {out!r}"
    return found


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_read_back(module_broker, codec):
    bs = module_broker.bootstrap
    topic = f"kcat-{codec}"
    ck.create_topic(bs, topic, PARTITIONS)

    base = gen_records(N, PARTITIONS, seed=100 + CODECS.index(codec), text=True, headers=False, tag=codec)
    records = [replace(r, headers=run_headers(codec, r.partition)) for r in base]
    for p, recs in by_partition(records).items():
        lines = b"".join(r.key + b"\t" + r.value + b"\n" for r in recs)
        args = [
            "-P",
            "-b",
            bs,
            "-t",
            topic,
            "-p",
            str(p),
            "-K",
            "\t",
            "-X",
            f"compression.codec={codec}",
            "-X",
            "linger.ms=5",
            "-q",
        ]
        for k, v in run_headers(codec, p):
            args += ["-H", f"{k}={v.decode()}"]
        kcat(*args, stdin=lines)

    # metadata listing through kcat itself
    listing = kcat("-L", "-b", bs, "-t", topic)
    assert f'topic "{topic}" with {PARTITIONS} partitions' in listing, listing

    check_roundtrip(
        records,
        read=lambda p, start, count: kcat_read(bs, topic, p, str(start), count),
        lookup_time=lambda targets: kcat_offsets_for_times(bs, topic, targets),
        check_timestamps=False,  # kcat stamps records itself (CreateTime at produce)
    )

    # -o s@<ts>: kcat resolves the timestamp itself (ListOffsets) and starts there
    full = {p: kcat_read(bs, topic, p, "0", len(recs)) for p, recs in by_partition(records).items()}
    for p, got in full.items():
        ts = got[len(got) // 2].timestamp
        first = next(r.offset for r in got if r.timestamp >= ts)
        tail = kcat_read(bs, topic, p, f"s@{ts}", len(got) - first)
        assert [r.offset for r in tail] == list(range(first, len(got)))
        assert [r.value for r in tail] == [r.value for r in got[first:]]

    assert_stored_codec(bs, topic, PARTITIONS, codec, hint=LIBRDKAFKA_LZ4_HINT)
