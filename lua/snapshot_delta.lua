-- sc_snapshot_delta (read-only): what changed since a snapshot's generation, in one atomic read.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica (unused), generation G of the snapshot, the snapshot's tree generation,
--          inline limit L (-1: the head alone, for a snapshot that follows the stream)
-- Keys     gen, nodegen, imagegen, images, imgnodes:<image>, treegen, treezones,
--          treezone:<zone>, lastevent, events (its last entry's id), nsgen, and those of
--          sc_read_nodes for the changed nodes
-- Reply    { gen, live node count, { changed node, ... }, { image, size, count, ... },
--            tree (as sc_tree_read, or {} when the tree generation is the one given),
--            nodes (as sc_read_nodes without its last entry, but each with the records of
--            only the pods placed after G, and every pod's uid last; or {} when more than L
--            changed),
--            the incarnation ("" before the first change),
--            the id of the stream's last event ("" when it is empty): the point of the stream
--            this reply reflects,
--            the namespaces' generation `nsgen` (0 before any): a replica reads the labels
--            (sc_read_namespaces) only when it moved }
--          With L = -1 the live node count is -1: not counted. Every change of the node tree
--          sets `treegen` to its (newer) generation, so the tree the snapshot holds at the
--          tree generation it gave, or the one this reply sends, is the live nodes, and the
--          snapshot counts them there (views/snapshot.py; a call a zone saved each head read).
-- Errors   BADARG <what>
-- Cost grows with the number of nodes and images changed since G, not with the cluster
-- (with L = -1: constant, the tree aside; the names of the changed nodes are not sent either).
-- The head read (L = -1) runs once per pod a replica places: it makes three calls (and the
-- tree's when it changed), with `gen`, `treegen`, `incarnation`, `lastevent` and `nsgen` in
-- one MGET (a key of another type, or a missing one, is told apart by GET only then); the
-- stream's last id is `lastevent`, checked by an XREVRANGE down to it (last_event_id: no
-- event is read). The snapshot sends its XRANGE of the new events with it (one round trip):
-- answered here instead, a catch-up of one event cost Redis 1.3 times, of ten 2.2 times.
local function snapshot_delta(p, replica, a)
  local since = int_arg(a[1], -math.huge, math.huge)
  local known_tree = int_arg(a[2], -math.huge, math.huge)
  if since == nil or known_tree == nil then return nil, 'BADARG generation' end
  local limit = int_arg(a[3], -1, BOUNDS.MAX_READ_NAMES)
  if limit == nil then return nil, 'BADARG limit' end
  local since_text = int_string(since)
  local bound = '(' .. since_text
  local heads = redis.call('MGET', p .. 'gen', p .. 'treegen', p .. 'incarnation',
                          p .. 'lastevent', p .. 'nsgen')
  local gen_text = heads[1] or get_string(p .. 'gen')
  local tree_text = heads[2] or get_string(p .. 'treegen')
  local incarnation = heads[3] or get_string(p .. 'incarnation')
  local last_hint = heads[4] or get_string(p .. 'lastevent')
  local gen = stored_int(p .. 'gen', gen_text, 0)
  local nsgen = stored_int(p .. 'nsgen', heads[5] or get_string(p .. 'nsgen'), 0)
  local changed, images = {}, {}
  if limit >= 0 then
    changed = typed_read(p .. 'nodegen', 'zset', 'ZRANGEBYSCORE', bound, '+inf')
    images = image_summaries(
      p, typed_read(p .. 'imagegen', 'zset', 'ZRANGEBYSCORE', bound, '+inf'))
  end
  local tree = {}
  local live = 0
  local tree_gen = stored_int(p .. 'treegen', tree_text, 0)
  if tree_gen ~= known_tree then tree = read_tree(p) end
  if limit == -1 then
    live = -1
  else
    -- Each read is its key's type check (one call a zone, not two).
    for _, zone in ipairs(typed_read(p .. 'treezones', 'zset', 'ZRANGE', '0', '-1')) do
      live = live + typed_read(p .. 'treezone:' .. zone, 'zset', 'ZCARD')
    end
  end
  local nodes = {}
  if #changed <= limit then
    for j = 1, #changed do nodes[j] = read_node(p, changed[j], since_text) end
  end
  return { gen, live, changed, images, tree, nodes, incarnation or '', last_event_id(p, last_hint),
           nsgen }
end
