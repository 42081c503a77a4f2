-- sc_remove_node: the informer saw a node deleted. A node that still holds pods stays as a
-- ghost (no node object, pods and aggregates intact) until its last pod goes.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, name
-- Keys     node:<name>, nodepods:<name>, nodeimgs:<name>, nodelabels:<name>, imgnodes:<image>,
--          images, imagegen,
--          treezones, treezone:<zone>, treegen, treecursor, nodes, gen, nodegen, events,
--          version:node:<name> (expires as a tombstone)
-- Reply    the generation recorded for the change
-- Errors   NODENOTFOUND <name> <absent|ghost>   unknown, or already removed (ghost/placeholder)
--          BADARG <what>
-- Event    NodeRemoved  node, gen, ghost=<1 if pods remain, else 0>
local function remove_node(p, replica, a)
  local name = a[1]
  if name == nil or name == '' then return nil, 'BADARG name' end
  local nk = p .. 'node:' .. name
  expect_type(nk, 'hash')
  local exists = redis.call('HGET', nk, 'exists')
  if exists == false then return nil, 'NODENOTFOUND ' .. name .. ' absent' end
  if exists ~= '1' then return nil, 'NODENOTFOUND ' .. name .. ' ghost' end
  local zone = redis.call('HGET', nk, 'zone') or ''
  guard_node_change(p, name, {}, { zone })
  guard_labels(p, name)
  local gen, text = touch(p, name)
  for _, image in ipairs(redis.call('SMEMBERS', p .. 'nodeimgs:' .. name)) do
    image_lost(p, name, image, gen)
  end
  tree_remove(p, name, zone, gen)
  redis.call('HSET', nk, 'exists', 0)
  redis.call('HDEL', nk, 'blob', 'zone')
  note_spec(nk, false, nil, '', text)  -- its pods leave every domain (_changes.lua)
  set_node_labels(p, name, {})
  local pods = redis.call('ZCARD', p .. 'nodepods:' .. name)
  drop_if_empty(p, name)
  retire_version(p .. 'version:node:' .. name)
  local ghost = '0'
  if pods > 0 then ghost = '1' end
  emit(p, 'NodeRemoved', replica, 'node', name, 'gen', text, 'ghost', ghost)
  return gen
end
