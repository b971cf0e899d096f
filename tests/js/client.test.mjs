// Queen's own JavaScript client (npm queen-mq 0.15.0, unchanged) against `queenpy serve`: the broker calls a
// Node user makes. Run by tests/js/test_js_client.py (`node --test`, QUEEN_URL set to a running broker).
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Queen } from 'queen-mq'
import { eventually, unique } from './support.mjs'

const url = process.env.QUEEN_URL
const q = new Queen({ url, handleSignals: false })
after(() => q.close())

/** Every message of `queue` a fresh consumer group can pop now (autoAck), across partitions. */
async function drain (queue, group = unique('drain')) {
  const out = []
  for (;;) {
    const batch = await q.queue(queue).group(group).batch(1000).partitions(100).autoAck(true).wait(false).pop()
    if (batch.length === 0) return out
    out.push(...batch)
  }
}

test('push, pop and ack: acked messages are gone, a failed ack redelivers at once', async () => {
  const queue = unique('basic')
  await q.queue(queue).config({ retryLimit: 3 }).create()
  const pushed = await q.queue(queue).partition('p1').push([
    { data: { n: 1 } }, { data: { n: 2 } }, { data: { n: 3 } }])
  assert.deepEqual(pushed.map((r) => r.status), ['queued', 'queued', 'queued'])

  const first = await q.queue(queue).partition('p1').batch(2).wait(false).pop()
  assert.deepEqual(first.map((m) => m.data.n), [1, 2])
  assert.ok(first.every((m) => m.leaseId && m.partition === 'p1'))
  for (const message of first) await q.ack(message, true)

  const third = await q.queue(queue).partition('p1').batch(5).wait(false).pop()
  assert.deepEqual(third.map((m) => m.data.n), [3])
  await q.ack(third[0], false, { error: 'try again' })
  const again = await q.queue(queue).partition('p1').batch(5).wait(false).pop()  // no retryDelay: at once
  assert.deepEqual(again.map((m) => m.data.n), [3])
  await q.ack(again, true)  // batch ack (the client reports success for any array answer)
  assert.deepEqual(await q.queue(queue).partition('p1').wait(false).pop(), [])
})

test('consumer groups: each group gets every message; subscriptionMode new and subscriptionFrom skip history',
  async () => {
    const queue = unique('groups')
    await q.queue(queue).push([{ data: { n: 1 } }, { data: { n: 2 } }])
    const fromAll = await q.queue(queue).group('all').batch(10).wait(false).pop()
    assert.deepEqual(fromAll.map((m) => m.data.n), [1, 2])
    assert.ok(fromAll.every((m) => m.consumerGroup === 'all'))
    await q.ack(fromAll, true, { group: 'all' })

    const newOnly = await q.queue(queue).group('new').subscriptionMode('new').batch(10).wait(false).pop()
    assert.deepEqual(newOnly, [])
    await new Promise((resolve) => setTimeout(resolve, 20))
    const boundary = new Date().toISOString()
    await new Promise((resolve) => setTimeout(resolve, 20))
    await q.queue(queue).push([{ data: { n: 3 } }])

    const afterNew = await q.queue(queue).group('new').subscriptionMode('new').batch(10).wait(false).pop()
    assert.deepEqual(afterNew.map((m) => m.data.n), [3])
    const fromBoundary = await q.queue(queue).group('since').subscriptionFrom(boundary).batch(10).wait(false).pop()
    assert.deepEqual(fromBoundary.map((m) => m.data.n), [3])
    const rest = await q.queue(queue).group('all').batch(10).wait(false).pop()
    assert.deepEqual(rest.map((m) => m.data.n), [3])

    const groups = await q.admin.listConsumerGroups()
    const names = new Set((groups || []).filter((g) => g.queueName === queue).map((g) => g.name))
    for (const group of ['all', 'new', 'since']) assert.ok(names.has(group), `${group} in ${[...names]}`)
    const detail = await q.admin.getConsumerGroup('all')
    assert.ok(detail[queue], JSON.stringify(detail))
    await q.deleteConsumerGroup('since', true)
  })

