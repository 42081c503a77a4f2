-- sc_timed_claim: sc_assume_pod and the claim's deadline (sc_finish_binding with a ttl) in one
-- call: the extender's bind claims the pod with its --bind-timeout deadline already set, one
-- round trip and one function call instead of two (docs/extender.md, "Performance").
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, ttl_ms (> 0), then sc_assume_pod's arguments after `replica`
-- Keys     sc_assume_pod's, deadlines
-- Reply    sc_assume_pod's
-- Errors   sc_assume_pod's; BADARG ttl (nothing written)
-- Event    PodAssumed, then BindingFinished (deadline now + ttl), as the two calls emit them
local TIMED_CLAIM = {}

function TIMED_CLAIM.run(p, replica, a)
  local ttl = a[1]
  if int_arg(ttl, 1, BOUNDS.MAX_DURATION_MS) == nil then return nil, 'BADARG ttl' end
  table.remove(a, 1)  -- the claim's own arguments (as many as the call carried)
  local reply, err = assume_pod(p, replica, a)
  if reply == nil then return nil, err end  -- refused: nothing written
  -- The pod was assumed by this very call: its deadline cannot be refused.
  finish_binding(p, replica, { a[1], '', ttl })
  return reply
end
