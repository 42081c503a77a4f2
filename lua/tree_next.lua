-- sc_tree_next: the next node name in zone round-robin order; one cursor shared by every
-- replica, advanced atomically, so replicas calling it get different nodes.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica (unused)
-- Keys     treezones, treezone:<zone>, treecursor
-- Reply    a node name, or "" when the tree is empty
-- Errors   CORRUPT <key> <why>   treezones names a zone with no nodes, or a key of the wrong
--          type: answered before any write
-- Event    none: the cursor is not cache state
-- The cursor of kube-scheduler's original NodeTree.Next(): an index per zone plus a zone index.
-- Each call takes the next zone (wrapping) and its next node; a zone whose index ran past its
-- end counts as exhausted, and when every zone is exhausted all indexes reset to 0. Nodes added
-- to an exhausted zone are served before the reset. Removing a node leaves indexes unchanged.
local function tree_next(p, replica, a)
  local zk = p .. 'treezones'
  expect_type(zk, 'zset')
  local ck = p .. 'treecursor'
  expect_type(ck, 'hash')
  local zones = redis.call('ZRANGE', zk, 0, -1)
  local count = #zones
  if count == 0 then return '', nil, 0 end  -- nothing written
  local zone_index = stored_int(ck, redis.call('HGET', ck, 'zi'), 0)
  -- Bounded: one pass over the zones from the cursor, and after a reset one more. A second
  -- pass that finds nothing means treezones lists zones without nodes: corruption, reported
  -- before anything is written (the cursor included).
  local reset = false
  local exhausted = 0
  for _ = 1, 2 * count do
    if zone_index >= count or zone_index < 0 then zone_index = 0 end
    local zone = zones[zone_index + 1]
    zone_index = zone_index + 1
    local zone_key = p .. 'treezone:' .. zone
    expect_type(zone_key, 'zset')
    local index = 0
    if not reset then index = stored_int(ck, redis.call('HGET', ck, 'z:' .. zone), 0) end
    local node = nil
    if index >= 0 then node = redis.call('ZRANGE', zone_key, index, index)[1] end
    if node then
      if reset then redis.call('DEL', ck) end
      redis.call('HSET', ck, 'zi', zone_index, 'z:' .. zone, index + 1)
      return node
    end
    exhausted = exhausted + 1
    if exhausted >= count then
      if reset then break end
      reset, zone_index, exhausted = true, 0, 0
    end
  end
  corrupt(zk, 'lists zones without nodes')
end
