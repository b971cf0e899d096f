-- Consume: wildcard long-poll pops of P.batch messages from P.queue, round-robin over P.groups
-- ("" = queue mode). P.mode:
--   "auto"    autoAck=true: the pop is the whole consumption;
--   "ack"     the pop's messages are acknowledged with one POST /api/v1/ack/batch (status completed);
--   "handoff" one POST /api/v1/transaction acks them and pushes one message per popped message to
--             P.target (same partition name, payload P.payload, transactionId "h-" .. source id).
-- The follow-up request is built from the pop's body and sent as the thread's next request.
-- A pop answers one partition (partitions=1), so its messages share one partitionId, one leaseId and one
-- consumerGroup, which the follow-up request carries.

COUNTERS = {"pops", "empty_pops", "delivered", "acked", "ack_failed", "tx_ok", "tx_failed", "handed",
            "parse_errors", "bad_responses"}
pops, empty_pops, delivered, acked, ack_failed, tx_ok, tx_failed, handed, parse_errors, bad_responses =
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0

local pop_requests = {}
local next_group = 0

function init(args)
  for g, group in ipairs(P.groups) do
    local path = "/api/v1/pop/queue/" .. P.queue .. "?batch=" .. P.batch .. "&wait=true&timeout=" .. P.timeout_ms
    if P.mode == "auto" then path = path .. "&autoAck=true" end
    if group ~= "" then path = path .. "&consumerGroup=" .. group end
    pop_requests[g] = wrk.format("GET", path)
  end
  next_group = (thread_index or 0) % #pop_requests
end

function request()
  local req = dequeue()
  if req ~= nil then return req end
  next_group = next_group % #pop_requests + 1
  return pop_requests[next_group]
end

local function follow_up(body, ids)
  local lease = string.match(body, '"leaseId"%s*:%s*"([^"]+)"')
  local partition_id = nil
  for _, pid in ipairs(json_strings(body, "partitionId")) do
    if partition_id == nil then
      partition_id = pid
    elseif pid ~= partition_id then
      return nil
    end
  end
  local group = string.match(body, '"consumerGroup"%s*:%s*"([^"]+)"')
  if lease == nil or partition_id == nil or group == nil then return nil end
  local acks = {}
  local kind = P.mode == "handoff" and '"type":"ack","consumerGroup":"' .. group .. '",' or ""
  for i, id in ipairs(ids) do
    acks[i] = '{' .. kind .. '"transactionId":"' .. id .. '","partitionId":"' .. partition_id ..
              '","leaseId":"' .. lease .. '","status":"completed"}'
  end
  if P.mode == "ack" then
    return wrk.format("POST", "/api/v1/ack/batch", nil, '{"acknowledgments":[' .. table.concat(acks, ",") ..
                      '],"consumerGroup":"' .. group .. '"}')
  end
  local partition = string.match(body, '"partition"%s*:%s*"([^"]*)"')
  if partition == nil then return nil end
  local items = {}
  for i, id in ipairs(ids) do
    items[i] = '{"queue":"' .. P.target .. '","partition":"' .. partition .. '","payload":' .. P.payload ..
               ',"transactionId":"h-' .. id .. '"}'
  end
  return wrk.format("POST", "/api/v1/transaction", nil,
                    '{"operations":[' .. table.concat(acks, ",") .. ',{"type":"push","items":[' ..
                    table.concat(items, ",") .. ']}]}')
end

function response(status, headers, body)
  if status ~= 200 then
    bad_responses = bad_responses + 1
    keep_sample(status, body)
    return
  end
  local first = string.match(body, "^%s*(.)")
  if first == "[" then                                      -- ack/batch: one result per item
    acked = acked + count_json(body, "success", "true")
    local failed = count_json(body, "success", "false")
    ack_failed = ack_failed + failed
    if failed > 0 then keep_sample(status, body) end
    return
  end
  if string.find(body, '"results"', 1, true) then           -- transaction
    if string.find(body, '"success"%s*:%s*false') then
      tx_failed = tx_failed + 1
      keep_sample(status, body)
    else
      tx_ok = tx_ok + 1
      handed = handed + count_json(body, "type", '"push"')
    end
    return
  end
  pops = pops + 1                                           -- pop
  local ids = json_strings(body, "transactionId")
  if #ids == 0 then
    empty_pops = empty_pops + 1
    return
  end
  delivered = delivered + #ids
  if P.mode == "auto" then return end
  local req = follow_up(body, ids)
  if req == nil then
    parse_errors = parse_errors + 1
    keep_sample(status, body)
  else
    enqueue(req)
  end
end
