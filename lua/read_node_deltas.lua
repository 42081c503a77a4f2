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
  local since = tonumber(a[1])
  if since == nil or since < 0 or since ~= math.floor(since) then
    return nil, 'BADARG generation'
  end
  return read_entries(p, a, 2, int_string(since))
end
