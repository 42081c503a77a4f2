-- sc_update_pod: the informer saw an added pod change (labels, requests, status...).
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, uid, node, blob, contribution   -- of the new pod, as for sc_add_pod
-- Keys     pod:<uid>, node:<node>, nodepods:<node>, nodes, gen, nodegen, events
-- Reply    the generation the node now has
-- Errors   PODNOTFOUND <uid> absent
--          NOTADDED <uid> assumed             assumed pods get an add first, never an update
--          WRONGNODE <uid> added <stored node> <new node>   (upstream exits the process)
--          OVERFLOW <uid> <node> <field>   a node total would pass int64
--          BADARG <what>
-- Event    PodUpdated  uid, node, gen, data=new blob
-- The stored contribution is subtracted, never the caller's copy of the old pod.
-- `loaded`: the pod's record as sc_sync_pod read it (load_pod with `stays`), else nil.
local function update_pod(p, replica, a, loaded)
  local args, err = read_pod_args(p, a)
  if args == nil then return nil, err end
  local rec = loaded
  if rec == nil then
    rec = load_pod(p, args.uid)
  else
    guard_removal(p, rec.node, rec.contribution)
  end
  if rec == nil then return nil, 'PODNOTFOUND ' .. args.uid .. ' absent' end
  if rec.state ~= 'added' then return nil, 'NOTADDED ' .. args.uid .. ' ' .. rec.state end
  if rec.node ~= args.node then
    return nil, 'WRONGNODE ' .. args.uid .. ' added ' .. rec.node .. ' ' .. args.node
  end
  delete_pod(p, args.uid, rec)
  local gen, text = put_pod(p, args, 'added', '')
  emit(p, 'PodUpdated', replica,
       'uid', args.uid, 'node', args.node, 'gen', text, 'data', args.blob)
  return gen
end
