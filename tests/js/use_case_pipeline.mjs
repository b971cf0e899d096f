// Queen's transactional-pipeline recipe ("reproduce with examples/use-case-pipeline.js"), run with Queen's own
// JavaScript client (npm queen-mq 0.15.0) exactly as issue 38 describes that script:
// - delete, then configure uc-pipeline.translate, .route and .notify (leaseTime 8, retryLimit 2, DLQ on,
//   retention 3600 s / completed 300 s; no retryDelay);
// - push 100 messages, one per partition chat-0 .. chat-99 (transactionId chat-<i>), before any consumer;
// - start three consumers at once with the client's defaults: batch(1).each().autoAck(false), a wildcard long
//   poll; translate throws for idx % 7 == 0 && idx != 0 and its onError nacks with the group and the error;
//   successes hand off with transaction().ack(msg, 'completed', {consumerGroup}).queue(next).partition(chatId)
//   .push([...]).commit(); notify uses each() with client-side auto-ack;
// - the stop rule: every 500 ms, once notify has counted 86, read GET /api/v1/dlq?queue=...translate&limit=500
//   once and judge: PASS needs 86 routed, 86 notified and at least 128 translate attempts.
// Usage: node use_case_pipeline.mjs <broker url>. Prints the verdict and one line `RESULT <json>`; exits 0 on
// PASS, 1 on FAIL.
import { Queen } from 'queen-mq'

const url = process.argv[2] || 'http://localhost:6632'
const q = new Queen({ url, handleSignals: false })
const MESSAGES = 100
const TRANSLATE = 'uc-pipeline.translate'
const ROUTE = 'uc-pipeline.route'
const NOTIFY = 'uc-pipeline.notify'
const OPTIONS = { leaseTime: 8, retryLimit: 2, deadLetterQueue: true, dlqAfterMaxRetries: true,
  retentionEnabled: true, retentionSeconds: 3600, completedRetentionSeconds: 300 }

const counts = { translateAttempts: 0, translateFailures: 0, translated: 0, routed: 0, notified: 0 }

for (const name of [TRANSLATE, ROUTE, NOTIFY]) {
  try { await q.queue(name).delete() } catch { /* absent */ }
  await q.queue(name).config(OPTIONS).create()
}

for (let idx = 0; idx < MESSAGES; idx++) {
  const chatId = `chat-${idx}`
  await q.queue(TRANSLATE).partition(chatId).push([
    { transactionId: chatId, data: { chatId, idx, text: `message ${idx} of chat ${chatId}` } }])
}

const controller = new AbortController()
const signal = controller.signal

const translate = q.queue(TRANSLATE).group('translator').batch(1).each().autoAck(false)
  .consume(async (msg) => {
    counts.translateAttempts++
    const { chatId, idx, text } = msg.data
    if (idx % 7 === 0 && idx !== 0) throw new Error(`cannot translate message ${idx}`)
    await q.transaction()
      .ack(msg, 'completed', { consumerGroup: 'translator' })
      .queue(ROUTE).partition(chatId)
      .push([{ data: { chatId, idx, text: text.toUpperCase() } }])
      .commit()
    counts.translated++
  }, { signal })
  .onError(async (msg, error) => {
    counts.translateFailures++
    await q.ack(msg, false, { group: 'translator', error: error.message })
  })

const route = q.queue(ROUTE).group('router').batch(1).each().autoAck(false)
  .consume(async (msg) => {
    const { chatId, idx, text } = msg.data
    await q.transaction()
      .ack(msg, 'completed', { consumerGroup: 'router' })
      .queue(NOTIFY).partition(chatId)
      .push([{ data: { chatId, idx, text, channel: idx % 2 ? 'email' : 'push' } }])
      .commit()
    counts.routed++
  }, { signal })
  .onError(async (msg, error) => {
    await q.ack(msg, false, { group: 'router', error: error.message })
  })

const notify = q.queue(NOTIFY).group('notifier').batch(1).each()
  .consume(async () => { counts.notified++ }, { signal })

const started = Date.now()
const consumers = Promise.all([translate, route, notify].map((c) => Promise.resolve(c).catch((e) => {
  if (!signal.aborted) console.error('consumer stopped:', e.message)
})))

const expected = MESSAGES - 14
let judged = null
while (Date.now() - started < 120000) {
  await new Promise((resolve) => setTimeout(resolve, 500))
  if (counts.notified >= expected) {
    const at = { ...counts, seconds: (Date.now() - started) / 1000 }
    const response = await fetch(`${url}/api/v1/dlq?queue=${TRANSLATE}&limit=500`)
    const text = await response.text()
    const dlq = text ? JSON.parse(text) : { messages: [] }
    const failedAt = (dlq.messages || []).map((m) => Date.parse(m.failedAt)).filter(Number.isFinite)
    judged = { ...at, dlq: dlq.total ?? (dlq.messages || []).length,
      dlqFullSeconds: failedAt.length ? (Math.max(...failedAt) - started) / 1000 : null }
    break
  }
}
controller.abort()
await Promise.race([consumers, new Promise((resolve) => setTimeout(resolve, 1000))])

const pass = judged !== null && judged.routed === expected && judged.notified === expected &&
  judged.translateAttempts >= 128
console.log(pass ? 'PASS' : 'FAIL', judged ? `routed ${judged.routed}, notified ${judged.notified}, ` +
  `translate attempts ${judged.translateAttempts} (failures ${judged.translateFailures}), ` +
  `DLQ ${judged.dlq} (expected 14) after ${judged.seconds} s` : 'notify never reached 86')
console.log('RESULT ' + JSON.stringify(judged))
await q.close()
process.exit(pass ? 0 : 1)
