-- sc_gang_claim: a pod group (gang) placed all or nothing: every member's claim is checked as
-- assume_pod's fit-checked claim checks one (room, ports, inter-pod rules), each member counting
-- the members before it on the same node, and only then are all of them written (docs/gangs.md).
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     lease ttl ms, since, incarnation, seen, count, then per member (count of them):
--          uid, node, blob, contribution, reads, domains
--          `lease ttl`, `since`, `incarnation`, `seen`, `reads`, `domains` as assume_pod takes
--          them (one snapshot decided every member: one `since`, `incarnation` and `seen`).
--          `since` "": no rules judged (refused as `unchecked` while placed pods have required
--          anti-affinity, or for a member with rules of its own: "-" as assume_pod).
-- Keys     those of assume_pod, for every member (a member's own nomination dropped as it
--          lands, as assume_pod drops it; _nominations.lua)
-- Reply    the generation each member's node has after the call, in member order
-- Errors   PODEXISTS <uid> <state> <node>          a member is assumed or added already
--          FITCONFLICT <uid> <node> <reason,...>    the first member refused (reasons as
--            assume_pod's; counted with the members before it on the same node)
--          OVERFLOW <uid> <node> <field>            as assume_pod
--          BADARG <what>   malformed arguments, more than MAX_GANG_MEMBERS members,
--                          MAX_GANG_BYTES bytes or MAX_GANG_FIELDS contribution fields, the
--                          same uid twice
--          Every check runs before the first write: an error writes nothing.
-- Event    PodAssumed per member (uid, node, gen, data=blob): the records and events of N
--          single claims, so finish_binding, forget, expiry, replay and verify work per member.

local GANG = { MEMBER_ARGS = 6, FIRST_MEMBER = 6 }
-- Members one gang claim holds at most, and bytes of its arguments (docs/security.md):
-- checked before anything is read.
BOUNDS.MAX_GANG_MEMBERS = 256
BOUNDS.MAX_GANG_BYTES = 4 * 1048576
-- Contribution fields (resources, host ports, ...) of all members together: each is read and
-- written on its node (256 members of 200 host ports, 51,200 fields, held Redis 0.4-0.5 s;
-- 4,096 take about 40 ms).
BOUNDS.MAX_GANG_FIELDS = 4096

-- The members as assume_pod's argument tables ({uid, node, blob, contribution, 'fit', '',
-- lease, since, reads, domains, incarnation}); nil and the BADARG text when malformed. Reads
-- nothing.
function GANG.members(a)
  local bytes = 0
  for j = 1, #a do bytes = bytes + #a[j] end
  if bytes > BOUNDS.MAX_GANG_BYTES then
    return nil, 'BADARG bytes: more than ' .. BOUNDS.MAX_GANG_BYTES
  end
  local count = int_arg(a[5] or '', 1, BOUNDS.MAX_GANG_MEMBERS)
  if count == nil then
    return nil, 'BADARG members: 1 to ' .. BOUNDS.MAX_GANG_MEMBERS
  end
  if #a ~= GANG.FIRST_MEMBER - 1 + GANG.MEMBER_ARGS * count then return nil, 'BADARG argc' end
  local members, uids, fields = {}, {}, 0
  for j = 0, count - 1 do
    local at = GANG.FIRST_MEMBER + GANG.MEMBER_ARGS * j
    local uid = a[at]
    if uids[uid] then return nil, 'BADARG duplicate ' .. uid end
    uids[uid] = true
    local _, spaces = string.gsub(a[at + 3], ' ', '')  -- "<field> <amount>" pairs, spaced
    fields = fields + math.floor((spaces + 1) / 2)
    if fields > BOUNDS.MAX_GANG_FIELDS then
      return nil, 'BADARG fields: more than ' .. BOUNDS.MAX_GANG_FIELDS
    end
    members[j + 1] = { uid, a[at + 1], a[at + 2], a[at + 3], 'fit', '', a[1], a[2],
                       a[at + 4], a[at + 5], a[3] }
  end
  return members
