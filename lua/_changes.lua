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

local SPEC_FIELD, DIGEST_FIELD = 'spec', 'sd'

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
    redis.call('HDEL', nk, DIGEST_FIELD)
    redis.call('HSET', nk, SPEC_FIELD, text)
  else
    redis.call('HSET', nk, SPEC_FIELD, text, DIGEST_FIELD, digest)
  end
end

-- The first of `changed` (nodes changed since generation `since`) whose spec changed since
-- then, or nil. Bounded by the list (at most MAX_CHANGED_NODES plus the batch's own).
local function spec_changed_since(p, changed, since)
  local after = tonumber(since)
  for j = 1, #changed do
    local nk = p .. 'node:' .. changed[j]
    local at = typed_read(nk, 'hash', 'HGET', SPEC_FIELD)
    if stored_int(nk, at, 0) > after then return changed[j] end
  end
  return nil
end
