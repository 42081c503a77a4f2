-- sc_update_node: the informer saw a node change; an unknown node is created, as upstream.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     as sc_add_node (the new node; the old one is not needed: the stored one is replaced)
-- Keys     as sc_add_node
-- Reply    the generation the node now has
-- Errors   BADARG <what>
-- Event    NodeUpdated  node, gen, zone, data=blob[, revived=1]
local function update_node(p, replica, a)
  return set_node(p, replica, a, 'NodeUpdated')
end
