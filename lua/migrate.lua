-- sc_migrate: brings a cache written by schema 1 to this schema, a bounded slice per call.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, command id, SSCAN cursor over `nodes` ("0" to start), node entries to
--          look at per call (1..1000, a hint to SSCAN)
-- Keys     nodes, nodepods:<name>, pod:<uid>, nodegen, node:<name> (its schema-1 `gen`)
-- Reply    { next cursor ("0" when every node entry has been looked at), node pod sets
--          converted }
-- Errors   BADARG <what>; CORRUPT <key> <why> (a listed pod without a readable record: nothing
--          of this slice is converted)
-- Schema 1 kept a node's pods in a set; schema 2 scores them in a zset by the generation that
-- placed each (the `gen` of its record), so snapshots read only the pods placed since, and
-- keeps a node's generation in `nodegen` only (schema 1 copied it into the node hash). A
-- converted set changes no content, so running it again, or alongside the cache's own commands
-- (which refuse a node still unconverted), is harmless.
local MIGRATE_MAX_COUNT = 1000
-- Members per ZADD (a bound on the arguments unpacked at once).
local MIGRATE_PER_ZADD = 200

local function migrate(p, replica, a)
  local cursor, count = a[1], tonumber(a[2])
  if cursor == nil or not string.match(cursor, '^%d+$') then return nil, 'BADARG cursor' end
  if count == nil or count < 1 or count > MIGRATE_MAX_COUNT or count ~= math.floor(count) then
    return nil, 'BADARG count'
  end
  expect_type(p .. 'nodes', 'set')
  expect_type(p .. 'nodegen', 'zset')
  local scan = redis.call('SSCAN', p .. 'nodes', cursor, 'COUNT', count)
  -- Every record is read and checked before the first write.
  local conversions = {}
  local stale = {}
  for _, node in ipairs(scan[2]) do
    -- Schema 1 kept each node's generation in its hash too; the index holds it now.
    if typed_read(p .. 'node:' .. node, 'hash', 'HEXISTS', 'gen') == 1 then
      stale[#stale + 1] = node
    end
    local index = p .. 'nodepods:' .. node
    local kind = key_type(index)
    if kind ~= 'set' and kind ~= 'zset' and kind ~= 'none' then
      corrupt(index, 'is a ' .. kind .. ', not a set (schema 1) or zset')
    end
    if kind == 'set' then
      local scored = {}
      for _, uid in ipairs(redis.call('SMEMBERS', index)) do
        local key = p .. 'pod:' .. uid
        local raw = get_string(key)
        if not raw then corrupt(index, 'lists pod ' .. uid .. ', which has no record') end
        local gen = string.match(raw, '^%S+ %S+ [01] %S+ (%-?%d+) ')
        if gen == nil then corrupt(key, 'has a malformed header') end
        scored[#scored + 1] = gen
        scored[#scored + 1] = uid
      end
      conversions[#conversions + 1] = { index, scored }
    end
  end
  -- Schema 2 keeps nodegen a skiplist from the start (NODEGEN_SKIPLIST in _helpers.lua).
  if #conversions > 0 then redis.call('ZADD', p .. 'nodegen', '-inf', NODEGEN_SKIPLIST) end
  for _, node in ipairs(stale) do redis.call('HDEL', p .. 'node:' .. node, 'gen') end
  for _, conversion in ipairs(conversions) do
    local index, scored = conversion[1], conversion[2]
    redis.call('DEL', index)
    call_in_slices('ZADD', index, scored, 2 * MIGRATE_PER_ZADD)
    checked[index] = true  -- a zset now, of no count this call read
  end
  -- A slice that converted nothing wrote nothing: its reply is not remembered either.
  return { scan[1], #conversions }, nil, #conversions + #stale
end
