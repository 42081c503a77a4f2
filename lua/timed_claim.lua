-- sc_timed_claim: sc_assume_pod and the claim's deadline (sc_finish_binding with a ttl) in one
-- call: the extender's bind claims the pod with its --bind-timeout deadline already set, one
-- round trip and one function call instead of two (docs/extender.md, "Performance").
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, ttl_ms (> 0), then sc_assume_pod's arguments after `replica`
-- Keys     sc_assume_pod's, deadlines
-- Reply    sc_assume_pod's
-- Errors   sc_assume_pod's; BADARG ttl (nothing written)
-- Event    PodAssumed with `deadline` (now + ttl): one event for the claim and its finished
--          binding (docs/storage.md); the pod record is written once, binding finished, its
--          deadline set, in no replica's claims (the deadline bounds it, not the lease)
local TIMED_CLAIM = {}

-- `ttl_text`: the ttl as FCALL sc_timed_claim hands it (_register.lua: `a` holds the claim's
-- own arguments); nil in sc_batch, where it is a[1], taken out of `a` here.
function TIMED_CLAIM.run(p, replica, a, ttl_text)
  if ttl_text == nil then
    ttl_text = a[1]
    table.remove(a, 1)  -- the claim's own arguments (as many as the call carried)
  end
  local ttl = int_arg(ttl_text, 1, BOUNDS.MAX_DURATION_MS)
  if ttl == nil then return nil, 'BADARG ttl' end
  return assume_pod(p, replica, a, int_string(now_ms(nil) + ttl))
end
