-- sc_read_node_deltas (read-only): node entries as sc_snapshot_delta sends them, read
-- atomically, for a snapshot too far behind to take them inline.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica (unused), generation G of the snapshot, node name, ...
-- Keys     those of sc_read_nodes
-- Reply    as sc_read_nodes (the stream's last event id last), but each entry with the records
--          of only the pods placed after G and, last, every pod's uid (the reader holds the
--          others)
-- Errors   BADARG generation
local function read_node_deltas(p, replica, a)
  local since = int_arg(a[1], 0, math.huge)
  if since == nil then return nil, 'BADARG generation' end
  if #a - 1 > BOUNDS.MAX_READ_NAMES then return nil, 'BADARG names' end
  return read_entries(p, a, 2, int_string(since))
end
