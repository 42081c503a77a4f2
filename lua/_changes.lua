-- Node spec changes: what a claim's inter-pod rules learn about nodes (docs/constraints.md,
-- "Node changes"). A node's labels, taints and unschedulable flag decide its topology domains
-- and whether a spread constraint counts it; a claim judged on a snapshot at generation
-- `since` read them as they were then. Every write that can change them (sc_add_node,
-- sc_update_node with a different spec, a placeholder or ghost filled in, sc_remove_node of
-- a node that keeps pods) records its generation in the node's `spec` field, so the claim
-- refuses (`node-changed`) when a node changed since `since` changed its spec too: the
-- snapshot's domains are then no longer the live ones. Nodes whose pods changed but whose spec
-- did not keep the fine-grained checks of _claims.lua.
--
-- Node hash fields: spec = generation of the last spec change, sd = the spec's digest (an
-- integer the client computes from labels, taints and unschedulable: an update that leaves
-- them as they were, a status heartbeat, records no change). A node written without a digest
-- (an older client) counts every write as a change.

BOUNDS.SPEC_FIELD, BOUNDS.DIGEST_FIELD = 'spec', 'sd'

-- The digest argument: '' (unknown) when absent, the integer text when valid, nil otherwise.
local function spec_digest_arg(value)
  if value == nil or value == '' then return '' end
  if not is_int(value) then return nil end
  return value
end

-- After a node write at generation `text`: record the spec change unless the node was live
-- with the same known digest.
local function note_spec(nk, was_live, old_digest, digest, text)
  if was_live and digest ~= '' and old_digest == digest then return end
  if digest == '' then
    redis.call('HDEL', nk, BOUNDS.DIGEST_FIELD)
    redis.call('HSET', nk, BOUNDS.SPEC_FIELD, text)
  else
    redis.call('HSET', nk, BOUNDS.SPEC_FIELD, text, BOUNDS.DIGEST_FIELD, digest)
  end
end

-- A live node's labels (nodelabels:<name>: l:<key> fields, and ln: how many) let a claim tell
-- a node that joined the target's domain from one that moved elsewhere. At most
-- BOUNDS.MAX_NODE_LABELS are kept; a node written with more, or by an older client, has none (`ln`
-- missing): its changes refuse. Apart from the node entry, which snapshots read whole.
BOUNDS.MAX_NODE_LABELS = 128
-- The line of `domains` that says the pod's affinity held by the first-pod rule: a matching
-- pod anywhere ends it, so a node that holds pods and was not live at the snapshot refuses.
local FIRST_POD = '\n@first-pod\n'
local LABELS_FIELD = 'ln'

