-- The scheduling queue's shared parts (sc_sync_pod feeds it; sc_queue_pop and sc_queue_retry
-- serve scheduler replicas). docs/queue.md describes it whole.
--
-- Every pending pod a feeder sees is queued under its spec.schedulerName, so N replicas of one
-- scheduler share one queue: a pod is handed to one replica at a time, with a lease.
--   queued:<uid>              string "<state> <scheduler> <priority> <seq> <attempts> <due>
--                                    <holder>\n<msgpack Pod>"; state active|leased|backoff|
--                                    parked, seq its arrival (orders one priority), due (ms)
--                                    the end of its back-off, holder the replica leasing it
--   queuedpods                set    the uids of every queued pod
--   queueseq                  string the arrival counter (one SET a call: guard_sequence)
--   queues                    hash   scheduler -> "<id>[ <score>]": the last helpful event
--                                    its parked pods were woken for, and while that wake is
--                                    still being given, the parked pods (score at most this)
--                                    still owed it; the field goes with the scheduler's last pod
--   helped                    string the id of the last event that could help a parked pod
--                                    (HELPFUL; emit, end_call): no event is read for a wake
--   queue:<scheduler>:active  zset   "<seq, 15 digits>:<uid>" scored -priority: ZRANGE's
--                                    order is priority, then arrival
--   queue:<scheduler>:leased  zset   uid -> lease deadline (ms, Redis' clock)
--   queue:<scheduler>:backoff zset   uid -> end of its back-off (ms)
--   queue:<scheduler>:parked  zset   uid -> when it returns anyway (ms): pods no node could
--                                    take, until a cluster event that could help

local QUEUE_STATES = { active = 'active', leased = 'leased', backoff = 'backoff',
                       parked = 'parked' }
-- Pods moved per category (lapsed leases, ended back-offs, parked pods) by one call.
BOUNDS.QUEUE_MOVES = 100
-- Bytes of queued records one pop reads (and so rewrites) at most, past the first record of
-- each part (the heads, woken, flushed, lapsed, ended): a record's state change rewrites its
-- pod's msgpack (up to BOUNDS.MAX_BLOB_BYTES), so 300 pods of 0.9 MiB made one pop 2 s.
BOUNDS.POP_BYTES = 2 * 1048576

-- A spec.schedulerName (a DNS subdomain, as the API server and the library check it:
-- model/selectors.is_dns_subdomain): it is part of key names. The names found valid are kept
-- across calls (a cluster has a few; the five matches cost ~10,000 instructions, on every
-- queued record read), at most BOUNDS.SCHEDULERS_KEPT, dropped whole when full.
BOUNDS.SCHEDULERS_KEPT = 64
local valid_scheduler
do  -- (the memo's locals end with the block: the library's chunk may hold 200)
  local known, kept = {}, 0
  function valid_scheduler(name)
    if known[name] then return true end
    if not (type(name) == 'string' and #name <= 253
        and string.match(name, '^[a-z0-9][-a-z0-9.]*$') ~= nil
        and string.match(name, '[a-z0-9]$') ~= nil
        and not string.find(name, '..', 1, true) and not string.find(name, '.-', 1, true)
        and not string.find(name, '-.', 1, true)) then
      return false
    end
    if kept >= BOUNDS.SCHEDULERS_KEPT then known, kept = {}, 0 end
    known[name] = true
    kept = kept + 1
    return true
  end
end

local function queue_key(p, scheduler, part)
  return p .. 'queue:' .. scheduler .. ':' .. part
end

-- Two facts about a scheduler's queue a call keeps in `checked` (emptied at every call's start,
-- _helpers.lua), under names no key there can have (a key starts with the prefix's '{'):
--   checked[<scheduler>]            a lower bound on the pods its four parts hold, as this
--                                   call last counted them less what queue_drop took out since
--                                   (only removals lower the count: every other ZREM of the
--                                   parts, queue_unlink's and sc_queue_pop's, forgets it; adds
--                                   keep it a lower bound), or nil: unknown
--   checked[<scheduler> .. ' listed']  true once this call made sure its `queues` field is
--                                   there (HSETNX); forgotten with its HDEL
-- An sc_batch confirming many of one scheduler's pods counts its queue once, not once a pod
-- (up to four ZCARDs each), and pushing many lists the scheduler once (an HSETNX each).

-- Its `queues` field goes with a scheduler's last pod (so does every series /metrics shows for
-- it): 5,000 names once seen must not stay forever. What it counts is kept (checked[scheduler]).
-- (The four parts written out: a table and ipairs a call cost ~2,000 instructions.) A drop
-- checks only the part its pod leaves (guard_queue's `part`), so the others may be unchecked
-- here: one of another type counts as holding pods (pcall: no error after the drop's writes),
-- and the scheduler is kept; the next command that writes that part reports it.
local function forget_if_idle(p, scheduler)
  local q = p .. 'queue:' .. scheduler .. ':'
  local held = redis.pcall('ZCARD', q .. 'active')
  if held == 0 then held = redis.pcall('ZCARD', q .. 'leased') end
  if held == 0 then held = redis.pcall('ZCARD', q .. 'backoff') end
  if held == 0 then held = redis.pcall('ZCARD', q .. 'parked') end
  if type(held) ~= 'number' then held = 1 end
  checked[scheduler] = held
  if held > 0 then return end
  redis.call('HDEL', p .. 'queues', scheduler)
  checked[scheduler .. ' listed'] = nil
end

-- The wake cursor of `scheduler` ("<id>[ <score>]", see `queues`): the last event read and the
-- parked score still owed a wake (nil when none). An unreadable one starts again from 0-0.
-- The third value is the field as it was.
local function wake_cursor(p, scheduler)
  local text = redis.call('HGET', p .. 'queues', scheduler) or ''
  local id, owed = string.match(text, '^(%d+%-%d+) ?(%d*)$')
  if id == nil then return '0-0', nil, text end
  return id, tonumber(owed), text
end
-- The arrival counter holds an integer from 0 (or is missing), short of 10^15 by more than a
-- call counts (BOUNDS.SEQ_MOST): an active member is its seq padded to 15 digits, and the
-- queue's order is those members' order as text (active_member); a negative seq would not
-- read back (load_queued). It is read and checked once a call, and its digits are kept in
-- `checked` ('' when missing): the call's arrivals count on from it in Lua (queue_activate:
-- exact, under 2^53), and end_call writes the last one back with one SET, as `gen` is (an
-- INCR an arrival was ~3,500 instructions). No counter of arrivals gets near the bound (10^15
-- is 31 years of a million a second).
BOUNDS.SEQ_MOST = '999999999000000'  -- 10^15 less 10^6 (a call's most: 1,000 commands of 400)
local function guard_sequence(p)
  local seq = p .. 'queueseq'
  if not checked[seq] then
    -- (the generation counter's check: an integer, or missing)
    local value = check_gen(seq) or ''
    if string.sub(value, 1, 1) == '-' then
      corrupt(seq, 'is negative: an arrival numbered below 0 would not read back')
    end
    if #value > #BOUNDS.SEQ_MOST or (#value == #BOUNDS.SEQ_MOST and value >= BOUNDS.SEQ_MOST) then
      corrupt(seq, 'is past 10^15 less 10^6: arrivals past 10^15 would not keep their order')
    end
    checked[seq] = value  -- (its digits: a number only when an arrival counts on from it)
  end
end

-- The keys of `scheduler`'s queue and the shared ones: all checked before the first write.
-- `dropping`: the caller only takes a pod out of the queue (queue_drop), which never counts
-- arrivals, so the arrival counter is left unread. `part`: the one part of the four the caller
-- writes, the only one checked (a new pod's push: 'active'; a drop: the part its pod is in),
-- else nil: all four. A drop's part, counted here (its probe is its ZCARD), is a lower bound on
-- the scheduler's pods that queue_drop counts down (checked[scheduler]); only when it reaches
-- 0 are the parts counted again (forget_if_idle). The four ZCARDs of every push and every
-- drop were ~3 commands a single push and a confirmation's call (issue 40).
-- What a call checked of a scheduler's queue is kept in checked[<its queue's prefix>], a table
-- (`all`: the four parts; a part's name: that part; `seq`: the arrival counter; the shared
-- keys go with any part), which answers the rest of the call's pushes and drops: four more key
-- names built and six checks looked up again a pod were ~100 VM instructions of a push
-- (bench/lua_profile.py).
local function guard_queue(p, scheduler, dropping, part)
  local q = p .. 'queue:' .. scheduler .. ':'  -- queue_key's, once (no key: it ends in ':')
  local done = checked[q]
  if done == nil then
    done = {}
    checked[q] = done
  elseif (done.all or (part ~= nil and done[part])) and (dropping or done.seq) then
    return
  end
  -- Marked in `done` only once every check passed: a command refused by one of them (a
  -- corrupt `queuedpods`) leaves no mark for the batch's next command to trust (found in
  -- review: it skipped the shared keys' checks and wrote a corrupt one).
  local key, probed = nil, false
  if done.all then  -- (the counter only)
  elseif part ~= nil then
    key = q .. part
    probed = not checked[key]
    expect_type(key, 'zset')
  else
    expect_type(q .. 'active', 'zset')
    expect_type(q .. 'leased', 'zset')
    expect_type(q .. 'backoff', 'zset')
    expect_type(q .. 'parked', 'zset')
  end
  expect_type(p .. 'queuedpods', 'set')
  expect_type(p .. 'queues', 'hash')
  if not dropping then guard_sequence(p) end
  if key ~= nil then
    done[part] = true
    local least = checked[scheduler]
    if dropping and probed and (least == nil or least < checked[key]) then
      checked[scheduler] = checked[key]  -- (the part alone: a lower bound, counted now)
    end
  elseif part == nil then
    done.all = true
  end
  if not dropping then done.seq = true end
end

-- The queued record of `uid`, or nil; a record that cannot be read is the corruption (raised
-- before any write), unless `lenient`: then false (a pop skips it rather than stall on it).
-- `dropping`: the caller only takes it out of the queue (queue_drop), so the record is checked
-- whole but only what a drop reads is kept: key, uid, state, scheduler and seq (half the table,
-- and no copy of the pod's msgpack: a confirmation's largest allocation).
local function load_queued(p, uid, lenient, dropping, read)
  local key = p .. 'queued:' .. uid
  local text = read  -- (as load_pod's `read`)
  if text == nil then text = get_string(key) end
  if text == false then return nil end
  -- (The header matched in the text itself, up to its first newline: no substring of it.)
  local state, scheduler, priority, seq, attempts, due, holder, body = string.match(text,
    '^(%l+) (%S+) (%-?%d+) (%d+) (%d+) (%d+) (%S+)\n()')
  -- (attempts and due stay their digits: a save writes them back as they are, and only
  -- back-offs need them as numbers; more than 18 digits after leading zeros might not be an
  -- int64, or a double a ZADD takes: found in review, a parked record's 309-digit due failed
  -- its pop mid-write)
  if state == nil or QUEUE_STATES[state] == nil or not valid_scheduler(scheduler)
      or (#attempts > 18 and #string.match(attempts, '^0*(%d*)$') > 18)
      or (#due > 18 and #string.match(due, '^0*(%d*)$') > 18) then
    if lenient then return false end
    corrupt(key, 'is not a queued pod record')
  end
  if dropping then
    return { key = key, uid = uid, state = state, scheduler = scheduler, seq = seq }
  end
  return { key = key, uid = uid, state = state, scheduler = scheduler, priority = priority,
           seq = seq, attempts = attempts, due = due, holder = holder,
           blob = string.sub(text, body) }
end

-- The text of `rec` as stored. (attempts and due: the digits read, or numbers a command
-- counted: written as int_string's)
local function queued_text(rec)
  local attempts, due = rec.attempts, rec.due
  if attempts == 0 then attempts = '0'  -- (a new record's)
  elseif type(attempts) == 'number' then attempts = int_string(attempts) end
  if due == 0 then due = '0'
  elseif type(due) == 'number' then due = int_string(due) end
  return rec.state .. ' ' .. rec.scheduler .. ' ' .. rec.priority .. ' ' .. rec.seq .. ' '
    .. attempts .. ' ' .. due .. ' ' .. rec.holder .. '\n' .. rec.blob
end

-- `vkey`, `rv`: the pod's version, when the caller records it now too (sc_sync_pod): one
-- MSET for both, not two SETs (~3,000 instructions a push).
local function save_queued(rec, vkey, rv)
  if vkey then
    redis.call('MSET', rec.key, queued_text(rec), vkey, rv)
  else
    redis.call('SET', rec.key, queued_text(rec))
  end
end

-- (Padded with a substring, not string.format: ~1,500 instructions less a member.)
local function active_member(rec)
  local seq = rec.seq
  if #seq < 15 then
    return string.sub('000000000000000', #seq + 1) .. seq .. ':' .. rec.uid
  end
  return string.format('%015d', tonumber(seq)) .. ':' .. rec.uid
end

-- Takes `rec` out of the sorted set of its state (the record itself stays); the count this call
-- kept of its scheduler's pods is forgotten (queue_drop keeps it up to date itself).
local function queue_unlink(p, rec)
  checked[rec.scheduler] = nil
  if rec.state == 'active' then
    return redis.call('ZREM', queue_key(p, rec.scheduler, 'active'), active_member(rec))
  end
  return redis.call('ZREM', queue_key(p, rec.scheduler, rec.state), rec.uid)
end

-- Puts `rec` (unlinked) at the back of its priority in the active queue (`vkey`, `rv`: as
-- save_queued's). Its place is the arrival counter's next value (guard_sequence).
local function queue_activate(p, rec, vkey, rv)
  local n = checked[' queueseq']  -- (the call's last arrival, which end_call writes)
  if n == nil then
    local seq = p .. 'queueseq'
    if not checked[seq] then guard_sequence(p) end  -- (every caller guarded it)
    n = tonumber(checked[seq]) or 0
  end
  n = n + 1
  checked[' queueseq'] = n
  rec.seq = int_string(n)
  rec.state, rec.holder = 'active', '-'
  redis.call('ZADD', queue_key(p, rec.scheduler, 'active'), -tonumber(rec.priority),
             active_member(rec))
  save_queued(rec, vkey, rv)
end

-- Puts `rec` (unlinked) where its back-off says: active once it has ended, else backoff.
local function queue_after_backoff(p, rec, now)
  if tonumber(rec.due) <= now then return queue_activate(p, rec) end
  rec.state, rec.holder = 'backoff', '-'
  redis.call('ZADD', queue_key(p, rec.scheduler, 'backoff'), rec.due, rec.uid)
  save_queued(rec)
end

-- A pod left the queue for good (bound, deleted, terminated): record and membership go, and
-- the scheduler's bookkeeping with its last pod. A lower bound this call kept on the pods its
-- scheduler's four parts hold (checked[scheduler]: guard_queue's count of the pod's part, less
-- what queue_drop took out since) that stays above 0 once this pod is out tells that pods are
-- left; only otherwise are they counted again (forget_if_idle).
local function queue_drop(p, rec)
  local scheduler = rec.scheduler
  local least = checked[scheduler]
  local removed = queue_unlink(p, rec)
  if batching then  -- out of `queuedpods` when the call ends, as its pushes join (end_call)
    local uid, pending = rec.uid, checked[' queued']
    if pending == nil then
      pending = {}
      checked[' queued'] = pending
    end
    if pending[uid] == nil then pending[#pending + 1] = uid end
    pending[uid] = false
  else
    redis.call('SREM', p .. 'queuedpods', rec.uid)
  end
  redis.call('DEL', rec.key)
  if least ~= nil and least - removed > 0 then
    checked[scheduler] = least - removed
  else
    forget_if_idle(p, scheduler)
  end
end

-- The id of the stream's last event, or '0-0'.
local function last_event_or_zero(p)
  local last = last_event_id(p)
  if last == '' then return '0-0' end
  return last
end

-- Whether stream id `a` comes after stream id `b` (both "<ms>-<seq>").
local function id_after(a, b)
  local a_ms, a_seq = string.match(a, '^(%d+)%-(%d+)$')
  local b_ms, b_seq = string.match(b, '^(%d+)%-(%d+)$')
  a_ms, b_ms = tonumber(a_ms), tonumber(b_ms)
  if a_ms ~= b_ms then return a_ms > b_ms end
  return tonumber(a_seq) > tonumber(b_seq)
end

-- Whether an event after `after` (a stream id) could help a parked pod, and the id of the last
-- such event ('0-0' when none): one read of `helped` (emit keeps it), however many events
-- came since. (Scanning the events read their data: 200 events of 0.8 MiB took 1.4 s.)
local function helpful_since(p, after)
  -- A helpful event of this call: `helped` is written with its id when the call ends (emit).
  local last = ARRIVALS.helped
  if not last then
    local key = p .. 'helped'
    last = get_string(key) or '0-0'
    if not string.match(last, '^%d+%-%d+$') then corrupt(key, 'is not a stream id') end
  end
  return id_after(last, after), last
end
