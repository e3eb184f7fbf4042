// kafkajs 2.2.4 consumer-group member for tests/integration/test_groups_clients.py.
//
// usage: node group_member.js <bootstrap> <topic> <group> <clientId> [sessionTimeoutMs]
// Joins <group>, subscribes to <topic> from the earliest offset, prints one line per record
// "R <partition> <offset> <value>" (offsets are committed after each batch), and on SIGTERM disconnects cleanly
// (LeaveGroup) and exits 0.
'use strict'

const { Kafka, logLevel } = require('kafkajs')

async function main () {
  const [bootstrap, topic, group, clientId, session] = process.argv.slice(2)
  const kafka = new Kafka({
    clientId,
    brokers: [bootstrap],
    logLevel: logLevel.NOTHING,
    connectionTimeout: 5000,
    requestTimeout: 30000,
    retry: { initialRetryTime: 100, maxRetryTime: 1000, retries: 50 }
  })
  const consumer = kafka.consumer({
    groupId: group,
    sessionTimeout: Number(session || 6000),
    rebalanceTimeout: 20000,
    heartbeatInterval: 500,
    maxWaitTimeInMs: 200,
    retry: { initialRetryTime: 100, maxRetryTime: 1000, retries: 50 }
  })
  let stopping = false
  const stop = async () => {
    if (stopping) return
    stopping = true
    try { await consumer.disconnect() } finally { process.exit(0) }
  }
  process.on('SIGTERM', stop)
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    autoCommit: true,
    autoCommitThreshold: 1,
    eachBatch: async ({ batch, resolveOffset, heartbeat, commitOffsetsIfNecessary }) => {
      const lines = []
      for (const m of batch.messages) {
        lines.push(`R ${batch.partition} ${m.offset} ${m.value.toString()}`)
        resolveOffset(m.offset)
      }
      if (lines.length) process.stdout.write(lines.join('\n') + '\n')
      await commitOffsetsIfNecessary()
      await heartbeat()
    }
  })
}

main().catch(err => {
  process.stderr.write(`kafkajs member failed: ${err && err.stack ? err.stack : err}\n`)
  process.exit(1)
})
