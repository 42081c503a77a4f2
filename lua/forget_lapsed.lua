-- sc_forget_lapsed: forget the unfinished assumed pods of replicas whose lease lapsed.
--
-- A replica that dies after assume_pod and before finish_binding would book those resources
-- forever (no deadline was ever set). Replicas that heartbeat a lease are listed in `replicas`;
-- when lease:<replica> is gone, its pods in replicapods:<replica> that are still assumed with
-- binding unfinished are forgotten.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica (the caller, e.g. the expiry worker), command id, limit
-- Keys     replicas, lease:<replica>, replicapods:<replica>, pod:<uid>, node:*, nodepods:*,
--          nodes, pods, assumed, gen, nodegen, events
-- Reply    { uids forgotten, uids skipped because their record is corrupt (claim dropped) },
--          at most `limit` together
-- Errors   BADARG <what>; CORRUPT <key> <why> (a cache-wide key; nothing written)
-- Event    PodForgotten  uid, node, gen, reason=lease-expired, owner=<replica>, data=stored blob
local function forget_lapsed(p, replica, a)
  local limit = bounded_int(a[1], BOUNDS.sweep)
  if limit == nil or limit < 1 then return nil, 'BADARG limit' end
  local forgotten, skipped = {}, {}
  expect_type(p .. 'replicas', 'set')
  -- The lapsed replicas, each claim set checked before the first write.
  local lapsed = {}
  for _, owner in ipairs(redis.call('SMEMBERS', p .. 'replicas')) do
    if redis.call('EXISTS', p .. 'lease:' .. owner) == 0 then
      expect_type(p .. 'replicapods:' .. owner, 'set')
      lapsed[#lapsed + 1] = owner
    end
  end
  for _, owner in ipairs(lapsed) do
    if #forgotten + #skipped >= limit then break end
    local claims = p .. 'replicapods:' .. owner
    for _, uid in ipairs(redis.call('SRANDMEMBER', claims, limit - #forgotten - #skipped)) do
      -- A corrupt record is skipped (and its claim dropped, so the rest is forgotten).
      local ok, rec = pcall(load_pod, p, uid)
      if not ok then
        if corruption_of(rec) == nil then error(rec) end
        skipped[#skipped + 1] = uid
        rec = nil
      end
      redis.call('SREM', claims, uid)
      if rec ~= nil and rec.state == 'assumed' and rec.finished == '0'
          and rec.claimer == owner then
        local gen, text = delete_pod(p, uid, rec)
        emit(p, 'PodForgotten', replica, 'uid', uid, 'node', rec.node, 'gen', text,
             'reason', 'lease-expired', 'owner', owner, 'data', rec.blob)
        forgotten[#forgotten + 1] = uid
      end
    end
    if redis.call('SCARD', claims) == 0 then redis.call('SREM', p .. 'replicas', owner) end
  end
  return { forgotten, skipped }, nil, #forgotten + #skipped
end
