-- Ranked candidates (docs/constraints.md, "Candidates"): a fit-checked claim may name up to
-- MAX_EXTRA_CANDIDATES more nodes after its own, best first, each with the blob of the pod
-- placed there and the inter-pod reads its verdict took on the snapshot. The claim takes the
-- first node that passes every check (room, ports, rules), in the same call: replicas racing
-- for one best node do not decide again for a lost race (Volcano's agent scheduler sends
-- candidates per result the same way; Omega's incremental commits).
--
-- ARGV of the candidates, after assume_pod's own (a[13] on; a[12] is `seen`): count, the
-- length of the blob
-- prefix the candidates share with the claim's own blob (a[3]), then per candidate: node, the
-- rest of its blob after that prefix, reads, domains (as _claims.lua reads them).
local MAX_EXTRA_CANDIDATES = 7

-- The candidates as { node, blob, reads, domains } tables; {} when there are none; nil and
-- the argument at fault when malformed. Nothing is read or written here.
local function read_candidates(a, first, blob)
  local count = a[first]
  if count == nil or count == '' then return {} end
  if not is_int(count) or tonumber(count) > MAX_EXTRA_CANDIDATES or tonumber(count) < 0 then
    return nil, 'candidates'
  end
  local shared = a[first + 1]
  if not is_int(shared) or tonumber(shared) < 0 or tonumber(shared) > #blob then
    return nil, 'candidate-prefix'
  end
  local n = tonumber(count)
  if #a ~= first + 1 + 4 * n then return nil, 'candidates' end
  local prefix = string.sub(blob, 1, tonumber(shared))
  local out = {}
  for j = 0, n - 1 do
    local at = first + 2 + 4 * j
    local node = a[at]
    if node == nil or node == '' or string.find(node, '%s') then return nil, 'candidate-node' end
    local rest = a[at + 1]
    if rest == nil or (rest == '' and prefix == '') then return nil, 'candidate-blob' end
    local whole = prefix .. rest
    if not valid_blob(whole) then return nil, 'candidate-blob' end
    out[#out + 1] = { node = node, blob = whole, reads = a[at + 2] or '',
                      domains = a[at + 3] or '' }
  end
  return out
end

-- The pod's arguments for another node: the same pod and contribution, that node's blob, its
-- node entry's fields checked as read_pod_args checks the claim's own (corruption is raised
-- before any write). nil when a total there would pass int64: that node is refused.
local function candidate_args(p, args, candidate)
  local overflow, live = check_fields(p, candidate.node, args.contribution, false)
  guard_node(p, candidate.node)
  if not known_nodes[candidate.node] then guard_cache(p, NEW_NODE_KEYS) end
  if overflow then return nil end
  return { uid = args.uid, node = candidate.node, blob = candidate.blob,
           contribution = args.contribution, live = live }
end
