-- sc_remove_pod: the informer saw the pod deleted (also while it was still assumed).
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, uid, node ("" when the delete event lost the node name: the stored one wins)
-- Keys     pod:<uid>, node:<stored node>, nodepods:<stored node>, nodes, pods, assumed,
--          deadlines, gen, nodegen, events, version:pod:<uid> (expires as a tombstone)
-- Reply    the generation the node now has
-- Errors   PODNOTFOUND <uid> absent
--          WRONGNODE <uid> <state> <stored node> <given node>   (upstream exits the process)
--          BADARG <what>
-- Event    PodRemoved  uid, node, gen, state=<assumed|added>, data=stored blob
-- `loaded`: the pod's record as sc_sync_pod read it (load_pod with `stays`), else nil.
local function remove_pod(p, replica, a, loaded)
  local uid, node = a[1], a[2]
  if uid == nil or uid == '' then return nil, 'BADARG uid' end
  local rec = loaded
  if rec == nil then
    rec = load_pod(p, uid)
  else
    guard_removal(p, rec.node, rec.contribution)
  end
  if rec == nil then return nil, 'PODNOTFOUND ' .. uid .. ' absent' end
  if node ~= nil and node ~= '' and node ~= rec.node then
    return nil, 'WRONGNODE ' .. uid .. ' ' .. rec.state .. ' ' .. rec.node .. ' ' .. node
  end
  local gen, text = delete_pod(p, uid, rec)
  retire_version(p .. 'version:pod:' .. uid)
  emit(p, 'PodRemoved', replica,
       'uid', uid, 'node', rec.node, 'gen', text, 'state', rec.state, 'data', rec.blob)
  return gen
end
