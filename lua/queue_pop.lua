-- sc_queue_pop: hand a scheduler replica the next pending pods of its scheduler, each leased to
-- it alone (_queue.lua).
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, command id (""), scheduler, holder, lease ms, count (1-100), parked ms
--          (how long a parked pod waits at most for a helpful event), [now ms]
-- Keys     queued:<uid>, queuedpods, queueseq, queues, queue:<scheduler>:*, pod:<uid> (read),
--          events (read)
-- Reply    { uid, attempts, msgpack Pod, ... } at most `count` pods, highest priority first,
--          then oldest
-- Errors   BADARG <what>; CORRUPT <key> <why> (nothing written)
-- First, each bounded to QUEUE_MOVES: parked pods go to back-off (or active) when an event
-- since they were parked could help them, or when they waited `parked ms`; lapsed leases come
-- back (a replica died or stalled), except those of pods claimed in the cache meanwhile,
-- whose lease is renewed until the pod is bound or its claim is forgotten; ended back-offs
-- become active. Then up to `count` active pods are leased to `holder` for `lease ms`.
-- A record that cannot be read is taken out of the queue (and left for an operator): sync
-- queues the pod again with its next change or relist.

-- Records of the uids given, read (and checked) before anything is written, that are in the
-- state `state`; the others (no record, an unreadable one, or one in another state: members
-- left behind) are listed in `strays` as { uid, state }.
local function load_all(p, uids, state, strays)
  local recs = {}
  for j = 1, #uids do
    local rec = load_queued(p, uids[j], true)
    if rec and rec.state == state then
      recs[#recs + 1] = rec
    else
      strays[#strays + 1] = { uids[j], state }
    end
  end
  return recs
end

-- The active pods at the head of the queue: { rec, member } each; members without a readable
-- active record are listed in `strays`.
local function heads_of(p, scheduler, count, strays)
  local heads = {}
  local key = queue_key(p, scheduler, 'active')
  for _, member in ipairs(typed_read(key, 'zset', 'ZRANGE', 0, count - 1)) do
    local uid = string.match(member, '^%d+:(.+)$')
    local rec = uid and load_queued(p, uid, true)
    if rec and rec.state == 'active' and active_member(rec) == member then
      heads[#heads + 1] = rec
    else
      strays[#strays + 1] = { member, 'active' }
    end
  end
  return heads
end

-- The uids of `part` due by `now` (the read is the key's type check).
local function due_uids(p, scheduler, part, now)
  local key = queue_key(p, scheduler, part)
  local uids = typed_read(key, 'zset', 'ZRANGEBYSCORE', '-inf', now, 'LIMIT', 0,
                          QUEUE_MOVES)
  checked[key] = true
  return uids
end

local function queue_pop(p, replica, a)
  local scheduler, holder = a[1], a[2]
  local lease_ms, count = bounded_int(a[3], BOUNDS.duration_ms), tonumber(a[4])
  local parked_ms = bounded_int(a[5], BOUNDS.duration_ms)
  if not valid_scheduler(scheduler) then return nil, 'BADARG scheduler' end
  if holder == nil or holder == '' or holder == '-' or string.find(holder, '%s') then
    return nil, 'BADARG holder'
  end
  if lease_ms == nil or lease_ms < 1 then
    return nil, 'BADARG lease'
  end
  if count == nil or count < 1 or count > QUEUE_MOVES or count ~= math.floor(count) then
    return nil, 'BADARG count'
  end
  if parked_ms == nil then
    return nil, 'BADARG parked'
  end
  local now = now_ms(a[6])
  if now == nil then return nil, 'BADARG now' end
  local parked_key = queue_key(p, scheduler, 'parked')

  -- Reads (and every check: the reads of the queue's sorted sets check their types) first.
  local strays = {}
  local woken, seen = {}, nil
  local flushed = load_all(p, due_uids(p, scheduler, 'parked', now), 'parked', strays)
  if redis.call('ZCARD', parked_key) > 0 then
    expect_type(p .. 'queues', 'hash')
    local since = redis.call('HGET', p .. 'queues', scheduler)
    if not since then since = '0-0' end
    local helped, last = helpful_since(p, since)
    if helped then
      woken = load_all(p, redis.call('ZRANGE', parked_key, 0, QUEUE_MOVES - 1), 'parked',
                       strays)
      -- Every parked pod had its wake: the next call looks past this event.
      if redis.call('ZCARD', parked_key) <= QUEUE_MOVES then seen = last end
    else
      seen = last
    end
  end
  local lapsed = load_all(p, due_uids(p, scheduler, 'leased', now), 'leased', strays)
  local ended = load_all(p, due_uids(p, scheduler, 'backoff', now), 'backoff', strays)
  local heads = heads_of(p, scheduler, count, strays)
  if #woken + #flushed + #lapsed + #ended > 0 then  -- pods to activate, or to drop
    guard_sequence(p)
    expect_type(p .. 'queuedpods', 'set')
  end
  -- What the cache holds of each lapsed pod: 'assumed' (claimed: its lease is renewed while
  -- the claim lasts), 'added ' (bound: it leaves the queue), or nothing (it comes back).
  local held = {}
  for j = 1, #lapsed do
    local state = typed_read(p .. 'pod:' .. lapsed[j].uid, 'string', 'GETRANGE', 0, 7)
    held[j] = string.match(state or '', '^(%l+) ') or ''
  end

  -- Then the writes.
  for j = 1, #strays do
    redis.call('ZREM', queue_key(p, scheduler, strays[j][2]), strays[j][1])
  end
  if seen ~= nil then redis.call('HSET', p .. 'queues', scheduler, seen) end
  local moved = {}
  for _, group in ipairs({ woken, flushed }) do
    for j = 1, #group do
      local rec = group[j]
      if not moved[rec.uid] then
        moved[rec.uid] = true
        queue_unlink(p, rec)
        queue_after_backoff(p, rec, now)
      end
    end
  end
  for j = 1, #lapsed do
    local rec = lapsed[j]
    if held[j] == 'assumed' then
      redis.call('ZADD', queue_key(p, scheduler, 'leased'), now + lease_ms, rec.uid)
    elseif held[j] == 'added' then
      queue_drop(p, rec)
    else
      queue_unlink(p, rec)
      queue_activate(p, rec)
    end
  end
  for j = 1, #ended do
    queue_unlink(p, ended[j])
    queue_activate(p, ended[j])
  end
  -- The pods activated above join the back of their priority: the heads read before still
  -- come first, unless a higher priority came back (read again only then; a stray found now
  -- stays for the next call, which removes it).
  if #lapsed + #ended + #woken + #flushed > 0 then
    heads = heads_of(p, scheduler, count, {})
  end
  local out = {}
  local deadline = now + lease_ms
  for j = 1, #heads do
    local rec = heads[j]
    queue_unlink(p, rec)  -- from `active`
    rec.state, rec.holder = 'leased', holder
    redis.call('ZADD', queue_key(p, scheduler, 'leased'), deadline, rec.uid)
    save_queued(rec)
    out[#out + 1] = rec.uid
    out[#out + 1] = int_string(rec.attempts)
    out[#out + 1] = rec.blob
  end
  return out, nil, #out
end
