-- sc_read_nodes (read-only): node entries with their pods and images, read atomically.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica (unused), node name, ...
-- Keys     node:<name>, nodepods:<name> (zset), pod:<uid>, nodeimgs:<name>, nodegen, images,
--          imgnodes:<image>, lastevent, events
-- Reply    { { name, { hash field, value, ... }, { pod record, ... }, { image, ... },
--              { uid of each record, ... }, {} }, ...,
--            { image, size, live node count, ... },  -- every image named
--            the id of the stream's last event ("" when empty): the point the read reflects }
--          A name without an entry comes back with an empty hash.
-- Errors   none
local function read_nodes(p, replica, a)
  if #a > BOUNDS.MAX_READ_NAMES then return nil, 'BADARG names' end
  return read_entries(p, a, 1, nil)
end
