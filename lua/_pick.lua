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

-- How many candidates the claim carries (0 for none), every one checked as a whole; nil and
-- the argument at fault when malformed. Nothing is read or written here, and nothing is built:
-- a candidate's table and its blob (the shared prefix and its rest, ~17,000 instructions a
-- candidate with the table, the copy and the garbage they leave) are made only when the claim
-- gets to it (candidate_at), and most claims take their own node.
local function read_candidates(a, first, blob)
  local count = a[first]
  if count == nil or count == '' then return 0 end
  local n = is_int(count) and tonumber(count)  -- (each tonumber is a strtod: once each)
  if not n or n > MAX_EXTRA_CANDIDATES or n < 0 then return nil, 'candidates' end
  local shared = a[first + 1]
  local prefix = is_int(shared) and tonumber(shared)
  if not prefix or prefix < 0 or prefix > #blob then return nil, 'candidate-prefix' end
  if #a ~= first + 1 + 4 * n then return nil, 'candidates' end
  for at = first + 2, first + 4 * n - 2, 4 do
    local node = a[at]
    if node == nil or node == '' or string.find(node, '%s') then return nil, 'candidate-node' end
    local rest = a[at + 1]
    if rest == nil or (rest == '' and prefix == 0) then return nil, 'candidate-blob' end
    -- valid_blob(<prefix> .. rest), unbuilt: a prefix is the claim's own blob's, whose first
    -- byte read_pod_args found valid; without one, the blob is `rest`.
    if prefix + #rest > BOUNDS.MAX_BLOB_BYTES or (prefix == 0 and not valid_blob(rest)) then
      return nil, 'candidate-blob'
    end
  end
  return n
end

-- Candidate j (1-based) of a claim read_candidates checked: { node, blob, reads, domains }.
local function candidate_at(a, first, j, blob)
  local at = first + 2 + 4 * (j - 1)
  return { node = a[at], blob = string.sub(blob, 1, tonumber(a[first + 1])) .. a[at + 1],
           reads = a[at + 2] or '', domains = a[at + 3] or '' }
end

-- The pod's arguments for another node: the same pod and contribution, that node's blob, its
-- node entry's fields checked as read_pod_args checks the claim's own (corruption is raised
-- before any write). nil when a total there would pass int64: that node is refused.
local function candidate_args(p, args, candidate)
  local overflow, live, state = check_fields(p, candidate.node, args.contribution, false, true)
  guard_node(p, candidate.node)
  if not known_nodes[candidate.node] then guard_cache(p, NEW_NODE_KEYS) end
  if overflow then return nil end
  return { uid = args.uid, node = candidate.node, blob = candidate.blob,
           contribution = args.contribution, live = live, state = state }
end
