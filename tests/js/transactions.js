// kafkajs transactional producer: commit, abort, commit on one partition of an existing topic.
// usage: node transactions.js <bootstrap> <topic> <transactionalId>; prints {"ok": true} when done.
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [bootstrap, topic, transactionalId] = process.argv.slice(2);
  const kafka = new Kafka({ clientId: "strata-it-txn", brokers: [bootstrap], logLevel: logLevel.ERROR });
  const producer = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  try {
    for (const [values, commit] of [[["c1", "c2"], true], [["a1"], false], [["c3"], true]]) {
      const txn = await producer.transaction();
      await txn.send({ topic, messages: values.map((value) => ({ value, partition: 0 })) });
      if (commit) await txn.commit();
      else await txn.abort();
    }
  } finally {
    await producer.disconnect();
  }
  console.log(JSON.stringify({ ok: true }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
