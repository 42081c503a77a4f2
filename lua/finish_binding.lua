-- sc_finish_binding: the bind call returned; from now on the assumed pod may expire.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, uid, now_ms ("" = the server's TIME), ttl_ms (0 = never expire)
-- Keys     pod:<uid>, deadlines, events
-- Reply    the deadline in ms, 0 when ttl is 0, or -1 when the pod is not assumed (as upstream,
--          finishing the binding of an unknown or confirmed pod is a no-op that writes nothing)
-- Errors   BADARG <what>
-- Event    BindingFinished  uid, node, deadline ("" when it never expires)
local function finish_binding(p, replica, a)
  local uid, ttl = a[1], bounded_int(a[3], BOUNDS.duration_ms)
  if uid == nil or uid == '' then return nil, 'BADARG uid' end
  if ttl == nil then return nil, 'BADARG ttl ' .. uid end
  local now = now_ms(a[2])
  if now == nil then return nil, 'BADARG now ' .. uid end
  local rec = load_pod(p, uid, true)  -- it stays on its node
  if rec == nil or rec.state ~= 'assumed' then return -1, nil, 0 end  -- nothing written
  local deadline = ''
  if ttl > 0 then
    deadline = int_string(now + ttl)
    redis.call('ZADD', p .. 'deadlines', deadline, uid)
  else
    redis.call('ZREM', p .. 'deadlines', uid)
  end
  release_claim(p, uid, rec)  -- from now on the deadline, not the lease, bounds it
  rec.finished = '1'
  rec.deadline = deadline
  save_pod(p, uid, rec)
  emit(p, 'BindingFinished', replica,
       'uid', uid, 'node', rec.node, 'deadline', deadline)
  if ttl > 0 then return now + ttl end
  return 0
end
