-- Push: every request carries P.per_request messages for one random partition of P.partitions (as a
-- client pushes), payload P.payload. The broker assigns transaction ids, and the whole request text is
-- built once per partition and reused, so wrk spends its CPU on the socket, not in Lua. With
-- P.transaction_ids each message carries a transactionId of its own, as the official clients send (queen-mq
-- and queenpy's client default to a UUIDv7): time-ordered, UUID-shaped, unique per thread (its index and a
-- counter in the last group), built per request.
-- P.rate_per_thread > 0 paces the thread's requests to that many per second (the producer of the keep-up
-- scenario): an open-loop schedule of send slots every 1000 / rate ms, shared by the thread's connections,
-- so the rate does not depend on the latency as long as enough connections are free. A thread that falls
-- behind catches up at most CATCH_UP_MS (1 s) of missed slots.

COUNTERS = {"queued", "not_queued", "bad_responses"}
queued, not_queued, bad_responses = 0, 0, 0

local cache = {}
local id_thread, id_seq = 0, 0  -- the thread's index (1-based, from init) and its messages' counter

function init(args)
  math.randomseed(P.seed + 7919 * (thread_index or 0))
  id_thread = (thread_index or 0) + 1
end

local ffi = require("ffi")  -- wrk runs LuaJIT; its Lua API has no clock
ffi.cdef[[
  typedef struct { long tv_sec; long tv_nsec; } queenbench_timespec;
  int clock_gettime(int clock_id, queenbench_timespec *tp);
]]
local CLOCK_REALTIME, CLOCK_MONOTONIC = 0, 1
local clock = ffi.new("queenbench_timespec")

local function clock_ms(id)
  ffi.C.clock_gettime(id, clock)
  return tonumber(clock.tv_sec) * 1000 + tonumber(clock.tv_nsec) / 1e6
end

-- "tttttttt-tttt-7xxx-yxxx-xxxxxxxxxxxx": 48 bits of Unix milliseconds as in a UUIDv7 (RFC 9562), then the
-- thread's index and a per-thread counter
local function client_id()
  id_seq = id_seq + 1
  local ms = math.floor(clock_ms(CLOCK_REALTIME))
  return string.format("%08x-%04x-7%03x-%04x-%04x%08x", math.floor(ms / 65536), ms % 65536,
                       math.random(0, 4095), 0x8000 + math.random(0, 0x3fff), id_thread % 65536,
                       id_seq % 4294967296)
end

local function fresh_request(p)
  local head = '{"queue":"' .. P.queue .. '","partition":"p' .. p .. '","payload":' .. P.payload ..
               ',"transactionId":"'
  local items = {}
  for i = 1, P.per_request do items[i] = head .. client_id() .. '"}' end
  return wrk.format("POST", "/api/v1/push", nil, '{"items":[' .. table.concat(items, ",") .. ']}')
end

function request()
  local p = math.random(0, P.partitions - 1)
  if P.transaction_ids then return fresh_request(p) end
  local req = cache[p]
  if req == nil then
    local item = '{"queue":"' .. P.queue .. '","partition":"p' .. p .. '","payload":' .. P.payload .. '}'
    local items = {}
    for i = 1, P.per_request do items[i] = item end
    req = wrk.format("POST", "/api/v1/push", nil, '{"items":[' .. table.concat(items, ",") .. ']}')
    cache[p] = req
  end
  return req
end

if P.rate_per_thread > 0 then
  local CATCH_UP_MS = 1000
  local interval_ms = 1000 / P.rate_per_thread
  local next_slot = nil

  function delay()
    local t = clock_ms(CLOCK_MONOTONIC)
    if next_slot == nil or next_slot < t - CATCH_UP_MS then next_slot = t end
    local wait = next_slot - t
    next_slot = next_slot + interval_ms
    if wait < 0 then return 0 end
    return wait
  end
end

function response(status, headers, body)
  if status ~= 200 and status ~= 201 then
    bad_responses = bad_responses + 1
    keep_sample(status, body)
    return
  end
  local n = count_json(body, "status", '"queued"')
  queued = queued + n
  not_queued = not_queued + (P.per_request - n)
  if n < P.per_request then keep_sample(status, body) end
end
