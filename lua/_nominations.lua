-- Nominations (docs/preemption.md): a preemptor's room reserved on its nominated node until
-- its claim lands, it is denominated, or its deadline passes. Other claims see it as upstream's
-- addNominatedPods does: a claim of a pod whose priority is not above the nominee's must fit
-- with the nominee's requests (and one pod slot) counted on the node; a higher-priority claim
-- may take the room. Not part of the event-sourced state (like leases): a reservation of the
-- scheduling cycle, never folded, replayed or audited.
--
-- Keys     nominated        zset  uid -> deadline (ms) of every nomination (the gate: a claim
--                                 reads only its existence while no node has a nomination)
--          nomnode          hash  uid -> nominated node
--          nom:<node>       hash  uid -> "<priority> <deadline ms> <contribution>"
--          nomvictims       hash  uid -> the victims' "<namespace>/<name>", space-separated
--                                 (what `explain pod` shows; at most NOM.VICTIM_BYTES)
-- Bounds   NOM.MAX_PER_NODE nominations a node holds (a claim reads them all); NOM.PRUNE lapsed
--          nominations one call drops (its first writes are after every read).
local NOM = {}
NOM.MAX_PER_NODE = 16
NOM.PRUNE = 16
NOM.INT32 = 2147483648
NOM.VICTIM_BYTES = 65536

-- A claim's check argument: "fit", or "fit:<priority>" (the claimer's spec.priority, for the
-- nominations); the check and the priority (0 when not given), nil for a malformed one.
function NOM.check_arg(check)
  if string.sub(check, 1, 4) ~= 'fit:' then return check, 0 end
  local priority = int_arg(string.sub(check, 5), -NOM.INT32, NOM.INT32 - 1)
  if priority == nil then return nil, 0 end
  return 'fit', priority
end

-- Whether `s` is UTF-8 (no overlong forms, no surrogates): names and victims stored here are
-- read back as text by every replica's preemption and by explain. Bounded by #s.
function NOM.utf8(s)
  if not string.find(s, '[\128-\255]') then return true end
  local i, n = 1, #s
  while i <= n do
    local c = string.byte(s, i)
    local len, low, high = 1, 128, 191
    if c >= 194 and c <= 223 then len = 2
    elseif c >= 224 and c <= 239 then
      len = 3
      if c == 224 then low = 160 elseif c == 237 then high = 159 end
    elseif c >= 240 and c <= 244 then
      len = 4
      if c == 240 then low = 144 elseif c == 244 then high = 143 end
    elseif c >= 128 then return false end
    for k = i + 1, i + len - 1 do
      local b = string.byte(s, k)
      if b == nil or b < low or b > high then return false end
      low, high = 128, 191
    end
    i = i + len
  end
  return true
end

