-- sc_cleanup_assumed_pods: expire assumed pods whose binding finished and whose deadline passed.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, now_ms ("" = the server's TIME), limit (at most this many per call)
-- Keys     deadlines, pod:<uid>, node:*, nodepods:*, nodes, pods, assumed, gen, nodegen, events,
--          quarantine (zset: uid -> time, deadline entries whose pod record is corrupt)
-- Reply    { uids expired, uids skipped as corrupt (moved to quarantine) }; together fewer
--          than `limit` means none is due any more
-- Errors   BADARG <what>; CORRUPT <key> <why> (a cache-wide key; nothing written)
-- Event    PodExpired  uid, node, gen, deadline, data=stored blob   (one per pod)
-- Expiry is strictly after the deadline, as upstream. Each pod is re-checked here (still
-- assumed, binding finished, deadline passed), so a pod confirmed meanwhile never expires.
local function cleanup_assumed_pods(p, replica, a)
  local now = now_ms(a[1])
  if now == nil then return nil, 'BADARG now' end
  local limit = bounded_int(a[2], BOUNDS.sweep)
  if limit == nil or limit < 1 then return nil, 'BADARG limit' end
  local due = redis.call('ZRANGEBYSCORE', p .. 'deadlines', '-inf', '(' .. int_string(now),
                         'LIMIT', 0, limit)
  local expired, skipped = {}, {}
  expect_type(p .. 'quarantine', 'zset')  -- before the first write, though rarely written
  for _, uid in ipairs(due) do
    -- A corrupt record is skipped, and its entry moved from deadlines to `quarantine` (so the
    -- rest keeps expiring); load_pod checks everything before this pod's first write.
    local ok, rec = pcall(load_pod, p, uid)
    if not ok then
      if corruption_of(rec) == nil then error(rec) end
      redis.call('ZADD', p .. 'quarantine', now, uid)
      redis.call('ZREM', p .. 'deadlines', uid)
      skipped[#skipped + 1] = uid
    elseif rec ~= nil and rec.state == 'assumed' and rec.finished == '1' and rec.deadline ~= ''
        and tonumber(rec.deadline) < now then
      local gen, text = delete_pod(p, uid, rec)
      emit(p, 'PodExpired', replica, 'uid', uid, 'node', rec.node, 'gen', text,
                                       'deadline', rec.deadline, 'data', rec.blob)
      expired[#expired + 1] = uid
    else
      redis.call('ZREM', p .. 'deadlines', uid)  -- an index entry nothing should have left
    end
  end
  return { expired, skipped }, nil, #expired + #skipped  -- nothing written when nothing was due
end
