-- sc_sync_pod: a feeder's list or watch saw a pod at resourceVersion rv: assigned and running
-- ("set"), or gone, terminated or unassigned ("delete"). The function decides add, confirm,
-- update or remove from what the cache holds, so feeders need not read the cache first, and
-- any number of them may send the same change (_versions.lua).
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, rv, op, uid, then for "set": node, blob, contribution (as sc_add_pod)
-- Keys     version:pod:<uid>, and those of sc_add_pod, sc_update_pod or sc_remove_pod
-- Reply    {"applied", "add"|"update"|"remove"|"none", gen or ""}
--          {"dropped", "repeated"|"stale", stored version}   nothing read or written
-- Errors   those of sc_add_pod / sc_update_pod / sc_remove_pod (nothing written);
--          BADARG rv|op|uid
-- Event    that of the command applied (PodAdded, also confirming an assumed pod; PodUpdated;
--          PodRemoved); none for a drop, or a delete of a pod the cache does not hold
local function sync_pod(p, replica, a)
  local rv, op, uid = normal_rv(a[1]), a[2], a[3]
  if rv == nil then return nil, 'BADARG rv' end
  if op ~= 'set' and op ~= 'delete' then return nil, 'BADARG op' end
  if uid == nil or uid == '' then return nil, 'BADARG uid' end
  local vkey = p .. 'version:pod:' .. uid
  local dropped = stale_version(vkey, rv)
  if dropped ~= nil then return dropped, nil, 0 end
  local rec = load_pod(p, uid)
  local action, result, err = 'none', '', nil
  if op == 'delete' then
    if rec ~= nil then
      action = 'remove'
      result, err = COMMANDS['remove_pod'](p, replica, { uid, '' })
    end
  else
    local args = { uid, a[4], a[5], a[6] }
    if rec ~= nil and rec.state == 'added' then
      action = 'update'
      result, err = COMMANDS['update_pod'](p, replica, args)
    else  -- new, or confirms an assumed pod (on whichever node)
      action = 'add'
      result, err = COMMANDS['add_pod'](p, replica, args)
    end
  end
  if result == nil then return nil, err end
  record_version(vkey, rv, op == 'delete')
  return { 'applied', action, result }
end
