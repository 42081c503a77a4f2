-- sc_sync_node: a feeder's list or watch saw a node at resourceVersion rv: present ("set") or
-- deleted ("delete"). Adds, updates (a ghost or placeholder is revived) or removes it as the
-- cache's state calls for; stale and repeated versions are dropped (_versions.lua).
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, rv, op, name, then for "set": zone, blob, n, (resource, amount) * n, m,
--          (image, size) * m (as sc_add_node)
-- Keys     version:node:<name>, and those of sc_add_node / sc_update_node / sc_remove_node
-- Reply    {"applied", "add"|"update"|"remove"|"none", gen or ""}
--          {"dropped", "repeated"|"stale", stored version}   nothing read or written
-- Errors   those of sc_add_node / sc_remove_node (nothing written); BADARG rv|op|name
-- Event    NodeAdded, NodeUpdated or NodeRemoved; none for a drop or a delete of a node the
--          cache does not hold (or holds only as a ghost)
local function sync_node(p, replica, a)
  local rv, op, name = normal_rv(a[1]), a[2], a[3]
  if rv == nil then return nil, 'BADARG rv' end
  if op ~= 'set' and op ~= 'delete' then return nil, 'BADARG op' end
  if not name_arg(name) then return nil, 'BADARG name' end
  local vkey = p .. 'version:node:' .. name
  local dropped = stale_version(vkey, rv)
  if dropped ~= nil then return dropped, nil, 0 end
  local nk = p .. 'node:' .. name
  expect_type(nk, 'hash')
  local live = redis.call('HGET', nk, 'exists') == '1'
  local args = {}
  for i = 3, #a do args[#args + 1] = a[i] end
  local action, result, err = 'none', '', nil
  if op == 'delete' then
    if live then
      action = 'remove'
      result, err = COMMANDS['remove_node'](p, replica, { name })
    end
  elseif live then
    action = 'update'
    result, err = COMMANDS['update_node'](p, replica, args)
  else
    action = 'add'
    result, err = COMMANDS['add_node'](p, replica, args)
  end
  if result == nil then return nil, err end
  record_version(vkey, rv, op == 'delete')
  return { 'applied', action, result }
end
