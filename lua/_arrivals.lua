-- The queue's wake on arrivals (upstream's QueueingHints for InterPodAffinity and
-- PodTopologySpread: a pod its affinity or spread selects was added). Loaded before
-- _helpers.lua, whose placements and `emit` use it; its functions are in _wakes.lua.
-- `woke`: the running call placed a pod some parked pod waits for, so its event's id goes to
-- `helped` (emit resets it).
-- `last` and `helped`: the ids the running call's events leave to `lastevent` and `helped`
-- (false: none this call). emit keeps them here and end_call writes each key once for the
-- call (an sc_batch of 8 claims wrote `lastevent` 8 times); a read in the same call takes
-- them from here first (last_event_id, helpful_since). Reset by begin_call.
local ARRIVALS = { woke = false, last = false, helped = false }
