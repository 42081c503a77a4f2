-- The scheduling queue's shared parts (sc_sync_pod feeds it; sc_queue_pop and sc_queue_retry
-- serve scheduler replicas). docs/queue.md describes it whole.
--
-- Every pending pod a feeder sees is queued under its spec.schedulerName, so N replicas of one
-- scheduler share one queue: a pod is handed to one replica at a time, with a lease.
--   queued:<uid>              string "Q<state> <seq> <attempts> <due> <holder> <scheduler>
--                                    <priority>\n<msgpack Pod>"; state active|leased|backoff|
--                                    parked padded to 7, seq its arrival (orders one
--                                    priority), attempts, due (ms) the end of its back-off,
--                                    zero-padded to 19, 10 and 14 digits, holder the replica
--                                    leasing it ("-": none) padded with spaces to its slot (at
--                                    least 64): each state change rewrites this fixed part
--                                    alone (SETRANGE at offset 1), never the pod's msgpack.
--                                    A record of the previous release ("<state> <scheduler>
--                                    <priority> <seq> <attempts> <due> <holder>\n<msgpack>",
--                                    no padding) is read as it is and rewritten whole, in this
--                                    form, by its first change (QUEUED below)
--   queuedpods                set    the uids of every queued pod
--   queueseq                  string the arrival counter (INCR)
--   queues                    hash   scheduler -> "<id>[ <score>]": the last helpful event
--                                    its parked pods were woken for, and while that wake is
--                                    still being given, the parked pods (score at most this)
--                                    still owed it; the field goes with the scheduler's last pod
--   helped                    string the id of the last event that could help a parked pod
--                                    (HELPFUL, written by emit): no event is read for a wake
--   queue:<scheduler>:active  zset   "<seq, 15 digits>:<uid>" scored -priority: ZRANGE's
--                                    order is priority, then arrival
--   queue:<scheduler>:leased  zset   uid -> lease deadline (ms, Redis' clock)
--   queue:<scheduler>:backoff zset   uid -> end of its back-off (ms)
--   queue:<scheduler>:parked  zset   uid -> when it returns anyway (ms): pods no node could
--                                    take, until a cluster event that could help

-- The states, and each one as the record stores it (padded to 7).
local QUEUE_STATES = { active = 'active ', leased = 'leased ', backoff = 'backoff',
                       parked = 'parked ' }
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

-- Its `queues` field goes with a scheduler's last pod (so does every series /metrics shows for
-- it): 5,000 names once seen must not stay forever.
-- (The four parts written out: a table and ipairs a call cost ~2,000 instructions.)
local function forget_if_idle(p, scheduler)
  local q = p .. 'queue:' .. scheduler .. ':'
  if redis.call('ZCARD', q .. 'active') > 0 or redis.call('ZCARD', q .. 'leased') > 0
      or redis.call('ZCARD', q .. 'backoff') > 0 or redis.call('ZCARD', q .. 'parked') > 0 then
    return
  end
  redis.call('HDEL', p .. 'queues', scheduler)
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
-- The arrival counter holds an integer INCR can count on from (or is missing).
local function guard_sequence(p)
  local seq = p .. 'queueseq'
  if not checked[seq] then
    check_gen(seq)  -- the generation counter's check: an integer INCR can count on from
    checked[seq] = true
  end
end

-- The keys of `scheduler`'s queue and the shared ones: all checked before the first write.
-- `dropping`: the caller only takes a pod out of the queue (queue_drop), which never counts
-- arrivals, so the arrival counter is left unread; and when the four parts are read here (not
-- checked earlier in the call), the pods they hold are answered: their ZCARDs are the type
-- checks, and queue_drop needs no more to tell whether the scheduler's last pod went.
local function guard_queue(p, scheduler, dropping)
  local q = p .. 'queue:' .. scheduler .. ':'  -- queue_key's, once
  local active, leased, backoff, parked = q .. 'active', q .. 'leased', q .. 'backoff',
                                          q .. 'parked'
  local queued = nil
  if dropping and not checked[active] then
    queued = typed_read(active, 'zset', 'ZCARD') + typed_read(leased, 'zset', 'ZCARD')
      + typed_read(backoff, 'zset', 'ZCARD') + typed_read(parked, 'zset', 'ZCARD')
    checked[active], checked[leased], checked[backoff], checked[parked] = true, true, true, true
  else
    expect_type(active, 'zset')
    expect_type(leased, 'zset')
    expect_type(backoff, 'zset')
    expect_type(parked, 'zset')
  end
  expect_type(p .. 'queuedpods', 'set')
  expect_type(p .. 'queues', 'hash')
  if not dropping then guard_sequence(p) end
  return queued
