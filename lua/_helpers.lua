-- Shared helpers of the schedcache Redis Functions library.
--
-- The loader (schedcache/library.py) concatenates this file, one file per command, and
-- _register.lua into one library. Everything here is `local`: a Redis Functions library may
-- not write globals, and fakeredis would keep such a global for the life of its server.
--
-- Key schema (every key of one cache starts with the prefix KEYS[1] = "{<name>}:", so one
-- hash tag puts them all in one Redis Cluster slot):
--   pod:<uid>        hash   state (assumed|added), node, finished (0|1), deadline (ms or ""),
--                           blob (msgpack Pod, never decoded here), replica,
--                           k:<field> = the pod's contribution to its node, as it was added
--   node:<name>      hash   exists (1 live node, 0 ghost or placeholder), gen, zone, blob,
--                           a:<res> allocatable, r:<res> requested, n:cpu/n:mem non-zero
--                           requested, pods, aff, anti, p:<ip>|<proto>|<port> and
--                           v:<ns>/<claim> reference counts. A field that drops to 0 is deleted.
--   nodepods:<name>  zset   pod uids on the node, scored by the generation that placed them
--   nodeimgs:<name>  set    image names the live node reports
--   imgnodes:<image> set    live nodes that report the image
--   images           hash   image name -> size in bytes (the first size reported wins)
--   nodes            set    every node entry: live, ghost and placeholder
--   pods             set    every pod uid in the cache
--   assumed          set    uids of assumed pods
--   deadlines        zset   uid -> expiry deadline (ms) of assumed pods whose binding finished
--   gen              string the cache's generation counter (INCR)
--   nodegen          zset   node name -> generation of its last change (removed names stay as
--                           tombstones, so snapshot consumers learn about removals)
--   events           stream the history: type, v, replica, uid/node, gen, data, extras
--
-- Commands return a value, or `nil, "<CODE> <detail...>"`. The registration wrapper turns the
-- latter into an error reply; sc_batch collects it. Every command checks all preconditions
-- before its first write, so an error reply means nothing was written.

local SCHEMA_VERSION = '1'

-- name -> command function; filled in by _register.lua, read by sc_batch.
local COMMANDS = {}


local function now_ms(arg)
  if arg ~= nil and arg ~= '' then
    local n = tonumber(arg)
    if n == nil or n < 0 or n ~= math.floor(n) then return nil end
    return n
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function int_string(n)
  return string.format('%d', n)
end