-- The labels after the digest (a[i]: count, then key, value pairs) as HSET arguments with
-- `ln`; {} when absent; nil when malformed. Reads nothing.
local function read_node_labels(a, i)
  local count = a[i]
  if count == nil then return {} end
  if not is_int(count) or tonumber(count) > BOUNDS.MAX_NODE_LABELS or tonumber(count) < 0 then
    return nil
  end
  local n = tonumber(count)
  if #a ~= i + 2 * n then return nil end
  local out = { LABELS_FIELD, count }
  for j = i + 1, i + 2 * n, 2 do
    if a[j] == '' or a[j + 1] == nil then return nil end
    out[#out + 1] = 'l:' .. a[j]
    out[#out + 1] = a[j + 1]
  end
  return out
end

-- Makes node `name`'s kept labels `labels` (read_node_labels' HSET arguments; {}: none).
-- Its key's type is checked by guard_labels before the command's first write.
local function set_node_labels(p, name, labels)
  local key = p .. 'nodelabels:' .. name
  redis.call('DEL', key)
  if #labels > 0 then redis.call('HSET', key, unpack(labels)) end
end

local function guard_labels(p, name)
  expect_type(p .. 'nodelabels:' .. name, 'hash')
end

-- The topology keys of a claim's `domains` argument ("<key> <node> ...\n...").
local function domain_keys(domains)
  local keys = {}
  for key in string.gmatch(domains or '', '([^%s]+)[^\n]*') do keys[#keys + 1] = key end
  return keys
end

-- Node `x`'s labels under `keys` and the target's are equal for some key (x is in the
-- target's domain now), or either's labels are unknown.
local function joined_domain(p, x, target, keys)
  local fields = { LABELS_FIELD }
  for k = 1, #keys do fields[k + 1] = 'l:' .. keys[k] end
  local xk, tk = p .. 'nodelabels:' .. x, p .. 'nodelabels:' .. target
  local mine = typed_read(xk, 'hash', 'HMGET', unpack(fields))
  local theirs = typed_read(tk, 'hash', 'HMGET', unpack(fields))
  if not mine[1] or not theirs[1] then return true end
  for k = 2, #fields do
    if theirs[k] and mine[k] == theirs[k] then return true end
  end
  return false
end

-- 'node-changed' when a node of `changed` (changed since generation `since`) changed its spec
-- since then in a way the claim of `target`, judged with `reads` and `domains`, cannot vouch
-- for; else nil. A spec change is harmless when the node is not the target, the pod has no
-- spread constraint (every domain's count and eligibility feed its minimum), and the node is
-- gone (a ghost is in no domain) or is now in none of the target's domains under the keys the
-- rules use (and, when the pod's affinity held by the first-pod rule, holds no pod). A node
-- that was in one of them at the snapshot is among `reads` and refused there. Bounded by the
-- list and the keys given.
local function spec_refusal(p, changed, since, target, reads, domains)
  local after = tonumber(since)
  local keys = nil
  for j = 1, #changed do
    local x = changed[j]
    local nk = p .. 'node:' .. x
    local at = typed_read(nk, 'hash', 'HMGET', BOUNDS.SPEC_FIELD, 'exists')
    if stored_int(nk, at[1], 0) > after then
      if x == target or string.find(reads, '@topology-spread', 1, true) then
        return 'node-changed'
      end
      if at[2] == '1' then
        keys = keys or domain_keys(domains)
        if joined_domain(p, x, target, keys) then return 'node-changed' end
        if string.find('\n' .. (domains or '') .. '\n', FIRST_POD, 1, true)
            and typed_read(p .. 'nodepods:' .. x, 'zset', 'ZCARD') > 0 then
          return 'node-changed'
        end
      end
    end
  end
  return nil
end

-- Whether pods were placed on `node` (added) and taken off it (removed) since generation
-- `since`. A pod placed or changed since has a placement generation after it in nodepods; a
-- removal leaves its generation in the node's `rm` field. A node whose spec changed since, or
-- whose entry is gone, counts as both: its pods may have entered or left any domain.
local REMOVED_FIELD = 'rm'

local function pod_changes_since(p, node, since)
  local nk = p .. 'node:' .. node
  local at = typed_read(nk, 'hash', 'HMGET', 'exists', REMOVED_FIELD, BOUNDS.SPEC_FIELD)
  if not at[1] then return true, true end
  local after = tonumber(since)
  if stored_int(nk, at[3], 0) > after then return true, true end
  local placed = typed_read(p .. 'nodepods:' .. node, 'zset', 'ZRANGEBYSCORE', '(' .. since,
                            '+inf', 'LIMIT', 0, 1)
  return #placed > 0, stored_int(nk, at[2], 0) > after
end

-- Whether a pod with required anti-affinity was placed on `node` since generation `since`
-- (the node's `ax` field): those placed before were on the claim's snapshot, which judged
-- their terms (a node moved since into the target's domain is refused by spec_refusal).
local function anti_placed_since(p, node, since)
  local nk = p .. 'node:' .. node
  return stored_int(nk, typed_read(nk, 'hash', 'HGET', 'ax'), 0) > tonumber(since)
end