end

-- The queued record's layout (the header comment above) and its helpers: the one table keeps
-- them out of the chunk's 200 locals.
local QUEUED = {
  -- Bytes read of a record when its header alone is wanted (GETRANGE): more than any
  -- header holds (1 + 7 + 1 + 19 + 1 + 10 + 1 + 14 + 1 + a holder of MAX_NAME_BYTES (1,024)
  -- + 1 + a scheduler name of 253 + 1 + a priority of 11, or the previous release's).
  HEADER_BYTES = 2048,
  -- The holder's slot of a record written whole (a longer holder widens it).
  HOLDER_SLOT = 64,
  -- 1-based positions in the record: the holder's first byte (the fixed part is bytes 2 to
  -- the end of the holder's slot, SETRANGE's offset 1).
  HOLDER_AT = 56,
  ZEROS = '0000000000000000000',
  SPACES = nil,  -- 1,024 spaces (made by the first call: no library at load time)
  -- The largest attempt count the record holds (10 digits; sc_queue_retry stops counting
  -- there: 115 days of one failed attempt a millisecond).
  MAX_ATTEMPTS = 9999999999,
}

-- `value` (an integer, or its digits) as the record stores it: zero-padded to `width` (10,
-- 14 or 19).
function QUEUED.pad(value, width)
  if type(value) == 'string' then
    if #value == width then return value end
    value = tonumber(value)
  end
  if value == 0 then return string.sub(QUEUED.ZEROS, 1, width) end
  return string.format(QUEUED.FORMATS[width], value)
end
QUEUED.FORMATS = { [10] = '%010d', [14] = '%014d', [19] = '%019d' }

