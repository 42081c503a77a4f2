-- sc_tree_next: the next node name in zone round-robin order; one cursor shared by every
-- replica, advanced atomically, so replicas calling it get different nodes.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica (unused)
-- Keys     treezones, treezone:<zone>, treecursor
-- Reply    a node name, or "" when the tree is empty
-- Errors   none
-- Event    none: the cursor is not cache state
-- The cursor of kube-scheduler's original NodeTree.Next(): an index per zone plus a zone index.
-- Each call takes the next zone (wrapping) and its next node; a zone whose index ran past its
-- end counts as exhausted, and when every zone is exhausted all indexes reset to 0. Nodes added
-- to an exhausted zone are served before the reset. Removing a node leaves indexes unchanged.
local function tree_next(p, replica, a)
  local zones = redis.call('ZRANGE', p .. 'treezones', 0, -1)
  local count = #zones
  if count == 0 then return '', nil, 0 end  -- nothing written
  local ck = p .. 'treecursor'
  local zone_index = tonumber(redis.call('HGET', ck, 'zi') or '0')
  local exhausted = 0
  while true do
    if zone_index >= count then zone_index = 0 end
    local zone = zones[zone_index + 1]
    zone_index = zone_index + 1
    local index = tonumber(redis.call('HGET', ck, 'z:' .. zone) or '0')
    local node = redis.call('ZRANGE', p .. 'treezone:' .. zone, index, index)[1]
    if node then
      redis.call('HSET', ck, 'zi', zone_index, 'z:' .. zone, index + 1)
      return node
    end
    exhausted = exhausted + 1
    if exhausted >= count then
      redis.call('DEL', ck)
      zone_index = 0
      exhausted = 0
    end
  end
end
