-- Lost writes: a Redis that holds fewer writes than a snapshot saw (restarted from an older
-- AOF or RDB, restored, failed over to a replica behind) hands out the same generations again,
-- so a claim's generation checks would pass on a snapshot of a history that no longer exists.
-- A snapshot names the newest event it saw (a stream id: server time, never handed out again
-- by the same history); the claim carries it, and is refused while the stream lacks it though
-- it still holds an older event (a stream trimmed past it says nothing either way).

-- Longest digits of a stream id's parts ("<ms>-<seq>"): past them Redis rejects the id.
BOUNDS.MAX_MS_DIGITS, BOUNDS.MAX_SEQ_DIGITS = 15, 19

-- true when the events stream lost the event `seen`, false when it holds it (or `seen` is
-- "", or was trimmed away), nil for a malformed id. Reads at most two entries.
local function history_lost(p, seen)
  if seen == nil or seen == '' then return false end
  local ms, seq = string.match(seen, '^(%d+)%-(%d+)$')
  if ms == nil or #ms > BOUNDS.MAX_MS_DIGITS or #seq > BOUNDS.MAX_SEQ_DIGITS then return nil end
  local events = p .. 'events'
  if #typed_read(events, 'stream', 'XRANGE', seen, seen, 'COUNT', 1) > 0 then return false end
  return #redis.call('XRANGE', events, '-', seen, 'COUNT', 1) > 0
end