end

-- What `args` adds to its node, into `before` (claim_conflicts' shape).
function GANG.count(before, args)
  local fields, amounts = args.contribution.fields, args.contribution.amounts
  for j = 1, #fields do
    local field = fields[j]
    if string.sub(field, 1, 2) == 'p:' then
      before.ports[#before.ports + 1] = field  -- indexed by node_ports (_claims.lua)
    else
      before.amounts[field] = (before.amounts[field] or 0) + tonumber(amounts[j])
    end
  end
  before.pods = before.pods + 1
  before.uids[args.uid] = true
end

-- Every member checked (nothing written): their parsed arguments, or nil and the error.
-- Members yield to every live nomination (they carry no priority of their own here): a gang
-- never takes room held for a preemptor (_nominations.lua), its members on one node counted
-- together against that room.
function GANG.check(p, members)
  local placed, on_node = {}, {}
  local nominated = NOM.any(p) and { priority = -2147483648 } or nil
  for j = 1, #members do
    local m = members[j]
    local args, err = read_pod_args(p, m)
    if args == nil then return nil, err end
    local rec = load_pod(p, args.uid, true)
    if rec ~= nil then
      return nil, 'PODEXISTS ' .. args.uid .. ' ' .. rec.state .. ' ' .. rec.node
    end
    -- Empty for a node's first member: its checks count nothing more, and the node's host
    -- ports read for it are kept there for the members after it (node_ports).
    local before = on_node[args.node] or { amounts = {}, pods = 0, ports = {}, uids = {} }
    local reason, failed = refusal(p, args, 'fit', m, m[9], m[10], nominated, before)
    if reason == nil then return nil, failed end
    if reason ~= '' then
      return nil, 'FITCONFLICT ' .. args.uid .. ' ' .. args.node .. ' ' .. reason
    end
    on_node[args.node] = before
    GANG.count(before, args)
    placed[j] = args
  end
  return placed
end

function GANG.claim(p, replica, a)
  local members, err = GANG.members(a)
  if members == nil then return nil, err end
  local lease_ms = int_arg(a[1] or '0', 0, BOUNDS.MAX_DURATION_MS)
  if lease_ms == nil then return nil, 'BADARG lease' end
  -- The snapshot every member was decided on saw event `seen` (_history.lua).
  local lost = history_lost(p, a[4])
  if lost == nil then return nil, 'BADARG seen' end
  if lost then
    return nil, 'FITCONFLICT ' .. members[1][1] .. ' ' .. members[1][2] .. ' lost-writes'
  end
  local placed, refused = GANG.check(p, members)
  if placed == nil then return nil, refused end
  -- A member's own nomination goes as its claim lands, as a single claim's does (read now:
  -- writes come after every read); the first member's plan prunes lapsed ones.
  local plans = {}
  if NOM.any(p) then
    local now = now_ms(nil)
    for j = 1, #placed do plans[j] = NOM.plan(p, placed[j].uid, now, j > 1) end
  end
  local leasing = lease_ms > 0 and replica ~= ''
  local claims = nil
  if replica ~= '' then claims = p .. 'replicapods:' .. replica end
  guard_cache(p, leasing and LEASED_SETS or ASSUMED_SETS, claims)
  local out = {}
  for j = 1, #placed do
    local args = placed[j]
    -- put_pod first: its INCR of `gen` is the first write (the wrapper left `gen` unchecked).
    local gen, text = put_pod(p, args, 'assumed', replica)
    redis.call('SADD', p .. 'assumed', args.uid)
    if plans[j] then NOM.settle(p, plans[j]) end
    emit(p, 'PodAssumed', replica,
         'uid', args.uid, 'node', args.node, 'gen', text, 'data', args.blob)
    out[j] = gen
  end
  if leasing then
    redis.call('SET', p .. 'lease:' .. replica, '1', 'PX', int_string(lease_ms))
    redis.call('SADD', p .. 'replicas', replica)
  end
  return out
end
