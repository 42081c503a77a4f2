-- sc_tree_read (read-only): the node tree, zones in order with their nodes in order.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica (unused)
-- Keys     treegen, treezones, treezone:<zone>
-- Reply    { treegen, { zone, { node, ... } }, ... }
-- Errors   none
local function tree_read(p, replica, a)
  return read_tree(p)
end
