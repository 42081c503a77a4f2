-- sc_assume_pod: a scheduler decided; book the pod on its node before binding.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, uid, node, blob, contribution ("<field> <amount> ...", aggregates.py),
--          [check ("" | "fit" | "generation"), [expected node generation, [lease ttl ms,
--          [since, reads, domains, incarnation, [seen]]]]]
--          A lease ttl > 0 takes (or renews) the replica's lease with the claim, atomically:
--          the replica is known to sc_forget_lapsed from its first pod on.
--          `since` (a cache generation), `reads` ("@<rule> <node> ...") and `domains`
--          ("<topology key> <node> ...\n..."): the inter-pod
--          rules the decision judged on a snapshot at `since` still hold (_claims.lua,
--          docs/constraints.md). `seen`: the id of the newest event that snapshot saw; the
--          claim is refused when the stream lost it (_history.lua).
-- Keys     pod:<uid>, node:<node>, nodepods:<node>, nodes, pods, assumed, gen, nodegen, events,
--          antipods
-- Reply    the generation the node now has
-- Errors   PODEXISTS <uid> <state> <node>   the pod is already assumed or added
--          FITCONFLICT <uid> <node> <reason,...>   with check "fit": the live node lacks room
--            (reasons: cpu, memory, ephemeral-storage, pods, <scalar>, port:<proto>/<port>) or
--            is gone (node-missing); with "generation": the node changed since the expected
--            generation (stale) or is gone (node-missing); with `since`: a rule the live
--            cache may break (pod-affinity, pod-anti-affinity, existing-anti-affinity,
--            topology-spread) or too many nodes changed since (stale); with "fit" and no
--            `since`: placed pods with required anti-affinity exist, so existing pods' terms
--            toward the pod must be judged on a snapshot first (unchecked); with `seen`: the
--            cache lost writes that snapshot saw (lost-writes)
--          OVERFLOW <uid> <node> <field>   a node total would pass int64
--          BADARG <what>                    malformed arguments (a client bug)
-- Event    PodAssumed  uid, node, gen, data=blob

-- The cache-wide sets assume_pod writes (checked with its replica's, in one call).
local ASSUMED_SETS = { 'pods', 'assumed' }
local LEASED_SETS = { 'pods', 'assumed', 'replicas' }

local function assume_pod(p, replica, a)
  local args, err = read_pod_args(p, a)
  if args == nil then return nil, err end
  local rec = load_pod(p, args.uid, true)  -- only to refuse it
  if rec ~= nil then
    return nil, 'PODEXISTS ' .. args.uid .. ' ' .. rec.state .. ' ' .. rec.node
  end
  local check = a[5] or ''
  if check ~= '' then
    local reasons = claim_conflicts(p, args.node, args.contribution, check, a[6])
    if reasons == nil then return nil, 'BADARG check ' .. args.uid end
    if reasons ~= '' then
      return nil, 'FITCONFLICT ' .. args.uid .. ' ' .. args.node .. ' ' .. reasons
    end
  end
  local since = a[8] or ''
  if since ~= '' then
    local lost = history_lost(p, a[12])  -- _history.lua
    if lost == nil then return nil, 'BADARG seen ' .. args.uid end
    if lost then return nil, 'FITCONFLICT ' .. args.uid .. ' ' .. args.node .. ' lost-writes' end
    local rule = rule_conflicts(p, since, a[9], a[10], a[11])
    if rule == nil then return nil, 'BADARG reads ' .. args.uid end
    if rule ~= '' then
      return nil, 'FITCONFLICT ' .. args.uid .. ' ' .. args.node .. ' ' .. rule
    end
  elseif check == 'fit' and bare_claim_unchecked(p) then
    return nil, 'FITCONFLICT ' .. args.uid .. ' ' .. args.node .. ' unchecked'
  end
  local lease_ms = bounded_int(a[7] or '0', BOUNDS.duration_ms)
  if lease_ms == nil then return nil, 'BADARG lease ' .. args.uid end
  local leasing = lease_ms > 0 and replica ~= ''
  -- The sets it writes, in one call: `pods`, `assumed`, its replica's claims and, leasing, the
  -- replica set. In a batch most are checked already (guard_cache leaves those out); a single
  -- claim names them straight away (guard_cache's loop costs ~5,000 instructions).
  local claims = nil
  if replica ~= '' then claims = p .. 'replicapods:' .. replica end
  if batching then
    guard_cache(p, leasing and LEASED_SETS or ASSUMED_SETS, claims)
  elseif claims == nil then
    expect_sets(p, p .. 'pods', p .. 'assumed')
  elseif leasing then
    expect_sets(p, p .. 'pods', p .. 'assumed', claims, p .. 'replicas')
  else
    expect_sets(p, p .. 'pods', p .. 'assumed', claims)
  end
  -- put_pod first: its INCR of `gen` is the first write (the wrapper left `gen` unchecked).
  local gen, text = put_pod(p, args, 'assumed', replica)
  if leasing then
    redis.call('SET', p .. 'lease:' .. replica, '1', 'PX', int_string(lease_ms))
    redis.call('SADD', p .. 'replicas', replica)
  end
  redis.call('SADD', p .. 'assumed', args.uid)
  emit(p, 'PodAssumed', replica,
       'uid', args.uid, 'node', args.node, 'gen', text, 'data', args.blob)
  return gen
end
