-- sc_sync_podgroup: a feeder's list or watch saw a PodGroup (scheduler-plugins' Coscheduling,
-- scheduling.x-k8s.io/v1alpha1) at resourceVersion rv: present ("set") or deleted ("delete").
-- Keeps what the schedulers read of it (docs/gangs.md); stale and repeated versions are
-- dropped as sc_sync_node drops them (_versions.lua).
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, rv, op, group ("<namespace>/<name>"), then for "set": minMember (1 to
--          2^31-1), scheduleTimeoutSeconds ("" for none, else 1 to 2^31-1)
-- Keys     version:podgroup:<group>, podgroup:<group> (hash: min, timeout), podgroups (set)
-- Reply    {"applied", "set"|"remove"|"none", ""}
--          {"dropped", "repeated"|"stale", stored version}   nothing read or written
-- Errors   BADARG rv|op|argc|group|min|timeout (nothing written)
-- Event    none: a PodGroup changes no node, so no snapshot or replay needs it; the schedulers
--          read podgroup:<group> when a member is popped.

local PODGROUP = { INT_MAX = 2147483647 }

function PODGROUP.sync(p, replica, a)
  local rv, op, group = normal_rv(a[1]), a[2], a[3]
  if rv == nil then return nil, 'BADARG rv' end
  if op ~= 'set' and op ~= 'delete' then return nil, 'BADARG op' end
  if #a ~= (op == 'set' and 5 or 3) then return nil, 'BADARG argc' end
  if not name_arg(group) or not string.match(group, '^[^/]+/[^/]+$') then
    return nil, 'BADARG group'
  end
  local min, timeout = nil, ''
  if op == 'set' then
    min = int_arg(a[4], 1, PODGROUP.INT_MAX)
    if min == nil then return nil, 'BADARG min' end
    if a[5] ~= '' then
      if int_arg(a[5], 1, PODGROUP.INT_MAX) == nil then return nil, 'BADARG timeout' end
      timeout = a[5]
    end
  end
  local vkey = p .. 'version:podgroup:' .. group
  local dropped = stale_version(vkey, rv)
  if dropped ~= nil then return dropped, nil, 0 end
  local key = p .. 'podgroup:' .. group
  expect_type(key, 'hash')
  expect_type(p .. 'podgroups', 'set')
  local action = 'none'
  if op == 'delete' then
    if redis.call('DEL', key) == 1 then action = 'remove' end
    redis.call('SREM', p .. 'podgroups', group)
  else
    action = 'set'
    redis.call('HSET', key, 'min', a[4], 'timeout', timeout)
    redis.call('SADD', p .. 'podgroups', group)
  end
  record_version(vkey, rv, op == 'delete')
  return { 'applied', action, '' }
end
