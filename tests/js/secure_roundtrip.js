// kafkajs 2.2.4 over a secured listener, for tests/integration/test_security_matrix.py.
//
// usage: node secure_roundtrip.js <spec.json>
// spec: { brokers, topic, partitions, n, group, ssl: { ca, cert?, key? }, sasl?: kafkajs' sasl option, or
//         { mechanism: "oauthbearer", token } for an OAUTHBEARER token handed out by oauthBearerProvider }
// Creates the topic (admin), produces n records "j<i>", consumes them in the group (subscribe, offsets committed
// after each batch), disconnects (LeaveGroup) and prints one JSON line: { "values": [...] }.
'use strict'

const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

async function main () {
  const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'))
  const ssl = { ca: [spec.ssl.ca], ...(spec.ssl.cert ? { cert: spec.ssl.cert, key: spec.ssl.key } : {}) }
  let sasl
  if (spec.sasl && spec.sasl.mechanism === 'oauthbearer') {
    const token = spec.sasl.token
    sasl = { mechanism: 'oauthbearer', oauthBearerProvider: async () => ({ value: token }) }
  } else if (spec.sasl) {
    sasl = spec.sasl
  }
  const kafka = new Kafka({
    clientId: 'secure-roundtrip',
    brokers: spec.brokers,
    ssl,
    ...(sasl ? { sasl } : {}),
    logLevel: logLevel.ERROR,
    connectionTimeout: 10000,
    retry: { initialRetryTime: 100, maxRetryTime: 1000, retries: 20 }
  })

  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic: spec.topic, numPartitions: spec.partitions }], waitForLeaders: true })
  await admin.disconnect()

  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const messages = []
  for (let i = 0; i < spec.n; i++) messages.push({ key: String(i), value: `j${i}` })
  await producer.send({ topic: spec.topic, acks: -1, messages })
  await producer.disconnect()

  const consumer = kafka.consumer({ groupId: spec.group, maxWaitTimeInMs: 100, heartbeatInterval: 500 })
  const values = []
  let done
  const finished = new Promise(resolve => { done = resolve })
  await consumer.connect()
  await consumer.subscribe({ topics: [spec.topic], fromBeginning: true })
  await consumer.run({
    autoCommit: true,
    autoCommitThreshold: 1,
    eachBatch: async ({ batch, resolveOffset, commitOffsetsIfNecessary }) => {
      for (const m of batch.messages) {
        values.push(m.value.toString())
        resolveOffset(m.offset)
      }
      await commitOffsetsIfNecessary()
      if (values.length >= spec.n) done()
    }
  })
  await finished
  await consumer.disconnect()
  process.stdout.write(JSON.stringify({ values }) + '\n')
}

main().catch(err => {
  process.stderr.write(`kafkajs secure roundtrip failed: ${err && err.stack ? err.stack : err}\n`)
  process.exit(1)
})
