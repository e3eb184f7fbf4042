// kafkajs 2.2.4 driver for tests/integration/test_kafkajs.py.
//
// usage: node produce.js <spec.json>
// spec: { brokers: ["127.0.0.1:port"], topic, partitions, codec: "none"|"gzip", chunk, ssl_ca?, sasl?,
//         records: [{ p, k, v, h: [[name, b64]], ts }] (k/v base64), timestamps: [ms, ...] }
// Creates the topic with the admin client, produces every record (chunk by chunk, in order, acks=-1), then asks
// the admin client for fetchTopicOffsets and fetchTopicOffsetsByTimestamp for each spec timestamp.
// Prints one JSON object on stdout: { created, sends: [[partition, baseOffset, count], ...], offsets, byTimestamp }.
'use strict'

const fs = require('fs')
const { Kafka, CompressionTypes, logLevel } = require('kafkajs')

async function main () {
  const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'))
  const kafka = new Kafka({
    clientId: 'strata-it-kafkajs',
    brokers: spec.brokers,
    logLevel: logLevel.ERROR,
    connectionTimeout: 5000,
    requestTimeout: 30000,
    retry: { retries: 3 },
    // optional security (test_security_listeners.py): a CA PEM and kafkajs' sasl option
    ...(spec.ssl_ca ? { ssl: { ca: [spec.ssl_ca] } } : {}),
    ...(spec.sasl ? { sasl: spec.sasl } : {})
  })
  const admin = kafka.admin()
  await admin.connect()
  const created = await admin.createTopics({
    topics: [{ topic: spec.topic, numPartitions: spec.partitions, replicationFactor: 1 }],
    waitForLeaders: true
  })

  const producer = kafka.producer({ allowAutoTopicCreation: false, idempotent: false })
  await producer.connect()
  const compression = spec.codec === 'gzip' ? CompressionTypes.GZIP : CompressionTypes.None
  const sends = []
  const chunk = spec.chunk || 1000
  for (let i = 0; i < spec.records.length; i += chunk) {
    const slice = spec.records.slice(i, i + chunk)
    const messages = slice.map(r => {
      const headers = {}
      for (const [name, b64] of r.h) headers[name] = Buffer.from(b64, 'base64')
      return {
        partition: r.p,
        key: Buffer.from(r.k, 'base64'),
        value: Buffer.from(r.v, 'base64'),
        headers,
        timestamp: String(r.ts)
      }
    })
    const counts = {}
    for (const r of slice) counts[r.p] = (counts[r.p] || 0) + 1
    const meta = await producer.send({ topic: spec.topic, acks: -1, timeout: 30000, compression, messages })
    for (const m of meta) {
      if (m.errorCode !== 0) throw new Error(`produce error ${m.errorCode} on partition ${m.partition}`)
      sends.push([m.partition, Number(m.baseOffset), counts[m.partition]])
    }
  }
  await producer.disconnect()

  const offsets = (await admin.fetchTopicOffsets(spec.topic)).map(o => ({
    partition: o.partition, low: Number(o.low), high: Number(o.high), offset: Number(o.offset)
  }))
  const byTimestamp = []
  for (const ts of spec.timestamps || []) {
    const res = await admin.fetchTopicOffsetsByTimestamp(spec.topic, ts)
    byTimestamp.push(res.map(o => ({ partition: o.partition, offset: Number(o.offset) })))
  }
  await admin.disconnect()
  process.stdout.write(JSON.stringify({ created, sends, offsets, byTimestamp }) + '\n')
}

main().catch(err => {
  process.stderr.write(`kafkajs driver failed: ${err && err.stack ? err.stack : err}\n`)
  process.exit(1)
})
