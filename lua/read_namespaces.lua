-- sc_read_namespaces (read-only): the namespaces' labels a replica's snapshot holds, when they
-- changed (docs/constraints.md, "Namespace selectors").
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, "", the `nsgen` the caller holds
-- Reply    { nsgen } when unchanged, else { nsgen, { name, labels, ... } }
function NSLABELS.read(p, _, a)
  local gk = p .. 'nsgen'
  local gen = tostring(stored_int(gk, get_string(gk), 0))
  if (a[1] or '') == gen then return { gen } end
  return { gen, typed_read(p .. 'namespaces', 'hash', 'HGETALL') }
end

