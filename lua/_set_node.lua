-- Shared body of sc_add_node and sc_update_node: store the node object, replace its
-- allocatable, update the image index, and place the node in the tree: appended to its zone
-- when it was not live, moved to the end of its new zone when its zone key changed.
--
-- ARGV     replica, name, zone, blob, n, (resource, amount) * n, m, (image name, size) * m,
--          [spec digest (an integer: labels, taints, unschedulable), [k, (label key, value) * k]]
--          (_changes.lua: a claim tells a relabelled node's new domains by its labels)
-- Reply    the generation the node now has
-- Errors   BADARG <what>
-- Event    <etype>  node, gen, zone, data=blob, revived=1 when it brings back a ghost or
--          fills in a placeholder
local function set_node(p, replica, a, etype)
  local name, zone, blob = a[1], a[2], a[3]
  if not name_arg(name) then return nil, 'BADARG name' end
  if zone == nil or #zone > BOUNDS.MAX_NAME_BYTES then return nil, 'BADARG zone ' .. name end
  if not valid_blob(blob) then return nil, 'BADARG blob ' .. name end
  local allocatable, next_i = read_pairs(a, 4, 'allocatable', BOUNDS.MAX_NODE_RESOURCES)
  if allocatable == nil then return nil, next_i end
  local images, after = read_pairs(a, next_i, 'images', BOUNDS.MAX_NODE_IMAGES)
  if images == nil then return nil, after end
  local digest = spec_digest_arg(a[after])
  if digest == nil then return nil, 'BADARG spec-digest ' .. name end
  local labels = read_node_labels(a, after + 1)
  if labels == nil then return nil, 'BADARG labels ' .. name end

  local nk = p .. 'node:' .. name
  expect_type(nk, 'hash')
  local previous = redis.call('HMGET', nk, 'exists', 'zone', 'sd')
  guard_node_change(p, name, images, { zone, previous[2] or '' })
  guard_labels(p, name)
  local stale = {}
  for _, field in ipairs(redis.call('HKEYS', nk)) do
    if string.sub(field, 1, 2) == 'a:' then stale[#stale + 1] = field end
  end
  if #stale > 0 then redis.call('HDEL', nk, unpack(stale)) end
  local fields = { nk, 'exists', 1, 'zone', zone, 'blob', blob }
  for j = 1, #allocatable, 2 do
    fields[#fields + 1] = 'a:' .. allocatable[j]
    fields[#fields + 1] = allocatable[j + 1]
  end
  redis.call('HSET', unpack(fields))
  set_node_labels(p, name, labels)
  redis.call('SADD', p .. 'nodes', name)

  local gen, text = touch(p, name)
  note_spec(nk, previous[1] == '1', previous[3], digest, text)
  set_node_images(p, name, images, gen)
  if previous[1] == '1' then
    if previous[2] ~= zone then
      tree_remove(p, name, previous[2] or '', gen)
      tree_add(p, name, zone, gen)
    end
  else
    tree_add(p, name, zone, gen)
  end
  local event = { 'node', name, 'gen', text, 'zone', zone, 'data', blob }
  if previous[1] == '0' then
    event[#event + 1] = 'revived'
    event[#event + 1] = '1'
  end
  emit(p, etype, replica, unpack(event))
  return gen
end
