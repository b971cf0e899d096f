// Queen's Streams SDK as the JS client ships it (`Stream` from queen-mq 0.15.0): a tumbling and a sliding
// event-time window query against `queenpy serve`, each window's count and sum checked against the same
// computation in plain JavaScript. Synthetic event times; a far-future event moves the watermark past every
// window, so the output is a pure function of the input. Run by tests/js/test_js_client.py.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Queen, Stream } from 'queen-mq'
import { eventually, unique } from './support.mjs'

const url = process.env.QUEEN_URL
const q = new Queen({ url, handleSignals: false })
after(() => q.close())

const BASE_MS = 1_699_999_980_000
const CLOSE_MS = BASE_MS + 1_000_000
const EVENTS = [['a', 1_000, 1], ['b', 2_000, 10], ['a', 4_500, 2], ['a', 11_000, 4], ['b', 12_000, 20],
  ['b', 15_000, 40], ['a', 25_000, 8], ['a', 70_000, 16], ['b', 130_500, 80], ['a', 131_000, 32]]

/** The windows (start, end) of an event time: tumbling 10 s, or sliding 4 s every 2 s. */
function windowsOf (kind, ts) {
  if (kind === 'tumbling') {
    const start = Math.floor(ts / 10_000) * 10_000
    return [[start, start + 10_000]]
  }
  const latest = Math.floor(ts / 2_000) * 2_000
  return [latest, latest - 2_000].filter((s) => s <= ts && ts < s + 4_000).map((s) => [s, s + 4_000])
}

function expected (kind) {
  const windows = new Map()
  for (const [key, offset, x] of EVENTS) {
    for (const [start, end] of windowsOf(kind, BASE_MS + offset)) {
      const id = `${key}|${start}|${end}`
      const w = windows.get(id) || { key, start, end, count: 0, sum: 0 }
      w.count++
      w.sum += x
      windows.set(id, w)
    }
  }
  return [...windows.values()].sort((a, b) => a.key.localeCompare(b.key) || a.start - b.start)
}

/** Every record of the sink queue, read by a fresh consumer group. */
async function sinkRecords (queue, group) {
  const out = []
  for (;;) {
    const batch = await q.queue(queue).group(group).batch(1000).partitions(100).autoAck(true).wait(false).pop()
    if (batch.length === 0) return out
    out.push(...batch.map((m) => m.data))
  }
}

for (const kind of ['tumbling', 'sliding']) {
  test(`a ${kind} event-time window counts and sums each key's window exactly once`, async () => {
    const source = unique(`js-${kind}-src`)
    const target = unique(`js-${kind}-sink`)
    await q.queue(source).push([...EVENTS.map(([k, offset, x]) => ({ data: { k, ts: BASE_MS + offset, x } })),
      { data: { k: 'zz', ts: CLOSE_MS, x: 0 } }])
    const eventTime = { eventTime: (m) => m.data.ts, idleFlushMs: 200 }
    let stream = Stream.from(q.queue(source)).keyBy((m) => m.data.k)
    stream = kind === 'tumbling'
      ? stream.windowTumbling({ seconds: 10, ...eventTime })
      : stream.windowSliding({ size: 4, slide: 2, ...eventTime })
    stream = stream.aggregate({ count: () => 1, sum: (value) => value.x })
      .map((agg, ctx) => ({ key: ctx.key, start: ctx.windowStart, end: ctx.windowEnd, count: agg.count, sum: agg.sum }))
      .to(q.queue(target))
    const errors = []
    const runner = await stream.run({ queryId: unique(`js-${kind}`), url, maxWaitMillis: 200,
      onError: (err, ctx) => errors.push(`${ctx.phase}: ${err.message}`) })
    const want = expected(kind)
    const got = []
    try {
      await eventually(async () => {
        got.push(...await sinkRecords(target, 'check'))
        return got.length >= want.length
      }, `${want.length} windows in the sink`)
    } finally {
      await runner.stop()
    }
    got.sort((a, b) => a.key.localeCompare(b.key) || a.start - b.start)
    assert.deepEqual(got, want)
    assert.deepEqual(errors, [])
  })
}
