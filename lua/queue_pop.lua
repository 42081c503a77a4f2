-- sc_queue_pop: hand a scheduler replica the next pending pods of its scheduler, each leased to
-- it alone (_queue.lua).
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, command id (""), scheduler, holder, lease ms, count (1-100), parked ms
--          (reserved: checked as an integer 0..MAX_DURATION_MS and otherwise ignored; how long
--          a parked pod waits is fixed when it is parked, sc_queue_retry's `parked ms`, which
--          scores it in queue:<scheduler>:parked), [now ms]
-- Keys     queued:<uid>, queuedpods, queueseq, queues, queue:<scheduler>:*, pod:<uid> (read),
--          helped (read)
-- Reply    { uid, attempts, msgpack Pod, ... } at most `count` pods, highest priority first,
--          then oldest
-- Errors   BADARG <what>; CORRUPT <key> <why> (nothing written)
-- First, each bounded to BOUNDS.QUEUE_MOVES: parked pods go to back-off (or active) when an event
-- since they were parked could help them, or when their wait (their score) ended; lapsed
-- leases come back (a replica died or stalled), except those of pods claimed in the cache
-- meanwhile, whose lease is renewed until the pod is bound or its claim is forgotten; ended
-- back-offs become active. Then up to `count` active pods are leased to `holder` for `lease ms`.
-- Every part is bounded in bytes too (BOUNDS.POP_BYTES, _queue.lua): what is left waits for the next
-- pop. A helpful event (`helped`, emit) owes every pod parked before it a wake, given
-- BOUNDS.QUEUE_MOVES per pop (the cursor in `queues` keeps the rest owed).
-- A record that cannot be read is taken out of the queue (and left for an operator): sync
-- queues the pod again with its next change or relist.