-- Whether the cache holds any nomination: the one call the claim path makes without. In an
-- sc_batch its answer is kept for the rest of the call in checked[' nominated'] (`checked` is
-- emptied at every call's start, _helpers.lua; no key starts with a space): a batch of claims
-- asks Redis once, not once a claim. (A single command keeps nothing: another key in
-- `checked` costs every call's begin_call.) The two writes of `nominated` keep it right:
-- nominate_pod's ZADD sets it true, NOM.drop's ZREM (every removal: settled, pruned, given
-- up, displaced) forgets it (the set may be empty now), so a later command of the same call
-- reads what the commands run one by one would.
function NOM.any(p)
  local any = checked[' nominated']
  if any == nil then
    any = redis.call('EXISTS', p .. 'nominated') == 1
    if batching then checked[' nominated'] = any end
  end
  return any
end

-- The live nominations on `node` other than `uid`'s (and those of the uids in `skip`, a set
-- or nil), as { uid, priority, deadline, parsed }. Reads only; bounded by NOM.MAX_PER_NODE
-- (nominate refuses more).
function NOM.on_node(p, node, uid, now, skip)
  local entries = typed_read(p .. 'nom:' .. node, 'hash', 'HGETALL')
  local live = {}
  for j = 1, #entries, 2 do
    if entries[j] ~= uid and not (skip and skip[entries[j]]) then
      local priority, deadline, text = string.match(entries[j + 1], '^(%-?%d+) (%d+) ?(.*)$')
      local parsed = priority and parse_contribution(text)
      if parsed and tonumber(deadline) > now then
        live[#live + 1] = { uid = entries[j], priority = tonumber(priority),
                            deadline = tonumber(deadline), parsed = parsed }
      end
    end
  end
  return live
end

-- "" when the claim of `uid` (priority `priority`, contribution `parsed`) fits `node` with the
-- room of the nominees it may not take counted, else "nominated". `before`: what claims of the
-- same call placed on the node before it (a gang's earlier members, claim_conflicts' shape,
-- their uids in `before.uids`: a nominee among them is counted as a member, not twice), or
-- nil. Reads only.
function NOM.conflicts(p, node, uid, parsed, priority, before)
  local held, count = {}, 0
  -- A nominee of this node yields to those of equal priority nominated before it only (the
  -- earlier deadline, then the smaller uid): two replicas that nominated one room for two
  -- pods of equal priority would otherwise each wait for the other until both lapse.
  local own = typed_read(p .. 'nom:' .. node, 'hash', 'HGET', uid)
  local mine = own and tonumber(string.match(own, '^%-?%d+ (%d+)'))
  for _, n in ipairs(NOM.on_node(p, node, uid, now_ms(nil), before and before.uids)) do
    local later = mine and n.priority == priority
      and (n.deadline > mine or (n.deadline == mine and n.uid > uid))
    if n.priority >= priority and not later then  -- upstream: nominees of equal or higher
      count = count + 1
      for k = 1, #n.parsed.fields do
        local field = n.parsed.fields[k]
        if string.sub(field, 1, 2) == 'r:' then
          held[field] = (held[field] or 0) + tonumber(n.parsed.amounts[k])
        end
      end
    end
  end
  if count == 0 then return '' end
  local earlier = 0
  if before then
    earlier = before.pods
    for field, amount in pairs(before.amounts) do
      if string.sub(field, 1, 2) == 'r:' then held[field] = (held[field] or 0) + amount end
    end
  end
  for k = 1, #parsed.fields do
    local field = parsed.fields[k]
    if string.sub(field, 1, 2) == 'r:' then
      held[field] = (held[field] or 0) + tonumber(parsed.amounts[k])
    end
  end
  local nk = p .. 'node:' .. node
  local wanted, amounts = { 'a:pods' }, {}
  for field, amount in pairs(held) do
    wanted[#wanted + 1] = field
    wanted[#wanted + 1] = 'a:' .. string.sub(field, 3)
    amounts[#amounts + 1] = amount
  end
  local state = redis.call('HMGET', nk, unpack(wanted))
  for k = 1, #amounts do
    if stored_int(nk, state[2 * k], 0) + amounts[k] > stored_int(nk, state[2 * k + 1], 0) then
      return 'nominated'
    end
  end
  local pods = redis.call('ZCARD', p .. 'nodepods:' .. node)
  if pods + earlier + 1 + count > stored_int(nk, state[1], 0) then return 'nominated' end
  return ''
end

-- What settling `uid` will write, read before any write: its own nomination's node (dropped
-- as its claim lands) and up to NOM.PRUNE lapsed nominations as { uid, node } (none when
-- `own_only`: a gang's later members, the first member's plan pruned them).
function NOM.plan(p, uid, now, own_only)
  local lapsed = {}
  local due = {}
  if not own_only then
    due = typed_read(p .. 'nominated', 'zset', 'ZRANGEBYSCORE', '-inf', int_string(now),
                     'LIMIT', 0, NOM.PRUNE)
  end
  for j = 1, #due do
    if due[j] ~= uid then
      lapsed[#lapsed + 1] = { due[j], typed_read(p .. 'nomnode', 'hash', 'HGET', due[j]) }
    end
  end
  local own = typed_read(p .. 'nomnode', 'hash', 'HGET', uid)
  if own then typed_read(p .. 'nom:' .. own, 'hash', 'HGET', uid) end
  for j = 1, #lapsed do
    local uid_j, node_j = lapsed[j][1], lapsed[j][2]
    if node_j then typed_read(p .. 'nom:' .. node_j, 'hash', 'HGET', uid_j) end
  end
  if own or #lapsed > 0 then
    -- NOM.drop's other keys, before any write: a `nomvictims` of another type failed a
    -- nominated pod's delete after its removal was written (review).
    expect_type(p .. 'nomvictims', 'hash')
    expect_type(p .. 'nominated', 'zset')
  end
  return { uid = uid, node = own, lapsed = lapsed }
end

function NOM.drop(p, uid, node)
  if node then redis.call('HDEL', p .. 'nom:' .. node, uid) end
  redis.call('HDEL', p .. 'nomnode', uid)
  redis.call('HDEL', p .. 'nomvictims', uid)
  redis.call('ZREM', p .. 'nominated', uid)
  -- Maybe the last one: NOM.any asks again. (Only when kept: setting an absent field, even
  -- to nil, makes room for it.)
  if checked[' nominated'] ~= nil then checked[' nominated'] = nil end
end

-- Writes what NOM.plan read: the nominations it names are gone.
function NOM.settle(p, plan)
  if plan.node then NOM.drop(p, plan.uid, plan.node) end
  for j = 1, #plan.lapsed do NOM.drop(p, plan.lapsed[j][1], plan.lapsed[j][2] or false) end
end
