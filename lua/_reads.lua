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

-- { name, { hash field, value, ... }, { pod record, ... }, { image, ... } } for one node.
local function read_node(p, name)
  guard_node(p, name)
  expect_type(p .. 'nodeimgs:' .. name, 'set')
  local pods = {}
  for _, uid in ipairs(redis.call('SMEMBERS', p .. 'nodepods:' .. name)) do
    local record = get_string(p .. 'pod:' .. uid)
    if record then pods[#pods + 1] = record end
  end
  return { name, redis.call('HGETALL', p .. 'node:' .. name), pods,
           redis.call('SMEMBERS', p .. 'nodeimgs:' .. name) }
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

