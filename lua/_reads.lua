-- Shared reads of sc_tree_read, sc_read_nodes and sc_snapshot_delta.

-- { treegen, { zone, { node, ... } }, ... }: the node tree in order.
local function read_tree(p)
  local out = { stored_int(p .. 'treegen', get_string(p .. 'treegen'), 0) }
  expect_type(p .. 'treezones', 'zset')
  for _, zone in ipairs(redis.call('ZRANGE', p .. 'treezones', 0, -1)) do
    expect_type(p .. 'treezone:' .. zone, 'zset')
    out[#out + 1] = { zone, redis.call('ZRANGE', p .. 'treezone:' .. zone, 0, -1) }
  end
  return out
end

-- Pod records read per MGET (a bound on the arguments unpacked at once).
local RECORDS_PER_MGET = 200

-- { name, { hash field, value, ... }, { pod record, ... }, { image, ... }, placed } for one
-- node. Without `since`, the records are all the node's pods and `placed` is empty. With it (a
-- generation), only the pods placed after it come as records, and `placed` lists every pod as
-- { uid, generation, ... }: the reader holds the others from an earlier read.
local function read_node(p, name, since)
  guard_node(p, name)
  expect_type(p .. 'nodeimgs:' .. name, 'set')
  local index = p .. 'nodepods:' .. name
  local uids, placed
  if since == nil then
    uids, placed = redis.call('ZRANGE', index, 0, -1), {}
  else
    placed = redis.call('ZRANGE', index, 0, -1, 'WITHSCORES')
    uids = redis.call('ZRANGEBYSCORE', index, '(' .. since, '+inf')
  end
  local pods = {}
  for first = 1, #uids, RECORDS_PER_MGET do
    local keys = {}
    for j = first, math.min(first + RECORDS_PER_MGET - 1, #uids) do
      keys[#keys + 1] = p .. 'pod:' .. uids[j]
    end
    local records = redis.call('MGET', unpack(keys))
    for j = 1, #keys do
      -- MGET answers nil for a key of another type too: GET tells that apart (corruption).
      local record = records[j] or get_string(keys[j])
      if record then pods[#pods + 1] = record end
    end
  end
  return { name, redis.call('HGETALL', p .. 'node:' .. name), pods,
           redis.call('SMEMBERS', p .. 'nodeimgs:' .. name), placed }
end

-- { image, size, live node count, ... } for the images given.
local function image_summaries(p, images)
  local out = {}
  expect_type(p .. 'images', 'hash')
  for _, image in ipairs(images) do
    expect_type(p .. 'imgnodes:' .. image, 'set')
    local size = redis.call('HGET', p .. 'images', image)
    out[#out + 1] = image
    out[#out + 1] = size or ''
    out[#out + 1] = redis.call('SCARD', p .. 'imgnodes:' .. image)
  end
  return out
end

