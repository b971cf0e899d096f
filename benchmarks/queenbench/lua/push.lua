-- Push: every request carries P.per_request messages for one random partition of P.partitions (as a
-- client pushes), payload P.payload. The broker assigns transaction ids. The whole request text is
-- built once per partition and reused, so wrk spends its CPU on the socket, not in Lua.
-- P.delay_ms > 0 paces each connection (the producer of the keep-up scenario).

COUNTERS = {"queued", "not_queued", "bad_responses"}
queued, not_queued, bad_responses = 0, 0, 0

local cache = {}

function init(args)
  math.randomseed(P.seed + 7919 * (thread_index or 0))
end

function request()
  local p = math.random(0, P.partitions - 1)
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

if P.delay_ms > 0 then
  function delay()
    return P.delay_ms
  end
end

function response(status, headers, body)
  if status ~= 200 and status ~= 201 then
    bad_responses = bad_responses + 1
    return
  end
  local n = count(body, '"queued"')
  queued = queued + n
  not_queued = not_queued + (P.per_request - n)
end