-- The record's fixed part from the state on (SETRANGE at 1), its holder padded to `width`:
-- seq, attempts and due are padded already (the record's own, or QUEUED.pad's).
function QUEUED.fixed(rec, width)
  local spaces = QUEUED.SPACES
  if spaces == nil then
    spaces = string.rep(' ', 1024)
    QUEUED.SPACES = spaces
  end
  return QUEUE_STATES[rec.state] .. ' ' .. rec.seq .. ' ' .. rec.attempts .. ' ' .. rec.due
    .. ' ' .. rec.holder .. string.sub(spaces, 1, width - #rec.holder)
end

-- The text of `key` (a record of `uid`) parsed: the record, or nil when it cannot be read.
-- `whole`: `text` is the whole record (else its first HEADER_BYTES, the blob left unread).
function QUEUED.parse(key, uid, text, whole)
  local newline = string.find(text, '\n', 1, true)
  if newline == nil then return nil end
  local header = string.sub(text, 1, newline - 1)
  local rec
  if string.byte(header) == 81 then  -- 'Q': this release's
    local state, seq, attempts, due, at, holder, slot_end, scheduler, priority = string.match(
      header, '^Q(%l+) +(%d+) (%d+) (%d+) ()(%S+) +()(%S+) (%-?%d+)$')
    if state == nil or at ~= QUEUED.HOLDER_AT or #seq ~= 19 or #attempts ~= 10
        or #due ~= 14 then
      return nil
    end
    rec = { key = key, uid = uid, state = state, scheduler = scheduler, priority = priority,
            seq = seq, attempts = attempts, due = due, holder = holder,
            width = slot_end - QUEUED.HOLDER_AT - 1 }
  else  -- the previous release's: read as it is (`width` nil: its first change rewrites it)
    local state, scheduler, priority, seq, attempts, due, holder = string.match(header,
      '^(%l+) (%S+) (%-?%d+) (%d+) (%d+) (%d+) (%S+)$')
    if state == nil then return nil end
    rec = { key = key, uid = uid, state = state, scheduler = scheduler, priority = priority,
            seq = QUEUED.pad(seq, 19), attempts = QUEUED.pad(attempts, 10),
            due = QUEUED.pad(due, 14), holder = holder }
  end
  if QUEUE_STATES[rec.state] == nil or not valid_scheduler(rec.scheduler) then return nil end
  if whole then rec.blob = string.sub(text, newline + 1) end
  -- What is stored (a change of any: the record is written whole).
  rec.stored_blob, rec.stored_scheduler, rec.stored_priority = rec.blob, rec.scheduler,
    rec.priority
  rec.bytes = #text
  return rec
end

-- The queued record of `uid`, or nil; a record that cannot be read is the corruption (raised
-- before any write), unless `lenient`: then false (a pop skips it rather than stall on it).
-- `header_only`: its msgpack is not read (rec.blob nil), unless it is a record of the previous
-- release (read whole: its first change rewrites it); a missing record reads as an empty
-- string then, and the key's existence is asked only when not `lenient`.
local function load_queued(p, uid, lenient, header_only)
  local key = p .. 'queued:' .. uid
  local text
  if header_only then
    text = typed_read(key, 'string', 'GETRANGE', 0, QUEUED.HEADER_BYTES - 1)
    if text == '' and (lenient or redis.call('EXISTS', key) == 0) then return nil end
    if string.byte(text) ~= 81 then  -- not 'Q': the previous release's, read whole
      header_only = false
      text = get_string(key)
    end
  else
    text = get_string(key)
    if text == false then return nil end
  end
  local rec = QUEUED.parse(key, uid, text, not header_only)
  if rec == nil then
    if lenient then return false end
    corrupt(key, 'is not a queued pod record')
  end
  return rec
end

-- Writes `rec`: its fixed part alone (SETRANGE) when its msgpack, scheduler and priority are
-- those stored and its holder fits its slot; else whole, in this release's form (a record of
-- the previous one, a new one, a changed one).
local function save_queued(rec)
  if rec.width ~= nil and #rec.holder <= rec.width and rec.blob == rec.stored_blob
      and rec.scheduler == rec.stored_scheduler and rec.priority == rec.stored_priority then
    redis.call('SETRANGE', rec.key, 1, QUEUED.fixed(rec, rec.width))
    return
  end
  local blob = rec.blob
  if blob == nil then  -- (read header only: never so far, as only a lease widens the slot)
    local text = get_string(rec.key)
    blob = string.sub(text, string.find(text, '\n', 1, true) + 1)
    rec.blob = blob
  end
  local width = math.max(QUEUED.HOLDER_SLOT, #rec.holder)
  redis.call('SET', rec.key, 'Q' .. QUEUED.fixed(rec, width) .. ' ' .. rec.scheduler .. ' '
    .. rec.priority .. '\n' .. blob)
  rec.width, rec.stored_blob, rec.stored_scheduler, rec.stored_priority = width, blob,
    rec.scheduler, rec.priority
end

-- The record's member of the active queue: "<seq, 15 digits>:<uid>".
local function active_member(rec)
  local seq = rec.seq
  if #seq == 19 and string.find(seq, '^0000') then
    return string.sub(seq, 5) .. ':' .. rec.uid
  end
  return string.format('%015d', tonumber(seq)) .. ':' .. rec.uid
end

-- Takes `rec` out of the sorted set of its state (the record itself stays).
local function queue_unlink(p, rec)
  if rec.state == 'active' then
    return redis.call('ZREM', queue_key(p, rec.scheduler, 'active'), active_member(rec))
  end
  return redis.call('ZREM', queue_key(p, rec.scheduler, rec.state), rec.uid)
end

-- Puts `rec` (unlinked) at the back of its priority in the active queue.
local function queue_activate(p, rec)
  rec.seq = QUEUED.pad(redis.call('INCR', p .. 'queueseq'), 19)
  rec.state, rec.holder = 'active', '-'
  if rec.width == nil then  -- new (sc_sync_pod's, its counts numbers), or of a release before
    rec.attempts, rec.due = QUEUED.pad(rec.attempts, 10), QUEUED.pad(rec.due, 14)
  end
  redis.call('ZADD', queue_key(p, rec.scheduler, 'active'), -tonumber(rec.priority),
             active_member(rec))
  save_queued(rec)
end

-- Puts `rec` (unlinked) where its back-off says: active once it has ended, else backoff.
local function queue_after_backoff(p, rec, now)
  local due = tonumber(rec.due)
  if due <= now then return queue_activate(p, rec) end
  rec.state, rec.holder = 'backoff', '-'
  redis.call('ZADD', queue_key(p, rec.scheduler, 'backoff'), due, rec.uid)
  save_queued(rec)
end

-- A pod left the queue for good (bound, deleted, terminated): record and membership go, and
-- the scheduler's bookkeeping with its last pod. `queued`: the pods its scheduler's four
-- parts held, as guard_queue counted them for this drop (nothing wrote them since), else nil
-- and they are counted again.
local function queue_drop(p, rec, queued)
  local removed = queue_unlink(p, rec)
  redis.call('SREM', p .. 'queuedpods', rec.uid)
  redis.call('DEL', rec.key)
  if queued == nil then
    forget_if_idle(p, rec.scheduler)
  elseif queued - removed <= 0 then
    redis.call('HDEL', p .. 'queues', rec.scheduler)
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
  local key = p .. 'helped'
  local last = get_string(key) or '0-0'
  if not string.match(last, '^%d+%-%d+$') then corrupt(key, 'is not a stream id') end
  return id_after(last, after), last
end
