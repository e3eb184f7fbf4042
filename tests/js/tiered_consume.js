// kafkajs 2.2.4 reader for tests/tiered/test_clients_200mb.py.
//
// usage: node tiered_consume.js <bootstrap> <topic> <group> <ends-json>
// Joins <group> (kafkajs only consumes through a group), subscribes to <topic> from the earliest offset and reads
// every partition up to its end offset ({"<partition>": end}). Per partition it keeps a running sha256 over
// (offset int64 BE, sha256(len key int32 BE, key, len value int32 BE, value)) of each record in offset order --
// the digest tests/tiered/clients_consume.py computes -- and fails on a gap or a duplicate.
// Prints one JSON line: {"<partition>": [count, bytes, hexdigest], "seconds": s}.
'use strict'

const crypto = require('crypto')
const { Kafka, logLevel } = require('kafkajs')

const TIMEOUT_MS = 150000

function recordDigest (key, value) {
  const h = crypto.createHash('sha256')
  for (const part of [key, value]) {
    const len = Buffer.alloc(4)
    if (part === null || part === undefined) {
      len.writeInt32BE(-1)
      h.update(len)
    } else {
      len.writeInt32BE(part.length)
      h.update(len)
      h.update(part)
    }
  }
  return h.digest()
}

async function main () {
  const [bootstrap, topic, group, endsJson] = process.argv.slice(2)
  const ends = JSON.parse(endsJson)
  const state = {}
  for (const p of Object.keys(ends)) state[p] = { h: crypto.createHash('sha256'), next: 0, count: 0, bytes: 0 }
  const started = Date.now()
  const kafka = new Kafka({
    clientId: 'tiered-200mb-kafkajs',
    brokers: [bootstrap],
    logLevel: logLevel.ERROR,
    connectionTimeout: 5000,
    requestTimeout: 30000,
    retry: { initialRetryTime: 100, maxRetryTime: 1000, retries: 50 }
  })
  const consumer = kafka.consumer({
    groupId: group,
    sessionTimeout: 30000,
    rebalanceTimeout: 20000,
    heartbeatInterval: 1000,
    maxWaitTimeInMs: 500,
    maxBytesPerPartition: 1 << 20,
    maxBytes: 8 << 20,
    retry: { initialRetryTime: 100, maxRetryTime: 1000, retries: 50 }
  })
  let finish
  const finished = new Promise(resolve => { finish = resolve })
  let failure = null
  const done = () => Object.keys(ends).every(p => state[p].next >= ends[p])
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: true,
    eachBatch: async ({ batch, heartbeat }) => {
      const st = state[String(batch.partition)]
      for (const m of batch.messages) {
        const off = Number(m.offset)
        if (off !== st.next) { // kafkajs drops records below the fetch offset itself: anything else is a gap/dup
          failure = new Error(`partition ${batch.partition}: offset ${off} where ${st.next} was expected`)
          finish()
          return
        }
        const off8 = Buffer.alloc(8)
        off8.writeBigInt64BE(BigInt(off))
        st.h.update(off8)
        st.h.update(recordDigest(m.key, m.value))
        st.next = off + 1
        st.count += 1
        st.bytes += (m.key ? m.key.length : 0) + (m.value ? m.value.length : 0)
      }
      await heartbeat()
      if (done()) finish()
    }
  })
  const timer = setTimeout(() => {
    failure = new Error(`timed out after ${TIMEOUT_MS} ms at ${JSON.stringify(Object.fromEntries(
      Object.entries(state).map(([p, s]) => [p, s.next])))} of ${endsJson}`)
    finish()
  }, TIMEOUT_MS)
  await finished
  clearTimeout(timer)
  await consumer.disconnect()
  if (failure) throw failure
  const out = {}
  for (const [p, s] of Object.entries(state)) out[p] = [s.count, s.bytes, s.h.digest('hex')]
  out.seconds = (Date.now() - started) / 1000
  process.stdout.write(JSON.stringify(out) + '\n')
}

main().catch(err => {
  process.stderr.write(`kafkajs tiered reader failed: ${err && err.stack ? err.stack : err}\n`)
  process.exit(1)
})
