-- sc_assume_pod: a scheduler decided; book the pod on its node before binding.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, uid, node, blob, contribution ("<field> <amount> ...", aggregates.py)
-- Keys     pod:<uid>, node:<node>, nodepods:<node>, nodes, pods, assumed, gen, nodegen, events
-- Reply    the generation the node now has
-- Errors   PODEXISTS <uid> <state> <node>   the pod is already assumed or added
--          BADARG <what>                    malformed arguments (a client bug)
-- Event    PodAssumed  uid, node, gen, data=blob
local function assume_pod(p, replica, a)
  local args, err = read_pod_args(a)
  if args == nil then return nil, err end
  local rec = load_pod(p, args.uid)
  if rec ~= nil then
    return nil, 'PODEXISTS ' .. args.uid .. ' ' .. rec.state .. ' ' .. rec.node
  end
  local gen = put_pod(p, args, 'assumed')
  redis.call('SADD', p .. 'assumed', args.uid)
  emit(p, 'PodAssumed', replica,
       { 'uid', args.uid, 'node', args.node, 'gen', gen, 'data', args.blob })
  return gen
end
