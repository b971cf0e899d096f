// Issue 16's pipeline over Node's own HTTP stack (fetch, i.e. undici, as Queen's JS client uses), sending what
// Queen's JS client sends (API.md section 22: pop with wait/timeout/batch/consumerGroup, each() handling, an
// onError nack with the group and error text, a transaction ack + push per hand-off). It is an emulation of the
// client's wire calls, NOT the official npm client (queen-mq is not on the registry reachable here).
// Prints one line: FINAL <counts as JSON> and exits 0.
const URL_ = process.argv[2];
const suffix = Math.random().toString(16).slice(2, 8);
const Q = { translate: `js.translate.${suffix}`, route: `js.route.${suffix}`, notify: `js.notify.${suffix}` };
const counts = {};
const inc = (k) => (counts[k] = (counts[k] || 0) + 1);
let stop = false;

async function http(method, path, body, timeoutMs = 30000) {
  const res = await fetch(URL_ + path, {
    method, headers: { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  if (res.status === 204) return null;
  const text = await res.text();
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${text}`);
  return text ? JSON.parse(text) : null;
}

const uuid = () => crypto.randomUUID();

async function ack(msg, status, ctx) {
  const body = { transactionId: msg.transactionId, partitionId: msg.partitionId,
    status: status === true ? 'completed' : status === false ? 'failed' : status,
    error: ctx.error || null, consumerGroup: ctx.group || null };
  if (msg.leaseId) body.leaseId = msg.leaseId;
  return http('POST', '/api/v1/ack', body);
}

async function consume(name, next, group) {
  const params = new URLSearchParams({ batch: '1', wait: 'true', timeout: '30000', consumerGroup: group });
  while (!stop) {
    let result;
    try { result = await http('GET', `/api/v1/pop/queue/${Q[name]}?${params}`, undefined, 35000); }
    catch (e) { if (stop) break; console.error('pop error', e.message); await new Promise(r => setTimeout(r, 1000)); continue; }
    if (!result || !result.messages || result.messages.length === 0) continue;
    for (const msg of result.messages) {
      try {
        inc(`${name} attempts`);
        if (msg.data.poison) throw new Error('poison');
        if (!next) { await ack(msg, true, { group }); inc(`${name} done`); continue; }
        const ops = [{ type: 'ack', transactionId: msg.transactionId, partitionId: msg.partitionId, status: 'completed', consumerGroup: group },
                     { type: 'push', items: [{ queue: Q[next], partition: msg.partition, payload: msg.data, transactionId: uuid() }] }];
        const r = await http('POST', '/api/v1/transaction', { operations: ops, requiredLeases: msg.leaseId ? [msg.leaseId] : [] });
        if (!r || !r.success) throw new Error('tx failed ' + JSON.stringify(r));
        inc(`${name} done`);
      } catch (err) {
        inc(`${name} failures`);
        await ack(msg, false, { group, error: err.message });
      }
    }
  }
}

async function main() {
  for (const q of Object.values(Q)) {
    await http('POST', '/api/v1/configure', { queue: q, options: { leaseTime: 8, retryLimit: 2, deadLetterQueue: true,
      dlqAfterMaxRetries: true, retentionEnabled: true, retentionSeconds: 3600, completedRetentionSeconds: 300 } });
  }
  const consumers = [consume('translate', 'route', 'translate-worker'), consume('route', 'notify', 'route-worker'), consume('notify', null, 'notify-worker')];
  for (let n = 1; n <= 100; n++) {
    await http('POST', '/api/v1/push', { items: [{ queue: Q.translate, partition: `chat-${n % 10}`, payload: { n, poison: n % 7 === 0 }, transactionId: `msg-${n}` }] });
  }
  const t0 = Date.now();
  let dlq = 0;
  while (Date.now() - t0 < 60000) {
    await new Promise(r => setTimeout(r, 1000));
    const d = await http('GET', `/api/v1/dlq?queue=${Q.translate}&limit=100`);
    dlq = d ? (d.total ?? d.messages.length) : 0;
    if (dlq === 14 && counts['notify done'] === 86) break;
  }
  stop = true;
  console.log('FINAL', JSON.stringify({ ...counts, dlq }));
  process.exit(0);
}
main();