-- Reads `count` field/value pairs starting at a[i]; the values must be integers.
-- Returns the flat list and the index after it, or nil and an error.
local function read_pairs(a, i, what)
  local count = tonumber(a[i])
  if count == nil or count < 0 then return nil, 'BADARG ' .. what .. '-count' end
  local out = {}
  for j = i + 1, i + 2 * count, 2 do
    local field, value = a[j], tonumber(a[j + 1])
    if field == nil or field == '' or value == nil or value ~= math.floor(value) then
      return nil, 'BADARG ' .. what
    end
    out[#out + 1] = field
    out[#out + 1] = value
  end
  return out, i + 1 + 2 * count
end

local function emit(p, etype, replica, fields)
  local args = { p .. 'events', '*', 'type', etype, 'v', SCHEMA_VERSION, 'replica', replica }
  for j = 1, #fields do args[#args + 1] = fields[j] end
  return redis.call('XADD', unpack(args))
end

-- Bumps the cache generation and records it on the node and in the generation index.
local function touch(p, node)
  local gen = redis.call('INCR', p .. 'gen')
  redis.call('HSET', p .. 'node:' .. node, 'gen', gen)
  redis.call('ZADD', p .. 'nodegen', gen, node)
  return gen
end

-- Creates a placeholder entry for a node that pods name before the node itself arrives.
local function ensure_node(p, node)
  local nk = p .. 'node:' .. node
  if redis.call('HEXISTS', nk, 'exists') == 0 then
    redis.call('HSET', nk, 'exists', 0)
    redis.call('SADD', p .. 'nodes', node)
  end
end

-- Drops a ghost or placeholder entry once its last pod has gone. Its nodegen member stays,
-- scored by the generation of this change: the tombstone snapshot consumers look for.
local function drop_if_empty(p, node)
  local nk = p .. 'node:' .. node
  local state = redis.call('HMGET', nk, 'exists', 'pods')
  if state[1] == '0' and (state[2] == false or tonumber(state[2]) == 0) then
    redis.call('DEL', nk, p .. 'nodepods:' .. node, p .. 'nodeimgs:' .. node)
    redis.call('SREM', p .. 'nodes', node)
  end
end

-- Adds (sign 1) or subtracts (sign -1) a contribution, a flat field/value list, to a node.
local function apply_contribution(nk, fields, sign)
  for j = 1, #fields, 2 do
    local v = redis.call('HINCRBY', nk, fields[j], sign * fields[j + 1])
    if v == 0 then redis.call('HDEL', nk, fields[j]) end
  end
end

local function place_pod(p, uid, node, contribution)
  ensure_node(p, node)
  apply_contribution(p .. 'node:' .. node, contribution, 1)
  local gen = touch(p, node)
  redis.call('ZADD', p .. 'nodepods:' .. node, gen, uid)
  return gen
end

local function unplace_pod(p, uid, node, contribution)
  apply_contribution(p .. 'node:' .. node, contribution, -1)
  redis.call('ZREM', p .. 'nodepods:' .. node, uid)
  local gen = touch(p, node)
  drop_if_empty(p, node)
  return gen
end

-- The stored pod record, with its contribution as a flat list, or nil.
local function load_pod(p, uid)
  local flat = redis.call('HGETALL', p .. 'pod:' .. uid)
  if #flat == 0 then return nil end
  local rec = { contribution = {} }
  for j = 1, #flat, 2 do
    local f = flat[j]
    if string.sub(f, 1, 2) == 'k:' then
      rec.contribution[#rec.contribution + 1] = string.sub(f, 3)
      rec.contribution[#rec.contribution + 1] = tonumber(flat[j + 1])
    else
      rec[f] = flat[j + 1]
    end
  end
  return rec
end

local function pod_state(rec)
  if rec == nil then return 'absent' end
  return rec.state
end

local function write_pod(p, uid, state, node, blob, replica, contribution)
  local pk = p .. 'pod:' .. uid
  redis.call('DEL', pk)
  local args = { pk, 'state', state, 'node', node, 'finished', 0, 'deadline', '',
                 'blob', blob, 'replica', replica }
  for j = 1, #contribution, 2 do
    args[#args + 1] = 'k:' .. contribution[j]
    args[#args + 1] = contribution[j + 1]
  end
  redis.call('HSET', unpack(args))
  redis.call('SADD', p .. 'pods', uid)
end

-- Removes a pod record and every index entry that points at it.
local function delete_pod(p, uid, rec)
  redis.call('DEL', p .. 'pod:' .. uid)
  redis.call('SREM', p .. 'pods', uid)
  redis.call('SREM', p .. 'assumed', uid)
  redis.call('ZREM', p .. 'deadlines', uid)
  return unplace_pod(p, uid, rec.node, rec.contribution)
end

-- Parses the common pod arguments: uid, node, blob, then the contribution pairs.
local function read_pod_args(a)
  local uid, node, blob = a[1], a[2], a[3]
  if uid == nil or uid == '' then return nil, 'BADARG uid' end
  if node == nil or node == '' then return nil, 'BADARG node ' .. uid end
  if blob == nil or blob == '' then return nil, 'BADARG blob ' .. uid end
  local contribution, err = read_pairs(a, 4, 'contribution')
  if contribution == nil then return nil, err end
  return { uid = uid, node = node, blob = blob, contribution = contribution }
end

-- Removes the node from the image index (images it reported while live).
local function remove_node_images(p, node)
  local ik = p .. 'nodeimgs:' .. node
  local names = redis.call('SMEMBERS', ik)
  for _, image in ipairs(names) do
    local nodes_key = p .. 'imgnodes:' .. image
    redis.call('SREM', nodes_key, node)
    if redis.call('SCARD', nodes_key) == 0 then
      redis.call('DEL', nodes_key)
      redis.call('HDEL', p .. 'images', image)
    end
  end
  redis.call('DEL', ik)
end

