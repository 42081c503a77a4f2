-- Fit-checked claims (Omega's fine-grained optimistic concurrency): a replica decided on its
-- own snapshot; at assume time the live node must still have room for the pod.

-- Host-port conflict, as kube-scheduler's NodePorts filter: same protocol and port, and the
-- same IP or either side 0.0.0.0.
local function port_conflict(p, nk, field)
  local ip, protocol, port = string.match(field, '^p:(.*)|([^|]*)|([^|]*)$')
  if ip == nil then return false end
  if redis.call('HEXISTS', nk, field) == 1
      or redis.call('HEXISTS', nk, 'p:0.0.0.0|' .. protocol .. '|' .. port) == 1 then
    return true
  end
  if ip ~= '0.0.0.0' then return false end
  local suffix = '|' .. protocol .. '|' .. port
  for _, used in ipairs(redis.call('HKEYS', nk)) do
    if string.sub(used, 1, 2) == 'p:' and string.sub(used, -#suffix) == suffix then
      return true
    end
  end
  return false
end

local RESOURCE_NAMES = { cpu = 'cpu', mem = 'memory', eph = 'ephemeral-storage' }

-- "" when the claim may go ahead, else comma-separated reasons; nil for an unknown check.
local function claim_conflicts(p, node, contribution, check, expected)
  local nk = p .. 'node:' .. node
  local state = redis.call('HMGET', nk, 'exists', 'gen')
  if state[1] ~= '1' then return 'node-missing' end
  local node_gen = stored_int(nk, state[2], 0)
  if check == 'generation' then
    local want = tonumber(expected)
    if want == nil then return nil end
    -- A change earlier in the same sc_batch is recorded on the node only when the call ends.
    -- Any difference is stale: a generation ahead of the node's means the cache lost writes
    -- (a restart without persistence, a failover) since the snapshot was taken.
    local current = changed_gen[node] or node_gen
    if current ~= want then return 'stale' end
    return ''
  end
  if check ~= 'fit' then return nil end
  local short = {}
  for field, amount in string.gmatch(contribution, '(%S+) (%S+)') do
    local prefix = string.sub(field, 1, 2)
    if prefix == 'r:' then
      local resource = string.sub(field, 3)
      local have = redis.call('HMGET', nk, field, 'a:' .. resource)
      if stored_int(nk, have[1], 0) + tonumber(amount) > stored_int(nk, have[2], 0) then
        local name = RESOURCE_NAMES[resource] or string.sub(resource, 3)
        short[#short + 1] = name
      end
    elseif prefix == 'p:' and port_conflict(p, nk, field) then
      local _, protocol, port = string.match(field, '^p:(.*)|([^|]*)|([^|]*)$')
      short[#short + 1] = 'port:' .. protocol .. '/' .. port
    end
  end
  local pods = redis.call('SCARD', p .. 'nodepods:' .. node)
  if pods + 1 > stored_int(nk, redis.call('HGET', nk, 'a:pods'), 0) then
    short[#short + 1] = 'pods'
  end
  return table.concat(short, ',')
end
