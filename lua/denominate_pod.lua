-- sc_denominate_pod: a nomination given up (docs/preemption.md; _nominations.lua).
function NOM.denominate(p, _, a)
  local uid = a[1]
  if not name_arg(uid) then return nil, 'BADARG uid' end
  local now = now_ms(a[2])
  if now == nil then return nil, 'BADARG now ' .. uid end
  local plan = NOM.plan(p, uid, now)
  NOM.settle(p, plan)
  if plan.node then return 1 end
  return 0
end
