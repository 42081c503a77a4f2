-- sc_add_node: the informer saw a node; also revives a ghost or fills in a placeholder.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, name, zone, blob, n, (resource, amount) * n, m, (image name, size) * m
--          resources: cpu (millicores), mem, eph (bytes), pods, s:<scalar name>
-- Keys     node:<name>, nodes, nodeimgs:<name>, nodelabels:<name>, imgnodes:<image>, images,
--          imagegen, treezones,
--          treezone:<zone>, treegen, gen, nodegen, events
-- Reply    the generation the node now has
-- Errors   BADARG <what>
-- Event    NodeAdded  node, gen, zone, data=blob[, revived=1]
local function add_node(p, replica, a)
  return set_node(p, replica, a, 'NodeAdded')
end
