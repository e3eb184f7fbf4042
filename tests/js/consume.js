// kafkajs 2.2.4 reader for tests/integration/test_kafkajs.py.
//
// usage: node consume.js <bootstrap> <topic> <group> <starts-json> <ends-json>
// kafkajs only consumes through a group: it joins <group>, subscribes to <topic>, seeks each partition to its start
// ({"<partition>": offset}) and reads until every partition reaches its end. Prints one JSON line:
// {"<partition>": [[offset, key_b64, value_b64, [[header key, value_b64], ...], timestamp], ...]}.
'use strict'

const { Kafka, logLevel } = require('kafkajs')

const TIMEOUT_MS = 90000
const b64 = (b) => (b === null || b === undefined ? null : Buffer.from(b).toString('base64'))

async function main () {
  const [bootstrap, topic, group, startsJson, endsJson] = process.argv.slice(2)
  const starts = JSON.parse(startsJson)
  const ends = JSON.parse(endsJson)
  const out = {}
  const next = {}
  for (const p of Object.keys(ends)) { out[p] = []; next[p] = starts[p] }
  const kafka = new Kafka({ clientId: 'strata-it-kafkajs-reader', brokers: [bootstrap], logLevel: logLevel.ERROR })
  const consumer = kafka.consumer({ groupId: group, sessionTimeout: 30000, heartbeatInterval: 1000, maxWaitTimeInMs: 200 })
  const done = () => Object.keys(ends).every(p => next[p] >= ends[p])
  let finish
  const finished = new Promise(resolve => { finish = resolve })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachBatch: async ({ batch }) => {
      const p = String(batch.partition)
      for (const m of batch.messages) {
        const off = Number(m.offset)
        if (off < next[p] || off >= ends[p]) continue
        if (off !== next[p]) throw new Error(`partition ${p}: offset ${off} after ${next[p] - 1}`)
        const headers = Object.entries(m.headers || {}).flatMap(([k, v]) =>
          (Array.isArray(v) ? v : [v]).map(x => [k, b64(x)]))
        out[p].push([off, b64(m.key), b64(m.value), headers, Number(m.timestamp)])
        next[p] = off + 1
      }
      if (done()) finish()
    }
  })
  for (const p of Object.keys(starts)) consumer.seek({ topic, partition: Number(p), offset: String(starts[p]) })
  if (done()) finish()
  const timer = setTimeout(() => finish(new Error(`timed out: ${JSON.stringify(next)} of ${JSON.stringify(ends)}`)),
    TIMEOUT_MS)
  const err = await finished
  clearTimeout(timer)
  await consumer.disconnect()
  if (err) throw err
  process.stdout.write(JSON.stringify(out) + '\n')
}

main().catch(e => { console.error(e); process.exit(1) })
