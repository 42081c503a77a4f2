-- sc_read_nodes (read-only): node entries with their pods and images, read atomically.
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica (unused), node name, ...
-- Keys     node:<name>, nodepods:<name> (zset), pod:<uid>, nodeimgs:<name>, images, imgnodes:<image>
-- Reply    { { name, { hash field, value, ... }, { pod record, ... }, { image, ... },
--              { uid of each record, ... }, {} }, ...,
--            { image, size, live node count, ... } }  -- the last entry: every image named
--          A name without an entry comes back with an empty hash.
-- Errors   none
local function read_nodes(p, replica, a)
  local out = {}
  local seen, images = {}, {}
  for j = 1, #a do
    local entry = read_node(p, a[j])
    out[#out + 1] = entry
    for _, image in ipairs(entry[4]) do
      if not seen[image] then
        seen[image] = true
        images[#images + 1] = image
      end
    end
  end
  out[#out + 1] = image_summaries(p, images)
  return out
end
