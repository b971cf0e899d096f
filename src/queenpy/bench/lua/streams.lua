-- Streams: a tumbling-window count per partition, the way the Streams SDK's runner drives the broker
-- (queen/streams/runtime/runner.py, event-time window + reduce): a long-poll pop of P.batch messages for the
-- query's consumer group, POST /streams/v1/state/get of the partition's state, then one POST
-- /streams/v1/cycle that upserts the open windows and the watermark, deletes the closed windows it read,
-- pushes one result per closed window to P.sink (same partition name) and acks the batch.
-- Event time is the offset: message k of a partition happened at k - 1 ms, so a window of P.window_ms holds
-- P.window_ms messages of each partition.
-- One connection per wrk thread (the suite runs as many threads as connections): the three requests of a
-- cycle alternate with their responses on it, so the thread's Lua state holds the cycle in flight.

COUNTERS = {"pops", "empty_pops", "delivered", "state_gets", "cycles_ok", "cycles_failed", "emitted",
            "acked", "parse_errors", "bad_responses"}
pops, empty_pops, delivered, state_gets, cycles_ok, cycles_failed, emitted, acked, parse_errors, bad_responses =
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0

local pop_request = nil
local step = "pop"   -- what the response that comes next answers: "pop" | "state" | "cycle"
local batch = nil    -- the popped batch whose cycle is in flight
local nextreq = nil

local SEP = "\\u001f"  -- the SDK's key separator, as it is written in JSON

function init(args)
  pop_request = wrk.format("GET", "/api/v1/pop/queue/" .. P.queue .. "?batch=" .. P.batch ..
                           "&wait=true&timeout=" .. P.timeout_ms .. "&consumerGroup=" .. P.group)
end

function request()
  local req = nextreq or pop_request
  nextreq = nil
  return req
end

local function window_key(start)
  return "tumb:" .. P.window_ms .. SEP .. start .. SEP .. batch.partition_id
end

-- the popped batch: partition, lease, the last message (offset order) and the message count per window
function read_batch(body)
  local ids = json_strings(body, "transactionId")
  if #ids == 0 then return nil, 0 end
  local b = {partition_id = json_strings(body, "partitionId")[1], partition = json_strings(body, "partition")[1],
             lease = json_strings(body, "leaseId")[1], last = ids[#ids], count = #ids, windows = {}, max_ts = -1}
  if b.partition_id == nil or b.partition == nil or b.lease == nil then return nil, #ids end
  local pos, n = 1, 0
  while true do
    local _, e, offset = string.find(body, '"offset"%s*:%s*(%d+)', pos)
    if e == nil then break end
    local ts = tonumber(offset) - 1
    local start = ts - ts % P.window_ms
    b.windows[start] = (b.windows[start] or 0) + 1
    if ts > b.max_ts then b.max_ts = ts end
    n, pos = n + 1, e + 1
  end
  if n ~= #ids then return nil, #ids end
  return b, #ids
end

-- the state rows' window accumulators: {start = count}
function read_state(body)
  local seeded = {}
  local pos = 1
  while true do
    local s, e = string.find(body, '"key"%s*:%s*"tumb:', pos)
    if s == nil then break end
    local start = string.match(body, '^[%d.]+' .. "\\u001f" .. '(%-?%d+)', e + 1)
    local acc = string.match(body, '"acc"%s*:%s*(%d+)', e + 1)
    if start ~= nil and acc ~= nil then seeded[tonumber(start)] = tonumber(acc) end
    pos = e + 1
  end
  return seeded
end

-- the cycle: closed windows (end <= watermark) are emitted (deleted when they came from the state), open
-- ones upserted, the watermark upserted, the batch acked
function cycle_body(b, seeded)
  local accs = {}
  for start, count in pairs(seeded) do accs[start] = count end
  for start, count in pairs(b.windows) do accs[start] = (accs[start] or 0) + count end
  local ops, items = {}, {}
  local starts = {}
  for start in pairs(accs) do starts[#starts + 1] = start end
  table.sort(starts)
  for _, start in ipairs(starts) do
    local acc, stop = accs[start], start + P.window_ms
    if stop <= b.max_ts then
      if seeded[start] ~= nil then ops[#ops + 1] = '{"type":"delete","key":"' .. window_key(start) .. '"}' end
      items[#items + 1] = '{"queue":"' .. P.sink .. '","partition":"' .. b.partition .. '","payload":{"key":"' ..
                          b.partition_id .. '","windowStart":' .. start .. ',"count":' .. acc .. '}}'
    elseif b.windows[start] ~= nil then
      ops[#ops + 1] = '{"type":"upsert","key":"' .. window_key(start) .. '","value":{"acc":' .. acc ..
                      ',"windowStart":' .. start .. ',"windowEnd":' .. stop .. '}}'
    end
  end
  ops[#ops + 1] = '{"type":"upsert","key":"__wm__","value":{"eventTimeMs":' .. b.max_ts .. '}}'
  return '{"query_id":"' .. P.query_id .. '","partition_id":"' .. b.partition_id .. '","consumer_group":"' ..
         P.group .. '","state_ops":[' .. table.concat(ops, ",") .. '],"push_items":[' ..
         table.concat(items, ",") .. '],"ack":{"transactionId":"' .. b.last .. '","leaseId":"' .. b.lease ..
         '","status":"completed","count":' .. b.count .. '},"release_lease":true}', #items
end

function response(status, headers, body)
  local answered = step
  step = "pop"
  if status ~= 200 then
    bad_responses = bad_responses + 1
    keep_sample(status, body)
    return
  end
  if answered == "pop" then
    pops = pops + 1
    local b, n = read_batch(body)
    if n == 0 then
      empty_pops = empty_pops + 1
      return
    end
    delivered = delivered + n
    if b == nil then
      parse_errors = parse_errors + 1
      keep_sample(status, body)
      return
    end
    batch = b
    nextreq = wrk.format("POST", "/streams/v1/state/get", nil, '{"query_id":"' .. P.query_id ..
                         '","partition_id":"' .. b.partition_id .. '","keys":[]}')
    step = "state"
  elseif answered == "state" then
    state_gets = state_gets + 1
    local body_out, pushes = cycle_body(batch, read_state(body))
    batch.pushes = pushes
    nextreq = wrk.format("POST", "/streams/v1/cycle", nil, body_out)
    step = "cycle"
  else
    if string.find(body, '"success"%s*:%s*true') then
      cycles_ok = cycles_ok + 1
      acked = acked + batch.count
      emitted = emitted + count_json(body, "status", '"queued"')
    else
      cycles_failed = cycles_failed + 1
      keep_sample(status, body)
    end
  end
end
