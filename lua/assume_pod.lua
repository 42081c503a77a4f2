-- sc_assume_pod: a scheduler decided; book the pod on its node before binding.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, uid, node, blob, contribution ("<field> <amount> ...", aggregates.py),
--          [check ("" | "fit" | "generation"), [expected node generation, [lease ttl ms,
--          [since, reads, domains, incarnation, [seen, [candidates...]]]]]]
--          A lease ttl > 0 takes (or renews) the replica's lease with the claim, atomically:
--          the replica is known to sc_forget_lapsed from its first pod on.
--          `since` (a cache generation), `reads` ("@<rule> <node> ...") and `domains`
--          ("<topology key> <node> ...\n..."): the inter-pod
--          rules the decision judged on a snapshot at `since` still hold (_claims.lua,
--          docs/constraints.md). `since` "-": the pod has rules of its own nobody judged
--          (refused as `unchecked`). `seen`: the id of the newest event that snapshot saw
--          ("" for none); the claim is refused when the stream lost it (_history.lua).
--          check "fit:<priority>": "fit", the claimer's priority given for the room nominated
--          pods hold (_nominations.lua: refused as `nominated` when it would take it).
--          `candidates` (with "fit" only): count (<= 7), the
--          length of the blob prefix they share with `blob`, then per candidate node, blob
--          rest, reads, domains: the first of the claim's node and the candidates that passes
--          every check is taken (_pick.lua).
-- Keys     pod:<uid>, node:<node>, nodepods:<node>, nodes, pods, assumed, gen, nodegen, events,
--          antipods
-- Reply    the generation the node now has; with candidates, {generation, node taken}
-- Errors   PODEXISTS <uid> <state> <node>   the pod is already assumed or added
--          FITCONFLICT <uid> <node> <reason,...>   (with candidates: every one was refused;
--            the claim's own node and reasons are named) with check "fit": the live node lacks room
--            (reasons: cpu, memory, ephemeral-storage, pods, <scalar>, port:<proto>/<port>) or
--            is gone (node-missing); with "generation": the node changed since the expected
--            generation (stale) or is gone (node-missing); with `since`: a rule the live
--            cache may break (pod-affinity, pod-anti-affinity, existing-anti-affinity,
--            topology-spread), a node changed its labels, taints or membership since
--            (node-changed) or too many nodes changed since (stale); with "fit" and no
--            `since`: placed pods with required anti-affinity exist, so existing pods' terms
--            toward the pod must be judged on a snapshot first (unchecked); with `seen`: the
--            cache lost writes that snapshot saw (lost-writes)
--          OVERFLOW <uid> <node> <field>   a node total would pass int64
--          BADARG <what>                    malformed arguments (a client bug)
-- Event    PodAssumed  uid, node, gen, data=blob (sc_timed_claim: deadline too, below)

-- The cache-wide sets assume_pod writes (checked with its replica's, in one call).
local ASSUMED_SETS = { 'pods', 'assumed' }
local LEASED_SETS = { 'pods', 'assumed', 'replicas' }

-- `since` of a fit-checked claim of a pod whose own inter-pod rules were not judged: refused
-- as `unchecked`, so the client judges them on a snapshot and claims again.
local UNJUDGED = '-'

-- "" when the pod may go on `args.node`, else the reasons it may not; nil and the error for
-- malformed arguments. Reads only. `nominated`: the claimer's priority when nominations exist
-- (_nominations.lua); `before`: a gang's earlier members there (sc_gang_claim).
local function refusal(p, args, check, a, reads, domains, nominated, before)
  if check ~= '' then
    local reasons = claim_conflicts(p, args.node, args.contribution, check, a[6], before,
                                    args.state)
    if reasons == nil then return nil, 'BADARG check ' .. args.uid end
    if reasons ~= '' then return reasons end
    if nominated and check == 'fit' then  -- room held for nominated pods (_nominations.lua)
      reasons = NOM.conflicts(p, args.node, args.uid, args.contribution, nominated.priority,
                              before)
      if reasons ~= '' then return reasons end
    end
  end
  local since = a[8] or ''
  if since == UNJUDGED then
    -- The pod has rules of its own that nobody judged (a batch's claim without rules=).
    return 'unchecked'
  elseif since ~= '' then
    local rule = rule_conflicts(p, args.node, since, reads, domains, a[11])
    if rule == nil then return nil, 'BADARG reads ' .. args.uid end
    return rule
  elseif check == 'fit' and bare_claim_unchecked(p) then
    return 'unchecked'
  end
  return ''
end

-- `deadline` (ms text; sc_timed_claim only, nil otherwise): the claim is written with its
-- binding finished and that deadline in one pass (record, `deadlines`, one PodAssumed event
-- carrying `deadline`), as sc_assume_pod then sc_finish_binding leave it; the deadline, not the
-- replica's lease, bounds it from the start, so it is never in the replica's claims.
local function assume_pod(p, replica, a, deadline)
  -- The check first (refused after the arguments and the record, as before): a fit check's
  -- node read goes with the arguments' (read_pod_args).
  local check, priority = NOM.check_arg(a[5] or '')
  local args, err = read_pod_args(p, a, check == 'fit')
  if args == nil then return nil, err end
  local rec = load_pod(p, args.uid, true)  -- only to refuse it
  if rec ~= nil then
    return nil, 'PODEXISTS ' .. args.uid .. ' ' .. rec.state .. ' ' .. rec.node
  end
  if check == nil then return nil, 'BADARG check ' .. args.uid end
  local nominated = NOM.any(p) and { priority = priority } or nil
  local candidates, bad = read_candidates(a, 13, args.blob)
  if candidates == nil or (candidates > 0 and check ~= 'fit') then
    return nil, 'BADARG ' .. (bad or 'candidates') .. ' ' .. args.uid
  end
  -- The snapshot the decision ran on saw event `seen`: a history that lost it is another one.
  local lost = history_lost(p, a[12])  -- _history.lua
  if lost == nil then return nil, 'BADARG seen ' .. args.uid end
  if lost then return nil, 'FITCONFLICT ' .. args.uid .. ' ' .. args.node .. ' lost-writes' end
  local reason, err = refusal(p, args, check, a, a[9], a[10], nominated)
  if reason == nil then return nil, err end
  -- The ranked candidates, in order, when the claim's own node is refused. One refused only
  -- for want of judging (`unchecked`) makes the refusal `unchecked`, whatever the claim's own
  -- node lacked: the client judges the rules and claims again with every candidate (naming
  -- only its own node's reasons, a bare claim's fitting candidates were never tried again).
  local unjudged = reason == 'unchecked'
  for j = 1, candidates do
    if reason == '' then break end
    local candidate = candidate_at(a, 13, j, args.blob)
    local there = candidate_args(p, args, candidate)
    if there ~= nil then
      local why, failed = refusal(p, there, check, a, candidate.reads, candidate.domains,
                                  nominated)
      if why == nil then return nil, failed end
      if why == '' then
        args, reason = there, ''
      elseif why == 'unchecked' then
        unjudged = true
      end
    end
  end
  if reason ~= '' then
    if unjudged then reason = 'unchecked' end
    return nil, 'FITCONFLICT ' .. args.uid .. ' ' .. args.node .. ' ' .. reason
  end
  local lease_ms = int_arg(a[7] or '0', 0, BOUNDS.MAX_DURATION_MS)
  if lease_ms == nil then return nil, 'BADARG lease ' .. args.uid end
  -- The pod's own nomination, dropped as it lands (read now: writes come after every read).
  if nominated then nominated = NOM.plan(p, args.uid, now_ms(nil)) end
  local leasing = lease_ms > 0 and replica ~= ''
  -- The sets it writes, in one call: `pods`, `assumed`, its replica's claims and, leasing, the
  -- replica set. In a batch most are checked already (guard_cache leaves those out); a single
  -- claim names them straight away (guard_cache's loop costs ~5,000 instructions).
  local claims = nil
  if replica ~= '' and deadline == nil then claims = p .. 'replicapods:' .. replica end
  if batching then
    guard_cache(p, leasing and LEASED_SETS or ASSUMED_SETS, claims)
  elseif claims == nil and leasing then  -- a timed claim's: in no replica's claims
    expect_sets(p, p .. 'pods', p .. 'assumed', p .. 'replicas')
  elseif claims == nil then
    expect_sets(p, p .. 'pods', p .. 'assumed')
  elseif leasing then
    expect_sets(p, p .. 'pods', p .. 'assumed', claims, p .. 'replicas')
  else
    expect_sets(p, p .. 'pods', p .. 'assumed', claims)
  end
  -- put_pod first: its INCR of `gen` is the first write (the wrapper left `gen` unchecked).
  -- (With a deadline the record names the replica, which is in no claims: put_pod.)
  local gen, text = put_pod(p, args, 'assumed', replica, deadline)
  if deadline then redis.call('ZADD', p .. 'deadlines', deadline, args.uid) end
  if leasing then
    -- a[7]: int_arg took it as canonical decimal text, int_string(lease_ms)'s very text.
    redis.call('SET', p .. 'lease:' .. replica, '1', 'PX', a[7])
    redis.call('SADD', p .. 'replicas', replica)
  end
  redis.call('SADD', p .. 'assumed', args.uid)
  if nominated then NOM.settle(p, nominated) end
  if deadline then
    emit(p, 'PodAssumed', replica, 'uid', args.uid, 'node', args.node, 'gen', text,
         'deadline', deadline, 'data', args.blob)
  else
    emit(p, 'PodAssumed', replica,
         'uid', args.uid, 'node', args.node, 'gen', text, 'data', args.blob)
  end
  if candidates > 0 then return { gen, args.node } end
  return gen
end
