-- queenbench common part, loaded before every scenario script (queenbench/wrk.py joins the files).
-- Above this file queenbench writes `P`, the scenario's parameters, as a Lua table.
--
-- Counters: each scenario script lists its counter names in COUNTERS and keeps them as globals of
-- its thread's Lua state; done() (main state) sums them over the threads and prints one line
--   QUEENBENCH {"requests":..,"duration_us":..,"status_errors":..,"p50":..,..,"<counter>":..}
-- that queenbench.parsing.parse_wrk reads (latencies in microseconds).

local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_index", #threads)
end

wrk.headers["Content-Type"] = "application/json"

-- a FIFO of follow-up requests (acks, transactions) made from responses; any connection of the thread
-- may send the next one
local fifo, fifo_head, fifo_tail = {}, 1, 0

function enqueue(req)
  fifo_tail = fifo_tail + 1
  fifo[fifo_tail] = req
end

function dequeue()
  if fifo_head > fifo_tail then return nil end
  local req = fifo[fifo_head]
  fifo[fifo_head] = nil
  fifo_head = fifo_head + 1
  return req
end

-- the thread's first unexpected response ("<status> <body...>"), reported by done() as "sample"
sample = nil

function keep_sample(status, body)
  if sample == nil then sample = status .. " " .. string.sub(body or "", 1, 500) end
end

local function json_string(text)
  return '"' .. string.gsub(text, '[%c"\\]', function(c) return string.format("\\u%04x", string.byte(c)) end) .. '"'
end

-- Reading responses: brokers answer compact JSON ("key":value, no spaces). Plain string.find is compiled
-- by LuaJIT, where string.gsub and string.gmatch (patterns) run in its interpreter and gsub copies the whole
-- body: with patterns, wrk spent 18-21 us of CPU per message in the keep-up scenario, 11-13 us with plain finds.
-- Each helper falls back to a pattern that allows spaces when the compact form is not in the body at all.

-- how many times `"key":value` occurs (value as JSON text, e.g. 'true' or '"queued"')
function count_json(text, key, value)
  local needle, n, pos = '"' .. key .. '":' .. value, 0, 1
  while true do
    local _, e = string.find(text, needle, pos, true)
    if e == nil then break end
    n, pos = n + 1, e + 1
  end
  if n == 0 and string.find(text, '"' .. key .. '"', 1, true) then
    local _, spaced = string.gsub(text, '"' .. key .. '"%s*:%s*' .. string.gsub(value, "%p", "%%%0"), "")
    return spaced
  end
  return n
end

-- the string values of `"key":"..."`, in order (values without escapes: ids, names)
function json_strings(text, key)
  local found, needle, pos = {}, '"' .. key .. '":"', 1
  while true do
    local _, e = string.find(text, needle, pos, true)
    if e == nil then break end
    local close = string.find(text, '"', e + 1, true)
    if close == nil then break end
    found[#found + 1] = string.sub(text, e + 1, close - 1)
    pos = close + 1
  end
  if #found == 0 and string.find(text, '"' .. key .. '"', 1, true) then
    for value in string.gmatch(text, '"' .. key .. '"%s*:%s*"([^"]*)"') do found[#found + 1] = value end
  end
  return found
end

function done(summary, latency, requests)
  local parts = {
    string.format('"requests":%d', summary.requests),
    string.format('"duration_us":%d', summary.duration),
    string.format('"status_errors":%d', summary.errors.status),
    string.format('"connect":%d', summary.errors.connect),
    string.format('"read":%d', summary.errors.read),
    string.format('"write":%d', summary.errors.write),
    string.format('"timeout":%d', summary.errors.timeout),
    string.format('"latency_mean_us":%.1f', latency.mean),
    string.format('"latency_max_us":%d', latency.max),
  }
  for _, p in ipairs({50, 75, 90, 99, 99.9}) do
    local key = string.gsub(tostring(p), "%.", "_")
    table.insert(parts, string.format('"p%s":%d', key, latency:percentile(p)))
  end
  -- requests slower than 10 ms: the lowest percentile above 10 ms, found by bisection, times the count
  if latency.max > 10000 then
    local low, high = 0.0, 100.0
    for _ = 1, 40 do
      local mid = (low + high) / 2
      if latency:percentile(mid) > 10000 then high = mid else low = mid end
    end
    table.insert(parts, string.format('"over_10ms":%d', math.floor(summary.requests * (100 - high) / 100 + 0.5)))
  else
    table.insert(parts, '"over_10ms":0')
  end
  for _, name in ipairs(COUNTERS) do
    local total = 0
    for _, thread in ipairs(threads) do
      total = total + (thread:get(name) or 0)
    end
    table.insert(parts, string.format('"%s":%d', name, total))
  end
  for _, thread in ipairs(threads) do
    local s = thread:get("sample")
    if s ~= nil then
      table.insert(parts, '"sample":' .. json_string(s))
      break
    end
  end
  io.write("QUEENBENCH {" .. table.concat(parts, ",") .. "}\n")
end
