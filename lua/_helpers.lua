-- Shared helpers of the schedcache Redis Functions library.
--
-- The loader (schedcache/library.py) concatenates this file, one file per command, and
-- _register.lua into one library. Everything here is `local`: a Redis Functions library may
-- not write globals, and fakeredis would keep such a global for the life of its server.
--
-- Key schema (every key of one cache starts with the prefix KEYS[1] = "{<name>}:", so one
-- hash tag puts them all in one Redis Cluster slot). The source is SCHEMA in
-- schedcache/keys.py; tests/test_key_schema.py keeps this list in step with it.
--   pod:<uid>              string "<state> <node> <finished> <deadline> <gen> <claimer>
--                                 <contribution>\n<blob>": state assumed|added, finished 0|1
--                                 (binding done), deadline in ms or "-", gen = the generation
--                                 that placed it (orders a node's pods), claimer = the replica
--                                 that assumed it while its binding is unfinished (it is in
--                                 replicapods:<claimer>), or that claimed it with a deadline
--                                 (sc_timed_claim: finished 1, in no replica's claims), else "-",
--                                 contribution = "<field> <amount> ..." exactly as added to
--                                 the node (removal subtracts it), blob = the msgpack Pod,
--                                 never decoded here
--   node:<name>            hash   exists (1 live node, 0 ghost or placeholder), zone,
--                                 blob, a:<res> allocatable, r:<res> requested, z:cpu/z:mem
--                                 non-zero requested minus requested, aff, anti,
--                                 p:<ip>|<proto>|<port> and v:<ns>/<claim> reference counts,
--                                 spec/sd (the last spec change and its digest), rm / ax (the
--                                 generation of the last pod taken off it / of the last pod
--                                 with required anti-affinity placed on it: _changes.lua).
--                                 A field that drops to 0 is deleted.
--   nodepods:<name>        zset   uids of the pods on the node, scored by the generation that
--                                 placed each (its size is the pod count; snapshots read only
--                                 the pods placed since they last looked)
--   nodeimgs:<name>        set    image names the live node reports
--   nodelabels:<name>      hash   the live node's labels (l:<key>) and their count (ln), for
--                                 claims (_changes.lua); none past 128 labels
--   imgnodes:<image>       set    live nodes that report the image
--   images                 hash   image name -> size in bytes (the first size reported wins)
--   imagegen               zset   image name -> generation of the last change of its node
--                                 count
--   treezones              zset   zone keys of live nodes, in first-insertion order (scored
--                                 by gen)
--   treezone:<zone>        zset   live nodes of the zone, in insertion order (scored by gen)
--   treegen                string generation of the last change of the tree's membership
--   treecursor             hash   sc_tree_next's cursor: zi (zone index), z:<zone> (index in
--                                 zone)
--   nodes                  set    every node entry: live, ghost and placeholder
--   pods                   set    every pod uid in the cache
--   assumed                set    uids of assumed pods
--   deadlines              zset   uid -> expiry deadline (ms) of assumed pods whose binding
--                                 finished
--   gen                    string the cache's generation counter (INCR)
--   incarnation            string "<seconds>.<micros>" (server TIME) written when `gen` is
--                                 created: snapshots of another incarnation are rebuilt
--   antipods               string placed pods with required anti-affinity (the sum of the
--                                 nodes' `anti`), written with `gen`: a bare claim reads it
--   quarantine             zset   uid -> time (ms): deadline entries of corrupt pod records,
--                                 moved aside by sc_cleanup_assumed_pods
--   nodegen                zset   node name -> generation of its last change (removed names
--                                 stay as tombstones, so snapshot consumers learn about
--                                 removals); one member scored -inf is no node
--                                 (NODEGEN_SKIPLIST)
--   events                 stream the history: type, v, replica, uid/node, gen, data, extras
--   lastevent              string the id of the stream's last event, written by the call that
--                                 appends it, once at its end (emit, end_call): the head read
--                                 learns it without reading the event (last_event_id)
--   cmd:<id>               string the reply of an applied command, for answering a retry
--                                 (expires)
--   absent                 set    never written: the type checks of several sets intersect
--                                 with it (SINTER), so they answer at once (expect_sets)
--   replicas               set    replicas that hold (or held) a lease
--   lease:<replica>        string the replica's lease, kept alive by its heartbeat (expires)
--   replicapods:<replica>  set    pods the replica assumed whose binding has not finished
--   version:pod:<uid>    string the newest resourceVersion a feeder applied to the pod; after a
--                           delete, a tombstone that expires (_versions.lua)
--   version:node:<name>  string the same for a node
--   sync             hash   feeders' progress per resource: <resource>:rv, :at (ms), :by
--   checkpoint             hash   the stored checkpoint (written by Python, not here)
--   checkpoint:<id>:<token>:<n>
--                          string chunk n of a checkpoint, msgpack (Python)
--   checkpoint:parts       hash   chunk prefix -> chunk count of every checkpoint (Python)
--   compacted              string the first stream id still replayable (Python)
--   retention              string the retention worker's lease (Python)
--   queued:<uid>           string "<state> <scheduler> <priority> <seq> <attempts> <due>
--                                 <holder>\n<msgpack Pod>": a pending pod in the scheduling
--                                 queue (_queue.lua)
--   nominated              zset   uid -> deadline (ms) of every nomination (_nominations.lua)
--   nomnode                hash   uid -> the node it is nominated to
--   nom:<node>             hash   uid -> "<priority> <deadline ms> <contribution>": the room
--                                 nominated pods hold on the node
--   nomvictims             hash   uid -> a nominee's victims "<ns>/<name> ..." (explain)
--   pdbs                   hash   "<namespace>/<name>" -> a PodDisruptionBudget (sync_budget.lua)
--   version:pdb:<key>      string newest resourceVersion a feeder applied (tombstone 1 h)
--   namespaces             hash   namespace -> its labels, JSON (sync_namespace.lua)
--   nsgen                  string bumped by every change of a namespace's labels (INCR)
--   version:ns:<name>      string newest resourceVersion a feeder applied (tombstone 1 h)
--   queuedpods             set    the uids of every queued pod
--   queueseq               string the queue's arrival counter (counted on in Lua, SET by end_call)
--   queues                 hash   scheduler -> "<id>[ <score>]": the last helpful event its
--                                 parked pods were woken for, and the parked score still owed
--                                 a wake (_queue.lua)
--   helped                 string the id of the last event that could help a parked pod
--                                 (HELPFUL): the queue's wake compares ids, reading no event
--   arrivalwakes           zset   "<key>=<value>" or "*" -> until when (ms) a parked pod
--                                 waits for a pod with that label to arrive (_wakes.lua)
--   arrivalsince           hash   the same token -> the stream id from which it is waited for
--   queue:<scheduler>:active
--                          zset   "<seq>:<uid>" scored -priority: pop order
--   queue:<scheduler>:leased
--                          zset   uid -> lease deadline (ms) of popped pods
--   queue:<scheduler>:backoff
--                          zset   uid -> end of its back-off (ms)
--   queue:<scheduler>:parked
--                          zset   uid -> when an unschedulable pod returns anyway (ms)
--   podgroup:<group>       hash   a PodGroup fed by sync: min, timeout (s, or '')
--   podgroups              set    '<namespace>/<name>' of every PodGroup held
--   version:podgroup:<group>
--                          string newest resourceVersion a feeder applied (tombstone 1 h)
--   gangwait:<group>       hash   a pod group's members seen pending: uid -> msgpack Pod,
--                                 since -> wait start (ms); written by Python (docs/gangs.md)
--   gangwaits              set    the groups with a gangwait (Python; no SCAN for explain)
--
-- Commands return a value, or `nil, "<CODE> <detail...>"`. The registration wrapper turns the
-- latter into an error reply; sc_batch collects it. Every command checks all preconditions
-- before its first write, so an error reply means nothing was written.

-- SCHEMA_VERSION (the events' `v`) is defined by the loader, ahead of this file.

-- name -> command function; filled in by _register.lua, read by sc_batch.
local COMMANDS = {}

-- Corruption: a key that does not hold what schedcache writes there (another client wrote
-- it). Every check that can raise this runs before the command's first write; the wrapper
-- (and sc_batch, per command) turns it into the error reply "CORRUPT <key> <why>", so a
-- corrupt key refuses the command whole instead of failing halfway (Redis does not roll back).
local CORRUPT = 'schedcache-corrupt'

local function corrupt(key, why)
  error({ [CORRUPT] = 'CORRUPT ' .. key .. ' ' .. why })
end

-- The reply text of a corruption raised by corrupt(), or nil for any other error.
local function corruption_of(err)
  if type(err) == 'table' then return err[CORRUPT] end
  return nil
end

-- Arguments copied into a command's table by one unpack (a bound on the values unpacked at
-- once; _register.lua's wrap and sc_batch).
local ARGS_UNPACKED = 64

-- Keys whose type this call has checked already (a batch checks each key once). Reset by
-- begin_call(): another call may find them changed.
local checked = {}

-- Whether the running call is an sc_batch (set by it; reset by begin_call()).
local batching = false

-- The type of a key, for the message of a corruption (TYPE answers a status reply).
local function key_type(key)
  local kind = redis.call('TYPE', key)
  if type(kind) == 'table' then kind = kind['ok'] end
  return kind
end

-- A read of `key` that fails with WRONGTYPE on a key of another type than `want`: that failure
-- becomes corruption (raised before any write); any other error is raised as it came.
local function typed_read(key, want, command, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    if string.find(tostring(reply.err), 'WRONGTYPE', 1, true) == nil then error(reply) end
    local kind = key_type(key)
    local why = 'is a ' .. kind .. ', not a ' .. want
    if kind == 'set' and string.find(key, ':nodepods:', 1, true) then
      why = why .. ' (a cache of schema 1: run `schedcache migrate`)'
    end
    corrupt(key, why)
  end
  return reply
end

-- A cheap read of each type: it answers an integer for a key of that type (or none), so the
-- check costs no status-reply table (TYPE's). All of them are in the least-privilege ACL of
-- docs/security.md already.
local PROBES = { set = 'SCARD', zset = 'ZCARD', stream = 'XLEN' }

-- A probe's answer (the key's size, an integer: true in Lua) is what `checked` keeps for the key:
-- a single command that needs the size before its first write takes it from there instead of
-- asking again (claim_conflicts: a node's pod count).
local function expect_type(key, want)
  if checked[key] then return end
  if want == 'hash' then
    typed_read(key, want, 'HEXISTS', 'exists')
    checked[key] = true
  else
    checked[key] = typed_read(key, want, PROBES[want])
  end
end

-- A key of the cache that no command writes (`absent`): intersected with it, several sets are
-- type-checked by one SINTER, which checks every key's type (WRONGTYPE) and then answers the
-- empty set at once. A call per key would cost a redis.call each (~3,000 instructions).
-- (SINTERCARD would do the same on Redis, but fakeredis refuses it a missing first key.)
local ABSENT = 'absent'
-- Keys per SINTER of a list (a bound on the arguments unpacked at once).
local SETS_PER_CHECK = 200

-- Checks that each key given (of the cache `p`; callers leave out those checked already) is a
-- set or missing, as expect_type does, with one call for all of them. Varargs, not a table: a
-- table and its growth would cost more than the calls saved.
local function expect_sets(p, ...)
  local count = select('#', ...)
  if count == 1 then return expect_type((...), 'set') end
  local reply = redis.pcall('SINTER', p .. ABSENT, ...)
  if reply.err then
    -- Name the key: each in turn (the first of another type raises the corruption).
    for j = 1, count do expect_type((select(j, ...)), 'set') end
    expect_type(p .. ABSENT, 'set')
    error(reply)
  end
  -- Marked for the commands after this one in an sc_batch (a single command checks each of
  -- its sets once: an unmarked key only costs a check again, and the marks ~1,000 each).
  if batching then
    for j = 1, count do checked[(select(j, ...))] = true end
  end
end

-- The same for a list of keys, in slices of SETS_PER_CHECK (a node's images).
local function expect_set_list(p, keys)
  local unchecked = {}
  for j = 1, #keys do
    if not checked[keys[j]] then unchecked[#unchecked + 1] = keys[j] end
  end
  keys = unchecked
  for first = 1, #keys, SETS_PER_CHECK do
    expect_sets(p, unpack(keys, first, math.min(first + SETS_PER_CHECK - 1, #keys)))
  end
end

-- An integer as Redis reads one (string2ll, for INCR and HINCRBY): '-' the only sign, no
-- leading zero, within int64. Anything looser passes here and fails the write later.
local INT64_LIMITS = { ['-'] = '9223372036854775808', [''] = '9223372036854775807' }

-- A match without captures (string.find), then the length: up to 18 characters is within
-- int64 whatever the digits, and only a longer one is compared with the limit (string.match's
-- two captures cost ~500 instructions more a call, on every integer argument and field).
local function is_int(value)
  if value == '0' then return true end
  if type(value) ~= 'string' or not string.find(value, '^%-?[1-9]%d*$') then return false end
  if #value < 19 then return true end
  local sign, digits = '', value
  if string.byte(value) == 45 then sign, digits = '-', string.sub(value, 2) end  -- 45: '-'
  -- same length: text order is numeric
  return #digits < 19 or (#digits == 19 and digits <= INT64_LIMITS[sign])
end

-- A stored integer (a string, or false/nil when absent -> `default`), as a number.
local function stored_int(key, value, default)
  if value == nil or value == false then return default end
  if not is_int(value) then corrupt(key, 'holds ' .. string.format('%q', string.sub(value, 1, 40))
    .. ', not an integer') end
  return tonumber(value)
end

-- Helpers of the claims' reads, in one table (the chunk's locals are near Lua's 200):
-- READS.fit_layout, with check_fields below; READS.pod_texts.
local READS = {}

-- A pod's version, record and queued record (the keys given) in one MGET, each its text or
-- false when missing: sc_sync_pod reads all three for every change (three GETs cost two
-- redis.calls more, ~2,800 instructions each). MGET answers a key of another type as missing,
-- so when one is, EXISTS tells; if any missing one exists, all three come back nil, and the
-- caller's own reads (stale_version, load_pod, load_queued) read them one by one as before,
-- in their order, reporting the corruption as they always did (a dropped change first).
function READS.pod_texts(vkey, rkey, qkey)
  local got = redis.call('MGET', vkey, rkey, qkey)
  local version, record, queued = got[1], got[2], got[3]
  if version and record and queued then return version, record, queued end
  local absent = {}
  if not version then absent[#absent + 1] = vkey end
  if not record then absent[#absent + 1] = rkey end
  if not queued then absent[#absent + 1] = qkey end
  if redis.call('EXISTS', unpack(absent)) > 0 then return nil, nil, nil end
  return version, record, queued
end

-- GET that refuses a key of another type (as corruption, before any write); false when the
-- key is missing.
local function get_string(key)
  return typed_read(key, 'string', 'GET')
end

-- `gen` (the key given) holds an integer INCR can count on from, or is missing; else the
-- corruption is raised (before any write).
local function check_gen(key)
  local value = get_string(key)
  stored_int(key, value, 0)
  if value == INT64_LIMITS[''] then corrupt(key, 'is at the int64 limit: INCR would fail') end
  return value
end

-- HMGET of `fields` (after `first`, when given) that refuses a key of another type: the read
-- is the hash's type check.
local function hmget_checked(key, fields, first)
  local values
  if first then
    values = typed_read(key, 'hash', 'HMGET', first, unpack(fields))
  else
    values = typed_read(key, 'hash', 'HMGET', unpack(fields))
  end
  checked[key] = true
  return values
end

-- The cache-wide keys and their types (`gen`, the generation counter, holds an integer).
-- Each command checks those it may write (_register.lua names them; a pod placed on a node
-- entry that does not exist yet, and a pod taken off its node, add theirs): a wrong-typed one
-- refuses it whole, before its first write. Each key is checked once per call.
local CACHE_KEY_TYPES = { nodegen = 'zset', nodes = 'set', pods = 'set', assumed = 'set',
                          deadlines = 'zset', events = 'stream', replicas = 'set' }
local EVERY_CACHE_KEY = { 'gen', 'nodegen', 'nodes', 'pods', 'assumed', 'deadlines', 'events' }
local NEW_NODE_KEYS = { 'nodes' }
-- What add_pod (and sc_sync_pod adding or confirming through it) checks before it runs: a
-- confirmation writes no more of them (a new pod adds `pods`, checked then; a confirmation
-- elsewhere takes the pod off its node: all of them).
local ADD_POD_KEYS = { 'nodegen', 'events' }

-- The cache-wide sets among `names` (at most four: nodes, pods, assumed, replicas) are checked
-- with one call (expect_sets); `a_set`, when given, is one more set key for that call
-- (assume_pod's replica claims). Locals, not a table: see expect_sets.
local function guard_cache(p, names, a_set)
  local set1, set2, set3, set4, set5 = nil, nil, nil, nil, nil
  if a_set ~= nil and not checked[a_set] then set1 = a_set end
  for j = 1, #names do
    local name = names[j]
    local key = p .. name
    if not checked[key] then
      local want = CACHE_KEY_TYPES[name]
      if name == 'gen' then
        check_gen(key)
        checked[key] = true
      elseif want ~= 'set' then
        expect_type(key, want)
      elseif set1 == nil then
        set1 = key
      elseif set2 == nil then
        set2 = key
      elseif set3 == nil then
        set3 = key
      elseif set4 == nil then
        set4 = key
      elseif set5 == nil then
        set5 = key
      else
        expect_type(key, want)
      end
    end
  end
  if set5 ~= nil then
    expect_sets(p, set1, set2, set3, set4, set5)
  elseif set4 ~= nil then
    expect_sets(p, set1, set2, set3, set4)
  elseif set3 ~= nil then
    expect_sets(p, set1, set2, set3)
  elseif set2 ~= nil then
    expect_sets(p, set1, set2)
  elseif set1 ~= nil then
    expect_type(set1, 'set')
  end
end

-- A node's hash and pod set, before a command places or removes pods on it.
local function guard_node(p, node)
  expect_type(p .. 'node:' .. node, 'hash')
  expect_type(p .. 'nodepods:' .. node, 'zset')
end


-- Bounds of the calls' arguments (docs/security.md, "Bounds of every Lua call"), each checked
-- before a command's first write. Times and durations (ms) as the Python side bounds them
-- (commands.MAX_NOW, MAX_TTL): far inside int64 and the doubles' exact integers.
-- The caps of every call's arguments, in one table (a chunk may hold 200 locals at most).
local BOUNDS = {}
BOUNDS.MAX_NOW_MS = 1e13
BOUNDS.MAX_DURATION_MS = 1e12
-- A uid, node, replica or holder name (part of key names and replies).
BOUNDS.MAX_NAME_BYTES = 1024
-- One pod's or node's msgpack (events.MAX_PAYLOAD) or a pod's contribution text.
BOUNDS.MAX_BLOB_BYTES = 1048576
-- Image names and allocatable resources one node brings (values.MAX_NODE_IMAGES, _RESOURCES):
-- each is a write (10,000 images replaced took 356 ms).
BOUNDS.MAX_NODE_IMAGES = 1000
BOUNDS.MAX_NODE_RESOURCES = 1000
-- Pods one expiry call (sc_cleanup_assumed_pods, sc_forget_lapsed) settles at most, and the
-- bytes of pod records past which it stops (each settled pod's event carries its msgpack:
-- 1,000 pods of 0.8 MiB would hold Redis for seconds); it then answers that more are due.
BOUNDS.MAX_EXPIRY_LIMIT = 1000
BOUNDS.EXPIRY_BYTES = 2 * 1048576
-- Node names one read (sc_read_nodes, sc_read_node_deltas) and one inline delta
-- (sc_snapshot_delta's limit) take at most: each node costs its pods' records.
BOUNDS.MAX_READ_NAMES = 200

-- A decimal integer argument within [low, high], as a number; nil for anything else. Not
-- tonumber alone: it takes "inf" (which passes a floor check), "nan", "1e3", " 7" and "0x10".
-- is_int's check inlined: a call fewer (~400 instructions; a pod takes ~15 integers).
local function int_arg(value, low, high)
  if value == '0' then
    if low <= 0 and high >= 0 then return 0 end
    return nil
  end
  if type(value) ~= 'string' or not string.find(value, '^%-?[1-9]%d*$')
      or (#value > 18 and not is_int(value)) then
    return nil
  end
  local n = tonumber(value)
  if n < low or n > high then return nil end
  return n
end

-- A name argument (uid, node, holder): not empty, no whitespace, at most BOUNDS.MAX_NAME_BYTES.
local function name_arg(value)
  return type(value) == 'string' and value ~= '' and #value <= BOUNDS.MAX_NAME_BYTES
    and not string.find(value, '%s')
end

-- The server's time in ms, unless `arg` gives one. TIME is not frozen within a call (Redis 7.0
-- and fakeredis both answer it afresh each time: tests/test_call_memos_time.py): an sc_batch
-- keeps its first answer for the rest of the call in checked[' now'] (no key starts with a
-- space; `checked` is emptied at every call's start), so that its commands share one time,
-- as they share one call, and a batch of timed claims asks once. (A single command keeps
-- nothing: another key in `checked` costs every call's begin_call.)
local function now_ms(arg)
  if arg ~= nil and arg ~= '' then return int_arg(arg, 0, BOUNDS.MAX_NOW_MS) end
  local now = checked[' now']
  if now == nil then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    if batching then checked[' now'] = now end
  end
  return now
end

local function int_string(n)
  return string.format('%d', n)
end

-- Reads `count` (at most `limit`) field/value pairs starting at a[i]; the values must be
-- integers, and stay the strings they came as (a Lua number is a double: 1e18 would be stored
-- as "1e+18"). Returns the flat list and the index after it, or nil and an error.
local function read_pairs(a, i, what, limit)
  local count = int_arg(a[i], 0, limit)
  if count == nil then return nil, 'BADARG ' .. what .. '-count' end
  local out = {}
  for j = i + 1, i + 2 * count, 2 do
    local field, value = a[j], a[j + 1]
    if field == nil or field == '' or value == nil or not string.match(value, '^%-?%d+$') then
      return nil, 'BADARG ' .. what
    end
    out[#out + 1] = field
    out[#out + 1] = value
  end
  return out, i + 1 + 2 * count
end

-- Events that could help a pod parked as unschedulable (upstream's queueing hints for the
-- plugins that park a pod on resources, taints, node affinity and ports: a node added or
-- changed, an assigned pod deleted or changed, and this cache's own releases of room; and, for
-- PodTopologySpread, a node deleted: its domain may have held the minimum).
local HELPFUL = { NodeAdded = true, NodeUpdated = true, NodeRemoved = true, PodRemoved = true,
                  PodUpdated = true, PodForgotten = true, PodExpired = true }

-- Appends an event: its type, the schema version, the replica, then the field/value pairs
-- given (passed straight through: no table is built per event). Its id goes to `lastevent`
-- (last_event_id), a helpful one's to `helped` too: both kept in ARRIVALS (.last, .helped) and
-- written once, by end_call (SET takes any key, so these writes cannot fail after the XADD; a
-- command of an sc_batch that fails after its XADD leaves its entry, and its id, behind).
local function emit(p, etype, replica, ...)
  local id = redis.call('XADD', p .. 'events', '*', 'type', etype, 'v', SCHEMA_VERSION,
                        'replica', replica, ...)
  ARRIVALS.last = id
  if HELPFUL[etype] or ARRIVALS.woke then
    ARRIVALS.woke = false  -- set by a placement a parked pod waits for (_wakes.lua)
    ARRIVALS.helped = id
  end
  return id
end

-- The id of the stream's last event ("" when it is empty): the point of the stream a read
-- reflects. `hint`: `lastevent` as the caller read it (false: missing; nil: read it here).
-- emit keeps that key, so the event itself (its whole msgpack, converted into Lua tables) is
-- not read. One check makes it safe against entries appended by anything else (a stream
-- restored under the key, a test's XADD): XREVRANGE from the end down to it, exclusive, which
-- is empty unless so and then stops at the stream's last entry (~5,000 instructions; XRANGE
-- from it walks its listpack node from the node's first entry: ~24,000). When it is not empty,
-- or with no key (a cache written before it), the stream's last entry is read.
local function last_event_id(p, hint)
  -- An event of this call: its id is the stream's last (nothing else appends during a call),
  -- and `lastevent` is written with it only when the call ends (emit, end_call).
  if ARRIVALS.last then return ARRIVALS.last end
  local key, events = p .. 'lastevent', p .. 'events'
  if hint == nil then hint = get_string(key) end
  if hint then
    local after = redis.pcall('XREVRANGE', events, '+', '(' .. hint, 'COUNT', '1')
    if after.err == nil then
      if after[1] == nil then return hint end
    elseif string.find(tostring(after.err), 'WRONGTYPE', 1, true) == nil then
      corrupt(key, 'is not a stream id')
    end  -- a stream of another type: named by the read below
  end
  local last = typed_read(events, 'stream', 'XREVRANGE', '+', '-', 'COUNT', '1')[1]
  return last and last[1] or ''
end

-- Nodes changed by the running call, with the generation of their last change. A call (one
-- command, or a whole sc_batch) records them once at its end: a batch that puts 200 pods on
-- one node writes its generation once, not 200 times. Reset by begin_call().
local changed_nodes = {}
local changed_gen = {}

-- Node entries known to exist during the running call (saves a write per pod in a batch).
local known_nodes = {}

-- The generation of the running call's last change. Its first change INCRs `gen`; later ones
-- count on from it, and end_call writes the last one (a batch of 200 placements writes `gen`
-- once, not 200 times). `incr_gen`: what that INCR answered.
local call_gen = nil
local incr_gen = nil
-- call_gen as text (remember_reply answers it without formatting it again).
local call_gen_text = nil

-- Pods an sc_batch call added to the `pods` set (`batching`), added by one SADD at its end:
-- uid -> true (false when the call removed it again), and the uids in order. (A single command
-- adds its pod at once: the bookkeeping would cost it more than the call it saves.)
local pods_added = {}
local pods_order = {}
-- Uids per SADD at the end of a call (a bound on the arguments unpacked at once).
BOUNDS.PODS_PER_SADD = 500
-- The same for the uids an sc_batch call queued (sc_sync_pod's push, _queue.lua), added to
-- `queuedpods` by one SADD at its end: kept in checked[' queued'] (a name no key or scheduler
-- has; `checked` is emptied at every call's start), the uids in order (its array part) and
-- uid -> true. The uids an sc_batch call dropped from the queue (queue_drop) are kept there
-- too, uid -> false, and leave `queuedpods` by one SREM at its end: each uid's last change
-- wins, so the set ends as the commands run one by one would leave it (dropped, then queued
-- again: in; queued, then dropped: out). (A uid is a string: no array index.)

-- Keys of `checked` cleared in place at a call's start (more: a new table).
BOUNDS.CHECKED_KEPT = 32

local function begin_call()
  -- What the call may still search of claims' reads (lua/_claims.lua: rule_conflicts; set
  -- there, BOUNDS.MAX_READS_SCAN, before any call runs).
  BOUNDS.scan_left = BOUNDS.MAX_READS_SCAN
  call_gen = nil
  incr_gen = nil
  batching = false
  -- (end_call clears the ids too; `woke` is cleared by the event it marks, but a refused call
  -- may leave it set: found in review, the next event of any cache was taken as helpful)
  ARRIVALS.last, ARRIVALS.helped, ARRIVALS.woke = false, false, false
  READS.held = nil  -- (a call that failed holding a record write leaves no hold behind)
  if #pods_order > 0 then
    pods_added = {}
    pods_order = {}
  end
  -- The keys the last call checked are dropped in place: a new table each call grew from 0 to
  -- its ~10 keys through four rehashes, and left ~1 KB to the collector, whose work a byte
  -- allocated is what a call pays most for (bench/lua_profile.py). A large one (an sc_batch's)
  -- goes whole, so that no later call walks its room.
  local kept = 0
  for key in next, checked do
    kept = kept + 1
    if kept > BOUNDS.CHECKED_KEPT then
      checked = {}
      break
    end
    checked[key] = nil
  end
  -- A call that changed one node (a single command's case) leaves these tables one entry
  -- each: emptied in place, they keep their room, and the next call fills them without the
  -- allocation and the rehash of a new table (~1,700 instructions each). Larger ones go.
  local changed = #changed_nodes
  if changed == 1 then
    changed_gen[changed_nodes[1]] = nil
    changed_nodes[1] = nil
  elseif changed > 1 then
    changed_nodes = {}
    changed_gen = {}
  end
  local known = next(known_nodes)
  if known ~= nil then
    if next(known_nodes, known) == nil then known_nodes[known] = nil else known_nodes = {} end
  end
end

-- `nodegen` takes a ZADD in every call that changes a node. While a sorted set holds at most
-- zset-max-listpack-entries (128) short members, Redis keeps it as a listpack and each update
-- scans and moves it whole: at 100 nodes that ZADD was ~9 % of an add_pod. This member, longer
-- than zset-max-listpack-value (64 bytes) and no node name (it has spaces), makes Redis keep
-- the index a skiplist from the start, as it is anyway past 128 nodes. Scored -inf, it is
-- below every generation a reader asks for (ZRANGEBYSCORE (G +inf).
local NODEGEN_SKIPLIST = 'not a node: keeps this index a skiplist (a member over 64 bytes),'
  .. ' so updating it never scans a listpack'

-- Bumps the cache generation for a change of `node`; returns the new generation as a number
-- and as text. Pass the text to redis.call: Redis prints a Lua number argument with "%.17g",
-- several times the cost of formatting it once here.
--
-- Its INCR is the first write of add_pod and assume_pod (place_pod touches first), which
-- therefore leave `gen` unchecked: INCR refuses a key of another type or a value that is no
-- integer without writing, and that refusal is turned into the corruption here. Every other
-- command has checked `gen` before.
local function touch(p, node)
  local gen
  if call_gen == nil then
    gen = redis.pcall('INCR', p .. 'gen')
    if type(gen) == 'table' then
      check_gen(p .. 'gen')  -- raises the corruption, if it is one
      redis.call('INCR', p .. 'gen')  -- else the same refusal again, raised as Redis words it
    end
    incr_gen = gen
    if gen == 1 then
      -- A new generation counter: a new incarnation of the cache (first use, or a Redis that
      -- lost its data). Snapshots from another incarnation are rebuilt, not caught up.
      local t = redis.call('TIME')
      redis.call('SET', p .. 'incarnation', t[1] .. '.' .. t[2])
      redis.call('SET', p .. 'antipods', '0')
      if checked[' antipods'] ~= nil then checked[' antipods'] = 0 end  -- (_claims.lua)
      redis.call('ZADD', p .. 'nodegen', '-inf', NODEGEN_SKIPLIST)
    end
  else
    gen = call_gen + 1
  end
  call_gen = gen
  local text = int_string(gen)
  call_gen_text = text
  if changed_gen[node] == nil then changed_nodes[#changed_nodes + 1] = node end
  changed_gen[node] = text
  return gen, text
end

-- redis.call(command, key, item, ...) over `items` in slices of at most `per_call` (a bound on
-- the arguments unpacked at once; even, for pairs).
local function call_in_slices(command, key, items, per_call)
  for first = 1, #items, per_call do
    redis.call(command, key, unpack(items, first, math.min(first + per_call - 1, #items)))
  end
end

-- Changed nodes per ZADD at the end of a call.
BOUNDS.NODES_PER_ZADD = 200

-- end_call's MSET arguments (at most four keys and values), kept: no table a call. (A field:
-- the library's chunk is at Lua's limit of 200 locals.)
READS.end_sets = {}

-- Writes the ids of the call's last event and last helpful one, the call's last generation,
-- records each changed node's generation in the generation index (the only place it is kept;
-- a node that is gone stays there as a tombstone), then adds the pods a batch added to `pods`
-- (and those it queued to `queuedpods`, taking out those it dropped). What readers catch up by
-- comes first, so that no later write's failure leaves it behind the stream (found in review:
-- a failed SREM left `nodegen` behind `gen`).
local function end_call(p)
  -- The ids of the call's last event and last helpful one (emit), the call's last generation
  -- and the queue's arrival counter as the call's arrivals counted on (_queue.lua:
  -- queue_activate): each key once, all of them in one MSET (a call less for each past the
  -- first; the strings are overwritten whatever their type, as SET does).
  local n, sets = 0, READS.end_sets
  local last = ARRIVALS.last
  if last then
    sets[1], sets[2] = p .. 'lastevent', last
    n = 2
    if ARRIVALS.helped then
      sets[3], sets[4] = p .. 'helped', ARRIVALS.helped
      n = 4
    end
    ARRIVALS.last, ARRIVALS.helped = false, false
  end
  if call_gen ~= nil and call_gen ~= incr_gen then
    sets[n + 1], sets[n + 2] = p .. 'gen', int_string(call_gen)
    n = n + 2
  end
  local seq = checked[' queueseq']
  if seq then
    sets[n + 1], sets[n + 2] = p .. 'queueseq', int_string(seq)
    n = n + 2
  end
  if n > 0 then redis.call('MSET', unpack(sets, 1, n)) end
  if #changed_nodes == 1 then  -- one command's usual case: no table to build
    local node = changed_nodes[1]
    redis.call('ZADD', p .. 'nodegen', changed_gen[node], node)
  elseif #changed_nodes > 1 then
    local scored = {}
    for j = 1, #changed_nodes do
      scored[#scored + 1] = changed_gen[changed_nodes[j]]
      scored[#scored + 1] = changed_nodes[j]
    end
    call_in_slices('ZADD', p .. 'nodegen', scored, 2 * BOUNDS.NODES_PER_ZADD)
  end
  if #pods_order > 0 then  -- only an sc_batch defers them
    local added = {}
    for j = 1, #pods_order do
      if pods_added[pods_order[j]] then added[#added + 1] = pods_order[j] end
    end
    call_in_slices('SADD', p .. 'pods', added, BOUNDS.PODS_PER_SADD)
  end
  local queued = checked[' queued']
  if queued ~= nil then
    local added, dropped = {}, {}
    for j = 1, #queued do
      if queued[queued[j]] then
        added[#added + 1] = queued[j]
      else
        dropped[#dropped + 1] = queued[j]
      end
    end
    call_in_slices('SADD', p .. 'queuedpods', added, BOUNDS.PODS_PER_SADD)
    call_in_slices('SREM', p .. 'queuedpods', dropped, BOUNDS.PODS_PER_SADD)
  end
end

-- Creates a placeholder entry for a node that pods name before the node itself arrives.
local function ensure_node(p, node)
  if known_nodes[node] then return end
  if redis.call('HSETNX', p .. 'node:' .. node, 'exists', 0) == 1 then
    redis.call('SADD', p .. 'nodes', node)
  end
  known_nodes[node] = true
end

-- Drops a ghost or placeholder entry once its last pod has gone. Its nodegen member stays,
-- scored by the generation of this change: the tombstone snapshot consumers look for.
local function drop_if_empty(p, node)
  local nk = p .. 'node:' .. node
  if redis.call('HGET', nk, 'exists') == '0'
      and redis.call('ZCARD', p .. 'nodepods:' .. node) == 0 then
    redis.call('DEL', nk, p .. 'nodepods:' .. node, p .. 'nodeimgs:' .. node)
    checked[p .. 'nodepods:' .. node] = nil
    redis.call('SREM', p .. 'nodes', node)
    known_nodes[node] = nil
  end
end

-- A contribution is the string "<field> <amount> <field> <amount> ..." (see
-- schedcache/model/aggregates.py), parsed by parse_contribution into
-- { fields = {...}, amounts = {...}, text = <the string> }: exactly pairs of a field and an
-- integer, single-spaced (the matches must cover the whole string but for one space between
-- neighbours, and no other whitespace), else nil. Amounts stay strings: no Lua number round trip. The pod's
-- labels (`l:<key>=<value>`, arrivals.py) go to `labels`, not to the node's totals: the
-- queue's wake compares them (_wakes.lua).
-- `twice`: the first field (not a label) the text names more than once, else nil. A claim's
-- fit is checked amount by amount and its contribution added whole, so `r:cpu 100 r:cpu 100`
-- passed where 100 was free and added 200 (found in review): the commands that take one as an
-- argument refuse it (read_pod_args, sc_nominate_pod); the client never writes one. (Records
-- stored before keep being read as they are: their totals were added, and go, whole.)
local function parse_contribution_text(contribution)
  -- Spaces only: a newline would end the pod record's header early (`<header> <contribution>
  -- \n<blob>`), the rest read back as the blob (found in review); tabs and the like are no
  -- separator the client writes.
  if string.find(contribution, '[^%S ]') then return nil end
  local fields, amounts, labels, covered = {}, {}, {}, 0
  local seen, twice = {}, nil  -- (one table for the text's lifetime: parses are kept, below)
  for field, amount in string.gmatch(contribution, '(%S+) (%-?%d+)') do
    if not is_int(amount) then return nil end  -- HINCRBY would refuse it after earlier writes
    covered = covered + #field + #amount + 2
    if string.sub(field, 1, 2) == 'l:' then
      labels[#labels + 1] = string.sub(field, 3)
    else
      -- (named in the error by its first 64 bytes: a refusal echoes no megabyte)
      if seen[field] and twice == nil then twice = string.sub(field, 1, 64) end
      seen[field] = true
      fields[#fields + 1] = field
      amounts[#amounts + 1] = amount
    end
  end
  if covered ~= #contribution + 1 and contribution ~= '' then return nil end
  return { fields = fields, amounts = amounts, labels = labels, text = contribution,
           twice = twice }
end

-- Parsed contributions by their text, kept across calls. The pods of a cluster share a few
-- request shapes, and a parse costs ~20,000 instructions (the gmatch, its captures, three
-- tables) where this lookup costs a few hundred. Parsing is a pure function of the text, so
-- keeping its results changes no outcome. Bounded: texts up to BOUNDS.CONTRIBUTION_KEPT_BYTES long,
-- and the whole memo dropped when it holds BOUNDS.CONTRIBUTIONS_KEPT of them. The tables it hands out
-- are shared by every call: read them, never change them (one exception, derived from the text
-- alone and set once: READS.fit_layout's `fit_fields`, `fit_read` and `fit_at`, the fields a
-- fit check reads).
BOUNDS.CONTRIBUTIONS_KEPT = 1000
BOUNDS.CONTRIBUTION_KEPT_BYTES = 512
local parsed_contributions = {}
local contributions_kept = 0

local function parse_contribution(contribution)
  local parsed = parsed_contributions[contribution]
  if parsed ~= nil then return parsed end
  parsed = parse_contribution_text(contribution)
  if parsed ~= nil and #contribution <= BOUNDS.CONTRIBUTION_KEPT_BYTES then
    if contributions_kept >= BOUNDS.CONTRIBUTIONS_KEPT then
      parsed_contributions = {}
      contributions_kept = 0
    end
    parsed_contributions[contribution] = parsed
    contributions_kept = contributions_kept + 1
  end
  return parsed
end

-- Adds a parsed contribution to a node hash, or subtracts it when `negate` is true; a field
-- that drops to 0 is deleted. The `anti` field (pods with required anti-affinity) also moves
-- the cache-wide count `antipods`, which a bare fit-checked claim reads (_claims.lua): only
-- where the count exists (it is created with `gen`; a cache older than it has none, which
-- claims read as "unknown": they are always judged; `schedcache migrate` does not count it,
-- docs/constraints.md).
local function apply_contribution(p, nk, parsed, negate)
  local fields, amounts = parsed.fields, parsed.amounts
  for j = 1, #fields do
    local field, amount = fields[j], amounts[j]
    if negate then
      if string.sub(amount, 1, 1) == '-' then
        amount = string.sub(amount, 2)
      else
        amount = '-' .. amount
      end
    end
    if redis.call('HINCRBY', nk, field, amount) == 0 then redis.call('HDEL', nk, field) end
    if field == 'anti' and redis.call('EXISTS', p .. 'antipods') == 1 then
      local count = redis.call('INCRBY', p .. 'antipods', amount)
      if checked[' antipods'] ~= nil then checked[' antipods'] = count end  -- (_claims.lua)
    end
  end
end

local function place_pod(p, uid, node, parsed)
  ARRIVALS.note(p, parsed.labels)  -- reads only: a parked pod this arrival may help
  local gen, text = touch(p, node)  -- first: it may be the command's first write (touch)
  ensure_node(p, node)
  apply_contribution(p, p .. 'node:' .. node, parsed, false)
  -- The last pod with required anti-affinity placed here: only one placed after a claim's
  -- snapshot can repel it from this node's domains (_claims.lua).
  local fields = parsed.fields
  for j = 1, #fields do
    if fields[j] == 'anti' then redis.call('HSET', p .. 'node:' .. node, 'ax', text) end
  end
  local pk = p .. 'nodepods:' .. node
  redis.call('ZADD', pk, text, uid)
  checked[pk] = true  -- a zset, its probe's count gone (claim_conflicts counts again)
  return gen, text
end

local function unplace_pod(p, uid, node, parsed)
  apply_contribution(p, p .. 'node:' .. node, parsed, true)
  local pk = p .. 'nodepods:' .. node
  redis.call('ZREM', pk, uid)
  checked[pk] = true  -- (as place_pod's)
  local gen, text = touch(p, node)
  -- The last removal, for claims whose rules a removal can break (_changes.lua).
  redis.call('HSET', p .. 'node:' .. node, 'rm', text)
  drop_if_empty(p, node)
  return gen, text
end

-- The node fields a contribution changes must hold integers (HINCRBY fails on anything else,
-- after earlier writes), and adding must not push a total past int64 (HINCRBY refuses that
-- too). One HMGET checks both, before the first write. Returns the field that would overflow.
BOUNDS.TOTAL_LIMIT = 9.0e18

-- The node fields a fit-checked claim reads (claim_conflicts: `exists`, `a:pods`, then each
-- requested resource and its allocatable), followed by the contribution's other fields: one
-- HMGET serves check_fields and the fit check (two cost ~5,000 instructions more a claim, and
-- as many a candidate tried). Built once per contribution shape and kept on the shared parsed
-- contribution (parse_contribution): `fit_fields` (the fit check's part), `fit_read` (the
-- whole read) and `fit_at` (contribution field j's place in it), all derived from the text
-- alone, the same for every call, and never changed once set.
-- A fit layout's read of more fields than this is two reads, as the fit check's own and the
-- fields' (found in review: one HMGET of thousands of resources and ports passed what Lua can
-- unpack, a raw error where the two reads answered).
BOUNDS.FIT_READ_FIELDS = 4000
function READS.fit_layout(parsed)
  local read = parsed.fit_read
  if read ~= nil then return read end
  local fields = parsed.fields
  local fit, at = { 'exists', 'a:pods' }, {}
  for j = 1, #fields do
    local field = fields[j]
    if string.sub(field, 1, 2) == 'r:' then
      fit[#fit + 1] = field
      at[j] = #fit
      fit[#fit + 1] = 'a:' .. string.sub(field, 3)
    end
  end
  read = {}
  for k = 1, #fit do read[k] = fit[k] end
  for j = 1, #fields do
    if at[j] == nil then
      read[#read + 1] = fields[j]
      at[j] = #read
    end
  end
  parsed.fit_fields, parsed.fit_at, parsed.fit_read = fit, at, read
  return read
end

-- Adding (not `removing`), the same HMGET reads the node's `exists` field: a node entry found
-- there is known to exist, and placing the pod skips ensure_node's HSETNX; the second value
-- answers whether it is a live node (not a ghost or a placeholder). `fit` (adding, for a
-- fit-checked claim): the read is READS.fit_layout's, and its reply is the third value, which
-- claim_conflicts takes as its own read (no write comes between them).
local function check_fields(p, node, parsed, removing, fit)
  local nk = p .. 'node:' .. node
  local fields, amounts = parsed.fields, parsed.amounts
  if removing and #fields == 0 then return nil end
  local current, offset, at
  if removing then
    current, offset = hmget_checked(nk, fields, nil), 0
  elseif fit and #READS.fit_layout(parsed) <= BOUNDS.FIT_READ_FIELDS then
    current, at = hmget_checked(nk, parsed.fit_read, nil), parsed.fit_at
    if current[1] then known_nodes[node] = true end
  else
    current, offset = hmget_checked(nk, fields, 'exists'), 1
    if current[1] then known_nodes[node] = true end
  end
  for j = 1, #fields do
    local have
    if at then have = current[at[j]] else have = current[j + offset] end
    -- Checked as an integer (stored_int raises on anything else); converted only when the
    -- result could pass the limit (a number conversion per field is a strtod): a long amount,
    -- or a total already near it (either way, removing included).
    if have and not is_int(have) then stored_int(nk, have, 0) end
    -- The cache-wide count moves with `anti` (apply_contribution): checked before any write.
    if fields[j] == 'anti' then check_gen(p .. 'antipods') end
    local amount = amounts[j]
    if #amount >= 13 or (have and #have >= 18) then
      local change = tonumber(amount)
      if removing then change = -change end
      local total = stored_int(nk, have, 0) + change
      if total > BOUNDS.TOTAL_LIMIT or total < -BOUNDS.TOTAL_LIMIT then
        -- Adding, the pod is refused (OVERFLOW); a stored total that taking a pod off would
        -- push past int64 is no total schedcache wrote.
        if removing then
          corrupt(nk, 'holds ' .. fields[j] .. ' ' .. have .. ': past int64 less ' .. amount)
        end
        return fields[j]
      end
    end
  end
  return nil, not removing and current[1] == '1', at and current
end

-- Everything taking a pod off `node` writes must be writable (its totals' fields, the node's pod
-- set): checked before any write.
local function guard_removal(p, node, parsed)
  check_fields(p, node, parsed, true)
  guard_node(p, node)
end

-- The pod record is one string (one GET or SET, where a hash costs a field each):
--   "<state> <node> <finished 0|1> <deadline ms|-> <gen placed> <claimer|-> <contribution>\n<blob>"
-- claimer: the replica that assumed the pod. While its binding is unfinished (finished 0) the
-- pod is in the replica's claims (replicapods:<claimer>, bound by its lease); a claim with a
-- deadline (sc_timed_claim, finished 1 from the start) names its claimer too, in no replica's
-- claims, so that a replica whose claim went unanswered can tell its own from another's
-- (scheduler/loop.py); sc_finish_binding's release clears it.
-- Returns it as a table, or nil when the pod is not in the cache.
local STATES = { assumed = true, added = true }

-- `stays`: the caller leaves the pod on its node (it changes the record and the indexes of an
-- assumed pod only, and checks what it writes itself); else everything taking the pod off its
-- node writes is checked here (guard_removal). `read`: the record as the caller read it
-- (READS.pod_texts: false when missing), else nil and it is read here.
local function load_pod(p, uid, stays, read)
  local key = p .. 'pod:' .. uid
  local raw = read
  if raw == nil then raw = get_string(key) end
  if not raw then return nil end
  -- The newline first: without one, the match below backtracks over every length of the
  -- claimer, scanning the rest each time (found in review: a 20 KB record without a newline
  -- held Redis for seconds, 1 MiB for hours). Then the header is matched in the record itself
  -- and `at` is where the blob starts (no header string cut out first).
  if not string.find(raw, '\n', 1, true) then
    corrupt(key, 'is not a pod record (no header)')
  end
  local state, node, finished, deadline, gen, claimer, contribution, at = string.match(
    raw, '^(%S+) (%S+) ([01]) (%S+) (%-?%d+) (%S+) ?([^\n]*)\n()')
  local parsed = contribution and parse_contribution(contribution)
  if state == nil or not STATES[state] or (deadline ~= '-' and not is_int(deadline))
      or not parsed then
    corrupt(key, 'has a malformed header')
  end
  if deadline == '-' then deadline = '' end
  if claimer == '-' then claimer = '' end
  if not stays then guard_removal(p, node, parsed) end
  if claimer ~= '' and finished == '0' then expect_type(p .. 'replicapods:' .. claimer, 'set') end
  return { state = state, node = node, finished = finished, deadline = deadline, gen = gen,
           claimer = claimer, contribution = parsed, blob = string.sub(raw, at) }
end

-- A record write sc_sync_pod holds back (READS.hold_record) to send with the pod's version, in
-- one MSET at its end (READS.release_record): { key, text }, or false when none is held.
-- A second record written meanwhile sends the first.
READS.held = nil

-- Writes a pod record from its parts (no table per write: every placement writes one).
local function write_record(p, uid, state, node, finished, deadline, gen, claimer, contribution,
                            blob)
  if deadline == '' then deadline = '-' end
  if claimer == '' then claimer = '-' end
  if type(gen) == 'number' then gen = int_string(gen) end
  local key = p .. 'pod:' .. uid
  local text = state .. ' ' .. node .. ' ' .. finished .. ' ' .. deadline .. ' ' .. gen .. ' '
    .. claimer .. ' ' .. contribution .. '\n' .. blob
  local held = READS.held
  if held == nil then
    redis.call('SET', key, text)
  else
    if held then redis.call('SET', held[1], held[2]) end
    READS.held = { key, text }
  end
end

-- sc_sync_pod's confirmation or update writes the pod's record and then, as its last write,
-- the pod's version (_versions.lua): the two go in one MSET (a SET less a pod, ~2,800
-- instructions: issue 40). hold_record starts holding record writes back; release_record
-- sends the one held, with `vkey` = `rv` when given, and stops holding. Nothing reads a
-- record between its write and the command's end (the event, the queue's drop and a
-- nomination's settling read other keys).
function READS.hold_record()
  READS.held = false
end

function READS.release_record(vkey, rv)
  local held = READS.held
  READS.held = nil
  if held and vkey then
    redis.call('MSET', held[1], held[2], vkey, rv)
    return true
  elseif held then
    redis.call('SET', held[1], held[2])
  end
  return false
end

local function save_pod(p, uid, rec)
  write_record(p, uid, rec.state, rec.node, rec.finished, rec.deadline, rec.gen, rec.claimer,
               rec.contribution.text, rec.blob)
end

-- The replica's claim on an assumed pod ends (binding finished, or the pod left the cache). A
-- claim with a deadline (finished already) was in no replica's claims.
local function release_claim(p, uid, rec)
  if rec.claimer ~= '' and rec.finished == '0' then
    redis.call('SREM', p .. 'replicapods:' .. rec.claimer, uid)
  end
  rec.claimer = ''
end

local function pod_state(rec)
  if rec == nil then return 'absent' end
  return rec.state
end

-- Places a pod on its node and writes its record; the caller has removed any previous one.
-- `claimer`: the replica assuming it ('' for added pods). `deadline` (ms text, optional): the
-- pod's binding is finished and it expires then (sc_timed_claim; the caller indexes it); its
-- claimer is named in the record, not added to the replica's claims (the deadline bounds it).
local function put_pod(p, args, state, claimer, deadline)
  local gen, text = place_pod(p, args.uid, args.node, args.contribution)
  if claimer ~= '' and not deadline then
    redis.call('SADD', p .. 'replicapods:' .. claimer, args.uid)
  end
  write_record(p, args.uid, state, args.node, deadline and '1' or '0', deadline or '', text,
               claimer, args.contribution.text, args.blob)
  if not batching then
    redis.call('SADD', p .. 'pods', args.uid)
  else
    if pods_added[args.uid] == nil then pods_order[#pods_order + 1] = args.uid end
    pods_added[args.uid] = true  -- into `pods` when the call ends
  end
  return gen, text
end

-- Removes a pod record and every index entry that points at it.
local function delete_pod(p, uid, rec)
  release_claim(p, uid, rec)
  redis.call('DEL', p .. 'pod:' .. uid)
  if pods_added[uid] then
    pods_added[uid] = false  -- added by this call: never written
  else
    redis.call('SREM', p .. 'pods', uid)
  end
  redis.call('SREM', p .. 'assumed', uid)
  redis.call('ZREM', p .. 'deadlines', uid)
  return unplace_pod(p, uid, rec.node, rec.contribution)
end

-- Parses the common pod arguments: uid, node, blob, contribution.
-- An object's msgpack as every write takes it (a pod's record and events, a node's entry, a
-- queued pod): at most BOUNDS.MAX_BLOB_BYTES, and a msgpack map (fixmap, map 16, map 32), as
-- every schedcache object is. Only the header is read (fakeredis has no cmsgpack, and a full
-- decode would cost every claim): readers name a record whose body still cannot be read.
local function valid_blob(blob)
  if type(blob) ~= 'string' or blob == '' or #blob > BOUNDS.MAX_BLOB_BYTES then return false end
  local first = string.byte(blob, 1)
  return (first >= 0x80 and first <= 0x8f) or first == 0xde or first == 0xdf
end

-- `fit`: a fit-checked claim's (check_fields; its node read goes with the arguments, `state`).
local function read_pod_args(p, a, fit)
  local uid, node, blob, contribution = a[1], a[2], a[3], a[4]
  if uid == nil or uid == '' or #uid > BOUNDS.MAX_NAME_BYTES then return nil, 'BADARG uid' end
  if not name_arg(node) then return nil, 'BADARG node ' .. uid end
  if not valid_blob(blob) then return nil, 'BADARG blob ' .. uid end
  if contribution ~= nil and #contribution > BOUNDS.MAX_BLOB_BYTES then
    return nil, 'BADARG contribution ' .. uid
  end
  local parsed = contribution and parse_contribution(contribution)
  if not parsed then return nil, 'BADARG contribution ' .. uid end
  if parsed.twice then
    return nil, 'BADARG contribution ' .. uid .. ' ' .. parsed.twice .. ' twice'
  end
  local overflow, live, state = check_fields(p, node, parsed, false, fit)
  guard_node(p, node)
  -- A node entry check_fields did not find is created (and listed in `nodes`).
  if not known_nodes[node] then guard_cache(p, NEW_NODE_KEYS) end
  if overflow then return nil, 'OVERFLOW ' .. uid .. ' ' .. node .. ' ' .. overflow end
  return { uid = uid, node = node, blob = blob, contribution = parsed, live = live,
           state = state }
end

-- Image index: a node's images in nodeimgs:<node>, each image's live nodes in imgnodes:<image>,
-- its size in `images` (the first size reported wins, as upstream; forgotten with the image's
-- last node). Every image whose node count changes is scored in `imagegen` with the generation
-- of the change, so snapshots refresh exactly the image spreads that moved.
local function image_gained(p, node, image, size, gen)
  redis.call('SADD', p .. 'nodeimgs:' .. node, image)
  redis.call('SADD', p .. 'imgnodes:' .. image, node)
  redis.call('HSETNX', p .. 'images', image, size)
  redis.call('ZADD', p .. 'imagegen', gen, image)
end

local function image_lost(p, node, image, gen)
  local nodes_key = p .. 'imgnodes:' .. image
  redis.call('SREM', p .. 'nodeimgs:' .. node, image)
  redis.call('SREM', nodes_key, node)
  if redis.call('SCARD', nodes_key) == 0 then
    redis.call('DEL', nodes_key)
    redis.call('HDEL', p .. 'images', image)
  end
  redis.call('ZADD', p .. 'imagegen', gen, image)
end

-- Makes the node's images exactly `images` (flat name, size list), touching only the changes.
local function set_node_images(p, node, images, gen)
  local wanted = {}
  for j = 1, #images, 2 do wanted[images[j]] = images[j + 1] end
  local had = {}
  for _, image in ipairs(redis.call('SMEMBERS', p .. 'nodeimgs:' .. node)) do
    had[image] = true
    if wanted[image] == nil then image_lost(p, node, image, gen) end
  end
  for j = 1, #images, 2 do
    local image = images[j]
    if not had[image] then
      had[image] = true
      image_gained(p, node, image, images[j + 1], gen)
    end
  end
end

-- Before a node command's first write: every key it may write for node `name` (its entry,
-- image index entries for `images` (flat name, size list) and those it had, the tree keys of
-- `zones`) holds the type schedcache writes. Returns the images it had.
local function guard_node_change(p, name, images, zones)
  guard_node(p, name)
  local imgs = p .. 'nodeimgs:' .. name
  local had = typed_read(imgs, 'set', 'SMEMBERS')  -- the read is its type check
  checked[imgs] = true
  expect_type(p .. 'images', 'hash')
  expect_type(p .. 'imagegen', 'zset')
  local image_sets = {}
  for _, image in ipairs(had) do image_sets[#image_sets + 1] = p .. 'imgnodes:' .. image end
  for j = 1, #images, 2 do image_sets[#image_sets + 1] = p .. 'imgnodes:' .. images[j] end
  expect_set_list(p, image_sets)
  expect_type(p .. 'treezones', 'zset')
  expect_type(p .. 'treecursor', 'hash')
  for _, zone in ipairs(zones) do expect_type(p .. 'treezone:' .. zone, 'zset') end
  return had
end

-- Node tree: zones in first-insertion order (treezones, scored by the generation that added
-- them), nodes in insertion order within each zone (treezone:<zone>). Only live nodes are in it.
-- `treegen` is the generation of the last membership change, so snapshots know when to rebuild
-- their node order; treecursor holds the round-robin cursor of sc_tree_next.
local function tree_add(p, node, zone, gen)
  local zk = p .. 'treezone:' .. zone
  if redis.call('ZSCORE', zk, node) then return end
  if redis.call('EXISTS', zk) == 0 then redis.call('ZADD', p .. 'treezones', gen, zone) end
  redis.call('ZADD', zk, gen, node)
  redis.call('SET', p .. 'treegen', gen)
end

local function tree_remove(p, node, zone, gen)
  local zk = p .. 'treezone:' .. zone
  if redis.call('ZREM', zk, node) == 0 then return end
  if redis.call('EXISTS', zk) == 0 then
    redis.call('ZREM', p .. 'treezones', zone)
    redis.call('HDEL', p .. 'treecursor', 'z:' .. zone)
  end
  redis.call('SET', p .. 'treegen', gen)
end
