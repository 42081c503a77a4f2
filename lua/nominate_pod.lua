-- sc_nominate_pod: reserve a preemptor's room on its nominated node (_nominations.lua,
-- docs/preemption.md), as kube-scheduler's nominatedNodeName does inside one process, here for
-- every replica's claims; the node's nominations of lower priority are dropped (upstream's
-- prepareCandidate). sc_denominate_pod: drop it (the pod gave up or was placed elsewhere).
-- Both drop up to NOM.PRUNE lapsed nominations of any node first.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     nominate: replica, command id, uid, node, priority (int32), ttl ms (> 0), the pod's
--          contribution (aggregates.py), [now ms], [victims: "<ns>/<name>" space-separated, at
--          most NOM.VICTIM_BYTES, kept for explain]; uid and victims UTF-8 (read back as text)
--          denominate: replica, command id, uid, [now ms]
-- Keys     nominated, nomnode, nom:<node>, nomvictims, node:<node>
-- Reply    nominate: the nomination's deadline (ms); denominate: 1 when the pod had one, else 0
-- Errors   BADARG <what>                        malformed arguments (nothing written)
--          NODENOTFOUND <node> missing          no live node of that name
--          FITCONFLICT <uid> <node> nominations-full  the node holds NOM.MAX_PER_NODE others
--                                                of equal or higher priority
-- Event    none: a nomination is a reservation, not cache state (never replayed)
function NOM.nominate(p, _, a)
  local uid, node = a[1], a[2]
  if not name_arg(uid) or not NOM.utf8(uid) then return nil, 'BADARG uid' end
  if not name_arg(node) then return nil, 'BADARG node ' .. uid end
  local priority = int_arg(a[3] or '', -NOM.INT32, NOM.INT32 - 1)
  if priority == nil then return nil, 'BADARG priority ' .. uid end
  local ttl = int_arg(a[4] or '', 1, BOUNDS.MAX_DURATION_MS)
  if ttl == nil then return nil, 'BADARG ttl ' .. uid end
  local text = a[5] or ''
  local parsed = #text <= BOUNDS.MAX_BLOB_BYTES and parse_contribution(text)
  if not parsed then return nil, 'BADARG contribution ' .. uid end
  if parsed.twice then
    return nil, 'BADARG contribution ' .. uid .. ' ' .. parsed.twice .. ' twice'
  end
  local now = now_ms(a[6])
  if now == nil then return nil, 'BADARG now ' .. uid end
  local victims = a[7] or ''
  if #victims > NOM.VICTIM_BYTES or not NOM.utf8(victims) then
    return nil, 'BADARG victims ' .. uid
  end
  if redis.call('HGET', p .. 'node:' .. node, 'exists') ~= '1' then
    return nil, 'NODENOTFOUND ' .. node .. ' missing'
  end
  local plan = NOM.plan(p, uid, now)
  local entries = typed_read(p .. 'nom:' .. node, 'hash', 'HGETALL')
  typed_read(p .. 'nomvictims', 'hash', 'HEXISTS', uid)
  -- Counted: the node's live nominations this one keeps (those of lower priority go below).
  local kept = 0
  for _, n in ipairs(NOM.on_node(p, node, uid, now)) do
    if n.priority >= priority then kept = kept + 1 end
  end
  if kept >= NOM.MAX_PER_NODE then
    return nil, 'FITCONFLICT ' .. uid .. ' ' .. node .. ' nominations-full'
  end
  NOM.settle(p, plan)
  -- The node's lapsed nominations (at most NOM.MAX_PER_NODE and those the plan reached), and
  -- those of lower priority (upstream's prepareCandidate clears them: the preemptor's victims
  -- were chosen for it, not for them): gone.
  for j = 1, #entries, 2 do
    local q, d = string.match(entries[j + 1], '^(%-?%d+) (%d+)')
    if entries[j] ~= uid and (d == nil or tonumber(d) <= now or tonumber(q) < priority) then
      NOM.drop(p, entries[j], node)
    end
  end
  local deadline = now + ttl
  local value = string.format('%d %d ', priority, deadline) .. text
  redis.call('HSET', p .. 'nom:' .. node, uid, value)
  redis.call('HSET', p .. 'nomnode', uid, node)
  redis.call('ZADD', p .. 'nominated', deadline, uid)
  if batching then checked[' nominated'] = true end  -- NOM.any's answer for the call's rest
  if victims ~= '' then redis.call('HSET', p .. 'nomvictims', uid, victims) end
  return deadline
end
