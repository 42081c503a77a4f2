-- sc_queue_retry: a replica gives back a pod it leased and could not place (_queue.lua).
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, command id, scheduler, holder, uid, kind ("unschedulable": no node could
--          take it; "error": anything else, e.g. its Binding failed; "unreadable": its msgpack
--          could not be decoded, so it leaves the queue; "untried": popped in a batch and
--          not attempted, e.g. the replica stopped: back to its place in the active queue,
--          no attempt counted), attempt (the stream id
--          the attempt's snapshot reflected, "" when unknown), first back-off ms, longest
--          back-off ms, parked ms, [now ms ("": Redis' clock)], [wake tokens: "" or up to
--          BOUNDS.WAKE_TOKENS "<key>=<value>" or "*" separated by spaces: the arrivals that
--          can help an unschedulable pod, _wakes.lua]
-- Keys     queued:<uid>, queuedpods, queueseq, queues, queue:<scheduler>:*, helped (read),
--          arrivalwakes, arrivalsince
-- Reply    { "backoff"|"parked", due ms }, { "active", "" } (untried), { "dropped", "" } (unreadable: record and place
--          gone; sync queues the pod again with its next change or relist), or { "gone", "" }
--          (bound or deleted meanwhile) or
--          { "notheld", holder } (its lease lapsed and it is another's now, or it waits):
--          nothing written then
-- Errors   BADARG <what>; CORRUPT <key> <why> (nothing written)
-- Its back-off doubles per attempt (upstream's podInitialBackoff to podMaxBackoff). An
-- unschedulable pod is parked until an event that could help it, or `parked ms`; one such
-- event since its attempt sends it to back-off at once (upstream's move request cycle), so
-- a change the attempt did not see is never missed. An error goes to back-off. A pod with
-- wake tokens is parked only when they were waited for since before its attempt (a matching
-- arrival then set `helped`); else it backs off once, and they are waited for from now on.
local function queue_retry(p, replica, a)
  local scheduler, holder, uid, kind, attempt = a[1], a[2], a[3], a[4], a[5] or ''
  local first_ms = int_arg(a[6], 0, BOUNDS.MAX_DURATION_MS)
  local longest_ms = int_arg(a[7], 0, BOUNDS.MAX_DURATION_MS)
  local parked_ms = int_arg(a[8], 0, BOUNDS.MAX_DURATION_MS)
  if not valid_scheduler(scheduler) then return nil, 'BADARG scheduler' end
  if not name_arg(holder) or holder == '-' then return nil, 'BADARG holder' end
  if not name_arg(uid) then return nil, 'BADARG uid' end
  if kind ~= 'unschedulable' and kind ~= 'error' and kind ~= 'unreadable'
      and kind ~= 'untried' then
    return nil, 'BADARG kind'
  end
  if attempt ~= '' and not string.match(attempt, '^%d+%-%d+$') then
    return nil, 'BADARG attempt'
  end
  if first_ms == nil then return nil, 'BADARG backoff' end
  if longest_ms == nil then return nil, 'BADARG max_backoff' end
  if parked_ms == nil then return nil, 'BADARG parked' end
  local now = now_ms(a[9])
  if now == nil then return nil, 'BADARG now' end
  local tokens = ARRIVALS.parse(a[10])
  if tokens == nil then return nil, 'BADARG wake' end
  guard_queue(p, scheduler)
  local waits = kind == 'unschedulable' and #tokens > 0
  if waits then ARRIVALS.guard(p) end
  local rec = load_queued(p, uid)
  if rec == nil then return { 'gone', '' } end
  if rec.state ~= 'leased' or rec.holder ~= holder or rec.scheduler ~= scheduler then
    return { 'notheld', rec.holder }
  end
  if kind == 'unreadable' then
    queue_drop(p, rec)
    return { 'dropped', '' }
  end
  if kind == 'untried' then  -- its old seq: back where it was, ahead of those queued since
    queue_unlink(p, rec)
    rec.state, rec.holder = 'active', '-'
    redis.call('ZADD', queue_key(p, scheduler, 'active'), -tonumber(rec.priority),
               active_member(rec))
    save_queued(rec)
    return { 'active', '' }
  end
  local parked_key = queue_key(p, scheduler, 'parked')
  local park, seen = kind == 'unschedulable', nil
  if park then
    if attempt == '' then
      park = false  -- what the attempt saw is unknown: it may have missed a change
    else
      local helped, last = helpful_since(p, attempt)
      park = not helped and ARRIVALS.covered(p, tokens, attempt, now)
      -- The first parked pod: its wake waits for a helpful event after the last one.
      if park and redis.call('ZCARD', parked_key) == 0 then seen = last end
    end
  end
  if waits then
    ARRIVALS.register(p, tokens, now, now + parked_ms + longest_ms)
  end
  rec.attempts = rec.attempts + 1
  local backoff = first_ms * 2 ^ math.min(rec.attempts - 1, 30)
  if backoff > longest_ms then backoff = longest_ms end
  rec.due = now + backoff
  queue_unlink(p, rec)
  if park then
    if seen ~= nil then redis.call('HSET', p .. 'queues', scheduler, seen) end
    rec.state, rec.holder = 'parked', '-'
    redis.call('ZADD', parked_key, now + parked_ms, uid)
    save_queued(rec)
    return { 'parked', int_string(rec.due) }
  end
  rec.state, rec.holder = 'backoff', '-'
  redis.call('ZADD', queue_key(p, scheduler, 'backoff'), rec.due, uid)
  save_queued(rec)
  return { 'backoff', int_string(rec.due) }
end
