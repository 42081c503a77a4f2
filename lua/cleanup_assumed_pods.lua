-- sc_cleanup_assumed_pods: expire assumed pods whose binding finished and whose deadline passed.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, now_ms ("" = the server's TIME), limit (at most this many per call)
-- Keys     deadlines, pod:<uid>, node:*, nodepods:*, nodes, pods, assumed, gen, nodegen, events
-- Reply    the uids expired by this call; fewer than `limit` means none is due any more
-- Errors   BADARG <what>
-- Event    PodExpired  uid, node, gen, deadline, data=stored blob   (one per pod)
-- Expiry is strictly after the deadline, as upstream. Each pod is re-checked here (still
-- assumed, binding finished, deadline passed), so a pod confirmed meanwhile never expires.
local function cleanup_assumed_pods(p, replica, a)
  local now = now_ms(a[1])
  if now == nil then return nil, 'BADARG now' end
  local limit = tonumber(a[2])
  if limit == nil or limit < 1 or limit ~= math.floor(limit) then return nil, 'BADARG limit' end
  local due = redis.call('ZRANGEBYSCORE', p .. 'deadlines', '-inf', '(' .. int_string(now),
                         'LIMIT', 0, limit)
  local expired = {}
  for _, uid in ipairs(due) do
    local rec = load_pod(p, uid)
    if rec ~= nil and rec.state == 'assumed' and rec.finished == '1' and rec.deadline ~= ''
        and tonumber(rec.deadline) < now then
      local gen = delete_pod(p, uid, rec)
      emit(p, 'PodExpired', replica, { 'uid', uid, 'node', rec.node, 'gen', gen,
                                       'deadline', rec.deadline, 'data', rec.blob })
      expired[#expired + 1] = uid
    else
      redis.call('ZREM', p .. 'deadlines', uid)  -- an index entry nothing should have left
    end
  end
  return expired, nil, #expired  -- nothing written when nothing was due
end
