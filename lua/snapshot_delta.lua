-- sc_snapshot_delta (read-only): what changed since a snapshot's generation, in one atomic read.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica (unused), generation G of the snapshot, the snapshot's tree generation,
--          inline limit L (-1: the head alone, for a snapshot that follows the stream),
--          optionally (with L = -1 only) the snapshot's last event id E and a page size N
--          (1..BOUNDS.MAX_STREAM_PAGE): the catch-up's first page comes inline
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
--            (sc_read_namespaces) only when it moved,
--            given E: the first page of the catch-up, XRANGE of the stream from E (inclusive:
--            a first entry that is not E says E was trimmed or lost) to the last id above,
--            at most N entries, each { id, { field, value, ... } }; {} when the last id is E
--            itself (nothing to fold), when the stream is empty, or without E }
--          Given E, the live node count is -1: not counted. Every change of the node tree
--          sets `treegen` to its (newer) generation, so the tree the snapshot holds at the
--          tree generation it gave, or the one this reply sends, is the live nodes, and the
--          snapshot counts them there (one call a zone saved on every head read).
-- Errors   BADARG <what>  (`BADARG last event id`: E is not a stream id <ms>-<seq>)
-- Cost grows with the number of nodes and images changed since G, not with the cluster
-- (with L = -1: with the zones alone; the names of the changed nodes are not sent either).
-- The head read (L = -1) runs once per pod a replica places: it makes three calls plus
-- one a zone (given E: three, and the XRANGE when the stream moved), with `gen`, `treegen`, `incarnation`, `lastevent` and `nsgen` in one MGET (a
-- key of another type, or a missing one, is told apart by GET only then); the stream's last
-- id is `lastevent`, checked by an XREVRANGE down to it (last_event_id: no event is read).
local function snapshot_delta(p, replica, a)
  local since = int_arg(a[1], -math.huge, math.huge)
  local known_tree = int_arg(a[2], -math.huge, math.huge)
  if since == nil or known_tree == nil then return nil, 'BADARG generation' end
  local limit = int_arg(a[3], -1, BOUNDS.MAX_READ_NAMES)
  if limit == nil then return nil, 'BADARG limit' end
  local after, page_size = a[4], nil
  if after == '' then after = nil end
  if after ~= nil then
    local ms, seq = string.match(after, '^(%d+)%-(%d+)$')
    if limit ~= -1 or ms == nil or #ms > 20 or #seq > 20
        or (#ms == 20 and ms > '18446744073709551615')
        or (#seq == 20 and seq > '18446744073709551615') then
      return nil, 'BADARG last event id'
    end
    page_size = int_arg(a[5], 1, BOUNDS.MAX_STREAM_PAGE)
    if page_size == nil then return nil, 'BADARG page size' end
  end
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
  if after ~= nil then
    live = -1
  else
    -- Each read is its key's type check (one call a zone, not two: this runs on every update).
    for _, zone in ipairs(typed_read(p .. 'treezones', 'zset', 'ZRANGE', '0', '-1')) do
      live = live + typed_read(p .. 'treezone:' .. zone, 'zset', 'ZCARD')
    end
  end
  local nodes = {}
  if #changed <= limit then
    for j = 1, #changed do nodes[j] = read_node(p, changed[j], since_text) end
  end
  local last = last_event_id(p, last_hint)
  local page = {}
  if after ~= nil and last ~= '' and last ~= after then
    page = typed_read(p .. 'events', 'stream', 'XRANGE', after, last, 'COUNT', page_size)
  end
  return { gen, live, changed, images, tree, nodes, incarnation or '', last, nsgen, page }
end
