-- sc_add_pod: the informer saw the pod bound; confirm an assumed pod or add it outright.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, uid, node, blob, contribution ("<field> <amount> ...", aggregates.py)
-- Keys     pod:<uid>, node:<node>, node:<assumed node>, nodepods:*, nodes, pods, assumed,
--          deadlines, gen, nodegen, events
-- Reply    the generation the node now has
-- Errors   PODEXISTS <uid> added <node>   added twice
--          OVERFLOW <uid> <node> <field>   a node total would pass int64
--          BADARG <what>
-- Event    PodAdded  uid, node, gen, data=blob, and when it confirms an assumed pod:
--          confirmed=1, from=<node it was assumed on> (may differ from node) and fromgen=<the
--          generation that change gave that node>
local function add_pod(p, replica, a)
  local args, err = read_pod_args(p, a)
  if args == nil then return nil, err end
  local rec = load_pod(p, args.uid)
  if rec ~= nil and rec.state == 'added' then
    return nil, 'PODEXISTS ' .. args.uid .. ' added ' .. rec.node
  end
  if rec == nil then
    local gen, text = put_pod(p, args, 'added', '')
    emit(p, 'PodAdded', replica, 'uid', args.uid, 'node', args.node, 'gen', text,
         'data', args.blob)
    return gen
  end
  -- Assumed: the stored contribution leaves the node it was assumed on (a placeholder left
  -- empty disappears), and the confirmed pod is added where it really landed. Taking it off
  -- may write every cache-wide key.
  guard_cache(p, EVERY_CACHE_KEY)
  local _, from_gen = delete_pod(p, args.uid, rec)
  local gen, text = put_pod(p, args, 'added', '')
  emit(p, 'PodAdded', replica, 'uid', args.uid, 'node', args.node, 'gen', text,
       'data', args.blob, 'confirmed', '1', 'from', rec.node, 'fromgen', from_gen)
  return gen
end
