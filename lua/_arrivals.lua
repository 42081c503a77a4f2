-- The queue's wake on arrivals (upstream's QueueingHints for InterPodAffinity and
-- PodTopologySpread: a pod its affinity or spread selects was added). Loaded before
-- _helpers.lua, whose placements and `emit` use it; its functions are in _wakes.lua.
-- `woke`: the running call placed a pod some parked pod waits for, so its event's id goes to
-- `helped` (emit resets it).
local ARRIVALS = { woke = false }
