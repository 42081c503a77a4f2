-- sc_sync_namespace: a v1 Namespace's labels as `schedcache sync` lists and watches it
-- (docs/constraints.md, "Namespace selectors"): an inter-pod term's non-empty
-- namespaceSelector selects namespaces by these labels, as upstream's. Versioned as
-- sc_sync_node: a change at or below the version a feeder last applied for the namespace is
-- dropped; a deletion leaves a tombstone. Every change of a namespace's labels (a new or
-- deleted namespace too) bumps `nsgen`: a claim whose verdict read namespace labels carries
-- the generation it saw, and is refused ('namespace-changed') when it moved (_claims.lua).
-- Not part of the event-sourced state (no event, no replay, not compared by verify).
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, command id, resourceVersion, namespace name, its labels (canonical JSON
--          object, at most BOUNDS.MAX_BLOB_BYTES; "" when deleted or no longer listed)
-- Keys     namespaces (hash name -> labels JSON), nsgen (string counter),
--          version:ns:<name>
-- Reply    { 'applied', 'set' | 'delete' | 'same' } or { 'dropped', 'repeated' | 'stale', known }
-- Errors   BADARG <what>   malformed arguments (nothing written)
-- Event    none


function NSLABELS.sync(p, _, a)
  local rv = normal_rv(a[1] or '')
  if rv == nil then return nil, 'BADARG resourceVersion' end
  local name = a[2]
  if not name_arg(name) then return nil, 'BADARG name' end
  local body = a[3] or ''
  if #body > BOUNDS.MAX_BLOB_BYTES then return nil, 'BADARG labels ' .. name end
  if body ~= '' and (string.sub(body, 1, 1) ~= '{' or string.sub(body, -1) ~= '}') then
    return nil, 'BADARG labels ' .. name
  end
  local vk = p .. 'version:ns:' .. name
  local dropped = stale_version(vk, rv)
  if dropped then return dropped end
  local hk, gk = p .. 'namespaces', p .. 'nsgen'
  -- Corrupt keys refuse before any write.
  local before = typed_read(hk, 'hash', 'HGET', name) or ''
  stored_int(gk, get_string(gk), 0)
  if before ~= body then
    if body == '' then
      redis.call('HDEL', hk, name)
    else
      redis.call('HSET', hk, name, body)
    end
    redis.call('INCR', gk)
  end
  record_version(vk, rv, body == '')
  if before == body then return { 'applied', 'same' } end
  return { 'applied', body == '' and 'delete' or 'set' }
end
