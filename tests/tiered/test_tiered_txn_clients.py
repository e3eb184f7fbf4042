"""Tiered transactional data read back READ_COMMITTED from offset 0 by every client (issue 19, "Tests: Tiered").

Two confluent-kafka transactional producers write interleaved transactions, committed and aborted, to one partition
with 4 KiB segments and `local.retention.bytes=1`; the last transaction is a long aborted one whose marker stays in
the active segment. Once every closed segment is in remote storage (LocalTieredStorage) and deleted locally,
confluent-kafka, kafka-python, aiokafka, kafkajs and kcat read the partition from offset 0 at read_committed: each
returns exactly the committed records, in offset order; no aborted record appears. (Spark, broker and direct mode,
reads the same history in tests/pipeline/test_spark_transactions.py.)
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

import pytest

from tests.pipeline.support import consume_all, create_topic, produce_transactions, wait_offloaded
from tests.support.broker_proc import REPO_ROOT
from tests.support.txn_log import read_kafka_python
from tests.tiered.harness import Harness

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TOPIC = "txn-clients"
ROUNDS = [(4 + i % 3, 3 if i % 3 else 0, i % 2 == 1) for i in range(8)] + [(60, 0, False)]
JS_DIR = REPO_ROOT / "tests" / "js"

# kafkajs consumes only through a group; it reads committed records by default (readUncommitted: false)
KAFKAJS = """
const { Kafka, logLevel } = require('kafkajs')
const [bootstrap, topic, want] = process.argv.slice(1)
async function main () {
  const kafka = new Kafka({ clientId: 'txn-tiered', brokers: [bootstrap], logLevel: logLevel.ERROR })
  const consumer = kafka.consumer({ groupId: `txn-tiered-${Date.now()}`, readUncommitted: false, maxWaitTimeInMs: 200 })
  const values = []
  let finish
  const done = new Promise(resolve => { finish = resolve })
  const timer = setTimeout(finish, 90000)
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ message }) => {
      values.push(message.value.toString())
      if (values.length >= Number(want)) finish()
    }
  })
  await done
  clearTimeout(timer)
  await consumer.disconnect()
  console.log(JSON.stringify(values))
}
main().catch(e => { console.error(e); process.exit(1) })
"""


async def _aiokafka(bootstrap: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    await c.start()
    try:
        tp = TopicPartition(TOPIC, 0)
        c.assign([tp])
        await c.seek_to_beginning(tp)
        end = (await c.end_offsets([tp]))[tp]
        values: list[bytes] = []
        deadline = time.monotonic() + 90
        while await c.position(tp) < end and time.monotonic() < deadline:
            for records in (await c.getmany(tp, timeout_ms=200)).values():
                values.extend(r.value for r in records)
        return values
    finally:
        await c.stop()


def _kafkajs(bootstrap: str, want: int) -> list[bytes]:
    assert (JS_DIR / "node_modules" / "kafkajs").is_dir(), "run `make node-deps` (npm install in tests/js)"
    out = subprocess.run(
        ["node", "-e", KAFKAJS, bootstrap, TOPIC, str(want)],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [v.encode() for v in json.loads(out.stdout.strip().splitlines()[-1])]


def _kcat(bootstrap: str) -> list[bytes]:
    out = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", TOPIC, "-p", "0", "-o", "beginning", "-e", "-q"]
        + ["-X", "isolation.level=read_committed", "-f", "%s\\n"],
        capture_output=True,
        timeout=120,
        check=True,
    )
    return out.stdout.splitlines()


@pytest.mark.parametrize("backend_name", ["local"])
def test_every_client_reads_tiered_transactions_read_committed(make_harness):
    h: Harness = make_harness()
    bs = h.broker.bootstrap
    create_topic(
        bs, TOPIC, 1, remote_storage_enable="true", segment_bytes=4096, local_retention_bytes=1, retention_ms=-1
    )
    committed, aborted = produce_transactions(bs, TOPIC, ROUNDS)
    assert len(committed) > 20 and len(aborted) > 60
    hw = h.offset(TOPIC, 0, -1)
    wait_offloaded(bs, TOPIC, 0, at_least=hw - 25)  # all but the active segment only in remote storage
    fetched_before = h.remote_fetches(TOPIC)

    got = {
        "confluent-kafka": [r[3] for r in consume_all(bs, TOPIC, [0], isolation="read_committed")],
        "kafka-python": read_kafka_python(bs, TOPIC, "read_committed", timeout=90)[0],
        "aiokafka": asyncio.run(_aiokafka(bs)),
        "kafkajs": _kafkajs(bs, len(committed)),
        "kcat": _kcat(bs),
    }
    for client, values in got.items():
        assert values == committed, f"{client}: {len(values)} values, expected {len(committed)}"
    assert h.remote_fetches(TOPIC) > fetched_before  # the history came from remote storage
    # READ_UNCOMMITTED sees the aborted records too: they are in the tiered segments
    everything = [r[3] for r in consume_all(bs, TOPIC, [0])]
    assert sorted(everything) == sorted(committed + aborted)
