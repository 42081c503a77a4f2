-- Fit-checked claims (Omega's fine-grained optimistic concurrency): a replica decided on its
-- own snapshot; at assume time the live node must still have room for the pod.

-- Host-port conflicts, as kube-scheduler's NodePorts filter: same protocol and port, and the
-- same IP or either side 0.0.0.0. The node's port fields ("p:<ip>|<protocol>|<port>") are read
-- once per claim (one HKEYS, on the claim's first port) into two lookup tables: the fields, and
-- "<protocol>|<port>" held on any IP. Each of the pod's ports then costs two table lookups, so a
-- claim is linear in the node's fields plus the pod's ports (a read per port made 4,000
-- wildcard ports against a node holding 4,000 others quadratic: 11.7 s). (Other fields may hold
-- '|' too, a volume claim's name is the pod author's: only "p:" fields are indexed.)
-- `before`: a gang's members placed before the claim's on the same node (sc_gang_claim); the
-- tables built for its second member are kept in `before.port_table` and given each later
-- member's ports once (rebuilt per member, 256 members of 14 ports on a node holding 4,000
-- took 2 s).
local function node_ports(nk, before)
  local ports = before and before.port_table
  if ports == nil then
    ports = { held = {}, any_ip = {}, indexed = 0 }
    local names = typed_read(nk, 'hash', 'HKEYS')
    for j = 1, #names do
      local name = names[j]
      if string.sub(name, 1, 2) == 'p:' then
        ports.held[name] = true
        local protocol_port = string.match(name, '^p:.*|([^|]*|[^|]*)$')
        if protocol_port ~= nil then ports.any_ip[protocol_port] = true end
      end
    end
    if before ~= nil then before.port_table = ports end
  end
  if before ~= nil then  -- the members' ports not indexed yet (each is indexed once)
    for j = ports.indexed + 1, #before.ports do
      local name = before.ports[j]
      ports.held[name] = true
      local protocol_port = string.match(name, '^p:.*|([^|]*|[^|]*)$')
      if protocol_port ~= nil then ports.any_ip[protocol_port] = true end
    end
    ports.indexed = #before.ports
  end
  return ports
end

-- Whether the pod's port `field` conflicts with the node's ports (`ports`, node_ports).
local function port_conflict(ports, field)
  local ip, protocol, port = string.match(field, '^p:(.*)|([^|]*)|([^|]*)$')
  if ip == nil then return false end
  local protocol_port = protocol .. '|' .. port
  if ports.held[field] or ports.held['p:0.0.0.0|' .. protocol_port] then return true end
  -- The wildcard conflicts with the port on any IP.
  return ip == '0.0.0.0' and ports.any_ip[protocol_port] == true
end

local RESOURCE_NAMES = { cpu = 'cpu', mem = 'memory', eph = 'ephemeral-storage' }

-- "" when the claim may go ahead, else comma-separated reasons; nil for an unknown check.
-- A fit check reads the node in one HMGET: exists, a:pods, then each resource's requested and
-- allocatable. A generation check reads the node's generation from `nodegen`.
-- `before` (a fit check of a gang's member, sc_gang_claim): what the members before it on the
-- node add, { amounts = {field = n}, pods = n, ports = {field, ...} }, counted as placed.
-- `state`: the node as check_fields read it in READS.fit_layout's order in this command, no
-- write since (read_pod_args, candidate_args with `fit`), else nil and it is read here.
local function claim_conflicts(p, node, parsed, check, expected, before, state)
  local nk = p .. 'node:' .. node
  local fields, amounts = parsed.fields, parsed.amounts
  if check ~= 'fit' then
    state = redis.call('HMGET', nk, 'exists')
  elseif state == nil then
    -- The fields a fit check reads depend on the contribution alone (READS.fit_layout: built
    -- once per shape); the fit check's own come first.
    if parsed.fit_fields == nil then READS.fit_layout(parsed) end
    state = redis.call('HMGET', nk, unpack(parsed.fit_fields))
  end
  if state[1] ~= '1' then return 'node-missing' end
  if check == 'generation' then
    local want = tonumber(expected)
    if want == nil then return nil end
    local index = p .. 'nodegen'
    local node_gen = tonumber(typed_read(index, 'zset', 'ZSCORE', node) or '0')
    -- A change earlier in the same sc_batch is recorded on the node only when the call ends.
    -- Any difference is stale: a generation ahead of the node's means the cache lost writes
    -- (a restart without persistence, a failover) since the snapshot was taken.
    local current = tonumber(changed_gen[node]) or node_gen
    if current ~= want then return 'stale' end
    return ''
  end
  if check ~= 'fit' then return nil end
  local short = nil  -- the reasons, when there are any (most claims fit: no table then)
  local k = 3  -- the next requested/allocatable pair in `state`
  local ports = nil  -- the node's ports, read at the pod's first port (node_ports)
  for j = 1, #fields do
    local field, amount = fields[j], amounts[j]
    local prefix = string.sub(field, 1, 2)
    if prefix == 'r:' then
      local resource = string.sub(field, 3)
      local held = stored_int(nk, state[k], 0) + (before and before.amounts[field] or 0)
      if held + tonumber(amount) > stored_int(nk, state[k + 1], 0) then
        local name = RESOURCE_NAMES[resource] or string.sub(resource, 3)
        short = short or {}
        short[#short + 1] = name
      end
      k = k + 2
    elseif prefix == 'p:' then
      ports = ports or node_ports(nk, before)
      if port_conflict(ports, field) then
        local _, protocol, port = string.match(field, '^p:(.*)|([^|]*)|([^|]*)$')
        short = short or {}
        short[#short + 1] = 'port:' .. protocol .. '/' .. port
      end
    end
  end
  -- The node's pod count: guard_node's probe (read_pod_args, candidate_args) counted it in this
  -- call (expect_type keeps it), and every write of the node's pod set in the call leaves
  -- `true` there instead (place_pod, unplace_pod, confirm_in_place; drop_if_empty nil), so a
  -- number is the count as it is (an sc_batch's earlier commands, a gang's earlier members
  -- placed elsewhere, keep it); else it is counted again.
  local pk = p .. 'nodepods:' .. node
  local pods = checked[pk]
  if type(pods) ~= 'number' then pods = redis.call('ZCARD', pk) end
  if pods + 1 + (before and before.pods or 0) > stored_int(nk, state[2], 0) then
    short = short or {}
    short[#short + 1] = 'pods'
  end
  if short == nil then return '' end
  return table.concat(short, ',')
end

-- Inter-pod rules (docs/constraints.md): optimistic, on node generations. The replica decided
-- on a snapshot caught up to cache generation `since`; `reads` names, per rule, the nodes
-- whose pods that decision read: "@<rule> <node> <node> ... @<rule> ..." (a spread rule's
-- domain may be one word "~<key>=<value>" instead of its nodes: rules_broken). The live cache
-- still gives the same verdict when none of those nodes changed since `since` (any pod placed,
-- removed or relabelled on a node bumps its generation), and when no other node changed
-- since then gained a pod with required anti-affinity (the one rule that a pod on a node the
-- decision did not read can break: an existing pod's anti-affinity toward the incoming pod).
-- Bounded: the reads and domains of one claim by BOUNDS.MAX_READS_BYTES (more is malformed);
-- the nodes changed since `since` by BOUNDS.MAX_CHANGED_NODES; and the work on reads and
-- domains by BOUNDS.MAX_READS_SCAN a call, a claim's candidates, an sc_batch's claims and a
-- gang's members together (more is 'stale': decide again on a fresher snapshot, where fewer
-- nodes changed since). The work counts a byte checked by a pattern as READS_CHECK_COST bytes
-- searched plainly (measured: ~40 ms a MB checked, ~2.4 ms a MB searched), and per changed
-- node the reads' and domains' length (searched for it) and READS_RULE_COST per rule, domain
-- word and domain line (what each may read of the node). Before, a 16 MiB `reads` with 250
-- nodes changed held Redis 12 s; a claim at 5,000 nodes that read every node carries ~105 KB.
BOUNDS.MAX_CHANGED_NODES = 256
BOUNDS.MAX_READS_BYTES = 1048576
BOUNDS.MAX_READS_SCAN = 268435456
BOUNDS.READS_CHECK_COST = 16
-- What one changed node costs a claim per rule, domain word and domain line, in the same
-- units: a rule may read whether a pod carrying its labels arrived (up to 8 records), a word
-- or a line one kept label (~10 us on this machine's Redis).
BOUNDS.READS_RULE_COST = 4096
-- Per rule of `reads`, the change on a node it read that can break it: a pod placed there
-- (`added`: a matching pod in the target's domain, for anti-affinity and a spread count),
-- one taken off (`removed`: the anchor of an affinity, a pod the spread minimum counted), or
-- either. A change the other way only helps the verdict: the claim stands.
local RULES = { ['pod-affinity'] = 'removed', ['pod-anti-affinity'] = 'added',
                ['existing-anti-affinity'] = 'any', ['topology-spread'] = 'added',
                ['topology-spread-min'] = 'removed' }
-- The rule a refusal names (the spread minimum's nodes are the spread rule's).
local REPORTED = { ['topology-spread-min'] = 'topology-spread' }
-- A rule word of `reads` may name, after a colon, the labels a pod must carry one of to
-- matter to it ("@pod-anti-affinity:app=web,app=api"): then a pod placed since on a node it
-- read breaks it only when that pod carries one (its record's `l:` fields, _wakes.lua).

-- Whether a changed node (not among the reads) may now hold a pod whose required anti-affinity
-- repels the incoming one: only if it has such terms (xt) under a topology key for which it
-- shares the target's domain. `domains`: "<key> <node> ...\n<key> <node> ...", per topology key
-- of the anti-affinity terms the decision saw, the nodes sharing the target's value. A term
-- under any other key (xt more than those counted) is taken as repelling (decide again).
local function may_repel(nk, node, parsed)
  local have = typed_read(nk, 'hash', 'HMGET', 'anti', 'xt')
  if stored_int(nk, have[1], 0) <= 0 then return false end
  local terms, counted = stored_int(nk, have[2], 0), 0
  local keys, lists = parsed[1], parsed[2]
  -- The key's counts BOUNDS.PODS_PER_SADD fields an HMGET (unpack is bounded).
  for j = 1, #keys, BOUNDS.PODS_PER_SADD do
    local last = math.min(#keys, j + BOUNDS.PODS_PER_SADD - 1)
    local fields = {}
    for k = j, last do fields[#fields + 1] = 'x:' .. keys[k] end
    local got = typed_read(nk, 'hash', 'HMGET', unpack(fields))
    for k = j, last do
      local n = stored_int(nk, got[k - j + 1], 0)
      counted = counted + n
      if n > 0 and string.find(lists[k], ' ' .. node .. ' ', 1, true) then return true end
    end
  end
  return terms == 0 or terms > counted
end

-- The first rule that read a node of `changed` (nodes changed since `since`) and that the
-- change there can break, or nil. `padded` is " <reads> ": each "@<rule>" owns the words after
-- it up to the next one, node names and domain words "~<key>=<value>" (a spread rule's domains
-- under a key other than the hostname, in place of their every node): a node reads as named
-- by a word when its kept label <key> is <value>, or its labels are not kept. They are the
-- labels the snapshot saw: a spec change since refused the spread claim already
-- (spec_refusal). A first-pod affinity (no matching pod anywhere) breaks on a pod placed too.
-- One pass over the rules a claim, each rule's body searched for each changed node plainly
-- (a pass a changed node held Redis 1.9-3.6 s for 1 MiB of rules naming 100 changed nodes;
-- each place looking back over the reads for its rule, 1.8 s for a node named 2,000 times);
-- per changed node once: its pod changes, one HMGET per label key of the words, whether a
-- pod carrying given labels arrived. The searches were paid for by the caller (rule_conflicts);
-- `per_node`, what a node's reads may cost, is paid here for each node a rule reads.
local function rules_broken(p, changed, padded, since, first_pod, per_node)
  local tilde = string.find(padded, ' ~', 1, true) ~= nil
  local words, named_at = {}, {}  -- the changed nodes the reads name: their words, indexes
  for j = 1, #changed do
    local word = ' ' .. changed[j] .. ' '
    if string.find(padded, word, 1, true) then
      words[j] = word
      named_at[#named_at + 1] = j
    end
  end
  if #named_at == 0 and not tilde then return nil end
  local seen = {}  -- j -> what was read of changed[j]: pod changes, kept labels, arrivals
  for ruled, body in string.gmatch(padded, '@(%S+)([^@]*)') do
    local rule, labels = string.match(ruled, '^([^:]+):?(.*)$')
    local needs = RULES[rule]
    if rule == 'pod-affinity' and first_pod then needs = 'any' end
    local wanted = nil  -- this rule's domain words: key -> { value -> true }
    if tilde and string.find(body, ' ~', 1, true) then
      wanted = {}
      for key, value in string.gmatch(body, ' ~([^=%s]+)=(%S*)') do
        local values = wanted[key]
        if values == nil then
          values = {}
          wanted[key] = values
        end
        values[value] = true
      end
    end
    -- A rule with domain words may read any changed node; one without, only those named
    -- (30,000 rules naming one node visited 250 changed nodes each: 0.4 s).
    local count = wanted ~= nil and #changed or #named_at
    for k = 1, count do
      local j = wanted ~= nil and k or named_at[k]
      local node = changed[j]
      local named = words[j] ~= nil and string.find(body, words[j], 1, true) ~= nil
      local read = seen[j]
      if read == nil and (named or wanted ~= nil) then
        -- A changed node a rule reads pays for its rules' and words' reads, here (not every
        -- changed node up front: a batch of small claims ran out of budget: third review).
        if per_node > BOUNDS.scan_left then return 'stale' end
        BOUNDS.scan_left = BOUNDS.scan_left - per_node
        read = { kept = {}, arrived = {} }
        seen[j] = read
      end
      if not named and wanted ~= nil then
        for key, values in pairs(wanted) do
          local have = read.kept[key]
          if have == nil then
            have = typed_read(p .. 'nodelabels:' .. node, 'hash', 'HMGET', 'ln', 'l:' .. key)
            read.kept[key] = have
          end
          if not have[1] or values[have[2]] then
            named = true
            break
          end
        end
      end
      if named then
        if read.added == nil then
          local added, removed = pod_changes_since(p, node, since)
          read.added, read.removed = added or false, removed or false
        end
        local added, removed = read.added, read.removed
        local broken = needs == 'any' and (added or removed) or needs == 'removed' and removed
        if not broken and needs == 'added' and added then
          broken = labels == ''
          if not broken then
            local arrived = read.arrived[labels]
            if arrived == nil then
              arrived = ARRIVALS.arrived(p, node, since, labels) and true or false
              read.arrived[labels] = arrived
            end
            broken = arrived
          end
        end
        if broken then return rule end
      end
    end
  end
  return nil
end

-- "" when the rules of a claim on `target` still hold, else the first broken rule; nil for
-- malformed arguments.
-- `reads` is not split into a table: most claims find no node changed since `since`, and for
-- the few that did, one plain search each finds whether (and under which rule) it was read.
local function rule_conflicts(p, target, since, reads, domains, incarnation)
  if not is_int(since) then return nil end
  -- Generations of another incarnation (the cache lost its data and began again) say nothing
  -- about this one's nodes.
  if incarnation and incarnation ~= '' and get_string(p .. 'incarnation') ~= incarnation then
    return 'stale'
  end
  reads = reads or ''
  local size = #reads + #(domains or '') + 2
  if size > BOUNDS.MAX_READS_BYTES then return nil end
  local checking = size * BOUNDS.READS_CHECK_COST
  if checking > BOUNDS.scan_left then return 'stale' end
  BOUNDS.scan_left = BOUNDS.scan_left - checking
  local rules, words = 0, 0  -- how many rules and domain words: their work per changed node
  if reads ~= '' then
    if string.sub(reads, 1, 1) ~= '@' or string.find(reads, '[\r\n\t]') then return nil end
    for rule in string.gmatch(reads, '@(%S*)') do
      local name, labels = string.match(rule, '^([^:]*):?(.*)$')
      if not RULES[name] or not ARRIVALS.valid_labels(labels) then return nil end
      rules = rules + 1
    end
    -- Domain words: "~<key>=<value>", under a spread rule only ('@' is in no node name,
    -- label key or value: it splits the rules).
    for rule, body in string.gmatch(reads, '@(%S+)([^@]*)') do
      if string.find(body, ' ~', 1, true) then
        if string.sub(rule, 1, 15) ~= 'topology-spread' then return nil end
        for word in string.gmatch(body, '~%S*') do
          if not string.match(word, '^~[^=%s]+=') then return nil end
          words = words + 1
        end
      end
    end
  end
  -- A verdict that read namespace labels (a non-empty namespaceSelector) names the namespace
  -- generation it saw ("@namespaces=<n>", a line of `domains`): any label change since
  -- refuses it (sync_namespace.lua; the snapshot's next update reads the new labels).
  if domains and string.find(domains, '@namespaces=', 1, true) then
    local seen = string.match('\n' .. domains .. '\n', '\n@namespaces=(%d+)\n')
    if seen == nil then return nil end
    local gk = p .. 'nsgen'
    if tostring(stored_int(gk, get_string(gk), 0)) ~= seen then return 'namespace-changed' end
  end
  local changed = typed_read(p .. 'nodegen', 'zset', 'ZRANGEBYSCORE', '(' .. since, '+inf',
                             'LIMIT', 0, BOUNDS.MAX_CHANGED_NODES + 1)
  -- Changes earlier in the same sc_batch reach `nodegen` only when the call ends: they count
  -- against the same bound (a batch of 1,000 node updates and 200 claims read 200,000 nodes).
  if #changed + #changed_nodes > BOUNDS.MAX_CHANGED_NODES then return 'stale' end
  for j = 1, #changed_nodes do changed[#changed + 1] = changed_nodes[j] end
  if #changed == 0 then return '' end
  -- Each changed node is searched for in the reads and the domains (spec_refusal,
  -- rules_broken): the call's budget (reset by begin_call) pays for that first; a node a rule
  -- reads pays for each rule (its pod changes, an arrival read) and domain word (a kept label
  -- read) in rules_broken, a node an anti-affine pod was placed on for each line of the
  -- domains (may_repel) below.
  local _, lines = string.gsub(domains or '', '\n', '')
  local scan = #changed * size
  if scan > BOUNDS.scan_left then return 'stale' end
  BOUNDS.scan_left = BOUNDS.scan_left - scan
  -- A node relabelled, tainted, added, filled in or removed since: the snapshot's domains are
  -- not the live ones (_changes.lua).
  local moved = spec_refusal(p, changed, since, target, reads, domains)
  if moved ~= nil then return moved end
  local padded = ' ' .. reads .. ' '
  local first_pod = string.find('\n' .. (domains or '') .. '\n', FIRST_POD, 1, true) ~= nil
  local broken = rules_broken(p, changed, padded, since, first_pod,
                              BOUNDS.READS_RULE_COST * (rules + words))
  if broken ~= nil then return REPORTED[broken] or broken end
  local parsed  -- `domains` split once, "<key> <node> ..." a line (may_repel)
  for j = 1, #changed do
    local node = changed[j]
    if anti_placed_since(p, node, since) then
      local cost = BOUNDS.READS_RULE_COST * (lines + 1)
      if cost > BOUNDS.scan_left then return 'stale' end
      BOUNDS.scan_left = BOUNDS.scan_left - cost
      if parsed == nil then
        parsed = { {}, {} }
        for line in string.gmatch(domains or '', '[^\n]+') do
          local key, rest = string.match(line, '^(%S+)(.*)$')
          if key ~= nil then
            parsed[1][#parsed[1] + 1] = key
            parsed[2][#parsed[2] + 1] = rest .. ' '
          end
        end
      end
      if may_repel(p .. 'node:' .. node, node, parsed) then return 'existing-anti-affinity' end
    end
  end
  return ''
end

-- A bare fit-checked claim (no `since`: the caller judged no inter-pod rules) is exact only
-- while no placed pod has required anti-affinity: then nothing can repel the pod. `antipods`
-- counts them (kept with every placement, _helpers.lua); missing (a cache older than the
-- count) reads as "some". When there are some, the claim is refused as `unchecked`, and the
-- client judges existing pods' anti-affinity on a snapshot and claims again with its reads.
-- In an sc_batch the count is read once and kept for the rest of the call in
-- checked[' antipods'] (as NOM.any keeps its answer; a single command keeps nothing). Its two
-- writers keep it right (_helpers.lua): apply_contribution's INCRBY stores the new count, and
-- touch's SET to 0 (a new incarnation) stores 0; a memo of a missing count (1, "some") stays
-- until that SET, as apply_contribution leaves a missing count missing.
local function bare_claim_unchecked(p)
  local count = checked[' antipods']
  if count == nil then
    count = stored_int(p .. 'antipods', get_string(p .. 'antipods'), 1)
    if batching then checked[' antipods'] = count end
  end
  return count ~= 0
end