test('batch(n).each() consumers: an onError nack redelivers the batch from the cursor, then the DLQ takes the poison',
  async () => {
    const queue = unique('each')
    await q.queue(queue).config({ leaseTime: 30, retryLimit: 1, deadLetterQueue: true }).create()
    await q.queue(queue).partition('only').push(Array.from({ length: 10 }, (_, n) => ({ data: { n } })))
    const attempts = new Map()
    let nacks = 0
    const controller = new AbortController()
    const consumer = q.queue(queue).group('workers').batch(5).each().autoAck(false).timeoutMillis(1000)
      .consume(async (message) => {
        const n = message.data.n
        attempts.set(n, (attempts.get(n) || 0) + 1)
        if (n === 7) throw new Error('poison 7')
        // (the client reports success for any single ack: it reads `error` off the array answer)
        await q.ack(message, true, { group: 'workers' })
      }, { signal: controller.signal })
      .onError(async (message, error) => {
        nacks++
        await q.ack(message, false, { group: 'workers', error: error.message })
      })
    const running = Promise.resolve(consumer)
    const dlq = await eventually(async () => {
      const found = await q.queue(queue).dlq('workers').limit(10).get()
      return found.total === 1 && attempts.get(9) === 2 ? found : null
    }, 'the poison message in the DLQ and the redelivered batch done')
    controller.abort()
    await running
    assert.equal(dlq.messages[0].data.n, 7)
    assert.equal(dlq.messages[0].errorMessage, 'poison 7')
    assert.equal(dlq.messages[0].retryCount, 1)
    assert.equal(nacks, 2)  // retryLimit 1: two deliveries of 7, two nacks
    // the first nack released the lease, so 8 and 9 (delivered after 7 in that batch) were not acked and came
    // back with 7: the whole batch from the cursor (API.md 20.5); everything before 7 once
    assert.deepEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9].map((n) => attempts.get(n)), [1, 1, 1, 1, 1, 1, 1, 2, 2, 2])
    assert.deepEqual(await q.queue(queue).group('workers').wait(false).pop(), [], 'the group consumed everything')
  })

test('transactions: ack and push commit together; a failing one leaves nothing behind', async () => {
  const source = unique('tx-src')
  const target = unique('tx-dst')
  await q.queue(source).partition('chat-1').push([{ data: { text: 'hello' } }])
  const [message] = await q.queue(source).group('stage').wait(false).pop()
  const committed = await q.transaction()
    .ack(message, 'completed', { consumerGroup: 'stage' })
    .queue(target).partition('chat-1').push([{ data: { text: 'HELLO' } }])
    .commit()
  assert.equal(committed.success, true)
  assert.deepEqual(await q.queue(source).group('stage').wait(false).pop(), [])
  const moved = await drain(target)
  assert.deepEqual(moved.map((m) => [m.partition, m.data.text]), [['chat-1', 'HELLO']])

  const bogus = { transactionId: 'never-pushed', partitionId: message.partitionId }
  await assert.rejects(q.transaction().ack(bogus, 'completed', { consumerGroup: 'stage' })
    .queue(target).push([{ data: { text: 'must not exist' } }]).commit(), /Message not found/)
  assert.deepEqual((await drain(target)).map((m) => m.data.text), ['HELLO'])
})