-- Records of the uids given, read (and checked) before anything is written, that are in the
-- state `state`; the others (no record, an unreadable one, or one in another state: members
-- left behind) are listed in `strays` as { uid, state }. Past the first record, reading stops
-- when `budget.left` (bytes) is spent; the second value says whether every uid was read.
local function load_all(p, uids, state, strays, budget)
  local recs = {}
  for j = 1, #uids do
    if j > 1 and budget.left <= 0 then return recs, false end
    local rec = load_queued(p, uids[j], true)
    if rec and rec.state == state then
      recs[#recs + 1] = rec
      budget.left = budget.left - #rec.blob
    else
      strays[#strays + 1] = { uids[j], state }
    end
  end
  return recs, true
end

-- The active pods at the head of the queue (at most `count`, and within `budget` past the
-- first), each with its member (rec.member); members without a readable active record are
-- listed in `strays`.
local function heads_of(p, scheduler, count, strays, budget)
  local heads = {}
  local key = queue_key(p, scheduler, 'active')
  local members = typed_read(key, 'zset', 'ZRANGE', 0, count - 1)
  for j = 1, #members do
    if j > 1 and budget.left <= 0 then break end
    local member = members[j]
    local uid = string.match(member, '^%d+:(.+)$')
    local rec = uid and load_queued(p, uid, true)
    if rec and rec.state == 'active' and active_member(rec) == member then
      rec.member = member
      heads[#heads + 1] = rec
      budget.left = budget.left - #rec.blob
    else
      strays[#strays + 1] = { member, 'active' }
    end
  end
  return heads
end

-- The parked pods to wake now, and the new wake cursor ("<id>[ <score>]"; nil when it is
-- unchanged): a helpful event after the cursor owes every pod parked now (score up to the
-- highest) a wake, given BOUNDS.QUEUE_MOVES a call.
local function wake_parked(p, scheduler, parked_key, strays, budget)
  expect_type(p .. 'queues', 'hash')
  local since, owed, was = wake_cursor(p, scheduler)
  local helped, last = helpful_since(p, since)
  if helped then
    local top = redis.call('ZRANGE', parked_key, -1, -1, 'WITHSCORES')
    owed = tonumber(top[2])
  end
  local woken = {}
  if owed ~= nil then
    local uids = redis.call('ZRANGEBYSCORE', parked_key, '-inf', int_string(owed), 'LIMIT', 0,
                            BOUNDS.QUEUE_MOVES)
    local all
    woken, all = load_all(p, uids, 'parked', strays, budget)
    if all and #uids < BOUNDS.QUEUE_MOVES then owed = nil end  -- every owed wake given
  end
  local cursor = since  -- the last helpful event these pods were woken for
  if helped then cursor = last end
  if owed ~= nil then cursor = last .. ' ' .. int_string(owed) end
  if cursor == was then cursor = nil end  -- nothing new read, nothing to write
  return woken, cursor
end

-- The uids of `part` due by `now` (the read is the key's type check).
local function due_uids(p, scheduler, part, now)
  local key = queue_key(p, scheduler, part)
  local uids = typed_read(key, 'zset', 'ZRANGEBYSCORE', '-inf', now, 'LIMIT', 0,
                          BOUNDS.QUEUE_MOVES)
  checked[key] = true
  return uids
end

local function queue_pop(p, replica, a)
  local scheduler, holder = a[1], a[2]
  local lease_ms = int_arg(a[3], 1, BOUNDS.MAX_DURATION_MS)
  local count = int_arg(a[4], 1, BOUNDS.QUEUE_MOVES)
  local parked_ms = int_arg(a[5], 0, BOUNDS.MAX_DURATION_MS)
  if not valid_scheduler(scheduler) then return nil, 'BADARG scheduler' end
  if not name_arg(holder) or holder == '-' then
    return nil, 'BADARG holder'
  end
  if lease_ms == nil then return nil, 'BADARG lease' end
  if count == nil then return nil, 'BADARG count' end
  if parked_ms == nil then return nil, 'BADARG parked' end
  local now = now_ms(a[6])
  if now == nil then return nil, 'BADARG now' end
  local parked_key = queue_key(p, scheduler, 'parked')

  -- Reads (and every check: the reads of the queue's sorted sets check their types) first;
  -- the heads first, so the byte budget serves them before the housekeeping.
  local strays = {}
  local budget = { left = BOUNDS.POP_BYTES }
  local heads = heads_of(p, scheduler, count, strays, budget)
  -- (Nothing parked, the usual case: one ZCARD, the key's type check, and no ZRANGEBYSCORE.)
  local flushed, woken, seen = {}, {}, nil
  if typed_read(parked_key, 'zset', 'ZCARD') > 0 then
    flushed = load_all(p, due_uids(p, scheduler, 'parked', now), 'parked', strays, budget)
    woken, seen = wake_parked(p, scheduler, parked_key, strays, budget)
  end
  checked[parked_key] = true
  local lapsed = load_all(p, due_uids(p, scheduler, 'leased', now), 'leased', strays, budget)
  local ended = load_all(p, due_uids(p, scheduler, 'backoff', now), 'backoff', strays, budget)
  if #woken + #flushed + #lapsed + #ended > 0 then  -- pods to activate, or to drop
    guard_sequence(p)
    expect_type(p .. 'queuedpods', 'set')
  end
  -- A stray's removal or a bound pod's drop may take the scheduler's last pod, and its `queues`
  -- field with it (forget_if_idle's HDEL): its type checked before the first write (found in
  -- review: a stray's ZREM ran, then the HDEL answered WRONGTYPE).
  if #strays + #lapsed > 0 then expect_type(p .. 'queues', 'hash') end
  -- What the cache holds of each lapsed pod: 'assumed' (claimed: its lease is renewed while
  -- the claim lasts), 'added ' (bound: it leaves the queue), or nothing (it comes back).
  local held = {}
  for j = 1, #lapsed do
    local state = typed_read(p .. 'pod:' .. lapsed[j].uid, 'string', 'GETRANGE', 0, 7)
    held[j] = string.match(state or '', '^(%l+) ') or ''
  end

  -- Then the writes. (Removals: the count of this scheduler's pods kept, _queue.lua, goes.)
  if #strays > 0 then checked[scheduler] = nil end
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
    heads = heads_of(p, scheduler, count, {}, budget)
  end
  if #strays > 0 then forget_if_idle(p, scheduler) end
  local out = {}
  if #heads == 0 then return out, nil, 0 end
  -- The heads leave `active`, join `leased` and are rewritten leased in one call each (a call
  -- a head costs ~3,500 instructions; their bytes are POP_BYTES' bound).
  local members, leases, records = {}, {}, {}
  local deadline = int_string(now + lease_ms)
  for j = 1, #heads do
    local rec = heads[j]
    rec.state, rec.holder = 'leased', holder
    members[j] = rec.member
    leases[2 * j - 1], leases[2 * j] = deadline, rec.uid
    records[2 * j - 1], records[2 * j] = rec.key, queued_text(rec)
    out[3 * j - 2] = rec.uid
    out[3 * j - 1] = rec.attempts  -- (its digits as stored)
    out[3 * j] = rec.blob
  end
  checked[scheduler] = nil
  redis.call('ZREM', queue_key(p, scheduler, 'active'), unpack(members))
  redis.call('ZADD', queue_key(p, scheduler, 'leased'), unpack(leases))
  redis.call('MSET', unpack(records))
  return out, nil, #out
end
