-- Object versions for many feeders (sc_sync_pod, sc_sync_node).
--
-- Every feeder lists and watches the same API server, so each change arrives once per feeder,
-- and a slow feeder may deliver an old change after a newer one. The API server orders each
-- object's changes by its resourceVersion; version:<kind>:<id> keeps the newest applied, and a
-- change at or below it is dropped before anything is read or written. A deletion keeps its
-- version as a tombstone for TOMBSTONE_MS, so a late MODIFIED of a deleted object cannot
-- bring it back. resourceVersions are compared as decimal integers of any length (etcd's
-- revisions), exactly, never as Lua numbers (which round past 2^53).

local TOMBSTONE_MS = 3600000

-- `rv` without leading zeros, or nil when it is not a decimal integer.
local function normal_rv(rv)
  if type(rv) ~= 'string' or #rv > 40 then return nil end
  -- The usual case, no leading zero: as it came (one find, no gsub; ~2,000 instructions).
  if string.find(rv, '^[1-9]%d*$') then return rv end
  if not string.find(rv, '^%d+$') then return nil end
  local trimmed = string.gsub(rv, '^0+', '')
  if trimmed == '' then return '0' end
  return trimmed
end

-- -1, 0, 1 as decimal integer strings a < = > b.
local function compare_rv(a, b)
  if #a ~= #b then
    if #a < #b then return -1 end
    return 1
  end
  if a == b then return 0 end
  if a < b then return -1 end
  return 1
end

-- The drop reply when `rv` is not newer than the stored version of `key`, else nil. `read`:
-- the stored version as the caller read it (false: none), else nil and it is read here.
local function stale_version(key, rv, read)
  local stored = read
  if stored == nil then stored = get_string(key) end
  if stored == false then return nil end
  local known = normal_rv(stored)
  if known == nil then corrupt(key, 'holds ' .. string.format('%q', string.sub(stored, 1, 40))
    .. ', not a resourceVersion') end
  local order = compare_rv(rv, known)
  if order > 0 then return nil end
  if order == 0 then return { 'dropped', 'repeated', known } end
  return { 'dropped', 'stale', known }
end

-- Records the applied version: kept while the object lives, for TOMBSTONE_MS after a delete.
local function record_version(key, rv, deleted)
  if deleted then
    redis.call('SET', key, rv, 'PX', TOMBSTONE_MS)
  else
    redis.call('SET', key, rv)
  end
end

-- A remove that did not come from a feeder (the scheduler's remove_pod, a load) turns the
-- object's version into a tombstone too, so version keys never outlive their objects by more
-- than TOMBSTONE_MS. PEXPIRE of a missing key does nothing.
local function retire_version(key)
  redis.call('PEXPIRE', key, TOMBSTONE_MS)
end

