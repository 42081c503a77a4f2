-- Parked pods that wait for other pods to arrive (ARRIVALS, declared in _arrivals.lua;
-- docs/queue.md). A parked pod with required pod affinity or a DoNotSchedule spread constraint
-- registers tokens ("<key>=<value>": a label every pod its selector selects carries; "*": any
-- pod) in `arrivalwakes` (token -> until when, ms) and `arrivalsince` (token -> the stream id
-- from which it is waited for). A placement whose pod carries a registered label (its
-- contribution's `l:` fields) sends its event's id to `helped`, which wakes parked pods.
--   arrivalwakes  zset  token -> until when (ms, the queue's clock) a parked pod waits for it
--   arrivalsince  hash  token -> the id of the last event before it was waited for

-- Tokens one parked pod waits for at most, and their bytes (arrivals.py sends `*` for more).
BOUNDS.WAKE_TOKENS = 16
BOUNDS.WAKE_TOKEN_BYTES = 16 * 400
-- Labels one arriving pod is compared by at most; a pod with more matches every token.
BOUNDS.ARRIVAL_LABELS = 16

-- At a placement, before its first write (reads only): whether the arriving pod's labels
-- (`labels`: "<key>=<value>", or "*" when it has too many) match a token some parked pod
-- waits for; then the placement's event wakes parked pods (`woke`, read by emit). One ZCARD
-- when no pod waits for arrivals; in an sc_batch, one a call: its answer is kept for the rest
-- of the call in checked[' arrivalwakes'] (emptied at every call's start, _helpers.lua; no
-- key starts with a space), so a batch of claims asks once, not once a claim (a single
-- command keeps nothing: NOM.any says why). ARRIVALS.register, the only writer of
-- `arrivalwakes`, forgets it.
function ARRIVALS.note(p, labels)
  local waiting = checked[' arrivalwakes']
  if waiting == nil then
    waiting = typed_read(p .. 'arrivalwakes', 'zset', 'ZCARD')
    if batching then checked[' arrivalwakes'] = waiting end
  end
  if waiting == 0 then return end
  local key = p .. 'arrivalwakes'
  if #labels > BOUNDS.ARRIVAL_LABELS or labels[1] == '*' then
    ARRIVALS.woke = true
    return
  end
  local scores = redis.call('ZMSCORE', key, '*', unpack(labels))
  for j = 1, #scores do
    if scores[j] then
      ARRIVALS.woke = true
      return
    end
  end
end

-- The tokens argument of sc_queue_retry: '' (none) or tokens separated by spaces, each "*" or
-- "<key>=<value>"; nil when malformed or more than BOUNDS.WAKE_TOKENS.
function ARRIVALS.parse(text)
  local out = {}
  if text == nil or text == '' then return out end
  if #text > BOUNDS.WAKE_TOKEN_BYTES then return nil end
  for token in string.gmatch(text, '%S+') do
    if #out >= BOUNDS.WAKE_TOKENS then return nil end
    if token ~= '*' and not string.match(token, '^[^=]+=') then return nil end
    out[#out + 1] = token
  end
  return out
end

-- The two keys' types, checked before the first write.
function ARRIVALS.guard(p)
  expect_type(p .. 'arrivalwakes', 'zset')
  expect_type(p .. 'arrivalsince', 'hash')
end

-- Whether every token was waited for (without a lapse) since no later than `attempt` (a
-- stream id): then every matching arrival after the attempt's snapshot set `helped`, and
-- helpful_since tells. Reads only (ARRIVALS.guard first).
function ARRIVALS.covered(p, tokens, attempt, now)
  local key, since_key = p .. 'arrivalwakes', p .. 'arrivalsince'
  for j = 1, #tokens do
    local score = redis.call('ZSCORE', key, tokens[j])
    local since = redis.call('HGET', since_key, tokens[j])
    if not score or tonumber(score) < now or not since
        or not string.match(since, '^%d+%-%d+$') or id_after(since, attempt) then
      return false
    end
  end
  return true
end

-- Waits for `tokens` until `until_ms` at least; a token not waited for now (new, or lapsed)
-- is waited for from the stream's last event on. First drops up to BOUNDS.QUEUE_MOVES tokens
-- that lapsed before `now`. ARRIVALS.guard first. (The stream's last id is read first: its
-- reads may refuse a corrupt `lastevent` or `events`, which must come before any write.)
function ARRIVALS.register(p, tokens, now, until_ms)
  local key, since_key = p .. 'arrivalwakes', p .. 'arrivalsince'
  local last = last_event_or_zero(p)
  -- Its size changes below: ARRIVALS.note counts it again (NOM.drop: why only when kept).
  if checked[' arrivalwakes'] ~= nil then checked[' arrivalwakes'] = nil end
  local lapsed = redis.call('ZRANGEBYSCORE', key, '-inf', '(' .. int_string(now), 'LIMIT', 0,
                            BOUNDS.QUEUE_MOVES)
  for j = 1, #lapsed do
    redis.call('ZREM', key, lapsed[j])
    redis.call('HDEL', since_key, lapsed[j])
  end
  for j = 1, #tokens do
    local score = redis.call('ZSCORE', key, tokens[j])
    if not score or tonumber(score) < now then
      redis.call('HSET', since_key, tokens[j], last)
    end
    if not score or tonumber(score) < until_ms then
      redis.call('ZADD', key, until_ms, tokens[j])
    end
  end
end

-- Pods placed on one node since a claim's snapshot whose labels a claim compares at most
-- (more: taken as matching).
BOUNDS.ARRIVED_PODS = 8

-- The labels of a rule word of a claim's reads ("" or "<key>=<value>,...", _claims.lua).
function ARRIVALS.valid_labels(labels)
  if labels == '' then return true end
  if string.find(labels, ',,', 1, true) or string.match(labels, '^,') or string.match(labels, ',$') then
    return false
  end
  for item in string.gmatch(labels, '[^,]+') do
    if not string.match(item, '^[^=]+=[^=]*$') then return false end
  end
  return true
end

-- Whether a pod placed on `node` since generation `since` may carry one of `labels`
-- ("<key>=<value>,...": a pod the rule's selector selects carries one): true too when the node
-- is gone or its spec changed since (pod_changes_since says so for every rule), when more than
-- BOUNDS.ARRIVED_PODS were placed, or when one carries too many labels to compare. Reads only.
function ARRIVALS.arrived(p, node, since, labels)
  local nk = p .. 'node:' .. node
  local at = typed_read(nk, 'hash', 'HMGET', 'exists', BOUNDS.SPEC_FIELD)
  if not at[1] or stored_int(nk, at[2], 0) > tonumber(since) then return true end
  local uids = typed_read(p .. 'nodepods:' .. node, 'zset', 'ZRANGEBYSCORE', '(' .. since,
                          '+inf', 'LIMIT', 0, BOUNDS.ARRIVED_PODS + 1)
  if #uids > BOUNDS.ARRIVED_PODS then return true end
  local wanted = { ['*'] = true }
  for item in string.gmatch(labels, '[^,]+') do wanted[item] = true end
  for j = 1, #uids do
    local rec = load_pod(p, uids[j], true)
    if rec == nil then return true end  -- an index without its record: assume the worst
    local carried = rec.contribution.labels
    -- None at all: a record of an older client, which sent no labels (a pod without labels
    -- sends "-").
    if #carried == 0 or #carried > BOUNDS.ARRIVAL_LABELS then return true end
    for k = 1, #carried do
      if wanted[carried[k]] then return true end
    end
  end
  return false
end
