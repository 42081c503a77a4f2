-- sc_forget_pod: scheduling failed after assume; give the booked resources back.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, uid, node (the node the caller believes the pod was assumed on)
-- Keys     pod:<uid>, node:<stored node>, nodepods:<stored node>, pods, assumed, deadlines,
--          nodes, gen, nodegen, events
-- Reply    the generation the node now has
-- Errors   WRONGNODE <uid> <state> <stored node> <given node>
--          NOTASSUMED <uid> <state>           absent or added pods cannot be forgotten
--          BADARG <what>
-- Event    PodForgotten  uid, node, gen, data=stored blob
local function forget_pod(p, replica, a)
  local uid, node = a[1], a[2]
  if uid == nil or uid == '' then return nil, 'BADARG uid' end
  local rec = load_pod(p, uid)
  if rec ~= nil and node ~= nil and node ~= '' and rec.node ~= node then
    return nil, 'WRONGNODE ' .. uid .. ' ' .. rec.state .. ' ' .. rec.node .. ' ' .. node
  end
  if rec == nil or rec.state ~= 'assumed' then
    return nil, 'NOTASSUMED ' .. uid .. ' ' .. pod_state(rec)
  end
  local gen, text = delete_pod(p, uid, rec)
  emit(p, 'PodForgotten', replica,
       'uid', uid, 'node', rec.node, 'gen', text, 'data', rec.blob)
  return gen
end
