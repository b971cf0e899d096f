// What the JS tier's tests share: unique names and polling with a deadline (never a sleep on a condition).

/** A name no other test uses: `<prefix>-<random hex>`. */
export function unique (prefix) {
  return `${prefix}-${Math.random().toString(16).slice(2, 10)}`
}

/** Poll `probe` (sync or async) every 100 ms until it returns a truthy value, which is returned; throw after
 * `deadlineMs`, naming `what`. */
export async function eventually (probe, what, deadlineMs = 30000) {
  const end = Date.now() + deadlineMs
  for (;;) {
    const value = await probe()
    if (value) return value
    if (Date.now() > end) throw new Error(`timed out after ${deadlineMs} ms waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}
