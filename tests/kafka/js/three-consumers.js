// Three kafkajs consumers in one group share a topic, commit, disconnect; then kafkajs's admin describes the
// group, reads its offsets back and lists it. Run by tests/kafka/test_kafkajs.py, which asserts on what this
// prints: one JSON object a line on stdout. Usage: node three-consumers.js <bootstrap> <topic> <group> <partitions>
'use strict'

const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, groupId, partitionsArg] = process.argv.slice(2)
const partitions = Number(partitionsArg)
const MEMBERS = 3
const OFFSET_BASE = 100 // partition p is committed at OFFSET_BASE + p

const emit = (record) => process.stdout.write(JSON.stringify(record) + '\n')

// KAFKAJS_LOG_LEVEL=DEBUG shows every request kafkajs sends and what it got back (on stdout, as kafkajs logs).
const kafka = new Kafka({
  clientId: 'groupcoord-kafkajs-test',
  brokers: [bootstrap],
  logLevel: logLevel[process.env.KAFKAJS_LOG_LEVEL || 'ERROR'],
  logCreator: (level) => ({ namespace, log }) =>
    process.stderr.write(`${namespace} ${log.message} ${JSON.stringify(log)}\n`),
  retry: { initialRetryTime: 100, retries: 8 },
})

// The current assignment of each consumer, from its latest GROUP_JOIN event (kafkajs rejoins on a rebalance).
const assigned = new Array(MEMBERS).fill(null)

function shareComplete () {
  if (assigned.some((parts) => parts === null)) return false
  const all = assigned.flat().sort((a, b) => a - b)
  return all.length === partitions && all.every((p, i) => p === i)
}

async function until (done, what, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(assigned)}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

async function main () {
  const consumers = Array.from({ length: MEMBERS }, () =>
    kafka.consumer({
      groupId,
      sessionTimeout: 6000,
      heartbeatInterval: 500,
      rebalanceTimeout: 10000,
      // groupcoord answers Fetch empty after the wait the client allows: a short wait lets the runner heartbeat,
      // and so notice a rebalance, twice a second.
      maxWaitTimeInMs: 500,
      allowAutoTopicCreation: false,
    }),
  )
  consumers.forEach((consumer, i) => {
    consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
      const parts = [...(payload.memberAssignment[topic] || [])].sort((a, b) => a - b)
      assigned[i] = parts
      emit({ event: 'assigned', consumer: i, memberId: payload.memberId, partitions: parts })
    })
  })
  for (const consumer of consumers) {
    await consumer.connect()
    await consumer.subscribe({ topics: [topic] })
    // No records ever arrive (groupcoord stores none); the runner is what joins, syncs and heartbeats.
    await consumer.run({ autoCommit: false, eachMessage: async () => {} })
  }
  await until(shareComplete, `${MEMBERS} consumers to share ${partitions} partitions`)

  // Each member commits the partitions it owns, in the generation they all joined.
  for (const [i, consumer] of consumers.entries()) {
    const offsets = assigned[i].map((p) => ({ topic, partition: p, offset: String(OFFSET_BASE + p) }))
    await consumer.commitOffsets(offsets)
    emit({ event: 'committed', consumer: i, partitions: assigned[i] })
  }
  for (const consumer of consumers) await consumer.disconnect() // LeaveGroup
  emit({ event: 'disconnected' })

  const admin = kafka.admin()
  await admin.connect()
  try {
    const { groups } = await admin.describeGroups([groupId])
    emit({ event: 'described', groups: groups.map(({ groupId, state, members, protocolType, errorCode }) =>
      ({ groupId, state, members: members.length, protocolType, errorCode })) })
    const fetched = await admin.fetchOffsets({ groupId, topics: [topic] })
    emit({ event: 'offsets', topics: fetched.map((t) => ({
      topic: t.topic,
      partitions: t.partitions.map(({ partition, offset }) => ({ partition, offset: Number(offset) })),
    })) })
    const listed = await admin.listGroups()
    emit({ event: 'listed', groups: listed.groups.map((g) => g.groupId) })
  } finally {
    await admin.disconnect()
  }
}

const watchdog = setTimeout(() => {
  process.stderr.write(`three-consumers.js: still running after 25 s; assignments ${JSON.stringify(assigned)}\n`)
  process.exit(2)
}, 25000)
watchdog.unref()

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`three-consumers.js: ${err && err.stack ? err.stack : err}\n`)
    process.exit(1)
  },
)
