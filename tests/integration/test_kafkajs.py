"""kafkajs 2.2.4 (node, tests/js/produce.js) against Strata.

kafkajs creates the topic (admin ``createTopics``), produces 10,000 records with binary keys, values, headers and
explicit timestamps to explicit partitions, and checks offsets with its admin ``fetchTopicOffsets`` and
``fetchTopicOffsetsByTimestamp``. Then every partition is read back from offset 0 and from the offset its
timestamp lookup gave, both by kafkajs itself (tests/js/consume.js: its consumer always joins a group; it seeks
each partition) and by confluent-kafka (``assign``); the records must match byte for byte at consecutive offsets.

Codecs: kafkajs implements only gzip natively; snappy, lz4 and zstd need third-party codec plugins
(kafkajs-snappy, kafkajs-lz4, @kafkajs/zstd) that are not part of its distribution, so only none and gzip are
tested here (librdkafka/kafka-python/aiokafka cover the other codecs).
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from tests.support import ck
from tests.support.kafka_wire import assert_stored_codec
from tests.support.records import Rec, assert_partition_matches, by_partition, gen_records, past_ts_base

JS_DIR = Path(__file__).resolve().parents[1] / "js"
N = 10_000
PARTITIONS = 3
CODECS = ["none", "gzip"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def run_node(spec: dict, tmp_path: Path) -> dict:
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    assert (JS_DIR / "node_modules" / "kafkajs").is_dir(), "run `make node-deps` (npm install in tests/js)"
    proc = subprocess.run(
        ["node", str(JS_DIR / "produce.js"), str(spec_path)], cwd=JS_DIR, capture_output=True, timeout=120, check=False
    )
    assert proc.returncode == 0, f"node exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-4000:]}"
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def kafkajs_read(bs: str, topic: str, group: str, starts: dict[int, int], ends: dict[int, int]) -> dict[int, list[Rec]]:
    proc = subprocess.run(
        ["node", str(JS_DIR / "consume.js"), bs, topic, group, json.dumps(starts), json.dumps(ends)],
        cwd=JS_DIR,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"node exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-4000:]}"
    raw = json.loads(proc.stdout.decode().strip().splitlines()[-1])

    def unb64(x: str | None) -> bytes | None:
        return None if x is None else base64.b64decode(x)

    def header(k: str, v: str | None) -> tuple[str, bytes]:
        value = unb64(v)
        assert value is not None, f"header {k!r}: null value"  # the records produced have no null header values
        return k, value

    return {
        int(p): [
            Rec(
                partition=int(p),
                key=unb64(k),
                value=unb64(v),
                headers=tuple(header(hk, hv) for hk, hv in h),
                timestamp=ts,
                offset=off,
            )
            for off, k, v, h, ts in recs
        ]
        for p, recs in raw.items()
    }


@pytest.mark.parametrize("codec", CODECS)
def test_produce_with_kafkajs_read_back(module_broker, tmp_path, codec):
    bs = module_broker.bootstrap
    topic = f"kjs-{codec}"
    ts_base = past_ts_base(N)
    records = gen_records(N, PARTITIONS, seed=400 + CODECS.index(codec), ts_base=ts_base, tag=codec)
    exp = by_partition(records)
    mid_ts = ts_base + N * 3 // 5
    after_ts = ts_base + N + 5
    spec = {
        "brokers": [bs],
        "topic": topic,
        "partitions": PARTITIONS,
        "codec": codec,
        "chunk": 1000,
        "records": [
            {
                "p": r.partition,
                "k": b64(r.key),
                "v": b64(r.value),
                "h": [[k, b64(v)] for k, v in r.headers],
                "ts": r.timestamp,
            }
            for r in records
        ],
        "timestamps": [mid_ts, after_ts],
    }
    out = run_node(spec, tmp_path)
    assert out["created"] is True

    # every send was acknowledged at the next offset of its partition
    next_off = {p: 0 for p in range(PARTITIONS)}
    for p, base, count in out["sends"]:
        assert base == next_off[p], f"partition {p}: batch acknowledged at {base}, expected {next_off[p]}"
        next_off[p] += count
    assert next_off == {p: len(v) for p, v in exp.items()}

    # kafkajs admin: fetchTopicOffsets (ListOffsets -2/-1)
    offsets = {o["partition"]: (o["low"], o["high"]) for o in out["offsets"]}
    assert offsets == {p: (0, len(v)) for p, v in exp.items()}

    # read back with librdkafka, by partition, from 0
    got = {p: ck.read_partition(bs, topic, p, 0, len(v)) for p, v in exp.items()}
    for p, recs in exp.items():
        assert_partition_matches(recs, got[p], p)

    # kafkajs admin: fetchTopicOffsetsByTimestamp (ListOffsets by time; kafkajs maps "none" (-1) to the high mark)
    mid = {o["partition"]: o["offset"] for o in out["byTimestamp"][0]}
    after = {o["partition"]: o["offset"] for o in out["byTimestamp"][1]}
    assert mid == {p: next(r.offset for r in got[p] if r.timestamp >= mid_ts) for p in exp}
    assert after == {p: len(v) for p, v in exp.items()}
    for p, off in mid.items():
        tail = ck.read_partition(bs, topic, p, off, len(exp[p]) - off)
        assert_partition_matches(exp[p][off:], tail, p, off)

    # read back with kafkajs itself: from 0, and from the offsets of the timestamp lookup
    ends = {p: len(v) for p, v in exp.items()}
    for label, starts in (("zero", {p: 0 for p in exp}), ("ts", mid)):
        got_js = kafkajs_read(bs, topic, f"kjs-{codec}-{label}", starts, ends)
        for p, recs in exp.items():
            assert_partition_matches(recs[starts[p] :], got_js[p], p, starts[p])

    assert_stored_codec(bs, topic, PARTITIONS, codec)
