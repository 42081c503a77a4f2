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
--          confirmed=1; and when it was assumed on another node or with other requests (a
--          move): from=<node it was assumed on> and fromgen=<the generation its removal gave
--          that node>. Without them, the pod was confirmed in place: from is `node`, fromgen
--          is `gen` (readers default them so: store/fold.py).

-- The usual confirmation: the pod landed where it was assumed, on a live node (a ghost or a
-- placeholder it was the last pod of goes and comes back new, as upstream and the fold have it),
-- with the same requests. The
-- node's totals and the pod's place in `pods` stay as they are (taking the pod off and putting
-- it back, as a move does, cost six HINCRBYs and five more calls for the same sums); the
-- record, its generation and the indexes of an assumed pod change. One change of the node: the
-- event names no `from`/`fromgen` (they would be its node and gen: four stream elements that
-- every replica's catch-up reads, for nothing; issue 40). Checked here: `assumed`, `deadlines`; by the wrapper: `nodegen`,
-- `events` (and `pods`, left as it is); by read_pod_args: the node's pod set; by load_pod: the
-- claim set; `gen` needs no check (touch: the first write).
local function confirm_in_place(p, replica, args, rec)
  expect_type(p .. 'assumed', 'set')
  expect_type(p .. 'deadlines', 'zset')
  local gen, text = touch(p, args.node)
  release_claim(p, args.uid, rec)
  redis.call('SREM', p .. 'assumed', args.uid)
  redis.call('ZREM', p .. 'deadlines', args.uid)
  local pk = p .. 'nodepods:' .. args.node
  redis.call('ZADD', pk, text, args.uid)
  checked[pk] = true  -- (as place_pod's: the pod was there, but a count is no longer trusted)
  write_record(p, args.uid, 'added', args.node, '0', '', text, '', args.contribution.text,
               args.blob)
  emit(p, 'PodAdded', replica, 'uid', args.uid, 'node', args.node, 'gen', text,
       'data', args.blob, 'confirmed', '1')
  return gen
end

-- `loaded`: the pod's record as sc_sync_pod read it (load_pod with `stays`; false: none),
-- else nil and it is read here.
local function add_pod(p, replica, a, loaded)
  local args, err = read_pod_args(p, a)
  if args == nil then return nil, err end
  local rec = loaded
  if rec == nil then
    rec = load_pod(p, args.uid, true)  -- the move below checks the removal itself
  elseif rec == false then
    rec = nil
  end
  if rec ~= nil and rec.state == 'added' then
    return nil, 'PODEXISTS ' .. args.uid .. ' added ' .. rec.node
  end
  if rec == nil then
    expect_type(p .. 'pods', 'set')
    local gen, text = put_pod(p, args, 'added', '')
    emit(p, 'PodAdded', replica, 'uid', args.uid, 'node', args.node, 'gen', text,
         'data', args.blob)
    return gen
  end
  if args.live and rec.node == args.node and rec.contribution == args.contribution then
    return confirm_in_place(p, replica, args, rec)
  end
  -- Assumed elsewhere (or resized): the stored contribution leaves the node it was assumed on
  -- (a placeholder left empty disappears), and the confirmed pod is added where it really
  -- landed. Taking it off may write every cache-wide key.
  guard_removal(p, rec.node, rec.contribution)
  guard_cache(p, EVERY_CACHE_KEY)
  local _, from_gen = delete_pod(p, args.uid, rec)
  local gen, text = put_pod(p, args, 'added', '')
  emit(p, 'PodAdded', replica, 'uid', args.uid, 'node', args.node, 'gen', text,
       'data', args.blob, 'confirmed', '1', 'from', rec.node, 'fromgen', from_gen)
  return gen
end
