-- sc_sync_budget: a policy/v1 PodDisruptionBudget as `schedcache sync` lists and watches it
-- (docs/preemption.md), kept for preemption to read (the reference scheduler's and the
-- extender's). Versioned as sc_sync_node: a change at or below the version a feeder last
-- applied for the budget is dropped; a deletion leaves a tombstone. Not part of the
-- event-sourced state (no event, not folded by replay, not compared by verify): a budget is
-- read whole by preemption, never by a claim.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, command id, resourceVersion, "<namespace>/<name>" (UTF-8), the budget as
--          preemption reads it (a JSON object in UTF-8, at most BOUNDS.MAX_BLOB_BYTES; "" when
--          deleted or no longer listed)
-- Keys     pdbs (hash "<namespace>/<name>" -> JSON), version:pdb:<namespace>/<name>
-- Reply    { 'applied', 'set' | 'delete' } or { 'dropped', 'repeated' | 'stale', known }
-- Errors   BADARG <what>   malformed arguments (nothing written)
-- Event    none
local PDB = {}

function PDB.sync(p, _, a)
  local rv = normal_rv(a[1] or '')
  if rv == nil then return nil, 'BADARG resourceVersion' end
  local key = a[2]
  if not name_arg(key) or not string.find(key, '/', 1, true) or not NOM.utf8(key) then
    return nil, 'BADARG key'
  end
  local body = a[3] or ''
  -- Read back as JSON text by every replica's preemption: a JSON object in UTF-8, or "".
  if #body > BOUNDS.MAX_BLOB_BYTES or (body ~= '' and not (string.sub(body, 1, 1) == '{'
      and string.sub(body, -1) == '}' and NOM.utf8(body))) then
    return nil, 'BADARG body ' .. key
  end
  local vk = p .. 'version:pdb:' .. key
  local dropped = stale_version(vk, rv)
  if dropped then return dropped end
  typed_read(p .. 'pdbs', 'hash', 'HEXISTS', key)  -- a corrupt key refuses before any write
  if body == '' then
    redis.call('HDEL', p .. 'pdbs', key)
    record_version(vk, rv, true)
    return { 'applied', 'delete' }
  end
  redis.call('HSET', p .. 'pdbs', key, body)
  record_version(vk, rv, false)
  return { 'applied', 'set' }
end
