-- Shared reads of sc_tree_read, sc_read_nodes and sc_snapshot_delta.

-- { treegen, { zone, { node, ... } }, ... }: the node tree in order.
local function read_tree(p)
  local out = { stored_int(p .. 'treegen', get_string(p .. 'treegen'), 0) }
  expect_type(p .. 'treezones', 'zset')
  for _, zone in ipairs(redis.call('ZRANGE', p .. 'treezones', '0', '-1')) do
    expect_type(p .. 'treezone:' .. zone, 'zset')
    out[#out + 1] = { zone, redis.call('ZRANGE', p .. 'treezone:' .. zone, '0', '-1') }
  end
  return out
end

-- Pod records read per MGET (a bound on the arguments unpacked at once).
local RECORDS_PER_MGET = 200

-- { name, { hash field, value, ..., 'gen', generation from nodegen }, { pod record, ... },
--   { image, ... }, { uid, ... }, { uid, ... } } for one node: the records are those of the
-- first uid list, in its order ("" for a uid without a record). Without `since`, that list is every pod of the node and the
-- second is empty. With it (a generation), the first lists only the pods placed after it and
-- the second every pod of the node: the reader holds the others from an earlier read. (Uids,
-- not scores: Redis prints every score with "%.17g", which cost more than the records.)
-- Each read is its key's type check (typed_read): a read writes nothing, so no probe has to
-- come first, and a node costs five calls.
local function read_node(p, name, since)
  local index = p .. 'nodepods:' .. name
  local uids, every
  if since == nil then
    uids, every = typed_read(index, 'zset', 'ZRANGE', '0', '-1'), {}
  else
    uids = typed_read(index, 'zset', 'ZRANGEBYSCORE', '(' .. since, '+inf')
    every = redis.call('ZRANGE', index, '0', '-1')
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
      pods[#pods + 1] = records[j] or get_string(keys[j]) or ''
    end
  end
  local hash = typed_read(p .. 'node:' .. name, 'hash', 'HGETALL')
  if #hash > 0 then  -- the node's generation is kept in the index only
    hash[#hash + 1] = 'gen'
    hash[#hash + 1] = typed_read(p .. 'nodegen', 'zset', 'ZSCORE', name) or '0'
  end
  return { name, hash, pods, typed_read(p .. 'nodeimgs:' .. name, 'set', 'SMEMBERS'), uids,
           every }
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

-- The entries of the nodes named by a[first], a[first + 1], ... (read_node with `since`), then
-- the spread of every image they name, then the id of the stream's last event (verify compares
-- it with the fold at that point).
local function read_entries(p, a, first, since)
  local out = {}
  local seen, images = {}, {}
  for j = first, #a do
    local entry = read_node(p, a[j], since)
    out[#out + 1] = entry
    for _, image in ipairs(entry[4]) do
      if not seen[image] then
        seen[image] = true
        images[#images + 1] = image
      end
    end
  end
  out[#out + 1] = image_summaries(p, images)
  out[#out + 1] = last_event_id(p)
  return out
end