test('renewLease keeps a slow message leased past leaseTime: no second delivery', async () => {
  const queue = unique('renew')
  await q.queue(queue).config({ leaseTime: 2, retryLimit: 3 }).create()
  await q.queue(queue).push([{ data: { slow: true } }])

  const [popped] = await q.queue(queue).group('manual').wait(false).pop()
  const renewed = await q.renew(popped)
  assert.equal(renewed.success, true)  // newExpiresAt: the JS client reads fields the array answer lacks
  await new Promise((resolve) => setTimeout(resolve, 2500))  // past the lease's first end
  assert.deepEqual(await q.queue(queue).group('manual').wait(false).pop(), [], 'renewed: still leased')
  await q.ack(popped, true, { group: 'manual' })
  const [cursor] = (await q.admin.getConsumerGroup('manual'))[queue].partitions
  assert.equal(cursor.totalConsumed, 1)  // the ack under the renewed lease counted
  assert.equal(cursor.leaseActive, false)

  const seen = []
  const controller = new AbortController()
  const slow = q.queue(queue).group('auto').renewLease(true, 500).limit(1)
    .consume(async (message) => {
      seen.push(message.transactionId)
      await new Promise((resolve) => setTimeout(resolve, 4500))  // more than twice the lease
    }, { signal: controller.signal })
  const running = Promise.resolve(slow)
  await eventually(async () => seen.length === 1, 'the slow consumer got the message')
  await new Promise((resolve) => setTimeout(resolve, 2500))  // past the unrenewed lease's end
  const stolen = await q.queue(queue).group('auto').wait(false).pop()
  assert.deepEqual(stolen, [], 'the lease was renewed, so nobody else gets the message')
  await running
  assert.equal(seen.length, 1)
  assert.deepEqual(await q.queue(queue).group('auto').wait(false).pop(), [])  // acked by the consumer
})

test('buffer(): client-side buffered pushes all arrive, once', async () => {
  const queue = unique('buffered')
  for (let n = 0; n < 25; n++) {
    await q.queue(queue).partition(`p${n % 3}`).buffer({ messageCount: 10, timeMillis: 200 })
      .push([{ data: { n } }])
  }
  await q.flushAllBuffers()
  const got = await drain(queue)
  assert.deepEqual(got.map((m) => m.data.n).sort((a, b) => a - b), Array.from({ length: 25 }, (_, n) => n))
  for (const partition of ['p0', 'p1', 'p2']) {
    const ns = got.filter((m) => m.partition === partition).map((m) => m.data.n)
    assert.deepEqual(ns, [...ns].sort((a, b) => a - b), `FIFO within ${partition}`)
  }
})

test('admin API: queues, partitions, messages, status, analytics, health', async () => {
  const queue = unique('admin')
  await q.queue(queue).config({ leaseTime: 30 }).create()
  await q.queue(queue).partition('a').push([{ data: { n: 1 } }, { data: { n: 2 } }])
  const listed = await q.admin.listQueues({ search: queue })
  const queues = listed.queues || listed
  assert.ok(queues.some((entry) => entry.name === queue), JSON.stringify(listed).slice(0, 300))
  const info = await q.admin.getQueue(queue)
  assert.equal(info.name, queue)
  const partitions = await q.admin.getPartitions({ queue })
  assert.ok(JSON.stringify(partitions).includes('"a"'))
  const messages = await q.admin.listMessages({ queue })
  assert.equal((messages.messages || messages).length, 2)
  const [first] = messages.messages || messages
  const one = await q.admin.getMessage(first.partitionId, first.transactionId)
  assert.equal(one.transactionId, first.transactionId)
  const status = await q.admin.getStatus()
  assert.ok(status && typeof status === 'object')
  const detail = await q.admin.getQueueDetail(queue)
  assert.ok(JSON.stringify(detail).includes(queue))
  const health = await q.admin.health()
  assert.equal(health.status, 'healthy')
  const lagging = await q.admin.getLaggingConsumers(60)
  assert.ok(Array.isArray(lagging), JSON.stringify(lagging))
  assert.deepEqual(await q.admin.getConsumerGroup(unique('nobody')), {})
  await q.admin.clearQueue(queue)
  assert.deepEqual(await drain(queue), [])
  const deleted = await q.queue(queue).delete()
  assert.equal(deleted.deleted, true)
})
